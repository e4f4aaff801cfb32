//! `kubeless function run`: serve a function from local files, without any cluster.
//!
//! The same runtime the function pods run (the `kubeless-runtime` proxy and its language
//! workers) is linked into this command; the workers' files are embedded here and written to a
//! temporary folder at start. The function's folder is the install volume, so a function
//! importing its neighbours works as it does in the pod.

use std::path::{Path, PathBuf};

use kubeless_runtime::{
    cli::ServeArgs,
    server::{ServeError, Server},
};

use crate::{
    args::RunArgs,
    error::{Error, Result},
    spec::parse_key_values,
};

/// The languages a local run can serve: (language, suffix, default runtime id, interpreter,
/// worker files as (path under the language folder, content); the first is the worker script).
struct Language {
    name: &'static str,
    suffix: &'static str,
    default_runtime: &'static str,
    interpreter: &'static str,
    files: &'static [(&'static str, &'static str)],
}

const LANGUAGES: &[Language] = &[
    Language {
        name: "python",
        suffix: ".py",
        default_runtime: "python3.12",
        interpreter: "python3",
        files: &[
            (
                "kubeless_worker.py",
                include_str!("../../runtimes/python/kubeless_worker.py"),
            ),
            (
                "kubeless.py",
                include_str!("../../runtimes/python/kubeless.py"),
            ),
        ],
    },
    Language {
        name: "nodejs",
        suffix: ".js",
        default_runtime: "nodejs22",
        interpreter: "node",
        files: &[
            (
                "kubeless_worker.js",
                include_str!("../../runtimes/nodejs/kubeless_worker.js"),
            ),
            (
                "modules/kubeless/index.js",
                include_str!("../../runtimes/nodejs/modules/kubeless/index.js"),
            ),
        ],
    },
    Language {
        name: "ruby",
        suffix: ".rb",
        default_runtime: "ruby3.1",
        interpreter: "ruby",
        files: &[
            (
                "kubeless_worker.rb",
                include_str!("../../runtimes/ruby/kubeless_worker.rb"),
            ),
            (
                "lib/kubeless.rb",
                include_str!("../../runtimes/ruby/lib/kubeless.rb"),
            ),
        ],
    },
    Language {
        name: "php",
        suffix: ".php",
        default_runtime: "php8.2",
        interpreter: "php",
        files: &[
            (
                "kubeless_worker.php",
                include_str!("../../runtimes/php/kubeless_worker.php"),
            ),
            (
                "Kubeless.php",
                include_str!("../../runtimes/php/Kubeless.php"),
            ),
        ],
    },
];

fn language_of_runtime(runtime: &str) -> Option<&'static Language> {
    let id = kubeless_api::parse::RuntimeRef::parse(runtime).ok()?.id;
    LANGUAGES.iter().find(|l| l.name == id)
}

fn language_of_file(file: &Path) -> Option<&'static Language> {
    let name = file.file_name()?.to_str()?;
    LANGUAGES.iter().find(|l| name.ends_with(l.suffix))
}

/// What to serve, worked out from the flags and the folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Absolute folder holding the function (the install volume).
    pub dir: PathBuf,
    pub module: String,
    pub function: String,
    pub runtime: String,
}

