//! `kube-control-plane up --version v1.34.4 --state-dir DIR`: starts a real control plane built
//! by scripts/k8s/build.sh, prints its KUBECONFIG, and runs until Ctrl-C or SIGTERM.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kube_control_plane::{ControlPlane, ControlPlaneOptions, bin_dir};

#[derive(Parser)]
#[command(about = "A real Kubernetes control plane on 127.0.0.1")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start etcd, kube-apiserver, kube-controller-manager and kube-scheduler; stop on Ctrl-C.
    Up {
        /// Kubernetes version, as built by scripts/k8s/build.sh (its binaries are looked up in
        /// the build cache).
        #[arg(long, env = "KUBELESS_K8S_VERSION", default_value = kube_control_plane::TESTED_VERSIONS[0])]
        version: String,
        /// Use the binaries in this directory instead of the build cache's.
        #[arg(long, env = "KUBELESS_K8S_BIN_DIR")]
        bin_dir: Option<PathBuf>,
        /// Certificates, kubeconfigs, etcd's data, the audit log and the processes' logs.
        #[arg(long, env = "KUBELESS_K8S_STATE_DIR")]
        state_dir: PathBuf,
        /// Service ClusterIPs come from this IPv4 range (default: 127.96.0.0/16, loopback).
        #[arg(long, env = "KUBELESS_K8S_SERVICE_RANGE")]
        service_cluster_ip_range: Option<String>,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Cli {
        command:
            Cmd::Up {
                version,
                bin_dir: bins,
                state_dir,
                service_cluster_ip_range,
            },
    } = Cli::parse();
    let bins = bins.unwrap_or_else(|| bin_dir(&version));
    let mut opts = ControlPlaneOptions::new(bins, state_dir);
    if let Some(range) = service_cluster_ip_range {
        opts.service_cluster_ip_range = range;
    }
    let cp = match ControlPlane::start(opts).await {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("kube-control-plane: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("started Kubernetes {version}: {}", cp.times());
    println!("API server: {}", cp.server_url());
    println!("KUBECONFIG={}", cp.admin_kubeconfig().display());
    wait_for_signal().await;
    cp.shutdown();
    std::process::ExitCode::SUCCESS
}

async fn wait_for_signal() {
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
