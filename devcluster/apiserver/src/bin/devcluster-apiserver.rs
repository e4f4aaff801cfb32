//! Runs the API server alone (for the kubectl script and manual testing):
//! `cargo run -p devcluster-apiserver --bin devcluster-apiserver -- --kubeconfig /tmp/kc`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

#[derive(Parser, Debug)]
struct Args {
    /// Listen address (port 0 picks a free port).
    #[arg(long, env = "DEVCLUSTER_BIND", default_value = "127.0.0.1:0")]
    bind: SocketAddr,
    /// Where to write the kubeconfig.
    #[arg(long, env = "DEVCLUSTER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Keep state across restarts here.
    #[arg(long, env = "DEVCLUSTER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Pod log files root.
    #[arg(long, env = "DEVCLUSTER_LOGS_DIR")]
    logs_dir: Option<PathBuf>,
    /// Bearer token (random when unset).
    #[arg(long, env = "DEVCLUSTER_TOKEN")]
    token: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        bind,
        kubeconfig,
        data_dir,
        logs_dir,
        token,
    } = Args::parse();
    let mut config = devcluster_apiserver::ServerConfig {
        bind,
        data_dir,
        kubeconfig_path: kubeconfig,
        token,
        ..Default::default()
    };
    if let Some(l) = logs_dir {
        config.logs_dir = l;
    }
    let server = devcluster_apiserver::start(config).await?;
    println!(
        "devcluster-apiserver listening on https://{} kubeconfig={}",
        server.addr(),
        server.kubeconfig_path().display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    server.shutdown().await;
    Ok(())
}
