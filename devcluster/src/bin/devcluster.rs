//! `devcluster up`: serve a local Kubernetes until stopped; `devcluster node`: join a real
//! control plane as a node. See docs/devcluster.md.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};
use devcluster::{DevCluster, NodeAgentHandle, NodeOptions, Options};

#[derive(Parser)]
#[command(
    version,
    about = "A local Kubernetes API server and pod runner (processes or podman containers), for development and tests only"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the API server and the pod runner; print the kubeconfig path; serve until SIGINT/SIGTERM.
    Up(UpArgs),
    /// Join a real control plane as a node: register the Node, run the Pods bound to it and
    /// serve the kubelet API (logs, exec, attach, port-forward) until SIGINT/SIGTERM.
    Node(NodeArgs),
}

#[derive(clap::Args)]
struct NodeArgs {
    /// Kubeconfig of the node's identity (user system:node:NAME in group system:nodes).
    #[arg(long, env = "DEVCLUSTER_NODE_KUBECONFIG")]
    kubeconfig: PathBuf,
    /// The Node's name (the NAME of system:node:NAME).
    #[arg(long, env = "DEVCLUSTER_NODE_NAME")]
    node_name: String,
    /// Kubelet API serving certificate (PEM), for 127.0.0.1, signed by the CA the API server
    /// checks kubelets with (--kubelet-certificate-authority).
    #[arg(long, env = "DEVCLUSTER_KUBELET_CERT")]
    kubelet_cert: PathBuf,
    /// Its key (PEM).
    #[arg(long, env = "DEVCLUSTER_KUBELET_KEY")]
    kubelet_key: PathBuf,
    /// CA (PEM) that signed the API server's kubelet client certificate: kubelet API clients
    /// must present a certificate from it.
    #[arg(long, env = "DEVCLUSTER_KUBELET_CLIENT_CA")]
    client_ca: PathBuf,
    /// Where the kubelet API listens (loopback only); port 0 picks a free port, which the Node
    /// reports.
    #[arg(long, env = "DEVCLUSTER_KUBELET_BIND", default_value = "127.0.0.1:0")]
    kubelet_bind: SocketAddr,
    /// Pod folders and logs.
    #[arg(long, env = "DEVCLUSTER_STATE_DIR", default_value = ".devcluster-node")]
    state_dir: PathBuf,
    /// The /16 pod addresses come from (`10.244.0.0/16`); a random loopback /16 when unset. A
    /// real API server refuses loopback addresses in EndpointSlices: see docs/devcluster.md,
    /// "Node agent", for a range that is not loopback.
    #[arg(long, env = "DEVCLUSTER_POD_IP_RANGE", value_parser = parse_range16)]
    pod_ip_range: Option<std::net::Ipv4Addr>,
    /// Seconds between two status heartbeats of the Node (its Lease is renewed every 10 s).
    #[arg(
        long,
        value_name = "SECS",
        env = "DEVCLUSTER_NODE_STATUS_PERIOD",
        default_value_t = 60
    )]
    node_status_period: u64,
    /// Folder of image-map files; the repository's devcluster/images.d when unset.
    #[arg(long, env = "DEVCLUSTER_IMAGES")]
    images: Option<PathBuf>,
    /// How pods run: `process` (local programs chosen by the image map) or `container` (their
    /// real images, with podman).
    #[arg(long, env = "DEVCLUSTER_PODS", value_enum, default_value_t = PodsMode::Process)]
    pods: PodsMode,
    /// The podman program container mode runs.
    #[arg(long, env = "DEVCLUSTER_PODMAN", default_value = "podman")]
    podman: String,
    /// Log filter (RUST_LOG syntax).
    #[arg(long, env = "DEVCLUSTER_LOG", default_value = "info")]
    log: String,
}

#[derive(clap::Args)]
struct UpArgs {
    /// Address to listen on (loopback only); port 0 picks a free port.
    #[arg(long, env = "DEVCLUSTER_BIND", default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// Keep API state in this folder across restarts; in memory when unset.
    #[arg(long, env = "DEVCLUSTER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Where to write the kubeconfig; <state-dir>/kubeconfig when unset.
    #[arg(long, env = "DEVCLUSTER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Pod folders and logs.
    #[arg(long, env = "DEVCLUSTER_STATE_DIR", default_value = ".devcluster")]
    state_dir: PathBuf,
    /// Folder of image-map files; the repository's devcluster/images.d when unset.
    #[arg(long, env = "DEVCLUSTER_IMAGES")]
    images: Option<PathBuf>,
    /// Serve the API only: no pods are run (for benchmarks of controllers).
    #[arg(long, env = "DEVCLUSTER_NO_RUNNER")]
    no_runner: bool,
    /// Seconds between two passes of the HPA controller (15 on a real cluster).
    #[arg(
        long,
        value_name = "SECS",
        env = "DEVCLUSTER_HPA_SYNC_PERIOD",
        default_value_t = 15
    )]
    hpa_sync_period: u64,
    /// How pods run: `process` (local programs chosen by the image map) or `container` (their
    /// real images, with podman; see docs/devcluster.md "Container mode").
    #[arg(long, env = "DEVCLUSTER_PODS", value_enum, default_value_t = PodsMode::Process)]
    pods: PodsMode,
    /// The podman program container mode runs.
    #[arg(long, env = "DEVCLUSTER_PODMAN", default_value = "podman")]
    podman: String,
    /// Start a real Kubernetes control plane of this version (built by scripts/k8s/build.sh:
    /// etcd, kube-apiserver, kube-controller-manager, kube-scheduler) in place of devcluster's
    /// API server, with the pod runner as its node. Pods then take addresses in 10.64.0.0/10:
    /// run inside scripts/netns.sh. --bind, --data-dir and --hpa-sync-period are then unused.
    #[arg(long, value_name = "VERSION", env = "DEVCLUSTER_KUBERNETES")]
    kubernetes: Option<String>,
    /// Log filter (RUST_LOG syntax).
    #[arg(long, env = "DEVCLUSTER_LOG", default_value = "info")]
    log: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PodsMode {
    Process,
    Container,
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Up(args) => up(args).await,
        Command::Node(args) => node(args).await,
    }
}

