use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let (service, args, lease) = redis_trigger::Cli::parse().split_leader_election();
    let name = redis_trigger::SERVICE_NAME;
    // `run` logs the error chain; a failure exit makes the orchestrator restart the pod.
    let served = kubeless_service::run(name, service, |ctx| redis_trigger::serve(ctx, args, lease));
    if served.await.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
