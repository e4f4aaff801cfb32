//! The invoker against real local HTTP servers.

#![cfg(test)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode};
use k8s_openapi::api::discovery::v1::{
    Endpoint as SliceEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeless_invoke::resolve::SERVICE_NAME_LABEL;
use kubeless_invoke::{
    CallBody, Class, Endpoint, EndpointSliceResolver, Event, FunctionTarget, InvokeError, Invoker,
    Jitter, Lane, RetryPolicy, StaticResolver,
};
use support::{TestServer, dead_addr};

fn invoker_for(server: &TestServer) -> Invoker {
    Invoker::new(Arc::new(StaticResolver::single(
        Endpoint::parse(&server.url()).unwrap(),
    )))
}

/// An invoker whose only endpoint refuses connections.
async fn dead_invoker() -> Invoker {
    let dead = dead_addr().await;
    Invoker::new(Arc::new(StaticResolver::single(
        Endpoint::parse(&format!("http://{dead}/")).unwrap(),
    )))
}

fn fast_retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        multiplier: 2.0,
        jitter: Jitter::Equal,
    }
}

fn target() -> FunctionTarget {
    FunctionTarget::new("default", "hello").with_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn post_carries_kubeless_headers_and_body() {
    let server = TestServer::ok().await;
    let invoker = invoker_for(&server);
    let event = Event::new("kafkatriggers.kubeless.io")
        .with_body(r#"{"order": 7}"#)
        .with_content_type("text/plain")
        .with_header(
            HeaderName::from_static("event-topic"),
            HeaderValue::from_static("orders"),
        );
    let out = invoker.invoke(&target(), &event).await;
    assert!(out.is_success(), "{:?}", out.error);
    assert_eq!(out.status, Some(StatusCode::OK));
    assert_eq!(out.body, "answer 0");
    assert_eq!(out.attempts, 1);

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.body, r#"{"order": 7}"#);
    let h = &req.headers;
    let id = h["event-id"].to_str().unwrap();
    assert_eq!(id, out.event_id);
    assert_eq!(id.len(), 20);
    assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
    // Kubeless's event-time (Go's time.String() in UTC), and the CloudEvents form beside it.
    let time = h["event-time"].to_str().unwrap();
    assert!(time.ends_with(" +0000 UTC"), "{time}");
    assert!(chrono::DateTime::parse_from_rfc3339(h["ce-time"].to_str().unwrap()).is_ok());
    assert_eq!(h["ce-specversion"], "1.0");
    assert_eq!(h["ce-id"], id);
    assert_eq!(h["ce-source"], "kafkatriggers.kubeless.io");
    assert_eq!(h["ce-type"], "io.kubeless.kafkatriggers");
    assert_eq!(h["event-type"], "application/json");
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["event-namespace"], "kafkatriggers.kubeless.io");
    assert_eq!(h["event-topic"], "orders");
    let tp = h["traceparent"].to_str().unwrap();
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(
        (parts.len(), parts[0], parts[1].len(), parts[2].len()),
        (4, "00", 32, 16),
        "{tp}"
    );
}

#[tokio::test]
async fn arrays_are_json_and_text_keeps_its_type() {
    let server = TestServer::ok().await;
    let invoker = invoker_for(&server);
    invoker
        .invoke(&target(), &Event::new("x").with_body("[1,2,3]"))
        .await;
    invoker
        .invoke(
            &target(),
            &Event::new("x")
                .with_body("hello")
                .with_content_type("text/plain"),
        )
        .await;
    invoker
        .invoke(&target(), &Event::new("x").with_body("42"))
        .await;
    let seen = server.seen();
    assert_eq!(seen[0].headers["content-type"], "application/json");
    assert_eq!(seen[1].headers["content-type"], "text/plain");
    assert_eq!(seen[1].headers["event-type"], "text/plain");
    assert_eq!(
        seen[2].headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    // each event has its own id
    assert_ne!(seen[0].headers["event-id"], seen[1].headers["event-id"]);
}

#[tokio::test]
async fn no_body_is_a_get() {
    let server = TestServer::ok().await;
    let invoker = invoker_for(&server);
    let out = invoker
        .invoke(&target(), &Event::new("cronjobtrigger.kubeless.io"))
        .await;
    assert!(out.is_success());
    let seen = server.seen();
    assert_eq!(seen[0].method, "GET");
    assert!(seen[0].body.is_empty());
    assert!(!seen[0].headers.contains_key("content-type"));
    assert_eq!(
        seen[0].headers["event-namespace"],
        "cronjobtrigger.kubeless.io"
    );
}

#[tokio::test]
async fn slow_function_times_out_as_retryable() {
    let server = TestServer::start(Arc::new(|_| (StatusCode::OK, Duration::from_secs(3)))).await;
    let invoker = invoker_for(&server);
    let t = target().with_timeout(Duration::from_millis(200));
    let out = invoker.invoke(&t, &Event::new("x").with_body("{}")).await;
    assert!(
        matches!(out.error, Some(InvokeError::Timeout { .. })),
        "{:?}",
        out.error
    );
    assert_eq!(out.class(), Class::Retryable);
    assert!(
        out.latency >= Duration::from_millis(200) && out.latency < Duration::from_secs(2),
        "{:?}",
        out.latency
    );
}

#[tokio::test]
async fn retries_until_success_with_the_same_event_id() {
    let server = TestServer::start(Arc::new(|n| {
        let status = match n {
            0 => StatusCode::SERVICE_UNAVAILABLE,
            1 => StatusCode::TOO_MANY_REQUESTS,
            2 => StatusCode::REQUEST_TIMEOUT,
            _ => StatusCode::OK,
        };
        (status, Duration::ZERO)
    }))
    .await;
    let invoker = invoker_for(&server);
    let out = invoker
        .invoke_with_retry(
            &target(),
            &Event::new("x").with_body("{}"),
            &fast_retries(5),
        )
        .await;
    assert!(out.is_success(), "{:?}", out.error);
    assert_eq!(out.attempts, 4);
    assert_eq!(out.body, "answer 3");
    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter()
            .all(|s| s.headers["event-id"] == out.event_id.as_str())
    );
    assert!(
        seen.iter()
            .all(|s| s.headers["event-time"] == seen[0].headers["event-time"])
    );
}

#[tokio::test]
async fn retries_stop_at_max_attempts() {
    let server = TestServer::start(Arc::new(|_| {
        (StatusCode::INTERNAL_SERVER_ERROR, Duration::ZERO)
    }))
    .await;
    let invoker = invoker_for(&server);
    let out = invoker
        .invoke_with_retry(
            &target(),
            &Event::new("x").with_body("{}"),
            &fast_retries(3),
        )
        .await;
    assert_eq!(out.attempts, 3);
    assert_eq!(server.calls(), 3);
    assert_eq!(out.status, Some(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(out.class(), Class::Retryable);
    assert_eq!(
        out.error.as_ref().map(|e| e.metric_label()),
        Some("status_5xx")
    );
}

#[tokio::test]
async fn bad_request_is_not_retried() {
    let server = TestServer::start(Arc::new(|_| (StatusCode::BAD_REQUEST, Duration::ZERO))).await;
    let invoker = invoker_for(&server);
    let out = invoker
        .invoke_with_retry(
            &target(),
            &Event::new("x").with_body("{}"),
            &fast_retries(5),
        )
        .await;
    assert_eq!(out.attempts, 1);
    assert_eq!(server.calls(), 1);
    assert_eq!(out.class(), Class::Permanent);
    assert_eq!(out.status, Some(StatusCode::BAD_REQUEST));
}

#[tokio::test]
async fn refused_connection_is_retryable() {
    let invoker = dead_invoker().await;
    let out = invoker
        .invoke_with_retry(
            &target(),
            &Event::new("x").with_body("{}"),
            &fast_retries(2),
        )
        .await;
    assert!(
        matches!(out.error, Some(InvokeError::Connect { .. })),
        "{:?}",
        out.error
    );
    assert_eq!(out.attempts, 2);
    assert_eq!(out.status, None);
}

fn slice(name: &str, port: u16, hosts: &[(&str, Option<bool>)]) -> EndpointSlice {
    EndpointSlice {
        address_type: "IPv4".into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some([(SERVICE_NAME_LABEL.to_string(), "hello".to_string())].into()),
            ..ObjectMeta::default()
        },
        ports: Some(vec![EndpointPort {
            name: Some("http-function-port".into()),
            port: Some(i32::from(port)),
            ..EndpointPort::default()
        }]),
        endpoints: hosts
            .iter()
            .map(|(h, ready)| SliceEndpoint {
                addresses: vec![h.to_string()],
                conditions: Some(EndpointConditions {
                    ready: *ready,
                    ..EndpointConditions::default()
                }),
                ..SliceEndpoint::default()
            })
            .collect(),
    }
}

#[tokio::test]
async fn endpoint_slices_are_balanced_and_dead_endpoints_skipped() {
    let servers = [
        TestServer::ok().await,
        TestServer::ok().await,
        TestServer::ok().await,
    ];
    let dead = dead_addr().await;
    // An unready endpoint pointing at a live server must never be called.
    let unready = TestServer::ok().await;
    let resolver = Arc::new(EndpointSliceResolver::new(Duration::from_secs(30)));
    for (i, s) in servers.iter().enumerate() {
        resolver.apply(slice(
            &format!("hello-{i}"),
            s.addr.port(),
            &[("127.0.0.1", Some(true))],
        ));
    }
    resolver.apply(slice("hello-dead", dead.port(), &[("127.0.0.1", None)]));
    resolver.apply(slice(
        "hello-unready",
        unready.addr.port(),
        &[("127.0.0.1", Some(false))],
    ));
    let invoker = Invoker::new(resolver.clone());
    let t = target().with_port_name("http-function-port");
    assert_eq!(resolver.endpoints(&t).len(), 4);

    let mut connect_failures = 0;
    for _ in 0..30 {
        let out = invoker
            .invoke_with_retry(&t, &Event::new("x").with_body("{}"), &fast_retries(3))
            .await;
        assert!(out.is_success(), "{:?}", out.error);
        connect_failures += out.attempts - 1;
    }
    // The dead endpoint fails once, then sits out its cooldown.
    assert_eq!(connect_failures, 1);
    let calls: Vec<usize> = servers.iter().map(|s| s.calls()).collect();
    assert_eq!(calls.iter().sum::<usize>(), 30);
    assert!(calls.iter().all(|c| *c >= 8), "uneven balance: {calls:?}");
    assert_eq!(unready.calls(), 0);
}

/// An ordered lane's calls go over its own connection, driven by its task: the same headers,
/// retries and error classes as through the pool, with the Host header naming the endpoint.
#[tokio::test]
async fn a_lane_calls_like_the_pool() {
    let server = TestServer::start(Arc::new(|n| {
        let status = if n == 1 {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        (status, Duration::ZERO)
    }))
    .await;
    let invoker = invoker_for(&server);
    let lane: Lane<CallBody> = Lane::default();
    let outcomes = lane
        .run(async {
            let mut all = Vec::new();
            for i in 0..3 {
                let event = Event::new("x").with_body(format!("{{\"n\":{i}}}"));
                all.push(
                    invoker
                        .invoke_with_retry_in(Some(&lane), &target(), &event, &fast_retries(3))
                        .await,
                );
            }
            all
        })
        .await;
    assert!(outcomes.iter().all(|o| o.is_success()), "{outcomes:?}");
    // The second event's first attempt got 503 and was tried again, with the same event-id.
    assert_eq!(
        outcomes.iter().map(|o| o.attempts).collect::<Vec<_>>(),
        [1, 2, 1]
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[1].headers["event-id"], seen[2].headers["event-id"]);
    let host = server.url();
    let host = host.trim_start_matches("http://").trim_end_matches('/');
    assert!(seen.iter().all(|s| s.headers["host"] == host), "{host}");
    assert_eq!(seen[3].body, "{\"n\":2}");

    let invoker = dead_invoker().await;
    let out = lane
        .run(invoker.invoke_with_retry_in(
            Some(&lane),
            &target(),
            &Event::new("x").with_body("{}"),
            &fast_retries(2),
        ))
        .await;
    assert!(
        matches!(out.error, Some(InvokeError::Connect { .. })),
        "{:?}",
        out.error
    );
    assert_eq!(out.class(), Class::Retryable);
    assert_eq!(out.attempts, 2);
}
