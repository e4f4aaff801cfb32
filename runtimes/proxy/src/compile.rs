//! `compile`: the init step of compiled runtimes (Go, Java). It builds the
//! function in the install volume together with the worker we ship, so that
//! `serve` only starts the result. A compiler error fails the step with the
//! compiler's own message, which the function controller copies into the
//! Function's status.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::CompileArgs;

/// The Go worker binary `compile` writes, relative to the install volume.
pub const GO_BINARY: &str = ".kubeless-go/function";
/// Compiled Java classes (worker and function), relative to the install volume.
pub const JAVA_CLASSES: &str = ".kubeless-java/classes";
/// Jars of the function's `pom.xml` dependencies, relative to the install volume.
pub const JAVA_LIB: &str = ".kubeless-java/lib";
/// Main class of the Java worker.
pub const JAVA_WORKER_CLASS: &str = "io.kubeless.runtime.Worker";

/// Module path our Go `functions` package lives under (Kubeless's, so functions compile unchanged).
const GO_KUBELESS_MODULE: &str = "github.com/kubeless/kubeless";
/// Version written into the function's go.mod; the `replace` makes it point at our copy.
const GO_KUBELESS_VERSION: &str = "v1.0.8";
/// Folder in the install volume holding the generated `main` package.
const GO_MAIN_DIR: &str = "kubeless-main";
/// Largest part of a compiler's output kept in the error.
const OUTPUT_TAIL_BYTES: usize = 4000;

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("no compile step for runtime {0:?} (compiled runtimes: go*, java*)")]
    UnknownRuntime(String),
    #[error("handler {0:?} is not a valid {1} identifier")]
    BadHandler(String, &'static str),
    #[error("the function source {0} does not exist")]
    MissingSource(PathBuf),
    #[error("the runtime's {what} folder {path} does not exist (set {env})")]
    MissingRuntimeFiles {
        what: &'static str,
        path: PathBuf,
        env: &'static str,
    },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} has no `module` line")]
    NoModulePath(PathBuf),
    #[error("cannot run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{step} failed ({status}):\n{output}")]
    Failed {
        step: String,
        status: std::process::ExitStatus,
        output: String,
    },
    #[error("pom.xml dependency {0} is not in the local Maven repository {1}")]
    MissingJar(String, PathBuf),
    #[error("pom.xml is not valid: {0}")]
    BadPom(String),
}

/// What was built, for the log.
#[derive(Debug, PartialEq, Eq)]
pub enum Compiled {
    Go { binary: PathBuf },
    Java { classes: PathBuf, jars: usize },
}

/// Run the compile step for `args.runtime`.
pub fn compile(args: &CompileArgs) -> Result<Compiled, CompileError> {
    let runtime = args.runtime.trim();
    if runtime.starts_with("go") {
        compile_go(args)
    } else if runtime.starts_with("java") {
        crate::compile_java::compile_java(args)
    } else {
        Err(CompileError::UnknownRuntime(runtime.to_owned()))
    }
}

/// Whether `s` is an identifier in Go and Java (ASCII letters, digits, `_`, `$` for Java).
pub(crate) fn is_identifier(s: &str, dollar: bool) -> bool {
    let mut chars = s.chars();
    let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || (dollar && c == '$');
    matches!(chars.next(), Some(c) if ok(c) && !c.is_ascii_digit()) && chars.all(ok)
}

pub(crate) fn write(path: &Path, text: &[u8]) -> Result<(), CompileError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| CompileError::Write {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, text).map_err(|source| CompileError::Write {
        path: path.to_path_buf(),
        source,
    })
}

