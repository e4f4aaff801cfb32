//! A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler, the upstream binaries that `scripts/k8s/build.sh` builds into
//! `~/.cache/kubeless-rs/k8s/VERSION/bin` ([`bin_dir`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_control_plane::Error> {
//! use kube_control_plane::{ControlPlane, ControlPlaneOptions, bin_dir};
//! let cp = ControlPlane::start(ControlPlaneOptions::new(bin_dir("v1.34.4"), "/tmp/cp1")).await?;
//! let client = cp.client(); // kube::Client as cluster admin (group system:masters)
//! println!("KUBECONFIG={}", cp.admin_kubeconfig().display());
//! let node = cp.node_credentials("node-1")?; // what a node agent needs to join
//! cp.shutdown();
//! # Ok(()) }
//! ```
//!
//! - [`ControlPlane::start`] makes a CA and every certificate (rcgen), starts the four processes
//!   bound to 127.0.0.1 on free ports (so several control planes run side by side), and returns
//!   once `/readyz` answers and the controller manager has made the `default` ServiceAccount.
//!   Each process logs to `STATE_DIR/NAME.log`; a start failure names the process and quotes the
//!   end of its log. [`ControlPlane::times`] says how long each stage took.
//! - The API server runs as a cluster would: Node and RBAC authorization, the NodeRestriction,
//!   PodSecurity and OwnerReferencesPermissionEnforcement admission plugins (with the defaults),
//!   service-account tokens, an audit log at Metadata level ([`ControlPlane::audit_log`]), and a
//!   client certificate for reaching kubelets over TLS (InternalIP addresses).
//! - [`ControlPlane::node_credentials`] mints what a node agent needs: a kubeconfig as
//!   `system:node:NAME` (group `system:nodes`), a kubelet serving certificate for 127.0.0.1
//!   signed by the cluster CA (which the API server checks), and the CA that signs the API
//!   server's kubelet client certificate (which the node agent checks).
//! - [`ControlPlane::shutdown`] stops the processes by PID (SIGTERM, then SIGKILL); dropping the
//!   value kills them too. The state directory is left for the caller (logs stay readable).

mod pki;
mod process;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use pki::CertFiles;
use pki::{Ca, write, write_kubeconfig};
use process::{Proc, free_port};

/// The Kubernetes versions the tests use by default: the oldest and newest minor the chart claims.
pub const TESTED_VERSIONS: [&str; 2] = ["v1.34.4", "v1.37.2"];

/// Where `scripts/k8s/build.sh` caches its builds: `$KUBELESS_K8S_CACHE`, else
/// `~/.cache/kubeless-rs/k8s`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBELESS_K8S_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/kubeless-rs/k8s")
}

/// The binaries of `version` (`v1.34.4`) in the cache.
pub fn bin_dir(version: &str) -> PathBuf {
    cache_dir().join(version).join("bin")
}

/// Whether `scripts/k8s/build.sh` finished a build into `bin_dir` (its stamp file is there).
pub fn is_built(bin_dir: &Path) -> bool {
    bin_dir.join(".built").is_file()
        && [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ]
        .iter()
        .all(|b| bin_dir.join(b).is_file())
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting {bin} (build it with scripts/k8s/build.sh): {source}")]
    Spawn {
        bin: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("finding a free port on 127.0.0.1: {0}")]
    Port(#[source] std::io::Error),
    #[error("making certificates: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{name} exited ({status}); the end of {log}:\n{log_tail}")]
    Exited {
        name: &'static str,
        status: String,
        log: PathBuf,
        log_tail: String,
    },
    #[error("{name}: {what} not ready after {waited:?}; the end of {log}:\n{log_tail}")]
    NotReady {
        name: &'static str,
        what: String,
        waited: Duration,
        log: PathBuf,
        log_tail: String,
    },
    #[error("reading the admin kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("kube client: {0}")]
    Client(#[from] kube::Error),
    #[error("invalid service cluster IP range {0:?} (want an IPv4 CIDR such as 127.96.0.0/16)")]
    ServiceRange(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What [`ControlPlane::start`] needs.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Holds etcd, kube-apiserver, kube-controller-manager and kube-scheduler ([`bin_dir`]).
    pub bin_dir: PathBuf,
    /// Certificates, kubeconfigs, etcd's data, the audit log and each process's log go here.
    pub state_dir: PathBuf,
    /// Service ClusterIPs are taken from here (`--service-cluster-ip-range`). Nothing routes
    /// them without a kube-proxy; they are addresses in the API only. The default,
    /// `127.96.0.0/16`, is a loopback range, so a program that dials a ClusterIP never sends
    /// traffic off this machine (devcluster's pods use 127.1-127.3.x.x).
    pub service_cluster_ip_range: String,
    /// How long each stage (etcd, API server, default ServiceAccount) may take to get ready.
    pub ready_timeout: Duration,
}

impl ControlPlaneOptions {
    pub fn new(bin_dir: impl Into<PathBuf>, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            bin_dir: bin_dir.into(),
            state_dir: state_dir.into(),
            service_cluster_ip_range: "127.96.0.0/16".to_string(),
            ready_timeout: Duration::from_secs(120),
        }
    }
}

/// How long the start took, each stage counted from the call to [`ControlPlane::start`].
#[derive(Debug, Clone, Copy)]
pub struct StartTimes {
    /// etcd answers `/health`.
    pub etcd_ready: Duration,
    /// kube-apiserver answers `/readyz` with 200.
    pub apiserver_ready: Duration,
    /// The `default` namespace and its `default` ServiceAccount exist (the controller manager
    /// works), with the controller manager and the scheduler running.
    pub all_ready: Duration,
}

impl std::fmt::Display for StartTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "etcd ready {:.1} s, kube-apiserver ready {:.1} s, all ready {:.1} s",
            self.etcd_ready.as_secs_f64(),
            self.apiserver_ready.as_secs_f64(),
            self.all_ready.as_secs_f64()
        )
    }
}

