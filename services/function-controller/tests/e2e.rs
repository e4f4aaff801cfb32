//! End-to-end tests: devcluster with the pod runner ON runs the functions' pods as local
//! processes (the real `kubeless-runtime` binary and the Python/Node/Ruby/PHP workers), the controller
//! runs in-process, calls go through the API server's service proxy. Dependency installs reach
//! PyPI and npm, so Ready waits are generous (90 s).
#![cfg(test)]

mod common;

use std::io::Write;
use std::time::Duration;

use base64::Engine;
use common::{Env, NS, wait_for};
use kube::api::{Patch, PatchParams};
use serde_json::json;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn function(
    name: &str,
    runtime: &str,
    handler: &str,
    content_type: &str,
    code: &str,
) -> serde_json::Value {
    json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": handler, "runtime": runtime, "function": code,
                 "function-content-type": content_type, "timeout": "30"}
    })
}

fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        for (name, body) in files {
            z.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            z.write_all(body.as_bytes()).unwrap();
        }
        z.finish().unwrap();
    }
    buf.into_inner()
}

fn targz_of(files: &[(&str, &str)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut t = tar::Builder::new(gz);
    for (name, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        t.append_data(&mut h, name, body.as_bytes()).unwrap();
    }
    t.into_inner().unwrap().finish().unwrap()
}

async fn assert_all_gone(env: &Env, name: &str) {
    env.fns().delete(name, &Default::default()).await.unwrap();
    let left = common::wait_for_opt(Duration::from_secs(30), || async {
        let c = env.children(name).await;
        let f = env.fns().get_opt(name).await.unwrap();
        (c.is_empty() && f.is_none()).then_some(())
    })
    .await;
    assert!(
        left.is_some(),
        "{name}: still present after delete: {:?}",
        env.children(name).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_text_update_and_delete() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(function(
        "pyhi",
        "python3.11",
        "hello.handler",
        "text",
        "def handler(event, context):\n    return 'hello v1'\n",
    ))
    .await;
    env.wait_ready("pyhi").await;
    env.wait_answer("pyhi", "hello v1", Duration::from_secs(20))
        .await;

    env.fns()
        .patch(
            "pyhi",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"function": "def handler(event, context):\n    return 'hello v2'\n"}})),
        )
        .await
        .unwrap();
    env.wait_answer("pyhi", "hello v2", Duration::from_secs(60))
        .await;
    assert_all_gone(&env, "pyhi").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_base64_with_deps_and_targz_without() {
    let mut env = Env::start(true).await;
    env.host_ca_config().await;
    env.start_controller().await;
    let code = "const leftPad = require('left-pad');\nmodule.exports = { handler: (event, context) => leftPad('x', 4, '-') };\n";
    let mut f = function(
        "nd",
        "nodejs20",
        "handler.handler",
        "base64",
        &B64.encode(code),
    );
    f["spec"]["deps"] =
        json!(r#"{"name": "fn", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}}"#);
    env.create(f).await;
    let tgz = targz_of(&[(
        "handler.js",
        "module.exports = { handler: (event, context) => 'from tar' };\n",
    )]);
    env.create(function(
        "nt",
        "nodejs22",
        "handler.handler",
        "base64+compressedtar",
        &B64.encode(tgz),
    ))
    .await;
    env.wait_ready("nd").await;
    env.wait_answer("nd", "---x", Duration::from_secs(20)).await;
    env.wait_ready("nt").await;
    env.wait_answer("nt", "from tar", Duration::from_secs(20))
        .await;
    assert_all_gone(&env, "nd").await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_zip_with_deps() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    // six 1.16.0, not the 1.17 a host may have: the answer proves the install step ran.
    let zip = zip_of(&[(
        "hello.py",
        "import six\n\ndef handler(event, context):\n    return 'six ' + six.__version__\n",
    )]);
    let mut f = function(
        "pz",
        "python3.11",
        "hello.handler",
        "base64+zip",
        &B64.encode(zip),
    );
    f["spec"]["deps"] = json!("six==1.16.0\n");
    env.create(f).await;
    env.wait_ready("pz").await;
    env.wait_answer("pz", "six 1.16.0", Duration::from_secs(20))
        .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_deps_and_checksum_mismatch_are_conditions() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    let mut f = function(
        "bd",
        "python3.11",
        "hello.handler",
        "text",
        "def handler(event, context):\n    return 'x'\n",
    );
    f["spec"]["deps"] = json!("kubeless-rs-no-such-package-anywhere==0.0.1\n");
    env.create(f).await;
    let mut f = function(
        "bs",
        "python3.11",
        "hello.handler",
        "text",
        "def handler(event, context):\n    return 'x'\n",
    );
    f["spec"]["checksum"] = json!(format!("sha256:{}", "0".repeat(64)));
    env.create(f).await;
    let f = env
        .wait_condition("bd", "DependenciesFailed", Duration::from_secs(90), |c| {
            c.reason.as_deref() == Some("DependenciesFailed")
        })
        .await;
    let c = kubeless_api::find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert!(!c.is_true());
    assert!(c.message.as_deref().unwrap().contains("install"), "{c:?}");
    let f = env
        .wait_condition("bs", "ChecksumMismatch", Duration::from_secs(60), |c| {
            c.reason.as_deref() == Some("ChecksumMismatch")
        })
        .await;
    let c = kubeless_api::find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert!(c.message.as_deref().unwrap().contains("checksum"), "{c:?}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_duplicates_or_churn() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(function(
        "st",
        "python3.12",
        "hello.handler",
        "text",
        "def handler(event, context):\n    return 'steady'\n",
    ))
    .await;
    env.wait_ready("st").await;
    env.wait_answer("st", "steady", Duration::from_secs(20))
        .await;
    let pods_before = env.children("st").await;
    env.stop_controller().await;
    env.writes.reset();
    env.start_controller().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        env.writes.count(),
        0,
        "a restarted controller wrote: {:?}",
        env.writes.log()
    );
    let pods_after = env.children("st").await;
    assert_eq!(
        pods_before, pods_after,
        "children changed across the restart"
    );
    let f = wait_for("status", Duration::from_secs(5), || async {
        env.fns().get("st").await.unwrap().status
    })
    .await;
    assert_eq!(f.ready_replicas, Some(1));
    env.wait_answer("st", "steady", Duration::from_secs(10))
        .await;
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ruby_and_php_deploy_and_call() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(function(
        "rbhi",
        "ruby3.1",
        "hello.handler",
        "text",
        "def handler(event, context)\n  \"hello from #{context['runtime']}\"\nend\n",
    ))
    .await;
    let zip = zip_of(&[(
        "hello.php",
        "<?php\nfunction handler($event, $context) {\n    return \\KlGreeter\\Greeter::greet($context['runtime']);\n}\n",
    )]);
    let mut php = function(
        "phphi",
        "php8.2",
        "hello.handler",
        "base64+zip",
        &B64.encode(zip),
    );
    // composer installs the runtime tests' fixture package from a path repository (no Packagist here).
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../runtimes/proxy/tests/fixtures/deps/kl-greeter-php");
    php["spec"]["deps"] = json!(
        json!({
            "require": {"kubeless-rs/kl-greeter": "1.0.0"},
            "repositories": [
                {"type": "path", "url": package.canonicalize().unwrap(), "options": {"symlink": false}},
                {"packagist.org": false}
            ]
        })
        .to_string()
    );
    env.create(php).await;
    env.wait_ready("rbhi").await;
    env.wait_answer("rbhi", "hello from ruby3.1", Duration::from_secs(20))
        .await;
    env.wait_ready("phphi").await;
    env.wait_answer(
        "phphi",
        "hello php8.2 from kl-greeter 1.0.0",
        Duration::from_secs(20),
    )
    .await;
    assert_all_gone(&env, "rbhi").await;
    assert_all_gone(&env, "phphi").await;
    env.shutdown().await;
}
