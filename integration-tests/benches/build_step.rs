//! The build step against the init-step install, measured in the same run on devcluster (process
//! pods) with Debian's docker-registry on loopback: a Python function with a requirements file
//! (six) and a Node.js function with a package.json (left-pad), each deployed
//! `BUILD_BENCH_ROUNDS` times (default 3, a new name each time, so every build-step deploy really
//! builds) with `spec.build.enabled` true and false.
//!
//! Prints, per runtime and mode, the median and the worst of:
//! - deploy to first answer: from creating the Function to its first 200 through the service
//!   proxy (with the build step this includes the build Job and the push);
//! - cold start: from scaling the running function's Deployment from 0 to 1 to its first answer
//!   (the install step runs again in that new pod; the built image needs none).
//!
//! Run: `cargo build --workspace --bins && cargo bench -p integration-tests --bench build_step
//! --profile dev` (needs the runtime images of `scripts/images.sh build`, docker-registry, and
//! pip and npm reaching their registries).

use std::time::{Duration, Instant};

use integration_tests::build::{BuildEnv, call_via_proxy};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubeless_api::Function;
use kubeless_testkit::NS;
use serde_json::json;

const PYTHON: &str =
    "import six\n\ndef handler(event, context):\n    return 'six ' + six.__version__\n";
const NODE: &str = "const leftPad = require('left-pad');\nmodule.exports = { handler: (event, context) => leftPad('x', 3, '-') };\n";

struct Case {
    runtime: &'static str,
    handler: &'static str,
    code: &'static str,
    deps: &'static str,
    answer: &'static str,
}

const CASES: [Case; 2] = [
    Case {
        runtime: "python3.11",
        handler: "hello.handler",
        code: PYTHON,
        deps: "six==1.16.0\n",
        answer: "six 1.16.0",
    },
    Case {
        runtime: "nodejs20",
        handler: "handler.handler",
        code: NODE,
        deps: r#"{"name": "fn", "version": "1.0.0", "dependencies": {"left-pad": "1.3.0"}}"#,
        answer: "--x",
    },
];

/// Polls the function through the service proxy until it answers `want`.
async fn first_answer(client: &Client, name: &str, want: &str, since: Instant) -> Duration {
    loop {
        if call_via_proxy(client, NS, name, "bench").await.as_deref() == Some(want) {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(300),
            "{name} did not answer {want:?} within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn scale(client: &Client, name: &str, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap_or_else(|e| panic!("scaling {name} to {replicas}: {e}"));
}

async fn wait_no_pods(client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    loop {
        let left = pods
            .list(&ListParams::default().labels(&format!("function={name}")))
            .await
            .map(|l| l.items.len())
            .unwrap_or(usize::MAX);
        if left == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name}'s pods are still there after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn summary(mut d: Vec<Duration>) -> String {
    d.sort();
    let median = d.get(d.len() / 2).copied().unwrap_or_default();
    let worst = d.last().copied().unwrap_or_default();
    format!(
        "median {:>7.2} s  worst {:>7.2} s  (n={})",
        median.as_secs_f64(),
        worst.as_secs_f64(),
        d.len()
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("BUILD_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let env = BuildEnv::start(false).await;
    let client = env.cluster.client.clone();
    let fns: Api<Function> = Api::namespaced(client.clone(), NS);
    let mut n = 0;
    for case in &CASES {
        for build in [false, true] {
            let (mut deploy, mut cold) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                n += 1;
                let name = format!("b{n}");
                let f: Function = serde_json::from_value(json!({
                    "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"runtime": case.runtime, "handler": case.handler,
                             "function": case.code, "function-content-type": "text",
                             "deps": case.deps, "build": {"enabled": build}}
                }))
                .unwrap_or_else(|e| panic!("function manifest: {e}"));
                let t = Instant::now();
                fns.create(&PostParams::default(), &f)
                    .await
                    .unwrap_or_else(|e| panic!("creating {name}: {e}"));
                deploy.push(first_answer(&client, &name, case.answer, t).await);
                scale(&client, &name, 0).await;
                wait_no_pods(&client, &name).await;
                let t = Instant::now();
                scale(&client, &name, 1).await;
                cold.push(first_answer(&client, &name, case.answer, t).await);
                fns.delete(&name, &Default::default())
                    .await
                    .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
                wait_no_pods(&client, &name).await;
            }
            let mode = if build { "build step" } else { "init install" };
            println!(
                "{:<11} {mode:<12} deploy to first answer {}",
                case.runtime,
                summary(deploy)
            );
            println!(
                "{:<11} {mode:<12} cold start (0 -> 1)     {}",
                case.runtime,
                summary(cold)
            );
        }
    }
    drop(env);
}