/// What a node agent needs to join as node `node_name` (files under `STATE_DIR/nodes/NAME/`).
#[derive(Debug, Clone)]
pub struct NodeCredentials {
    pub node_name: String,
    /// A kubeconfig as `system:node:NAME` in group `system:nodes` (the Node authorizer and
    /// NodeRestriction limit it to its own Node and the Pods bound to it).
    pub kubeconfig: PathBuf,
    /// The client certificate and key in that kubeconfig.
    pub client: CertFiles,
    /// The kubelet's serving certificate, for 127.0.0.1 and localhost (and the node name), signed
    /// by the cluster CA that the API server checks it against.
    pub serving: CertFiles,
    /// The cluster CA (PEM): the API server's serving certificate is signed by it.
    pub ca_pem: String,
    /// The CA that signed the API server's kubelet client certificate (PEM): a node agent
    /// accepts a client of its kubelet API only with a certificate from it.
    pub kubelet_client_ca_pem: String,
}

/// A running control plane; see the crate documentation.
pub struct ControlPlane {
    server_url: String,
    admin_kubeconfig: PathBuf,
    client: kube::Client,
    state_dir: PathBuf,
    ca: Ca,
    times: StartTimes,
    procs: Procs,
}

/// The processes, stopped in reverse start order when dropped (also on a failed start).
struct Procs(Vec<Proc>);

