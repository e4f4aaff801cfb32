//! `install`: the second init step. Installs the function's dependencies
//! into the install volume, where the workers look for them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::InstallArgs;
use crate::server::PYTHON_PACKAGES_DIR;

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("no dependency installer for runtime {0:?} (supported: python*, nodejs*, ruby*, php*)")]
    UnknownRuntime(String),
    #[error("cannot read the dependency file {path}")]
    ReadDeps {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed with {status}; its output is above")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
    },
}

/// What was done, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    NothingToDo,
    Python { target: PathBuf },
    Node { prefix: PathBuf },
    Ruby { path: PathBuf },
    Php { vendor: PathBuf },
}

/// Where `install` puts a Ruby function's gems (bundler's `BUNDLE_PATH`), under the install volume.
pub const RUBY_BUNDLE_DIR: &str = "vendor/bundle";

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

fn run(mut cmd: Command) -> Result<(), InstallError> {
    let command = format!("{cmd:?}");
    let program = cmd.get_program().to_string_lossy().into_owned();
    // Installer output goes to the init container's log; stdout would mix with ours.
    let status = cmd
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .map_err(|source| InstallError::Spawn { program, source })?;
    if !status.success() {
        return Err(InstallError::Failed { command, status });
    }
    Ok(())
}

fn python_program(args: &InstallArgs) -> PathBuf {
    if let Some(p) = &args.python {
        return p.clone();
    }
    // `python3.11` -> try `python3.11` first, so the deps match the worker's interpreter.
    let versioned = args.runtime.trim().to_owned();
    if versioned.len() > "python".len() && on_path(&versioned) {
        return PathBuf::from(versioned);
    }
    PathBuf::from("python3")
}

/// Run the install step.
pub fn install(args: &InstallArgs) -> Result<Installed, InstallError> {
    let deps = match std::fs::read_to_string(&args.deps) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Installed::NothingToDo),
        Err(source) => {
            return Err(InstallError::ReadDeps {
                path: args.deps.clone(),
                source,
            });
        }
    };
    if deps.trim().is_empty() {
        return Ok(Installed::NothingToDo);
    }
    let runtime = args.runtime.trim();
    if runtime.starts_with("python") {
        let target = args.dir.join(PYTHON_PACKAGES_DIR);
        let mut cmd = Command::new(python_program(args));
        cmd.args([
            "-m",
            "pip",
            "install",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--target",
        ])
        .arg(&target)
        .arg("-r")
        .arg(&args.deps);
        run(cmd)?;
        Ok(Installed::Python { target })
    } else if runtime.starts_with("nodejs") || runtime.starts_with("node") {
        // npm reads package.json from the folder it runs in.
        put_manifest(args, &deps, "package.json")?;
        // Run in the install dir rather than with `--prefix`: npm reads its global npmrc from
        // <prefix>/etc, so `--prefix` would drop the machine's global settings (a proxy's CA file).
        let mut cmd = Command::new(&args.npm);
        cmd.args(["install", "--no-audit", "--no-fund", "--omit=dev"])
            .current_dir(&args.dir);
        // The function user's HOME may not be writable; keep npm's cache in the volume's temp space.
        if std::env::var_os("npm_config_cache").is_none() {
            cmd.env(
                "npm_config_cache",
                std::env::temp_dir().join("kubeless-npm-cache"),
            );
        }
        run(cmd)?;
        Ok(Installed::Node {
            prefix: args.dir.clone(),
        })
    } else if runtime.starts_with("ruby") {
        // The worker runs `bundler/setup` against <volume>/Gemfile, so the Gemfile (and the
        // Gemfile.lock bundler writes) live in the volume.
        let gemfile = put_manifest(args, &deps, "Gemfile")?;
        let path = args.dir.join(RUBY_BUNDLE_DIR);
        let mut cmd = Command::new(&args.bundle);
        cmd.arg("install")
            .current_dir(&args.dir)
            .env("BUNDLE_GEMFILE", &gemfile)
            .env("BUNDLE_PATH", &path);
        // Gems packaged with the function (`bundle cache`) install with no registry at all.
        if args.dir.join("vendor/cache").is_dir() {
            cmd.arg("--local");
        }
        // The function user's HOME may not be writable.
        if std::env::var_os("BUNDLE_USER_HOME").is_none() {
            cmd.env(
                "BUNDLE_USER_HOME",
                std::env::temp_dir().join("kubeless-bundle-home"),
            );
        }
        run(cmd)?;
        Ok(Installed::Ruby { path })
    } else if runtime.starts_with("php") {
        // composer reads composer.json from its working dir and writes <dir>/vendor.
        put_manifest(args, &deps, "composer.json")?;
        let mut cmd = Command::new(&args.composer);
        cmd.args([
            "install",
            "--no-dev",
            "--no-interaction",
            "--no-progress",
            "--optimize-autoloader",
        ])
        .current_dir(&args.dir);
        if std::env::var_os("COMPOSER_HOME").is_none() {
            cmd.env(
                "COMPOSER_HOME",
                std::env::temp_dir().join("kubeless-composer-home"),
            );
        }
        run(cmd)?;
        Ok(Installed::Php {
            vendor: args.dir.join("vendor"),
        })
    } else {
        Err(InstallError::UnknownRuntime(runtime.to_owned()))
    }
}

/// Write the deps as `<dir>/<name>` (where the installer looks), unless they are that file already.
fn put_manifest(args: &InstallArgs, deps: &str, name: &str) -> Result<PathBuf, InstallError> {
    let manifest = args.dir.join(name);
    if !same_file(&args.deps, &manifest) {
        std::fs::create_dir_all(&args.dir).map_err(|source| InstallError::Write {
            path: args.dir.clone(),
            source,
        })?;
        std::fs::write(&manifest, deps.as_bytes()).map_err(|source| InstallError::Write {
            path: manifest.clone(),
            source,
        })?;
    }
    Ok(manifest)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
