use std::process::ExitCode;

use clap::Parser;
use kafka_trigger::{Cli, SERVICE_NAME, serve};

#[tokio::main]
async fn main() -> ExitCode {
    let (service, brokers, trigger, lease) = Cli::parse().split_leader_election();
    // `run` logs the error chain; the exit code tells the orchestrator to restart us.
    match kubeless_service::run(SERVICE_NAME, service, |ctx| {
        serve(ctx, brokers, trigger, lease)
    })
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
