use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // A TAB in a shell with `kubeless completion` loaded runs us with COMPLETE set: answer and
    // exit before anything else (and before the async runtime starts its threads).
    kubeless_cli::complete::complete_from_env();
    let cli = kubeless_cli::args::Cli::parse();
    let verbose = cli.verbose;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("FATA: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(kubeless_cli::run(cli)) {
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
