use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = kubeless_cli::args::Cli::parse();
    match kubeless_cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FATA: {}", kubeless_cli::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