/// Resolves the file, handler and runtime; `cwd` is where relative paths start.
pub fn plan(args: &RunArgs, cwd: &Path) -> Result<Plan> {
    let handler = match &args.handler {
        Some(h) => Some(h.rsplit_once('.').ok_or_else(|| {
            Error::usage(format!(
                "Invalid --handler {h:?}: write it as <file>.<function>, e.g. hello.handler"
            ))
        })?),
        None => None,
    };
    let file = match (&args.file, handler) {
        (Some(f), _) => cwd.join(f),
        (None, Some((module, _))) => find_module(cwd, module)?,
        (None, None) => only_function_file(cwd)?,
    };
    if !file.is_file() {
        return Err(Error::usage(format!(
            "{} is not a file: give the function's file, e.g. `kubeless function run hello.py`",
            file.display()
        )));
    }
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let (module, function) = match handler {
        Some((m, f)) => (m.to_string(), f.to_string()),
        None => (stem.clone(), "handler".to_string()),
    };
    if module != stem {
        return Err(Error::usage(format!(
            "--handler {module}.{function} names module {module:?}, but the file is {}: the part \
             before the dot is the file name without its suffix",
            file.display()
        )));
    }
    let runtime = match &args.runtime {
        Some(r) => r.clone(),
        None => language_of_file(&file)
            .map(|l| l.default_runtime.to_string())
            .ok_or_else(|| {
                Error::usage(format!(
                    "Cannot tell the runtime of {}: give --runtime (python*, nodejs*, ruby*, php*)",
                    file.display()
                ))
            })?,
    };
    if language_of_runtime(&runtime).is_none() {
        let why = if runtime.starts_with("go") || runtime.starts_with("java") {
            "compiled runtimes need the cluster's compile step: deploy the function with \
             `kubeless function deploy`"
        } else {
            "a local run serves python*, nodejs*, ruby* and php* functions"
        };
        return Err(Error::usage(format!(
            "Cannot run a {runtime} function locally: {why}"
        )));
    }
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| cwd.to_path_buf());
    Ok(Plan {
        dir: std::path::absolute(&dir).unwrap_or(dir),
        module,
        function,
        runtime,
    })
}

fn function_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && language_of_file(p).is_some())
        .collect();
    files.sort();
    Ok(files)
}

fn find_module(dir: &Path, module: &str) -> Result<PathBuf> {
    let found: Vec<PathBuf> = function_files(dir)?
        .into_iter()
        .filter(|p| p.file_stem().and_then(|s| s.to_str()) == Some(module))
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::usage(format!(
            "No {module}.py, {module}.js, {module}.rb or {module}.php in {}: give the file",
            dir.display()
        ))),
        _ => Err(Error::usage(format!(
            "Several files are named {module}.* in {}: give the one to run",
            dir.display()
        ))),
    }
}

fn only_function_file(dir: &Path) -> Result<PathBuf> {
    let files = function_files(dir)?;
    match files.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(Error::usage(format!(
            "No function file (.py, .js, .rb, .php) in {}: give one, e.g. `kubeless function run \
             hello.py`, or write a starter with `kubeless function init python3.12 hello`",
            dir.display()
        ))),
        many => Err(Error::usage(format!(
            "{} function files in {}: say which one, e.g. `kubeless function run {}`",
            many.len(),
            dir.display(),
            many[0]
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ))),
    }
}

/// Writes the language's worker files under `root` and returns the worker script's path.
fn write_worker(root: &Path, lang: &Language) -> Result<PathBuf> {
    let mut script = None;
    for (rel, text) in lang.files {
        let path = root.join(lang.name).join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Write {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, text).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
        script.get_or_insert(path);
    }
    script.ok_or_else(|| Error::usage(format!("no worker for {}", lang.name)))
}

/// Serves until Ctrl-C.
pub async fn run(args: &RunArgs) -> Result<()> {
    let cwd = std::env::current_dir().map_err(|source| Error::Read {
        path: PathBuf::from("."),
        source,
    })?;
    let plan = plan(args, &cwd)?;
    let env: Vec<(String, String)> = parse_key_values(&args.env, "environment variable")?
        .into_iter()
        .collect();
    let lang = language_of_runtime(&plan.runtime)
        .ok_or_else(|| Error::usage(format!("no local worker for {}", plan.runtime)))?;
    let workers = tempfile::Builder::new()
        .prefix("kubeless-run-")
        .tempdir()
        .map_err(|source| Error::Write {
            path: std::env::temp_dir(),
            source,
        })?;
    let script = write_worker(workers.path(), lang)?;
    let mut argv: Vec<String> = vec![
        "kubeless-function-run".into(),
        format!("--port={}", args.port),
        format!("--listen-address={}", args.address),
        format!("--handler={}", plan.function),
        format!("--module={}", plan.module),
        format!("--timeout={}", args.timeout),
        format!("--runtime={}", plan.runtime),
        format!("--install-volume={}", plan.dir.display()),
        format!("--{}-worker={}", lang.name, script.display()),
        format!(
            "--{}={}",
            lang.name.trim_end_matches("js"),
            lang.interpreter
        ),
    ];
    if let Some(n) = args.workers {
        argv.push(format!("--workers={n}"));
    }
    let mut serve = parse_serve_args(&argv)?;
    serve.worker_env = env;
    let server = Server::bind(serve).await.map_err(|e| match e {
        ServeError::Bind { addr, source } => Error::usage(format!(
            "Cannot listen on {addr}: {source}. Pick another port with --port (0 takes any free one)"
        )),
        other => Error::usage(format!(
            "Cannot start {}.{} ({}): {}. The worker's own message is above",
            plan.module,
            plan.function,
            plan.runtime,
            crate::error_chain(&other)
        )),
    })?;
    // The bound address (the port the system chose for --port 0), else the one asked for.
    let addr = server
        .local_addr()
        .unwrap_or(std::net::SocketAddr::new(args.address, args.port));
    crate::output::println(&format!(
        "Serving {}.{} ({}) from {} on http://{addr}/ (Ctrl-C stops)",
        plan.module,
        plan.function,
        plan.runtime,
        plan.dir.display()
    ))?;
    server.run().await;
    Ok(())
}

