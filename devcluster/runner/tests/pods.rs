#![cfg(test)]
//! Bare pods: restarts with backoff, logs (follow, previous), unmapped images,
//! env and volumes from ConfigMaps and Secrets.

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{eventually, start};
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{LogParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const NS: &str = "default";

async fn create_pod(client: &Client, pod: serde_json::Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
}

async fn get_pod(client: &Client, name: &str) -> Option<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.get_opt(name).await.ok().flatten()
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|c| c[0].restart_count)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_container_restarts_with_backoff() {
    let h = start(Ipv4Addr::new(127, 31, 0, 0), |c| {
        c.restart_backoff_base = Duration::from_millis(300);
        c.restart_backoff_max = Duration::from_secs(5);
    })
    .await;
    let client = h.client.clone();
    create_pod(
        &client,
        json!({
            "metadata": {"name": "crasher", "namespace": NS},
            "spec": {"containers": [{
                "name": "main", "image": "busybox:1.36",
                "command": ["sh", "-c", "echo \"run at $(date +%s%N)\"; exit 3"]
            }]}
        }),
    )
    .await;
    // Record when each restart shows up.
    let t0 = Instant::now();
    let mut seen: Vec<(i32, Duration)> = Vec::new();
    let mut saw_backoff = false;
    while seen.last().map(|s| s.0).unwrap_or(0) < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "restarts too slow: {seen:?}"
        );
        if let Some(pod) = get_pod(&client, "crasher").await {
            let n = restart_count(&pod);
            if n > seen.last().map(|s| s.0).unwrap_or(0) {
                seen.push((n, t0.elapsed()));
            }
            let cs = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|c| c[0].clone());
            let waiting_reason = cs
                .as_ref()
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone());
            if let (Some(cs), Some("CrashLoopBackOff")) = (&cs, waiting_reason.as_deref()) {
                saw_backoff = true;
                let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
                assert_eq!(last.exit_code, 3);
                assert_eq!(last.reason.as_deref(), Some("Error"));
            }
            assert_ne!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Failed"),
                "restartPolicy Always never fails the pod"
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        saw_backoff,
        "the container showed CrashLoopBackOff while waiting"
    );
    // Gaps between restarts grow (300ms, 600ms, 1200ms, ...).
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(gaps.len() >= 2, "{seen:?}");
    assert!(
        gaps[gaps.len() - 1] > gaps[0] + Duration::from_millis(300),
        "backoff grows: {gaps:?}"
    );
    // The previous instance's log is kept.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let prev = pods
        .logs(
            "crasher",
            &LogParams {
                previous: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(prev.starts_with("run at "), "{prev:?}");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_while_the_container_writes() {
    let h = start(Ipv4Addr::new(127, 32, 0, 0), |_| {}).await;
    let client = h.client.clone();
    create_pod(&client, json!({
        "metadata": {"name": "talker", "namespace": NS},
        "spec": {"containers": [{
            "name": "main", "image": "busybox:1.36",
            "command": ["sh", "-c", "i=0; while [ $i -lt 600 ]; do echo line-$i; echo err-$i >&2; i=$((i+1)); sleep 0.1; done"]
        }]}
    }))
    .await;
    eventually("running", 30, || async {
        let p = get_pod(&client, "talker").await?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let stream = pods
        .log_stream(
            "talker",
            &LogParams {
                follow: true,
                container: Some("main".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut lines = stream.lines();
    let started = Instant::now();
    let mut got = Vec::new();
    // Follow must deliver lines written after the request, so read more than exist at the start.
    while got
        .iter()
        .filter(|l: &&String| l.starts_with("line-"))
        .count()
        < 25
    {
        let next = tokio::time::timeout(Duration::from_secs(10), lines.next())
            .await
            .expect("a new log line within 10s");
        got.push(next.unwrap().unwrap());
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "lines arrived as they were written"
    );
    assert!(
        got.iter().any(|l| l.starts_with("err-")),
        "stderr is in the log too"
    );
    // Whole lines only.
    assert!(
        got.iter()
            .all(|l| l.starts_with("line-") || l.starts_with("err-")),
        "{got:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmapped_image_waits_with_a_clear_reason() {
    let h = start(Ipv4Addr::new(127, 33, 0, 0), |_| {}).await;
    let client = h.client.clone();
    create_pod(
        &client,
        json!({
            "metadata": {"name": "mystery", "namespace": NS},
            "spec": {"containers": [{"name": "main", "image": "no-such-org/no-such-image:7"}]}
        }),
    )
    .await;
    let waiting = eventually("ErrImagePull", 30, || async {
        let p = get_pod(&client, "mystery").await?;
        let cs = p.status?.container_statuses?;
        let w = cs[0].state.as_ref()?.waiting.clone()?;
        (w.reason.as_deref() == Some("ErrImagePull")).then_some(w)
    })
    .await;
    let msg = waiting.message.unwrap();
    assert!(
        msg.contains("no-such-org/no-such-image:7") && msg.contains("base.yaml"),
        "{msg}"
    );
    let p = get_pod(&client, "mystery").await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_secret_env_and_volumes_with_mapped_paths() {
    let h = start(Ipv4Addr::new(127, 34, 0, 0), |_| {}).await;
    let client = h.client.clone();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
        "metadata": {"name": "cfg"}, "data": {"greeting": "hello", "handler.py": "print('hi')"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
        "metadata": {"name": "sec"}, "data": {"token": "czNjcjN0"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    create_pod(&client, json!({
        "metadata": {"name": "reader", "namespace": NS, "labels": {"tier": "x"}},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [
                {"name": "src", "configMap": {"name": "cfg"}},
                {"name": "creds", "secret": {"secretName": "sec", "defaultMode": 256}}
            ],
            "containers": [{
                "name": "main", "image": "alpine:3",
                "command": ["sh", "-c", "cat /src/handler.py; echo; cat /creds/token; echo; echo $GREETING $TOKEN $NS $TIER $DEVCLUSTER_POD_IP $KUBELESS_LISTEN_ADDRESS; pwd; echo $SRC_DIR; echo $HOME"],
                "workingDir": "/src",
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
                    {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                    {"name": "SRC_DIR", "value": "/src"}
                ],
                "volumeMounts": [{"name": "src", "mountPath": "/src"}, {"name": "creds", "mountPath": "/creds"}]
            }]
        }
    }))
    .await;
    let pod = eventually("Succeeded", 30, || async {
        let p = get_pod(&client, "reader").await?;
        (p.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then_some(p)
    })
    .await;
    let st = pod.status.unwrap();
    let ip = st.pod_ip.unwrap();
    let term = st.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (0, Some("Completed"))
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let log = pods.logs("reader", &LogParams::default()).await.unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "print('hi')");
    assert_eq!(lines[1], "s3cr3t");
    assert_eq!(lines[2], format!("hello s3cr3t default x {ip} {ip}"));
    let pod_dir = h.dir.path().join("pods");
    assert!(
        lines[3].starts_with(pod_dir.to_str().unwrap()) && lines[3].ends_with("/volumes/src"),
        "{}",
        lines[3]
    );
    assert_eq!(
        lines[4], lines[3],
        "env values are mapped like the working directory"
    );
    assert!(
        lines[5].starts_with(pod_dir.to_str().unwrap()) && lines[5].ends_with("/home"),
        "{}",
        lines[5]
    );
    h.stop().await;
}
