//! `kubeless-builder`: the last container of a Function's build Job (issue 23). The init
//! containers before it prepared the function's code and installed its dependencies into
//! `/kubeless`; this pushes the function image, the runtime image plus one layer holding that
//! directory, to the registry (see the `kubeless-oci` crate). Its stderr line on failure becomes
//! the Function's status message, so every error is one human sentence.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use clap::{ArgAction, Parser, Subcommand, builder::BoolishValueParser};
use kubeless_oci::{PushLayer, Registry, RegistryOptions};

/// Builds and pushes Kubeless function images.
#[derive(Debug, Parser)]
#[command(name = "kubeless-builder", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pushes TARGET = BASE + one layer holding DIR under ROOT, unless TARGET already exists.
    Push(PushArgs),
}

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The runtime image to build on (host[:port]/repository:tag).
    #[arg(long, env = "KUBELESS_BUILD_BASE")]
    pub base: Option<String>,
    /// The function image to push.
    #[arg(long, env = "KUBELESS_BUILD_TARGET")]
    pub target: Option<String>,
    /// The directory whose files make the new layer.
    #[arg(long, env = "KUBELESS_BUILD_DIR", default_value = "/kubeless")]
    pub dir: PathBuf,
    /// Where those files are in the image.
    #[arg(long, env = "KUBELESS_BUILD_ROOT", default_value = "/kubeless")]
    pub root: String,
    /// Labels of the image config, KEY=VALUE (repeat the flag; comma-separated in the env var).
    #[arg(long = "label", env = "KUBELESS_BUILD_LABELS", value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Talk plain HTTP to the registries.
    #[arg(
        long,
        env = "KUBELESS_REGISTRY_INSECURE",
        action = ArgAction::Set,
        num_args = 0..=1,
        default_value = "false",
        default_missing_value = "true",
        value_parser = BoolishValueParser::new()
    )]
    pub insecure: bool,
    /// PEM file of a CA the registry's certificate is signed by.
    #[arg(long, env = "KUBELESS_REGISTRY_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// A .dockerconfigjson file (the key of a kubernetes.io/dockerconfigjson Secret) holding the
    /// registry credentials.
    #[arg(long, env = "KUBELESS_DOCKER_CONFIG")]
    pub docker_config: Option<PathBuf>,
}

/// A failure, as the one line printed on stderr.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<kubeless_oci::Error> for Failure {
    fn from(e: kubeless_oci::Error) -> Self {
        Failure(chain(&e))
    }
}

/// An error and its sources on one line, skipping a source whose text is already there.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

/// Runs `push`, writing its progress lines to `out`.
pub async fn push(args: PushArgs, out: &mut impl Write) -> Result<(), Failure> {
    let PushArgs {
        base,
        target,
        dir,
        root,
        labels,
        insecure,
        ca_file,
        docker_config,
    } = args;
    let base =
        base.ok_or_else(|| Failure("no base image: set --base or KUBELESS_BUILD_BASE".into()))?;
    let target = target
        .ok_or_else(|| Failure("no target image: set --target or KUBELESS_BUILD_TARGET".into()))?;
    let labels = labels
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| Failure(format!("label {l:?} is not KEY=VALUE")))
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let read = |what: &str, path: &PathBuf| {
        std::fs::read(path)
            .map_err(|e| Failure(format!("cannot read the {what} {}: {e}", path.display())))
    };
    let ca_pem = ca_file.as_ref().map(|p| read("CA file", p)).transpose()?;
    let docker_config = docker_config
        .as_ref()
        .map(|p| read("docker config", p))
        .transpose()?;
    let registry = Registry::new(RegistryOptions {
        insecure,
        ca_pem,
        docker_config,
    })?;
    let say = |out: &mut dyn Write, line: String| {
        // A closed stdout must not fail the push.
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    if let Some(digest) = registry.exists(&target).await? {
        say(out, format!("exists {target}@{digest}"));
        return Ok(());
    }
    let pushed = registry
        .push_layer(&PushLayer {
            base: &base,
            target: &target,
            dir: &dir,
            root: &root,
            labels,
        })
        .await?;
    say(out, format!("base {base}@{}", pushed.base_digest));
    say(
        out,
        format!("layer {} {} bytes", pushed.layer_digest, pushed.layer_bytes),
    );
    let mut blobs = format!(
        "mounted {} blobs, uploaded {}",
        pushed.mounted, pushed.uploaded
    );
    if pushed.existing > 0 {
        blobs.push_str(&format!(", {} already there", pushed.existing));
    }
    say(out, blobs);
    say(out, format!("pushed {target}@{}", pushed.digest));
    Ok(())
}
