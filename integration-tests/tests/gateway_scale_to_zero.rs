//! Scale to zero through the http-trigger-controller's built-in gateway, in-process, on
//! devcluster (API server only; the function is a recording server on loopback). The test plays
//! the function-controller: it marks the Function `ScaledToZero=True` with no ready replica
//! and an empty EndpointSlice, checks that concurrent requests are held and that the gateway
//! wrote exactly one wake-up (the `kubeless.io/last-activity` annotation), then scales the
//! function "up" (status ready, slice ready) and checks every request reached the function
//! exactly once. A second gateway with a queue of one and a short timeout answers the 503s.
#![cfg(test)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use http_trigger_controller::gateway::wake::{RETRY_AFTER_SECONDS, WakeSettings};
use http_trigger_controller::{Running, Settings, run};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kubeless_api::scale::{SCALED_TO_ZERO, reasons};
use kubeless_api::{Condition, Function, FunctionStatus, HttpTrigger, HttpTriggerSpec};
use kubeless_testkit::{NS, RecordingFunction, TestCluster, register_function};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NAME: &str = "sleepy";

/// What the function-controller writes: the ScaledToZero condition and the ready replicas.
async fn set_status(client: &Client, at_zero: bool, ready: i32) {
    let reason = if at_zero {
        reasons::IDLE
    } else {
        reasons::ACTIVE
    };
    let status = FunctionStatus {
        ready_replicas: Some(ready),
        conditions: vec![Condition::new(SCALED_TO_ZERO, at_zero, reason, "")],
        ..Default::default()
    };
    let functions: Api<Function> = Api::namespaced(client.clone(), NS);
    functions
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
}

/// The function's pod address in its EndpointSlice, or none (scaled to zero).
async fn set_endpoints(client: &Client, addr: Option<std::net::SocketAddr>) {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let endpoints = match addr {
        Some(a) => json!([{"addresses": [a.ip().to_string()], "conditions": {"ready": true}}]),
        None => json!([]),
    };
    slices
        .patch(
            &format!("{NAME}-manual"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "endpoints": endpoints })),
        )
        .await
        .unwrap();
}

async fn gateway(
    client: &Client,
    wake: WakeSettings,
    metrics: &kubeless_service::Metrics,
    token: &CancellationToken,
) -> Running {
    let mut running = run(
        client.clone(),
        Settings {
            namespace: None,
            ingress: false,
            gateway_addr: Some("127.0.0.1:0".parse().unwrap()),
            secret_ttl: Duration::ZERO,
            instance: None,
            lease: None,
            wake,
            hosts: Default::default(),
        },
        metrics,
        token.clone(),
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(30), running.synced.wait_for(|s| *s))
        .await
        .expect("the gateway loads its routes")
        .unwrap();
    running
}

/// POSTs `body` to the trigger: status, Retry-After, body.
fn post(
    http: &HttpClient<HttpConnector, Full<Bytes>>,
    gateway: std::net::SocketAddr,
    body: String,
) -> tokio::task::JoinHandle<(u16, Option<String>, String)> {
    let http = http.clone();
    tokio::spawn(async move {
        let req = http::Request::post(format!("http://{gateway}/{NAME}"))
            .header("host", "sleepy.example.com")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(90), http.request(req))
            .await
            .expect("the gateway answers within its wake timeout")
            .unwrap();
        let status = resp.status().as_u16();
        let retry = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, retry, String::from_utf8_lossy(&body).into_owned())
    })
}

