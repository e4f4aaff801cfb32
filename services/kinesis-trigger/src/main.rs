use std::process::ExitCode;

use clap::Parser;
use kinesis_trigger::{Cli, SERVICE_NAME, serve};

#[tokio::main]
async fn main() -> ExitCode {
    let Cli { service, trigger } = Cli::parse();
    // With --leader-elect the scaffold runs `serve` only while this replica holds the Lease
    // (one active replica); `run` logs the error chain and the exit code asks for a restart.
    match kubeless_service::run(SERVICE_NAME, service, |ctx| serve(ctx, trigger)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