impl Procs {
    fn stop(&mut self, grace: Duration) {
        while let Some(mut p) = self.0.pop() {
            p.stop(grace);
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler and waits until
    /// the cluster is usable (see [`StartTimes`]).
    pub async fn start(opts: ControlPlaneOptions) -> Result<Self> {
        let t0 = Instant::now();
        let state = opts.state_dir.clone();
        let pki_dir = state.join("pki");
        for dir in [&state, &pki_dir] {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                path: dir.clone(),
                source,
            })?;
        }
        let service_ip = first_service_ip(&opts.service_cluster_ip_range)?.to_string();
        let [etcd_port, peer_port, api_port, kcm_port, sched_port] = [
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
            free_port()?,
        ];
        let server_url = format!("https://127.0.0.1:{api_port}");

        let ca = Ca::create(&pki_dir)?;
        let ca_pem = ca.files.cert_pem.clone();
        let serving = ca.serving(
            &pki_dir,
            "apiserver",
            "kube-apiserver",
            &[
                "127.0.0.1",
                "localhost",
                &service_ip,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )?;
        let kubelet_client = ca.client(
            &pki_dir,
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            &["system:masters"],
        )?;
        let (sa_key, sa_pub) = pki::key_files(&pki_dir, "service-account")?;
        let admin_kubeconfig = state.join("admin.kubeconfig");
        let admin = ca.client(&pki_dir, "admin", "kubernetes-admin", &["system:masters"])?;
        write_kubeconfig(&admin_kubeconfig, &server_url, &ca_pem, "admin", &admin)?;
        let kcm_kubeconfig = state.join("controller-manager.kubeconfig");
        let kcm = ca.client(
            &pki_dir,
            "controller-manager",
            "system:kube-controller-manager",
            &[],
        )?;
        write_kubeconfig(
            &kcm_kubeconfig,
            &server_url,
            &ca_pem,
            "system:kube-controller-manager",
            &kcm,
        )?;
        let sched_kubeconfig = state.join("scheduler.kubeconfig");
        let sched = ca.client(&pki_dir, "scheduler", "system:kube-scheduler", &[])?;
        write_kubeconfig(
            &sched_kubeconfig,
            &server_url,
            &ca_pem,
            "system:kube-scheduler",
            &sched,
        )?;
        let audit_policy = state.join("audit-policy.yaml");
        write(
            &audit_policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
        )?;

        let p = |path: &Path| path.display().to_string();
        let mut procs = Procs(Vec::new());

        // etcd: plain HTTP, on loopback only.
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_args = vec![
            "--name=default".to_string(),
            format!("--data-dir={}", p(&state.join("etcd-data"))),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--log-level=warn".to_string(),
        ];
        procs.0.push(Proc::spawn(
            "etcd",
            &opts.bin_dir,
            &etcd_args,
            state.join("etcd.log"),
        )?);
        wait_until(&mut procs.0[0], "/health", opts.ready_timeout, || {
            etcd_healthy(etcd_port)
        })
        .await?;
        let etcd_ready = t0.elapsed();

        let apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={api_port}"),
            format!("--cert-dir={}", p(&pki_dir)),
            format!("--tls-cert-file={}", p(&serving.cert_path)),
            format!("--tls-private-key-file={}", p(&serving.key_path)),
            format!("--client-ca-file={}", p(&ca.files.cert_path)),
            "--authorization-mode=Node,RBAC".to_string(),
            "--enable-admission-plugins=NodeRestriction,PodSecurity,OwnerReferencesPermissionEnforcement".to_string(),
            // As on a cluster that runs privileged system pods: PodSecurity decides per namespace.
            "--allow-privileged=true".to_string(),
            format!("--service-account-key-file={}", p(&sa_pub)),
            format!("--service-account-signing-key-file={}", p(&sa_key)),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
            format!("--service-cluster-ip-range={}", opts.service_cluster_ip_range),
            // No kube-proxy and no second API server: the `kubernetes` Service keeps no endpoints.
            "--endpoint-reconciler-type=none".to_string(),
            format!("--audit-policy-file={}", p(&audit_policy)),
            format!("--audit-log-path={}", p(&state.join("audit.log"))),
            format!("--kubelet-client-certificate={}", p(&kubelet_client.cert_path)),
            format!("--kubelet-client-key={}", p(&kubelet_client.key_path)),
            format!("--kubelet-certificate-authority={}", p(&ca.files.cert_path)),
            "--kubelet-preferred-address-types=InternalIP".to_string(),
            "--profiling=false".to_string(),
        ];
        procs.0.push(Proc::spawn(
            "kube-apiserver",
            &opts.bin_dir,
            &apiserver_args,
            state.join("kube-apiserver.log"),
        )?);
        let kubeconfig = Kubeconfig::read_from(&admin_kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        let client = kube::Client::try_from(config)?;
        wait_until(&mut procs.0[1], "/readyz", opts.ready_timeout, || {
            readyz(&client)
        })
        .await?;
        let apiserver_ready = t0.elapsed();

        let kcm_args = vec![
            format!("--kubeconfig={}", p(&kcm_kubeconfig)),
            format!("--authentication-kubeconfig={}", p(&kcm_kubeconfig)),
            format!("--authorization-kubeconfig={}", p(&kcm_kubeconfig)),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={kcm_port}"),
            format!("--cert-dir={}", p(&state.join("controller-manager"))),
            "--leader-elect=false".to_string(),
            "--use-service-account-credentials".to_string(),
            "--controllers=*".to_string(),
            format!("--service-account-private-key-file={}", p(&sa_key)),
            format!("--root-ca-file={}", p(&ca.files.cert_path)),
            format!("--cluster-signing-cert-file={}", p(&ca.files.cert_path)),
            format!("--cluster-signing-key-file={}", p(&ca.files.key_path)),
            format!(
                "--service-cluster-ip-range={}",
                opts.service_cluster_ip_range
            ),
            "--profiling=false".to_string(),
        ];
        procs.0.push(Proc::spawn(
            "kube-controller-manager",
            &opts.bin_dir,
            &kcm_args,
            state.join("kube-controller-manager.log"),
        )?);
        let sched_args = vec![
            format!("--kubeconfig={}", p(&sched_kubeconfig)),
            format!("--authentication-kubeconfig={}", p(&sched_kubeconfig)),
            format!("--authorization-kubeconfig={}", p(&sched_kubeconfig)),
            "--bind-address=127.0.0.1".to_string(),
            format!("--secure-port={sched_port}"),
            format!("--cert-dir={}", p(&state.join("scheduler"))),
            "--leader-elect=false".to_string(),
            "--profiling=false".to_string(),
        ];
        procs.0.push(Proc::spawn(
            "kube-scheduler",
            &opts.bin_dir,
            &sched_args,
            state.join("kube-scheduler.log"),
        )?);

        let sa_api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let ns_api: Api<Namespace> = Api::all(client.clone());
        wait_until(
            &mut procs.0[2],
            "the default ServiceAccount",
            opts.ready_timeout,
            || async {
                matches!(ns_api.get_opt("default").await, Ok(Some(_)))
                    && matches!(sa_api.get_opt("default").await, Ok(Some(_)))
            },
        )
        .await?;
        for proc in procs.0.iter_mut() {
            proc.check_running()?;
        }
        let times = StartTimes {
            etcd_ready,
            apiserver_ready,
            all_ready: t0.elapsed(),
        };
        Ok(Self {
            server_url,
            admin_kubeconfig,
            client,
            state_dir: state,
            ca,
            times,
            procs,
        })
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// A kubeconfig as cluster admin (group `system:masters`), for kubectl and services.
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// A client as cluster admin.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The cluster CA (PEM) that signs the API server's serving certificate and every client
    /// certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca.files.cert_pem
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The API server's audit log (one JSON event a line, Metadata level).
    pub fn audit_log(&self) -> PathBuf {
        self.state_dir.join("audit.log")
    }

    /// The log file of a process (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `kube-scheduler`).
    pub fn log_file(&self, process: &str) -> PathBuf {
        self.state_dir.join(format!("{process}.log"))
    }

    /// How long the start took.
    pub fn times(&self) -> StartTimes {
        self.times
    }

    /// The process ids, in start order (name, pid).
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.procs.0.iter().map(|p| (p.name, p.pid())).collect()
    }

    /// Mints the credentials of node `node_name` (see [`NodeCredentials`]).
    pub fn node_credentials(&self, node_name: &str) -> Result<NodeCredentials> {
        let dir = self.state_dir.join("nodes").join(node_name);
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        let user = format!("system:node:{node_name}");
        let client = self
            .ca
            .client(&dir, "kubelet-client", &user, &["system:nodes"])?;
        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &self.server_url, self.ca_pem(), &user, &client)?;
        let serving = self.ca.serving(
            &dir,
            "kubelet-serving",
            &user,
            &["127.0.0.1", "localhost", node_name],
        )?;
        Ok(NodeCredentials {
            node_name: node_name.to_string(),
            kubeconfig,
            client,
            serving,
            ca_pem: self.ca_pem().to_string(),
            kubelet_client_ca_pem: self.ca_pem().to_string(),
        })
    }