pub(crate) fn read(path: &Path) -> Result<String, CompileError> {
    std::fs::read_to_string(path).map_err(|source| CompileError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Run a tool; its output goes to stderr (the init container's log) and, on failure, into the error.
pub(crate) fn run(step: &str, mut cmd: Command) -> Result<(), CompileError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| CompileError::Spawn { program, source })?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if !text.trim().is_empty() {
        eprintln!("{}", text.trim_end());
    }
    if !out.status.success() {
        return Err(CompileError::Failed {
            step: step.to_owned(),
            status: out.status,
            output: tail(text.trim()),
        });
    }
    Ok(())
}

fn tail(text: &str) -> String {
    if text.len() <= OUTPUT_TAIL_BYTES {
        return text.to_owned();
    }
    let mut start = text.len() - OUTPUT_TAIL_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The `module` path of a go.mod.
fn go_module_path(go_mod: &Path) -> Result<String, CompileError> {
    let text = read(go_mod)?;
    text.lines()
        .map(str::trim)
        .find_map(|l| {
            l.strip_prefix("module ")
                .or_else(|| l.strip_prefix("module\t"))
        })
        .map(|rest| {
            rest.split("//")
                .next()
                .unwrap_or("")
                .trim()
                .trim_matches('"')
        })
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| CompileError::NoModulePath(go_mod.to_path_buf()))
}

/// Packages of our Go module that the function and worker import.
const GO_PACKAGES: &[&str] = &["pkg/functions", "pkg/kubelessrs/worker"];

/// Make a vendored build see our module: copy its packages into vendor/ and list them in
/// vendor/modules.txt, replacing any vendored copy of Kubeless's own module.
fn vendor_go_runtime(vol: &Path, runtime_dir: &Path) -> Result<(), CompileError> {
    let modules_txt = vol.join("vendor/modules.txt");
    let text = read(&modules_txt)?;
    let mut kept = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            skipping = rest.split_whitespace().next() == Some(GO_KUBELESS_MODULE);
        }
        if !skipping {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept.push_str(&format!(
        "# {GO_KUBELESS_MODULE} {GO_KUBELESS_VERSION} => {}\n## explicit\n",
        runtime_dir.display()
    ));
    let vendored = vol.join("vendor").join(GO_KUBELESS_MODULE);
    let _ = std::fs::remove_dir_all(&vendored);
    for pkg in GO_PACKAGES {
        kept.push_str(&format!("{GO_KUBELESS_MODULE}/{pkg}\n"));
        let from = runtime_dir.join(pkg);
        let entries = std::fs::read_dir(&from).map_err(|source| CompileError::Read {
            path: from.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "go") {
                let text = read(&path)?;
                write(&vendored.join(pkg).join(entry.file_name()), text.as_bytes())?;
            }
        }
    }
    // A replacement of every version is listed on its own as well.
    kept.push_str(&format!(
        "# {GO_KUBELESS_MODULE} => {}\n",
        runtime_dir.display()
    ));
    write(&modules_txt, kept.as_bytes())
}

fn compile_go(args: &CompileArgs) -> Result<Compiled, CompileError> {
    let handler = args.handler.trim();
    // The generated main calls `function.<handler>`: it must be an exported Go identifier.
    if !is_identifier(handler, false) || !handler.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Err(CompileError::BadHandler(
            handler.to_owned(),
            "exported Go (it must start with an upper-case letter)",
        ));
    }
    let vol = absolute(&args.dir);
    let source = vol.join(format!("{}.go", args.module));
    if !source.is_file() {
        return Err(CompileError::MissingSource(source));
    }
    let runtime_dir = absolute(&args.go_runtime_dir);
    if !runtime_dir.join("go.mod").is_file() {
        return Err(CompileError::MissingRuntimeFiles {
            what: "Go functions package",
            path: runtime_dir,
            env: "KUBELESS_GO_RUNTIME_DIR",
        });
    }
    let go_mod = vol.join("go.mod");
    if !go_mod.is_file() {
        write(&go_mod, b"module kubeless-function\n\ngo 1.19\n")?;
    }
    let module_path = go_module_path(&go_mod)?;
    let out_dir = vol.join(".kubeless-go");
    let go = |sub: &[&str]| {
        let mut cmd = Command::new(&args.go);
        cmd.args(sub).current_dir(&vol);
        // No registry unless the cluster configured one (GOPROXY in the compile phase's env).
        if std::env::var_os("GOPROXY").is_none() {
            cmd.env("GOPROXY", "off");
            if std::env::var_os("GOSUMDB").is_none() {
                cmd.env("GOSUMDB", "off");
            }
        }
        // The function's user may have no writable HOME; keep Go's caches in the volume.
        if std::env::var_os("GOCACHE").is_none() {
            cmd.env("GOCACHE", out_dir.join("cache"));
        }
        if std::env::var_os("GOPATH").is_none() {
            cmd.env("GOPATH", out_dir.join("gopath"));
        }
        if std::env::var_os("CGO_ENABLED").is_none() {
            cmd.env("CGO_ENABLED", "0");
        }
        cmd
    };
    let mut edit = go(&["mod", "edit"]);
    edit.arg(format!(
        "-require={GO_KUBELESS_MODULE}@{GO_KUBELESS_VERSION}"
    ))
    .arg(format!(
        "-replace={GO_KUBELESS_MODULE}={}",
        runtime_dir.display()
    ));
    run("go mod edit", edit)?;
    let vendored = vol.join("vendor/modules.txt").is_file();
    if vendored {
        vendor_go_runtime(&vol, &runtime_dir)?;
    }
    let main = format!(
        "// Generated by kubeless-runtime compile: serves {module_path}.{handler} to the runtime proxy.\n\
         package main\n\n\
         import (\n\
         \tfunction \"{module_path}\"\n\
         \tworker \"{GO_KUBELESS_MODULE}/pkg/kubelessrs/worker\"\n\
         )\n\n\
         func main() {{ worker.Run(function.{handler}) }}\n"
    );
    write(&vol.join(GO_MAIN_DIR).join("main.go"), main.as_bytes())?;
    let binary = vol.join(GO_BINARY);
    let mut build = go(&["build", "-trimpath"]);
    build
        .arg(if vendored { "-mod=vendor" } else { "-mod=mod" })
        .arg("-o")
        .arg(&binary)
        .arg(format!("./{GO_MAIN_DIR}"));
    run("go build", build)?;
    Ok(Compiled::Go { binary })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(is_identifier("Handler", false));
        assert!(is_identifier("_x9", false));
        assert!(!is_identifier("9x", false));
        assert!(!is_identifier("a.b", false));
        assert!(!is_identifier("a$b", false));
        assert!(is_identifier("a$b", true));
        assert!(!is_identifier("", true));
        assert!(!is_identifier("Foo() ; os.Exit(1)", false));
    }

    #[test]
    fn module_path_from_go_mod() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("go.mod");
        std::fs::write(&p, "// c\nmodule \"example.com/fn\" // x\n\ngo 1.19\n").unwrap();
        assert_eq!(go_module_path(&p).unwrap(), "example.com/fn");
        std::fs::write(&p, "go 1.19\n").unwrap();
        assert!(matches!(
            go_module_path(&p),
            Err(CompileError::NoModulePath(_))
        ));
    }
}
