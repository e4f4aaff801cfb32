//! The Java half of `compile`: copy pom.xml dependencies with Maven (offline against a local
//! repository unless told otherwise), then compile the function and our worker with javac.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::CompileArgs;
use crate::compile::{
    CompileError, Compiled, JAVA_CLASSES, JAVA_LIB, is_identifier, read, run, write,
};

/// Every `.java` file under `dir`, skipping hidden folders (our own output lives in one).
fn java_sources(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CompileError> {
    let entries = std::fs::read_dir(dir).map_err(|source| CompileError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        match entry.file_type() {
            Ok(t) if t.is_dir() && !hidden => java_sources(&path, out)?,
            Ok(t) if t.is_file() && path.extension().is_some_and(|e| e == "java") => out.push(path),
            _ => {}
        }
    }
    Ok(())
}

fn jar_count(lib: &Path) -> usize {
    std::fs::read_dir(lib)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "jar"))
                .count()
        })
        .unwrap_or(0)
}

pub(crate) fn compile_java(args: &CompileArgs) -> Result<Compiled, CompileError> {
    let class = args.module.trim();
    if !is_identifier(class, true) {
        return Err(CompileError::BadHandler(class.to_owned(), "Java class"));
    }
    let method = args.handler.trim();
    if !is_identifier(method, true) {
        return Err(CompileError::BadHandler(method.to_owned(), "Java method"));
    }
    let vol = std::path::absolute(&args.dir).unwrap_or_else(|_| args.dir.clone());
    let source = vol.join(format!("{class}.java"));
    if !source.is_file() {
        return Err(CompileError::MissingSource(source));
    }
    let runtime_dir = std::path::absolute(&args.java_runtime_dir)
        .unwrap_or_else(|_| args.java_runtime_dir.clone());
    if !runtime_dir.join("io/kubeless/Event.java").is_file() {
        return Err(CompileError::MissingRuntimeFiles {
            what: "Java worker source",
            path: runtime_dir,
            env: "KUBELESS_JAVA_RUNTIME_DIR",
        });
    }
    let classes = vol.join(JAVA_CLASSES);
    let lib = vol.join(JAVA_LIB);
    let _ = std::fs::remove_dir_all(&classes);
    std::fs::create_dir_all(&lib).map_err(|source| CompileError::Write {
        path: lib.clone(),
        source,
    })?;

    let pom = vol.join("pom.xml");
    if pom.is_file() && !read(&pom)?.trim().is_empty() {
        let mut mvn = Command::new(&args.mvn);
        if !args.maven_online {
            mvn.arg("--offline");
        }
        mvn.args(["-B", "-q", "-f"])
            .arg(&pom)
            .arg(format!("-Dmaven.repo.local={}", args.maven_repo.display()))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", lib.display()))
            .arg("-DincludeScope=runtime")
            .current_dir(&vol);
        run("mvn dependency:copy-dependencies", mvn)?;
    }

    let mut sources = Vec::new();
    java_sources(&runtime_dir, &mut sources)?;
    java_sources(&vol, &mut sources)?;
    // An argument file keeps long source lists off the command line.
    let mut listing = String::new();
    for s in &sources {
        let p = s
            .to_string_lossy()
            .replace('\\', "\\\\")
            .replace('"', "\\\"");
        listing.push_str(&format!("\"{p}\"\n"));
    }
    let argfile = vol.join(".kubeless-java/sources.txt");
    write(&argfile, listing.as_bytes())?;
    let mut javac = Command::new(&args.javac);
    javac
        .args(["-encoding", "UTF-8", "-nowarn", "-d"])
        .arg(&classes)
        .arg("-cp")
        .arg(lib.join("*"))
        .arg(format!("@{}", argfile.display()))
        .current_dir(&vol);
    run("javac", javac)?;
    Ok(Compiled::Java {
        classes,
        jars: jar_count(&lib),
    })
}
