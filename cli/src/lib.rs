//! The `kubeless` command: Kubeless 1.0.8's command tree over kube-rs.
//!
//! `main.rs` only parses the arguments and calls [`run`]; each command group lives in its own
//! module, with the pure parts (flag -> object builders, tables, metric parsing) separate from
//! the code that talks to the API server or the brokers.

pub mod args;
pub mod autoscale;
pub mod brokers;
pub mod complete;
pub mod config;
pub mod ctx;
pub mod error;
pub mod function;
pub mod local;
pub mod manifest;
pub mod metrics;
pub mod output;
pub mod selector;
pub mod source;
pub mod spec;
pub mod trigger;
pub mod ui;
pub mod wait;

use crate::{
    args::{Cli, Command},
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
    let Cli {
        kube,
        verbose: _,
        command,
    } = cli;
    match command {
        Command::Version => version(&kube).await,
        Command::Apply(a) => manifest::apply(&Ctx::connect(&kube).await?, &a.filename).await,
        Command::Completion { shell } => {
            let argv0 = std::env::args().next().unwrap_or_else(|| "kubeless".into());
            let script = complete::registration(shell, &argv0).map_err(Error::Stdout)?;
            output::print(&script)
        }
        Command::Topic(cmd) => brokers::topic(cmd).await,
        // `function init` writes files only: no cluster needed.
        Command::Function(args::FunctionCmd::Init(a)) => {
            manifest::init(&a.runtime, &a.name, &a.dir)
        }
        // `function run` serves local files: no cluster needed either.
        Command::Function(args::FunctionCmd::Run(a)) => local::run(&a).await,
        Command::Function(cmd) => function::run(&Ctx::connect(&kube).await?, cmd).await,
        Command::Trigger(cmd) => trigger::run(&Ctx::connect(&kube).await?, cmd).await,
        Command::Autoscale(cmd) => autoscale::run(&Ctx::connect(&kube).await?, cmd).await,
        Command::GetServerConfig => config::get_server_config(&Ctx::connect(&kube).await?).await,
        Command::Ui(args) => ui::run(&kube, args).await,
    }
}

/// `kubeless version`: this command's version, then what the cluster runs. The cluster part
/// never fails the command: an unreachable cluster is printed as such.
async fn version(kube: &args::KubeArgs) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut out = format!("Kubeless version: {}\n", env!("CARGO_PKG_VERSION"));
    let server = async {
        let ctx = Ctx::connect(kube).await?;
        let info = ctx
            .client
            .apiserver_version()
            .await
            .map_err(|e| Error::kube("reading the server version", e))?;
        let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(ctx.client.clone());
        let crd = crds
            .get_opt("functions.kubeless.io")
            .await
            .map_err(|e| Error::kube("reading the Function CRD", e))?;
        let crd_line = match crd {
            Some(c) => {
                let versions: Vec<String> =
                    c.spec.versions.iter().map(|v| v.name.clone()).collect();
                format!("kubeless.io {}", versions.join(", "))
            }
            None => "not installed (kubectl apply -f deploy/crds/)".to_string(),
        };
        Ok::<_, Error>((info.git_version, crd_line))
    };
    match tokio::time::timeout(std::time::Duration::from_secs(10), server).await {
        Ok(Ok((server, crd))) => {
            out.push_str(&format!(
                "Kubernetes server: {server}\nFunction CRD: {crd}\n"
            ));
        }
        Ok(Err(e)) => out.push_str(&format!("Kubernetes server: unknown ({})\n", e.human())),
        Err(_) => out.push_str("Kubernetes server: unknown (no answer within 10s)\n"),
    }
    output::print(&out)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }
}
