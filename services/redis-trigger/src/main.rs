use std::process::ExitCode;

use redis_trigger::{Cli, SERVICE_NAME, runtime_gaps::split_leader_election, serve};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let (service, lease) = split_leader_election(cli.service.clone(), SERVICE_NAME);
    // `run` logs the error chain; a failure exit makes the orchestrator restart the pod.
    let served = kubeless_service::run(SERVICE_NAME, service, |ctx| serve(ctx, cli, lease));
    if served.await.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
