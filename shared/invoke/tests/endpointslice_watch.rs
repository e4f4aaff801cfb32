//! The EndpointSlice watch against a devcluster API server, balancing real local servers.

#![cfg(test)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::discovery::v1::{
    Endpoint as SliceEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kubeless_invoke::resolve::SERVICE_NAME_LABEL;
use kubeless_invoke::{EndpointSliceResolver, Event, FunctionTarget, Invoker, RetryPolicy};
use support::TestServer;

fn slice(name: &str, port: u16, ready: bool) -> EndpointSlice {
    EndpointSlice {
        address_type: "IPv4".into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(SERVICE_NAME_LABEL.to_string(), "hello".to_string())].into()),
            ..ObjectMeta::default()
        },
        ports: Some(vec![EndpointPort {
            name: Some("http-function-port".into()),
            port: Some(i32::from(port)),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
        endpoints: vec![SliceEndpoint {
            addresses: vec!["127.0.0.1".into()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                ..EndpointConditions::default()
            }),
            ..SliceEndpoint::default()
        }],
    }
}

async fn wait_for_count(r: &EndpointSliceResolver, t: &FunctionTarget, n: usize) {
    for _ in 0..100 {
        if r.endpoints(t).len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("expected {n} endpoints, have {:?}", r.endpoints(t));
}

#[tokio::test]
async fn watched_slices_drive_balancing() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let (a, b) = (TestServer::ok().await, TestServer::ok().await);
    slices
        .create(
            &PostParams::default(),
            &slice("hello-a", a.addr.port(), true),
        )
        .await
        .unwrap();
    slices
        .create(
            &PostParams::default(),
            &slice("hello-b", b.addr.port(), true),
        )
        .await
        .unwrap();

    let resolver = Arc::new(EndpointSliceResolver::default());
    let watch = resolver.spawn_watch(client.clone(), Some("default"));
    tokio::time::timeout(Duration::from_secs(10), resolver.wait_synced())
        .await
        .expect("initial list");
    let t = FunctionTarget::new("default", "hello")
        .with_port_name("http-function-port")
        .with_timeout(Duration::from_secs(5));
    wait_for_count(&resolver, &t, 2).await;

    let invoker = Invoker::new(resolver.clone());
    for _ in 0..10 {
        let out = invoker.invoke(&t, &Event::new("x").with_body("{}")).await;
        assert!(out.is_success(), "{:?}", out.error);
    }
    assert_eq!((a.calls(), b.calls()), (5, 5));

    // b's pod turns unready: only a gets events.
    let mut not_ready = slices.get("hello-b").await.unwrap();
    not_ready.endpoints[0].conditions = Some(EndpointConditions {
        ready: Some(false),
        ..EndpointConditions::default()
    });
    slices
        .replace("hello-b", &PostParams::default(), &not_ready)
        .await
        .unwrap();
    wait_for_count(&resolver, &t, 1).await;
    for _ in 0..4 {
        assert!(invoker.invoke(&t, &Event::new("x")).await.is_success());
    }
    assert_eq!((a.calls(), b.calls()), (9, 5));

    // Both slices deleted: nothing to call, and that is retryable.
    slices
        .delete("hello-a", &DeleteParams::default())
        .await
        .unwrap();
    slices
        .delete("hello-b", &DeleteParams::default())
        .await
        .unwrap();
    wait_for_count(&resolver, &t, 0).await;
    let out = invoker
        .invoke_with_retry(&t, &Event::new("x"), &RetryPolicy::no_retry())
        .await;
    assert_eq!(out.class(), kubeless_invoke::Class::Retryable);

    watch.abort();
    server.shutdown().await;
}
