use std::process::ExitCode;

use clap::Parser;
use cronjob_trigger_controller::{Cli, SERVICE_NAME, serve};

#[tokio::main]
async fn main() -> ExitCode {
    let Cli {
        service,
        controller,
    } = Cli::parse();
    // `run` logs the error chain; the exit code tells the orchestrator to restart us.
    match kubeless_service::run(SERVICE_NAME, service, |ctx| serve(ctx, controller)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}
