//! End-to-end tests of the compiled runtimes (Go, Java) and of a custom runtime image:
//! devcluster's pod runner runs the `prepare` and `compile` init steps and the runtime as local
//! processes (the real `kubeless-runtime` with the real go / javac), the controller runs
//! in-process, calls go through the API server's service proxy.
#![cfg(test)]

mod common;

use std::time::{Duration, Instant};

use common::{Env, NS};
use serde_json::json;

fn function(name: &str, runtime: &str, handler: &str, code: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": handler, "runtime": runtime, "function": code,
                 "function-content-type": "text", "timeout": "30"}
    })
}

fn require_tool(tool: &str, arg: &str, package: &str) {
    assert!(
        std::process::Command::new(tool).arg(arg).output().is_ok(),
        "`{tool}` is not installed: apt-get install {package} (scripts/lib.sh ensure_tools does it)"
    );
}

/// Waits for the compile step's failure to reach the Function's Ready condition; returns its
/// message and how long it took from creation.
async fn build_failure(env: &Env, name: &str, started: Instant) -> (String, Duration) {
    let f = env
        .wait_condition(name, "BuildFailed", Duration::from_secs(120), |c| {
            c.reason.as_deref() == Some("BuildFailed")
        })
        .await;
    let took = started.elapsed();
    let c = kubeless_api::find_condition(&f.status.unwrap().conditions, "Ready")
        .unwrap()
        .clone();
    assert!(!c.is_true());
    (c.message.unwrap_or_default(), took)
}

const GO_HELLO: &str = "package kubeless\n\n\
import \"github.com/kubeless/kubeless/pkg/functions\"\n\n\
func Hello(event functions.Event, context functions.Context) (string, error) {\n\
\treturn \"hello from \" + context.Runtime, nil\n}\n";

const GO_BROKEN: &str = "package kubeless\n\n\
import \"github.com/kubeless/kubeless/pkg/functions\"\n\n\
func Hello(event functions.Event, context functions.Context) (string, error) {\n\
\treturn undefinedThing, nil\n}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_deploy_call_and_compile_error() {
    require_tool("go", "version", "golang");
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(function("gohi", "go1.19", "hello.Hello", GO_HELLO))
        .await;
    let started = Instant::now();
    env.create(function("gobad", "go1.19", "hello.Hello", GO_BROKEN))
        .await;
    let (message, took) = build_failure(&env, "gobad", started).await;
    eprintln!("go compile error reached the Function's status in {took:?}");
    assert!(message.contains("undefined: undefinedThing"), "{message}");
    assert!(message.contains("hello.go:6"), "{message}");
    env.wait_ready("gohi").await;
    env.wait_answer("gohi", "hello from go1.19", Duration::from_secs(30))
        .await;
    env.shutdown().await;
}

const JAVA_HELLO: &str = "package io.kubeless;\n\n\
public class Hello {\n\
    public String hello(io.kubeless.Event event, io.kubeless.Context context) {\n\
        return \"hello from \" + context.getRuntime();\n\
    }\n}\n";

const JAVA_BROKEN: &str = "package io.kubeless;\n\n\
public class Hello {\n\
    public String hello(io.kubeless.Event event, io.kubeless.Context context) {\n\
        return 42;\n\
    }\n}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_deploy_call_and_compile_error() {
    require_tool("javac", "-version", "openjdk-17-jdk-headless");
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(function("javahi", "java17", "Hello.hello", JAVA_HELLO))
        .await;
    let started = Instant::now();
    env.create(function("javabad", "java17", "Hello.hello", JAVA_BROKEN))
        .await;
    let (message, took) = build_failure(&env, "javabad", started).await;
    eprintln!("java compile error reached the Function's status in {took:?}");
    assert!(message.contains("incompatible types"), "{message}");
    assert!(message.contains("Hello.java:5"), "{message}");
    env.wait_ready("javahi").await;
    env.wait_answer("javahi", "hello from java17", Duration::from_secs(30))
        .await;
    env.shutdown().await;
}

/// `kubeless function deploy NAME --runtime-image IMAGE` writes this object: no runtime, no
/// code, only the image of the function container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_runtime_image_serves_through_the_function_service() {
    let mut env = Env::start(true).await;
    env.start_controller().await;
    env.create(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": "custom", "namespace": NS},
        "spec": {"handler": "", "runtime": "", "function": "", "timeout": "30",
                 "deployment": {"spec": {"template": {"spec": {"containers": [
                     {"image": "kubeless-rs/example-custom-runtime:1"}]}}}}}
    }))
    .await;
    env.wait_ready("custom").await;
    // The answer comes through the function's Service (API server service proxy), from the
    // image's own HTTP server on the function port.
    env.wait_answer(
        "custom",
        "custom runtime on port 8080",
        Duration::from_secs(30),
    )
    .await;
    env.shutdown().await;
}