/// The value of a metric line `name` in the exposition text (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_for_a_function_at_zero_are_held_and_each_delivered_once() {
    let tc = TestCluster::start(None).await;
    let client = tc.client.clone();
    let function = RecordingFunction::echo().await;
    register_function(&client, NAME, json!({}), "30", function.addr).await;
    // Scaled to zero, as the function-controller leaves it: no ready replica, no endpoint.
    set_status(&client, true, 0).await;
    set_endpoints(&client, None).await;
    let triggers: Api<HttpTrigger> = Api::namespaced(client.clone(), NS);
    let mut trigger = HttpTrigger::new(
        NAME,
        HttpTriggerSpec {
            function_name: NAME.into(),
            path: Some(NAME.into()),
            ..HttpTriggerSpec::default()
        },
    );
    trigger.metadata.namespace = Some(NS.into());
    triggers
        .create(&PostParams::default(), &trigger)
        .await
        .unwrap();

    // Every value the activity annotation takes, from a watch of the Function.
    let functions: Api<Function> = Api::namespaced(client.clone(), NS);
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let watch = {
        let seen = Arc::clone(&seen);
        let stream = watcher(
            functions.clone(),
            watcher::Config::default().fields(&format!("metadata.name={NAME}")),
        )
        .applied_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(Ok(f)) = stream.next().await {
                if let Some(v) = kubeless_api::scale::last_activity(&f) {
                    seen.lock().unwrap().insert(v.to_string());
                }
            }
        })
    };

    let token = CancellationToken::new();
    let metrics = kubeless_service::Metrics::new("kubeless");
    let running = gateway(&client, WakeSettings::default(), &metrics, &token).await;
    let gw = running.gateway_addr.unwrap();
    let http = HttpClient::builder(TokioExecutor::new()).build_http();

    // The Function was at zero before the gateway started: its first list says so.
    let holds = "kubeless_http_gateway_wake_holds_total";
    let calls: Vec<_> = (0..10)
        .map(|i| post(&http, gw, format!("request {i}")))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&metrics.encode().unwrap(), holds) < 10.0 {
        assert!(
            Instant::now() < deadline,
            "requests not held: {}",
            metrics.encode().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Held for a while (the activity records retry the wake every second while waiting):
    // one wake-up, nothing sent to the function yet.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(calls.iter().all(|c| !c.is_finished()), "held, not answered");
    assert_eq!(function.count(), 0);
    let text = metrics.encode().unwrap();
    assert_eq!(
        metric(&text, "kubeless_http_gateway_wakes_total"),
        1.0,
        "{text}"
    );
    let live = functions.get(NAME).await.unwrap();
    let woken_at = kubeless_api::scale::last_activity(&live)
        .expect("the wake-up annotation")
        .to_string();
    assert_eq!(
        seen.lock().unwrap().iter().cloned().collect::<Vec<_>>(),
        vec![woken_at.clone()],
        "exactly one wake-up write"
    );
    assert!(kubeless_api::scale::parse_activity(&woken_at).is_some());

    // The controller scales it up: the condition turns False with the replica ready, and the
    // pod's address shows up in the EndpointSlice a little later (as it can in a cluster).
    set_status(&client, false, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    set_endpoints(&client, Some(function.addr)).await;
    let mut answers = BTreeSet::new();
    for c in calls {
        let (status, _, body) = c.await.unwrap();
        assert_eq!(status, 200, "{body}");
        answers.insert(body);
    }
    let expected: BTreeSet<String> = (0..10).map(|i| format!("request {i}")).collect();
    assert_eq!(answers, expected, "each request got its own answer");
    let mut bodies = function.bodies();
    bodies.sort();
    assert_eq!(
        bodies,
        expected.iter().cloned().collect::<Vec<_>>(),
        "every request reached the function exactly once"
    );
    let text = metrics.encode().unwrap();
    assert_eq!(
        metric(&text, "kubeless_http_gateway_wake_wait_seconds_count"),
        10.0
    );
    assert_eq!(metric(&text, "kubeless_http_gateway_wakes_total"), 1.0);

    // At zero again, and a gateway that holds one request for at most 1.5 s.
    set_status(&client, true, 0).await;
    set_endpoints(&client, None).await;
    let small = kubeless_service::Metrics::new("kubeless");
    let strict = gateway(
        &client,
        WakeSettings {
            timeout: Duration::from_millis(1500),
            queue: 1,
            ..WakeSettings::default()
        },
        &small,
        &token,
    )
    .await;
    let strict_gw = strict.gateway_addr.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let first = post(&http, strict_gw, "first".into());
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !first.is_finished() {
            break first;
        }
        // Answered at once: this gateway's routes did not know the function is at zero yet.
        assert!(Instant::now() < deadline, "the request was never held");
    };
    let sent_before = function.count();
    let started = Instant::now();
    let (status, retry, body) = post(&http, strict_gw, "second".into()).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    assert_eq!(retry, Some(RETRY_AFTER_SECONDS.to_string()));
    assert!(body.contains("too many requests"), "{body}");
    let (status, retry, body) = first.await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry, Some(RETRY_AFTER_SECONDS.to_string()));
    assert!(body.contains("did not scale up in time"), "{body}");
    assert_eq!(
        function.count(),
        sent_before,
        "refused requests never reach it"
    );
    let text = small.encode().unwrap();
    assert!(text.contains("outcome=\"wake_queue_full\""), "{text}");
    assert!(text.contains("outcome=\"wake_timeout\""), "{text}");

    watch.abort();
    token.cancel();
    tokio::time::timeout(Duration::from_secs(40), async {
        running.join().await;
        strict.join().await;
    })
    .await
    .expect("the gateways stop after shutdown");
    tc.shutdown().await;
}
