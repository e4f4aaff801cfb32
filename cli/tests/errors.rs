//! What a newcomer meets in the first hour (issue 18): every error is one sentence naming the
//! object, the cause and the next step; bad input is refused before anything is sent; waits and
//! calls give up with the reason instead of hanging.
#![cfg(test)]

mod common;

use std::time::{Duration, Instant};

use common::Cluster;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use kubeless_api::{CronJobTrigger, Function, HttpTrigger};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HELLO: &str = "def handler(event, context):\n    return 'hello'\n";

fn write(dir: &std::path::Path, name: &str, data: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p.to_string_lossy().into_owned()
}

/// No Rust debug dump may reach the user without -v.
fn assert_human(err: &str) {
    for raw in [
        "ErrorResponse",
        "Status {",
        "ApiError:",
        "Some(",
        "HyperError",
    ] {
        assert!(!err.contains(raw), "raw detail {raw:?} in: {err}");
    }
    let fatal: Vec<&str> = err.lines().filter(|l| l.starts_with("FATA: ")).collect();
    assert_eq!(fatal.len(), 1, "one error line: {err}");
    assert_eq!(
        err.lines().last(),
        fatal.first().copied(),
        "the error is the last line: {err}"
    );
}

/// A one-shot HTTP server on 127.0.0.1 answering `body` to the first request.
async fn serve_once(body: &'static str) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/requirements.txt", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = sock.read(&mut buf).await.unwrap();
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(answer.as_bytes()).await.unwrap();
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_sentences_and_bad_input_is_refused() {
    let c = Cluster::start().await;
    let src = write(c.dir.path(), "hello.py", HELLO.as_bytes());
    let deploy = |name: &'static str| {
        vec![
            "function",
            "deploy",
            name,
            "-r",
            "python3.11",
            "--handler",
            "hello.handler",
            "-f",
        ]
    };
    let mut args = deploy("hello");
    args.push(&src);
    args.extend(["--label", "foobar", "--no-wait"]);
    c.ok(&args).await;
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    // A bare label key is a label with an empty value, as in Kubeless.
    assert_eq!(
        fns.get("hello").await.unwrap().metadata.labels.unwrap()["foobar"],
        ""
    );

    // 409: one sentence pointing at `function update`; -v adds the API server's answer.
    let err = c.fails(&args).await;
    assert!(
        err.contains("Cannot deploy function hello in namespace default")
            && err.contains("409")
            && err.contains("kubeless function update hello"),
        "{err}"
    );
    assert_human(&err);
    let mut verbose = args.clone();
    verbose.push("-v");
    let err = c.fails(&verbose).await;
    assert!(
        err.contains("detail: ") && err.contains("AlreadyExists"),
        "{err}"
    );

    // Kubeless's runtime ids are refused with the exact replacement.
    let err = c
        .fails(&[
            "function",
            "deploy",
            "old",
            "-r",
            "python2.7",
            "--handler",
            "hello.handler",
            "-f",
            &src,
        ])
        .await;
    assert!(
        err.contains("runtime python2.7 was Kubeless's")
            && err.contains("Use --runtime python3.11"),
        "{err}"
    );
    let err = c
        .fails(&[
            "function",
            "deploy",
            "old",
            "-r",
            "nodejs_distroless8",
            "--handler",
            "hello.handler",
            "-f",
            &src,
        ])
        .await;
    assert!(err.contains("Use --runtime nodejs20"), "{err}");

    // 404 names the object and how to list what exists.
    let err = c.fails(&["function", "describe", "nope"]).await;
    assert!(
        err.contains("Unable to find function nope in namespace default")
            && err.contains("kubeless function ls"),
        "{err}"
    );
    assert_human(&err);

    // A broken cron string is refused before anything is sent, naming the flag.
    let mut bad_cron = deploy("cron-fn");
    bad_cron.push(&src);
    bad_cron.extend(["--schedule", "99 * * * *"]);
    let err = c.fails(&bad_cron).await;
    assert!(
        err.contains("Invalid cron schedule \"99 * * * *\" in --schedule"),
        "{err}"
    );
    assert!(fns.get_opt("cron-fn").await.unwrap().is_none());
    let err = c
        .fails(&[
            "trigger",
            "cronjob",
            "create",
            "tick",
            "--function",
            "hello",
            "--schedule",
            "every minute",
        ])
        .await;
    assert!(err.contains("Invalid cron schedule"), "{err}");
    let crons: Api<CronJobTrigger> = Api::default_namespaced(c.client.clone());
    assert!(crons.get_opt("tick").await.unwrap().is_none());

    // --dependencies given a URL is downloaded, not read as a local file.
    let (url, server) = serve_once("requests==2.31.0\n").await;
    c.ok(&[
        "function",
        "update",
        "hello",
        "--dependencies",
        &url,
        "--no-wait",
    ])
    .await;
    server.await.unwrap();
    assert_eq!(
        fns.get("hello").await.unwrap().spec.deps.as_deref(),
        Some("requests==2.31.0\n")
    );
    let err = c
        .fails(&[
            "function",
            "update",
            "hello",
            "-d",
            "/no/such/requirements.txt",
        ])
        .await;
    assert!(
        err.contains("Cannot read /no/such/requirements.txt") && err.contains("Check the path"),
        "{err}"
    );

    // A function whose Service has no ready pod: the call says why within seconds.
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hello"},
        "spec": {"selector": {"function": "hello"},
                 "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080}]}
    }))
    .unwrap();
    Api::<Service>::default_namespaced(c.client.clone())
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();
    let started = Instant::now();
    let err = c.fails(&["function", "call", "hello"]).await;
    assert!(
        err.contains("Function hello cannot answer: it has no ready pod")
            && err.contains("kubeless function logs hello"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );

    // --data @file that does not exist: refused, never sent literally.
    let err = c
        .fails(&[
            "function",
            "call",
            "hello",
            "--data",
            "@/no/such/event.json",
        ])
        .await;
    assert!(err.contains("Cannot read /no/such/event.json"), "{err}");
    let err = c
        .fails(&["function", "call", "hello", "-H", "no-colon"])
        .await;
    assert!(err.contains("Invalid --header \"no-colon\""), "{err}");

    // Trigger lists show why a trigger is not ready; describe shows conditions and the URL.
    c.ok(&[
        "trigger",
        "http",
        "create",
        "hello-with-a-rather-long-trigger-name",
        "--function-name",
        "hello",
        "--hostname",
        "hello.example.com",
        "--path",
        "greet",
    ])
    .await;
    let http: Api<HttpTrigger> = Api::default_namespaced(c.client.clone());
    http.patch_status(
        "hello-with-a-rather-long-trigger-name",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"status": {"conditions": [{
            "type": "Ready", "status": "False", "reason": "IngressNotAdmitted",
            "message": "no ingress controller", "lastTransitionTime": "2026-11-24T00:00:00Z"
        }]}})),
    )
    .await
    .unwrap();
    c.ok(&[
        "trigger",
        "http",
        "create",
        "h2",
        "--function-name",
        "hello",
        "--hostname",
        "h2.example.com",
    ])
    .await;
    let list = c.ok(&["trigger", "http", "list"]).await;
    assert!(list.contains("False (IngressNotAdmitted)"), "{list}");
    // Columns line up whatever the name lengths.
    let lines: Vec<&str> = list.lines().collect();
    let col = |l: &str| {
        l.find("hello.example.com")
            .or_else(|| l.find("h2.example.com"))
    };
    assert_eq!(col(lines[1]), col(lines[2]), "{list}");
    assert_eq!(lines[0].find("HOST"), col(lines[1]), "{list}");
    let desc = c
        .ok(&[
            "trigger",
            "http",
            "describe",
            "hello-with-a-rather-long-trigger-name",
        ])
        .await;
    assert!(
        desc.contains("URL:          http://hello.example.com/greet"),
        "{desc}"
    );
    assert!(
        desc.contains("Ready=False IngressNotAdmitted no ingress controller"),
        "{desc}"
    );
    let err = c
        .fails(&[
            "trigger",
            "http",
            "create",
            "h2",
            "--function-name",
            "hello",
        ])
        .await;
    assert!(
        err.contains("kubeless trigger http update h2") && err.contains("409"),
        "{err}"
    );
    assert_human(&err);
    let err = c.fails(&["trigger", "kafka", "describe", "nope"]).await;
    assert!(err.contains("kubeless trigger kafka list"), "{err}");

    // An API server that is not there: the kubeconfig and how to start one.
    let dead = c.dir.path().join("dead-kubeconfig");
    let port = common::free_port();
    std::fs::write(
        &dead,
        std::fs::read_to_string(&c.kubeconfig).unwrap().replace(
            &format!(":{}", c.cluster.as_ref().unwrap().addr().port()),
            &format!(":{port}"),
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .arg("--kubeconfig")
        .arg(&dead)
        .args(["function", "ls"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot be reached") && err.contains("devcluster up"),
        "{err}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_create_names_the_unreachable_broker() {
    let port = common::free_port();
    let brokers = format!("127.0.0.1:{port}");
    let started = Instant::now();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .args(["topic", "create", "orders", "--brokers", &brokers])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("Cannot reach Kafka at {brokers}")) && err.contains("--brokers"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// A stand-in Deployment for function `name` whose pod cannot start, as a controller would
/// have made it.
async fn failing_deployment(c: &Cluster, name: &str, pod: serde_json::Value) {
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"function": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"function": name}},
            "template": {"metadata": {"labels": {"function": name}}, "spec": pod}
        }
    }))
    .unwrap();
    Api::<Deployment>::default_namespaced(c.client.clone())
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_give_up_with_the_pod_reason() {
    let c = Cluster::start().await;
    let cases = [
        (
            "pull",
            serde_json::json!({"containers": [{"name": "pull", "image": "no-such-registry.example/fn:1"}]}),
            "ErrImagePull",
        ),
        (
            "crash",
            serde_json::json!({"containers": [{"name": "crash", "image": "python:3.11",
                "command": ["python3", "-c", "import sys; sys.exit(3)"]}]}),
            "CrashLoopBackOff",
        ),
        (
            "init",
            serde_json::json!({
                "initContainers": [{"name": "install", "image": "python:3.11",
                    "command": ["python3", "-c", "import sys; print('pip failed'); sys.exit(1)"]}],
                "containers": [{"name": "init", "image": "python:3.11",
                    "command": ["python3", "-c", "import time; time.sleep(60)"]}]}),
            "InitStepFailed",
        ),
    ];
    for (name, pod, reason) in cases {
        c.ok(&[
            "function",
            "deploy",
            name,
            "--runtime-image",
            "example/fn:1",
            "--no-wait",
        ])
        .await;
        failing_deployment(&c, name, pod).await;
        let started = Instant::now();
        let err = c
            .fails(&[
                "function",
                "update",
                name,
                "--timeout",
                "30",
                "--wait",
                "--wait-timeout",
                "90",
            ])
            .await;
        // A failing pull alternates between ErrImagePull and ImagePullBackOff, as on a cluster.
        let in_reason = if reason == "ErrImagePull" {
            err.contains("is in ErrImagePull") || err.contains("is in ImagePullBackOff")
        } else {
            err.contains(&format!("is in {reason}"))
        };
        assert!(
            err.contains(&format!("Function {name} cannot start: pod {name}-")) && in_reason,
            "{name}: {err}"
        );
        if reason == "CrashLoopBackOff" {
            assert!(err.contains("exited with code 3"), "{err}");
        }
        if reason == "InitStepFailed" {
            assert!(
                err.contains("init step install exited with code 1"),
                "{err}"
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(80),
            "{name}: gave up after {:?}",
            started.elapsed()
        );
    }
    c.shutdown().await;
}
