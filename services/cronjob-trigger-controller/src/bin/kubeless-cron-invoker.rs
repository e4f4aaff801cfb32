//! Calls one function once (with the trigger's retries) and exits 0 only on a 2xx answer.
//! Exit codes: 0 success, 3 permanent failure, 4 retries exhausted, 64 bad arguments.

use std::process::ExitCode;

use clap::Parser;
use cronjob_trigger_controller::invoker::{self, EXIT_USAGE, InvokerArgs};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let filter = kubeless_service::args::log_filter(
        std::env::var("KUBELESS_LOG_LEVEL").ok().as_deref(),
        Some(std::env::var("RUST_LOG").as_deref().unwrap_or("warn")),
    );
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let args = match InvokerArgs::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match invoker::run(&args).await {
        Ok((report, code)) => {
            match serde_json::to_string(&report) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("cannot print the outcome: {e}"),
            }
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("kubeless-cron-invoker: {}", invoker::error_chain(&e));
            ExitCode::from(EXIT_USAGE)
        }
    }
}
