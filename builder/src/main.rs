//! `kubeless-builder push`: see the crate documentation (src/lib.rs).

use std::process::ExitCode;

use clap::Parser;
use kubeless_builder::{Cli, Command};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Cli { command } = Cli::parse();
    let result = match command {
        Command::Push(args) => kubeless_builder::push(args, &mut std::io::stdout()).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{}", failure.0);
            ExitCode::FAILURE
        }
    }
}