#[derive(clap::Parser)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeArgs,
}

fn parse_serve_args(argv: &[String]) -> Result<ServeArgs> {
    use clap::Parser;
    ServeOnly::try_parse_from(argv)
        .map(|s| s.serve)
        .map_err(|e| Error::usage(format!("Invalid run settings: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(file: Option<&str>, handler: Option<&str>, runtime: Option<&str>) -> RunArgs {
        RunArgs {
            file: file.map(PathBuf::from),
            handler: handler.map(str::to_string),
            runtime: runtime.map(str::to_string),
            port: 0,
            address: std::net::Ipv4Addr::LOCALHOST.into(),
            env: vec![],
            timeout: "180".into(),
            workers: None,
        }
    }

    #[test]
    fn plan_fills_in_what_the_folder_tells() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::usage(e.to_string()))?;
        let cwd = dir.path();
        std::fs::write(cwd.join("hello.py"), "def handler(e, c):\n  return 'hi'\n")
            .map_err(|e| Error::usage(e.to_string()))?;
        let p = plan(&args(None, None, None), cwd)?;
        assert_eq!(
            (p.module.as_str(), p.function.as_str(), p.runtime.as_str()),
            ("hello", "handler", "python3.12")
        );
        let p = plan(&args(None, Some("hello.greet"), Some("python3.11")), cwd)?;
        assert_eq!(
            (p.function.as_str(), p.runtime.as_str()),
            ("greet", "python3.11")
        );

        std::fs::write(cwd.join("other.js"), "module.exports = {}\n")
            .map_err(|e| Error::usage(e.to_string()))?;
        let many = plan(&args(None, None, None), cwd).map(|_| ()).unwrap_err();
        assert!(
            many.human().contains("2 function files"),
            "{}",
            many.human()
        );
        let p = plan(&args(Some("other.js"), None, None), cwd)?;
        assert_eq!(p.runtime, "nodejs22");

        let wrong = plan(&args(Some("hello.py"), Some("nope.handler"), None), cwd)
            .map(|_| ())
            .unwrap_err();
        assert!(wrong.human().contains("file name without its suffix"));
        let go = plan(&args(Some("hello.py"), None, Some("go1.19")), cwd)
            .map(|_| ())
            .unwrap_err();
        assert!(go.human().contains("compile step"), "{}", go.human());
        let dotless = plan(&args(None, Some("handler"), None), cwd)
            .map(|_| ())
            .unwrap_err();
        assert!(dotless.human().contains("<file>.<function>"));
        Ok(())
    }

    #[test]
    fn every_language_has_its_worker_flags() {
        for lang in LANGUAGES {
            let argv: Vec<String> = vec![
                "x".into(),
                format!("--{}-worker=/w", lang.name),
                format!(
                    "--{}={}",
                    lang.name.trim_end_matches("js"),
                    lang.interpreter
                ),
            ];
            assert!(parse_serve_args(&argv).is_ok(), "{}", lang.name);
        }
    }
}