    /// Stops every process (SIGTERM, then SIGKILL after 10 s), the API server before etcd.
    pub fn shutdown(mut self) {
        self.procs.stop(Duration::from_secs(10));
    }
}

/// The first address of an IPv4 CIDR: what the API server gives the `kubernetes` Service.
fn first_service_ip(cidr: &str) -> Result<Ipv4Addr> {
    let bad = || Error::ServiceRange(cidr.to_string());
    let (addr, _) = cidr.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
    Ok(Ipv4Addr::from(u32::from(addr).wrapping_add(1)))
}

/// Polls `ready` every 200 ms until it holds, `proc` exits, or `timeout` passes.
async fn wait_until<F, Fut>(proc: &mut Proc, what: &str, timeout: Duration, ready: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        proc.check_running()?;
        if ready().await {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(proc.not_ready(what, timeout));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// etcd's `/health` says `"health":"true"`.
async fn etcd_healthy(port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = String::new();
    let read =
        tokio::time::timeout(Duration::from_secs(2), stream.read_to_string(&mut response)).await;
    matches!(read, Ok(Ok(_))) && response.contains("\"health\":\"true\"")
}

async fn readyz(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    client
        .request_text(request)
        .await
        .is_ok_and(|body| body.trim() == "ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubernetes_service_takes_the_first_address_of_the_range() {
        assert_eq!(
            first_service_ip("127.96.0.0/16").ok(),
            Some(Ipv4Addr::new(127, 96, 0, 1))
        );
        assert!(matches!(
            first_service_ip("10.96.0.0"),
            Err(Error::ServiceRange(_))
        ));
        assert!(matches!(
            first_service_ip("fd00::/108"),
            Err(Error::ServiceRange(_))
        ));
    }
}
