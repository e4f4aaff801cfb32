//! The `kubeless` command: Kubeless 1.0.8's command tree over kube-rs.
//!
//! `main.rs` only parses the arguments and calls [`run`]; each command group lives in its own
//! module, with the pure parts (flag -> object builders, tables, metric parsing) separate from
//! the code that talks to the API server or the brokers.

pub mod args;
pub mod autoscale;
pub mod brokers;
pub mod config;
pub mod ctx;
pub mod error;
pub mod function;
pub mod metrics;
pub mod output;
pub mod selector;
pub mod source;
pub mod spec;
pub mod trigger;
pub mod ui;
pub mod wait;

use clap::CommandFactory;

use crate::{
    args::{Cli, Command, Shell},
    ctx::Ctx,
    error::Result,
};

pub use error::Error;

/// The error and its sources on one line: `a: b: c`.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

pub async fn run(cli: Cli) -> Result<()> {
    let Cli { kube, command } = cli;
    match command {
        Command::Version => {
            output::println(&format!("Kubeless version: {}", env!("CARGO_PKG_VERSION")))
        }
        Command::Completion { shell } => {
            let mut cmd = Cli::command();
            let mut buf = Vec::new();
            match shell {
                Shell::Bash => clap_complete::generate(
                    clap_complete::Shell::Bash,
                    &mut cmd,
                    "kubeless",
                    &mut buf,
                ),
                Shell::Zsh => clap_complete::generate(
                    clap_complete::Shell::Zsh,
                    &mut cmd,
                    "kubeless",
                    &mut buf,
                ),
                Shell::Fish => clap_complete::generate(
                    clap_complete::Shell::Fish,
                    &mut cmd,
                    "kubeless",
                    &mut buf,
                ),
                Shell::Powershell => clap_complete::generate(
                    clap_complete::Shell::PowerShell,
                    &mut cmd,
                    "kubeless",
                    &mut buf,
                ),
            }
            output::print(&String::from_utf8_lossy(&buf))
        }
        Command::Topic(cmd) => brokers::topic(cmd).await,
        Command::Function(cmd) => function::run(&Ctx::connect(&kube).await?, cmd).await,
        Command::Trigger(cmd) => trigger::run(&Ctx::connect(&kube).await?, cmd).await,
        Command::Autoscale(cmd) => autoscale::run(&Ctx::connect(&kube).await?, cmd).await,
        Command::GetServerConfig => config::get_server_config(&Ctx::connect(&kube).await?).await,
        Command::Ui(args) => ui::run(&kube, args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }
}
