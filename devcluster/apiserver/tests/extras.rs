#![cfg(test)]
//! Pod logs, service and pod proxy, events, authentication and the data dir.

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use futures::AsyncBufReadExt;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Pod, Service};
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;

/// A loopback HTTP backend that echoes method, path, query and body.
async fn echo_backend() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().fallback(|req: axum::extract::Request| async move {
        let method = req.method().to_string();
        let pq = req
            .uri()
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let body = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        format!("{method} {pq} {}", String::from_utf8_lossy(&body))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (
        addr,
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }),
    )
}

async fn raw(client: &Client, method: &str, path: &str, body: &str) -> Result<String, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(body.as_bytes().to_vec())
        .unwrap();
    client.request_text(req).await
}

#[tokio::test]
async fn service_and_pod_proxy() {
    let server = start(ServerConfig::default()).await.unwrap();
    // kube retries 503 with backoff by default; this test wants to see the 503 itself.
    let mut config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    let (backend, task) = echo_backend().await;
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = json!({"metadata": {"name": "echo"}, "spec": {"ports": [{"name": "http", "port": 80, "targetPort": backend.port()}]}});
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(svc).unwrap(),
    )
    .await
    .unwrap();
    // No endpoints yet: 503 as a Status.
    let err = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/services/echo/proxy/x",
        "",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 503),
        "{err:?}"
    );
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let ep = json!({"metadata": {"name": "echo"}, "subsets": [{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"name": "http", "port": backend.port()}]}]});
    eps.create(&PostParams::default(), &serde_json::from_value(ep).unwrap())
        .await
        .unwrap();
    for name in ["echo", "echo:http", "http:echo:http", "echo:80"] {
        let out = raw(
            &client,
            "POST",
            &format!("/api/v1/namespaces/default/services/{name}/proxy/call/me?x=1"),
            "hello",
        )
        .await
        .unwrap();
        assert_eq!(out, "POST /call/me?x=1 hello", "{name}");
    }
    // Pod proxy goes to status.podIP.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": backend.port()}]}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
    let err = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/pods/p/proxy/",
        "",
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 503),
        "{err:?}"
    );
    pods.patch_status(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"podIP": "127.0.0.1"}})),
    )
    .await
    .unwrap();
    let out = raw(
        &client,
        "GET",
        &format!(
            "/api/v1/namespaces/default/pods/p:{}/proxy/healthz",
            backend.port()
        ),
        "",
    )
    .await
    .unwrap();
    assert_eq!(out, "GET /healthz ");
    task.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn pod_logs_read_and_follow() {
    let logs = tempfile::tempdir().unwrap();
    let server = start(ServerConfig {
        logs_dir: logs.path().to_path_buf(),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = json!({"metadata": {"name": "app"}, "spec": {"containers": [{"name": "main", "image": "i"}, {"name": "side", "image": "i"}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .unwrap();
    let dir = logs.path().join("default/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.log"), "a\nb\nc\n").unwrap();
    std::fs::write(dir.join("side.log"), "side\n").unwrap();
    std::fs::write(dir.join("main.previous.log"), "old\n").unwrap();
    assert_eq!(
        pods.logs("app", &LogParams::default()).await.unwrap(),
        "a\nb\nc\n"
    );
    assert_eq!(
        pods.logs(
            "app",
            &LogParams {
                tail_lines: Some(2),
                ..Default::default()
            }
        )
        .await
        .unwrap(),
        "b\nc\n"
    );
    assert_eq!(
        pods.logs(
            "app",
            &LogParams {
                container: Some("side".into()),
                ..Default::default()
            }
        )
        .await
        .unwrap(),
        "side\n"
    );
    assert_eq!(
        pods.logs(
            "app",
            &LogParams {
                previous: true,
                ..Default::default()
            }
        )
        .await
        .unwrap(),
        "old\n"
    );
    let err = pods
        .logs(
            "app",
            &LogParams {
                container: Some("nope".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );

    // follow: appended lines stream until the pod is deleted.
    let mut lines = pods
        .log_stream(
            "app",
            &LogParams {
                follow: true,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .lines();
    use futures::StreamExt;
    for want in ["a", "b", "c"] {
        assert_eq!(lines.next().await.unwrap().unwrap(), want);
    }
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("main.log"))
            .unwrap();
        writeln!(f, "d").unwrap();
    }
    let next = tokio::time::timeout(Duration::from_secs(5), lines.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next, "d");
    pods.delete("app", &Default::default()).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), lines.next())
        .await
        .unwrap();
    assert!(end.is_none(), "stream should end when the pod is deleted");
    server.shutdown().await;
}

#[tokio::test]
async fn events_in_both_apis() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "subject"}})).unwrap(),
        )
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hi".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder.publish(&ev, &cm.object_ref(&())).await.unwrap();
    let new_events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let list = new_events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].reason.as_deref(), Some("Tested"));
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let e = json!({"metadata": {"name": "core-ev"}, "involvedObject": {"kind": "ConfigMap", "name": "subject"}, "reason": "Core"});
    core.create(&PostParams::default(), &serde_json::from_value(e).unwrap())
        .await
        .unwrap();
    // One resource: each API lists both Events (tests/events.rs checks the fields).
    assert_eq!(
        core.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
    assert_eq!(
        new_events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    server.shutdown().await;
}

#[tokio::test]
async fn wrong_token_is_unauthorized() {
    let server = start(ServerConfig {
        token: Some("right".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut kc = server.kubeconfig();
    for a in &mut kc.auth_infos {
        if let Some(ai) = a.auth_info.as_mut() {
            ai.token = Some("wrong".to_string().into());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let bad = Client::try_from(config).unwrap();
    let err = bad.apiserver_version().await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 401),
        "{err:?}"
    );
    assert_eq!(
        server
            .client()
            .await
            .unwrap()
            .apiserver_version()
            .await
            .unwrap()
            .major,
        "1"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn data_dir_survives_restart_and_torn_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let server = start(config.clone()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    let a = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"v": "1"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gone"}})).unwrap(),
    )
    .await
    .unwrap();
    cms.delete("gone", &Default::default()).await.unwrap();
    let rv_before: u64 = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
        .parse()
        .unwrap();
    // Wait for the change log to reach the disk, then simulate a crash mid-write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(server);
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("changes.jsonl"))
            .unwrap();
        write!(
            f,
            "{{\"rv\": 99999, \"g\": \"\", \"r\": \"configmaps\", \"ns\": \"default\", \"na"
        )
        .unwrap();
    }
    let server = start(config.clone()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    let kept = cms.get("kept").await.unwrap();
    assert_eq!(kept.metadata.uid, a.metadata.uid);
    assert!(cms.get_opt("gone").await.unwrap().is_none());
    let created = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "later"}})).unwrap(),
        )
        .await
        .unwrap();
    let rv_after: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        rv_after > rv_before,
        "resourceVersion must keep increasing across restarts"
    );
    server.shutdown().await;
    // A clean shutdown keeps everything too.
    let server = start(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    assert!(cms.get_opt("later").await.unwrap().is_some());
    server.shutdown().await;
}
