//! The `compile` init step of Go and Java: dependencies without a registry, compiler errors,
//! and Go's returned errors. (The shared HTTP contract runs for both in serve.rs.)
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Lang, Opts, Runtime, client, post_text};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

fn compile(lang: Lang, vol: &Path, module: &str, handler: &str) -> Output {
    let mut cmd = Command::new(common::BIN);
    cmd.arg("compile")
        .env("FUNC_RUNTIME", lang.runtime())
        .env("KUBELESS_INSTALL_VOLUME", vol)
        .env("MOD_NAME", module)
        .env("FUNC_HANDLER", handler);
    common::compile_env(&mut cmd);
    cmd.output().unwrap()
}

fn require_tool(tool: &str, package: &str) {
    let found = Command::new(tool).arg("-version").output().is_ok()
        || Command::new(tool).arg("version").output().is_ok();
    assert!(
        found,
        "`{tool}` is not installed: apt-get install {package} (scripts/lib.sh ensure_tools does it)"
    );
}

async fn call(vol: &Path, lang: Lang, module: &str, handler: &str, data: &str) -> String {
    let rt = Runtime::start(
        lang,
        Opts {
            handler,
            workers: 1,
            volume: Some(vol.to_path_buf()),
            env: vec![("MOD_NAME", module.to_owned())],
            ..Opts::default()
        },
    )
    .await;
    let r = client()
        .post(rt.url("/"))
        .body(data.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", rt.stderr());
    r.text().await.unwrap()
}

#[tokio::test]
async fn go_vendored_dependency() {
    require_tool("go", "golang");
    let vol = tempfile::tempdir().unwrap();
    copy_tree(&fixture("go-deps"), vol.path());
    // The vendor folder wins over the local module copy: only vendor/ is used.
    std::fs::remove_dir_all(vol.path().join("greet")).unwrap();
    let out = compile(Lang::Go, vol.path(), "greet", "Greet");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        call(vol.path(), Lang::Go, "greet", "Greet", "bob").await,
        "hello bob (vendored)"
    );
}

#[tokio::test]
async fn go_local_module_dependency() {
    require_tool("go", "golang");
    let vol = tempfile::tempdir().unwrap();
    copy_tree(&fixture("go-deps"), vol.path());
    std::fs::remove_dir_all(vol.path().join("vendor")).unwrap();
    let go_mod = vol.path().join("go.mod");
    let mut text = std::fs::read_to_string(&go_mod).unwrap();
    text.push_str("\nreplace example.com/greet => ./greet\n");
    std::fs::write(&go_mod, text).unwrap();
    let out = compile(Lang::Go, vol.path(), "greet", "Greet");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        call(vol.path(), Lang::Go, "greet", "Greet", "ann").await,
        "hello ann (local module)"
    );
}

#[test]
fn go_missing_module_fails_without_network() {
    require_tool("go", "golang");
    let vol = tempfile::tempdir().unwrap();
    copy_tree(&fixture("go-deps"), vol.path());
    std::fs::remove_dir_all(vol.path().join("vendor")).unwrap();
    let out = compile(Lang::Go, vol.path(), "greet", "Greet");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // GOPROXY=off: the error names the module instead of hanging on the network.
    assert!(stderr.contains("example.com/greet"), "{stderr}");
}

#[test]
fn go_compile_error_has_the_compiler_message() {
    require_tool("go", "golang");
    let vol = tempfile::tempdir().unwrap();
    std::fs::write(
        vol.path().join("broken.go"),
        "package kubeless\n\nimport \"github.com/kubeless/kubeless/pkg/functions\"\n\n\
         func Handler(event functions.Event, context functions.Context) (string, error) {\n\
         \treturn undefinedThing, nil\n}\n",
    )
    .unwrap();
    let out = compile(Lang::Go, vol.path(), "broken", "Handler");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("broken.go:6"), "{stderr}");
    assert!(stderr.contains("undefined: undefinedThing"), "{stderr}");
    assert!(stderr.contains("go build failed"), "{stderr}");
}

#[test]
fn go_handler_must_be_exported() {
    let vol = tempfile::tempdir().unwrap();
    common::fixture_copy(Lang::Go, vol.path());
    let out = compile(Lang::Go, vol.path(), "funcs", "hello");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("upper-case"), "{stderr}");
}

#[tokio::test]
async fn go_returned_error_is_500_and_worker_lives() {
    let rt = Runtime::start(
        Lang::Go,
        Opts {
            handler: "boom",
            workers: 1,
            ..Opts::default()
        },
    )
    .await;
    let c = client();
    let pid1 = post_text(&c, &rt.url("/"), "x").await;
    let r = c.post(rt.url("/")).body("fail").send().await.unwrap();
    assert_eq!(r.status(), 500);
    let pid2 = post_text(&c, &rt.url("/"), "x").await;
    assert_eq!(pid1, pid2);
    assert!(rt.stderr().contains("failed on purpose"), "{}", rt.stderr());
}

#[tokio::test]
async fn java_pom_dependency_from_the_local_maven_repository() {
    require_tool("javac", "openjdk-17-jdk-headless");
    require_tool("mvn", "maven");
    let vol = tempfile::tempdir().unwrap();
    copy_tree(&fixture("java-deps"), vol.path());
    let out = compile(Lang::Java, vol.path(), "Ext", "ext");
    assert!(
        out.status.success(),
        "mvn/javac failed (Maven's dependency plugin comes from apt-get install \
         libmaven-dependency-plugin-java junit4): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        vol.path()
            .join(".kubeless-java/lib/commons-io-2.11.0.jar")
            .is_file()
    );
    assert_eq!(
        call(vol.path(), Lang::Java, "Ext", "ext", "report.tar.gz").await,
        "gz"
    );
}

#[test]
fn java_missing_dependency_fails_offline() {
    require_tool("mvn", "maven");
    let vol = tempfile::tempdir().unwrap();
    copy_tree(&fixture("java-deps"), vol.path());
    let pom = vol.path().join("pom.xml");
    let text = std::fs::read_to_string(&pom)
        .unwrap()
        .replace("commons-io</groupId>", "org.example.absent</groupId>");
    std::fs::write(&pom, text).unwrap();
    let out = compile(Lang::Java, vol.path(), "Ext", "ext");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("org.example.absent"), "{stderr}");
    assert!(
        stderr.contains("mvn dependency:copy-dependencies failed"),
        "{stderr}"
    );
}

#[test]
fn java_compile_error_has_the_compiler_message() {
    require_tool("javac", "openjdk-17-jdk-headless");
    let vol = tempfile::tempdir().unwrap();
    std::fs::write(
        vol.path().join("Broken.java"),
        "package io.kubeless;\n\npublic class Broken {\n    public String run(Event e, Context c) {\n        return 42;\n    }\n}\n",
    )
    .unwrap();
    // The flag form, as docs/runtimes.md shows it.
    let mut cmd = Command::new(common::BIN);
    cmd.args(["compile", "--runtime", "java17", "--dir"])
        .arg(vol.path())
        .args(["--module", "Broken", "--handler", "run"]);
    common::compile_env(&mut cmd);
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Broken.java:5"), "{stderr}");
    assert!(stderr.contains("incompatible types"), "{stderr}");
    assert!(stderr.contains("javac failed"), "{stderr}");
}
