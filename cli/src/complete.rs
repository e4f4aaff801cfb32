//! Shell completion that knows the cluster: clap's dynamic completion engine, with function and
//! trigger names listed from the API server.
//!
//! `kubeless completion bash` prints a small registration script; the shell then runs
//! `COMPLETE=bash kubeless -- <words>` at every TAB, which [`complete_from_env`] answers before
//! anything else runs. Name arguments list the objects of the kind the words name (the word after
//! `trigger`, else functions), in the namespace, context and kubeconfig given on the line. A
//! cluster that does not answer within [`LIST_TIMEOUT`] completes nothing rather than hang.

use std::{ffi::OsStr, time::Duration};

use clap::CommandFactory;
use clap_complete::{
    engine::{ArgValueCompleter, CompletionCandidate},
    env::{Bash, CompleteEnv, EnvCompleter, Fish, Powershell, Zsh},
};
use kube::{
    Resource,
    api::{ApiResource, DynamicObject, ListParams},
};
use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger, KafkaTrigger, KinesisTrigger, NatsTrigger,
};

use crate::{
    args::{Cli, KubeArgs, Shell},
    ctx::Ctx,
};

/// The environment variable the registration script sets to ask for completions.
pub const ENV_VAR: &str = "COMPLETE";

/// How long a TAB may wait for the API server.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(3);

/// Answers a completion request and exits when the shell asked for one; returns otherwise.
/// Call it first in `main`, before any thread (the async runtime) starts.
pub fn complete_from_env() {
    CompleteEnv::with_factory(Cli::command)
        .var(ENV_VAR)
        .complete();
}

/// The registration script for `shell`, calling this binary by `argv0` (as the user typed it).
pub fn registration(shell: Shell, argv0: &str) -> std::io::Result<String> {
    let completer: &dyn EnvCompleter = match shell {
        Shell::Bash => &Bash,
        Shell::Zsh => &Zsh,
        Shell::Fish => &Fish,
        Shell::Powershell => &Powershell,
    };
    let mut buf = Vec::new();
    completer.write_registration(ENV_VAR, "kubeless", "kubeless", argv0, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// What a name argument names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Function,
    Http,
    Cronjob,
    Kafka,
    Nats,
    Kinesis,
}

impl Kind {
    /// The kind a command line is about: `trigger <kind> ...` names a trigger kind, anything
    /// else is about functions.
    pub fn from_words(words: &[String]) -> Self {
        let after_trigger = words
            .iter()
            .position(|w| w == "trigger")
            .and_then(|i| words.get(i + 1));
        match after_trigger.map(String::as_str) {
            Some("http") => Self::Http,
            Some("cronjob") => Self::Cronjob,
            Some("kafka") => Self::Kafka,
            Some("nats") => Self::Nats,
            Some("kinesis") => Self::Kinesis,
            _ => Self::Function,
        }
    }

    fn api_resource(self) -> ApiResource {
        match self {
            Self::Function => ApiResource::erase::<Function>(&()),
            Self::Http => ApiResource::erase::<HttpTrigger>(&()),
            Self::Cronjob => ApiResource::erase::<CronJobTrigger>(&()),
            Self::Kafka => ApiResource::erase::<KafkaTrigger>(&()),
            Self::Nats => ApiResource::erase::<NatsTrigger>(&()),
            Self::Kinesis => ApiResource::erase::<KinesisTrigger>(&()),
        }
    }
}

/// Completes the name of the object the command line is about (see [`Kind::from_words`]).
pub fn object_names() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| {
        let words = line_words();
        candidates(Kind::from_words(&words), &words, current)
    })
}

/// Completes a function name (`--function-name`, `--function`).
pub fn function_names() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| candidates(Kind::Function, &line_words(), current))
}

/// The words of the line being completed: what the shell passed after `--`.
fn line_words() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--") {
        Some(i) => args[i + 1..].to_vec(),
        None => Vec::new(),
    }
}

/// `--kubeconfig`, `--context` and `-n/--namespace` as typed on the line (either `--flag value`
/// or `--flag=value`); later ones win, as clap would have it.
pub fn kube_args_from_words(words: &[String]) -> KubeArgs {
    let mut kube = KubeArgs::default();
    let mut iter = words.iter().peekable();
    while let Some(word) = iter.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (word.as_str(), None),
        };
        let slot = match flag {
            "-n" | "--namespace" => 0,
            "--context" => 1,
            "--kubeconfig" => 2,
            _ => continue,
        };
        let Some(value) = inline.or_else(|| iter.next().cloned()) else {
            break;
        };
        match slot {
            0 => kube.namespace = Some(value),
            1 => kube.context = Some(value),
            _ => kube.kubeconfig = Some(value.into()),
        }
    }
    kube
}

fn candidates(kind: Kind, words: &[String], current: &OsStr) -> Vec<CompletionCandidate> {
    let prefix = current.to_string_lossy();
    let kube = kube_args_from_words(words);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    let names = runtime
        .block_on(async { tokio::time::timeout(LIST_TIMEOUT, list_names(kind, &kube)).await })
        .ok()
        .flatten()
        .unwrap_or_default();
    names
        .into_iter()
        .filter(|n| n.starts_with(prefix.as_ref()))
        .map(CompletionCandidate::new)
        .collect()
}

/// The names of the objects of `kind` in the line's namespace; `None` when the cluster cannot
/// be reached (completion then offers nothing).
async fn list_names(kind: Kind, kube: &KubeArgs) -> Option<Vec<String>> {
    let ctx = Ctx::connect(kube).await.ok()?;
    let resource = kind.api_resource();
    let api: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(ctx.client.clone(), &ctx.namespace, &resource);
    let list = api.list_metadata(&ListParams::default()).await.ok()?;
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_kind_comes_from_the_word_after_trigger() {
        assert_eq!(
            Kind::from_words(&words("kubeless function delete ")),
            Kind::Function
        );
        assert_eq!(
            Kind::from_words(&words("kubeless trigger kafka update x")),
            Kind::Kafka
        );
        assert_eq!(
            Kind::from_words(&words("kubeless -n ns trigger http delete")),
            Kind::Http
        );
        assert_eq!(
            Kind::from_words(&words("kubeless trigger cronjob describe")),
            Kind::Cronjob
        );
    }

    #[test]
    fn kube_flags_are_read_off_the_line() {
        let kube = kube_args_from_words(&words(
            "kubeless -n a function delete --context=c --kubeconfig /k",
        ));
        assert_eq!(kube.namespace.as_deref(), Some("a"));
        assert_eq!(kube.context.as_deref(), Some("c"));
        assert_eq!(kube.kubeconfig, Some("/k".into()));
        let kube = kube_args_from_words(&words("kubeless function delete --namespace=b x -n"));
        assert_eq!(kube.namespace.as_deref(), Some("b"));
    }

    #[test]
    fn every_shell_gets_a_script_calling_back_with_the_variable() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish, Shell::Powershell] {
            let script = registration(shell, "/opt/bin/kubeless").unwrap_or_default();
            assert!(script.contains("/opt/bin/kubeless"), "{shell:?}: {script}");
            assert!(script.contains(ENV_VAR), "{shell:?}: {script}");
        }
    }
}
