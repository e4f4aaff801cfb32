use std::process::ExitCode;

use redis_trigger::{Cli, SERVICE_NAME, serve};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let mut service = cli.service.clone();
    let lease = service.take_lease(SERVICE_NAME);
    // `run` logs the error chain; a failure exit makes the orchestrator restart the pod.
    let served = kubeless_service::run(SERVICE_NAME, service, |ctx| serve(ctx, cli, lease));
    if served.await.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
