use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = kubeless_cli::args::Cli::parse();
    let verbose = cli.verbose;
    match kubeless_cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FATA: {}", e.human());
            if verbose {
                eprintln!("detail: {}", e.detail());
            }
            ExitCode::FAILURE
        }
    }
}