/// `A.B.0.0/16` -> `A.B.0.0`.
fn parse_range16(s: &str) -> Result<std::net::Ipv4Addr, String> {
    let bad = || format!("{s:?} is not an IPv4 /16 such as 10.244.0.0/16");
    let (addr, bits) = s.split_once('/').ok_or_else(bad)?;
    let addr: std::net::Ipv4Addr = addr.parse().map_err(|_| bad())?;
    if bits != "16" || u32::from(addr) & 0xFFFF != 0 {
        return Err(bad());
    }
    Ok(addr)
}

fn pod_runtime(pods: PodsMode, podman: String) -> devcluster::PodRuntime {
    match pods {
        PodsMode::Process => devcluster::PodRuntime::Process,
        PodsMode::Container => {
            devcluster::PodRuntime::Container(devcluster::ContainerRuntime { podman })
        }
    }
}

async fn node(args: NodeArgs) -> ExitCode {
    let NodeArgs {
        kubeconfig,
        node_name,
        kubelet_cert,
        kubelet_key,
        client_ca,
        kubelet_bind,
        state_dir,
        pod_ip_range,
        node_status_period,
        images,
        pods,
        podman,
        log,
    } = args;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(log))
        .with_writer(std::io::stderr)
        .init();
    if !kubelet_bind.ip().is_loopback() {
        eprintln!(
            "devcluster: refusing to serve the kubelet API on {kubelet_bind}: bind a loopback address"
        );
        return ExitCode::from(2);
    }
    let mut options = NodeOptions::new(
        kubeconfig,
        node_name,
        kubelet_cert,
        kubelet_key,
        client_ca,
        state_dir,
    );
    options.kubelet_bind = kubelet_bind;
    options.pods = pod_runtime(pods, podman);
    options.pod_ip_base = pod_ip_range;
    options.keep_alive.status_report = std::time::Duration::from_secs(node_status_period.max(1));
    if let Some(dir) = images {
        options.images_dir = dir;
    }
    let agent = match NodeAgentHandle::start(options).await {
        Ok(a) => a,
        Err(e) => {
            eprintln!("devcluster: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    tracing::info!("node agent running; stop with Ctrl-C");
    tokio::select! {
        _ = wait_for_signal() => {}
        _ = async {
            while !agent.is_finished() {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        } => {}
    }
    tracing::info!("stopping: killing pods");
    match agent.shutdown().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devcluster: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

async fn up(args: UpArgs) -> ExitCode {
    let UpArgs {
        bind,
        data_dir,
        kubeconfig,
        state_dir,
        images,
        no_runner,
        hpa_sync_period,
        pods,
        podman,
        kubernetes,
        log,
    } = args;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(log))
        .with_writer(std::io::stderr)
        .init();
    if !bind.ip().is_loopback() {
        eprintln!(
            "devcluster: refusing to listen on {bind}: devcluster is for local use, bind a loopback address"
        );
        return ExitCode::from(2);
    }
    let options = Options {
        bind,
        data_dir,
        kubeconfig_path: kubeconfig,
        state_dir,
        images_dir: if no_runner {
            None
        } else {
            Some(images.unwrap_or_else(devcluster::repo_images_dir))
        },
        hpa_sync_period: std::time::Duration::from_secs(hpa_sync_period.max(1)),
        pods: pod_runtime(pods, podman),
        kubernetes: kubernetes.filter(|v| !v.is_empty()),
    };
    let cluster = match DevCluster::start(options).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devcluster: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    // The one line scripts wait for: the kubeconfig path on stdout.
    println!("{}", cluster.kubeconfig_path().display());
    tracing::info!(addr = %cluster.addr(), "devcluster is serving; stop with Ctrl-C");
    wait_for_signal().await;
    tracing::info!("stopping: killing pods, then the API server");
    cluster.shutdown().await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}
