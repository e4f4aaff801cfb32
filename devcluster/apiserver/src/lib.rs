//! devcluster's Kubernetes API server: the Kubernetes REST API served from
//! memory over HTTPS, for local development and tests (never production).
//!
//! ```no_run
//! # async fn demo() -> Result<(), devcluster_apiserver::Error> {
//! let server = devcluster_apiserver::start(Default::default()).await?;
//! let client = server.client().await?;
//! # drop(client); server.shutdown().await; Ok(()) }
//! ```

mod app;
pub mod attach;
pub mod auth;
mod backend;
mod builtin;
pub mod convert;
pub mod errors;
pub mod exec;
pub mod fieldmanager;
mod http;
mod logs;
pub mod metrics;
mod openapi;
mod openapi_v2;
pub mod patch;
pub mod persist;
mod podsecurity;
mod portforward;
pub mod protobuf;
mod proxy;
pub mod registry;
pub mod reqctx;
mod scale;
pub mod schema;
pub mod selectors;
pub use devcluster_streaming::spdy;
pub mod store;
pub mod table;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use axum::Router;
use base64::Engine as _;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use store::Store;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("generating the TLS certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("configuring TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Persist(#[from] persist::PersistError),
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("kube client: {0}")]
    Client(#[from] kube::Error),
}

/// How to run the server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (default 127.0.0.1:0, a free port).
    pub bind: SocketAddr,
    /// Keep state here across restarts (None: memory only).
    pub data_dir: Option<PathBuf>,
    /// Where to write the kubeconfig (None: a temp file owned by the server).
    pub kubeconfig_path: Option<PathBuf>,
    /// Pod logs: `{logs_dir}/{namespace}/{pod}/{container}.log`.
    pub logs_dir: PathBuf,
    /// Bearer token clients must send (None: a random one).
    pub token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            kubeconfig_path: None,
            logs_dir: std::env::temp_dir().join("devcluster-logs"),
            token: None,
        }
    }
}

/// A started server; stop it with [`RunningServer::shutdown`].
pub struct RunningServer {
    addr: SocketAddr,
    kubeconfig_path: PathBuf,
    kubeconfig_yaml: String,
    ca_pem: String,
    store: Arc<Store>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    data_dir: Option<PathBuf>,
    exec: app::ExecSlot,
    metrics: metrics::MetricsSlot,
    _temp: Option<tempfile::TempDir>,
}

impl RunningServer {
    /// Lets `pods/exec` reach running containers. The first backend set stays;
    /// returns false when one was already set.
    pub fn set_exec_backend(&self, backend: Arc<dyn exec::ExecBackend>) -> bool {
        self.exec.set(backend).is_ok()
    }

    /// Lets `metrics.k8s.io` serve the runner's measurements. The first backend set
    /// stays; returns false when one was already set.
    pub fn set_metrics_backend(&self, backend: Arc<dyn metrics::MetricsBackend>) -> bool {
        self.metrics.set(backend).is_ok()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The CA certificate (PEM) clients verify the server with, as `ca.crt` of a pod's
    /// ServiceAccount volume holds it.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server's URL, `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The kubeconfig written to [`Self::kubeconfig_path`].
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        // The YAML was produced by this crate and parsed once at start-up.
        kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml).unwrap_or_default()
    }

    /// A kube client for this server.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let config = kube::Config::from_custom_kubeconfig(
            self.kubeconfig(),
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// The in-memory store (for benchmarks and white-box tests).
    pub fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// Stops accepting, ends open connections and watches, and writes a final
    /// snapshot when a data dir is used.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(dir) = &self.data_dir {
            let (rv, objs) = self.store.dump();
            let objs: Vec<_> = objs.into_iter().map(|(gr, o)| (gr, (*o).clone())).collect();
            if let Err(e) = persist::write_snapshot(dir, rv, &objs) {
                tracing::error!("devcluster: final snapshot failed: {e}");
            }
        }
    }
}

fn tls_material() -> Result<(String, CertificateDer<'static>, PrivateKeyDer<'static>), Error> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "devcluster-ca");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "devcluster");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((ca_cert.pem(), cert.der().clone(), key_der))
}

fn kubeconfig_yaml(addr: SocketAddr, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: devcluster\n  cluster:\n    server: https://{addr}\n    certificate-authority-data: {ca}\nusers:\n- name: devcluster\n  user:\n    token: {token}\ncontexts:\n- name: devcluster\n  context:\n    cluster: devcluster\n    user: devcluster\n    namespace: default\ncurrent-context: devcluster\n"
    )
}

/// Starts the server and writes its kubeconfig.
pub async fn start(config: ServerConfig) -> Result<RunningServer, Error> {
    let (ca_pem, cert, key) = tls_material()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

    let mut persist_handle = None;
    let store = match &config.data_dir {
        Some(dir) => {
            let ((rv, objects), p, h) = persist::open(dir)?;
            persist_handle = Some(h);
            let store = Store::new(Some(p));
            store.load(rv, objects);
            store
        }
        None => Store::new(None),
    };
    // The writer thread runs until the store (its sender) is dropped.
    drop(persist_handle);
    store.ensure_default_namespaces();

    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|source| Error::Bind {
            addr: config.bind,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: config.bind,
        source,
    })?;
    let token = config
        .token
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    let yaml = kubeconfig_yaml(addr, &ca_pem, &token);
    kube::config::Kubeconfig::from_yaml(&yaml)?;
    let (temp, kubeconfig_path) = match &config.kubeconfig_path {
        Some(p) => (None, p.clone()),
        None => {
            let dir = tempfile::tempdir().map_err(|source| Error::Io {
                path: std::env::temp_dir(),
                source,
            })?;
            let p = dir.path().join("kubeconfig");
            (Some(dir), p)
        }
    };
    if let Some(parent) = kubeconfig_path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(&kubeconfig_path, &yaml).map_err(|source| Error::Io {
        path: kubeconfig_path.clone(),
        source,
    })?;

    let exec_slot = app::ExecSlot::default();
    let metrics_slot = metrics::MetricsSlot::default();
    let app = Arc::new(app::App {
        store: store.clone(),
        auth: auth::Authenticator::new(token),
        authorizer: auth::Authorizer::default(),
        logs_dir: config.logs_dir.clone(),
        addr,
        proxy: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http(),
        rr: AtomicUsize::new(0),
        exec: exec_slot.clone(),
        metrics: metrics_slot.clone(),
    });
    let router = Router::new().fallback(http::handle).with_state(app);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let gc = tokio::spawn(store.clone().gc_loop());
    let server = tokio::spawn(accept_loop(listener, acceptor, router, shutdown_rx));
    Ok(RunningServer {
        addr,
        kubeconfig_path,
        kubeconfig_yaml: yaml,
        ca_pem,
        store,
        shutdown,
        tasks: vec![server, gc],
        data_dir: config.data_dir,
        exec: exec_slot,
        metrics: metrics_slot,
        _temp: temp,
    })
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    shutdown: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let mut stop = shutdown.clone();
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("devcluster: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let mut stop = shutdown.clone();
        conns.spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            tokio::select! {
                _ = conn => {}
                _ = stop.changed() => {}
            }
        });
        // Reap finished connections so the set does not grow without bound.
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
}
