#![cfg(test)]
//! core/v1 and events.k8s.io/v1 Events are one stored resource, as on the real server: an Event
//! written through either API is listed, got, watched, patched and deleted through the other,
//! with the fields mapped (`note` is `message`, `regarding` is `involvedObject`, ...), and field
//! selectors take each version's own labels.

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as NewEvent;
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

async fn raw(client: &Client, method: &str, path: &str) -> Result<Value, kube::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(req).await?;
    Ok(serde_json::from_str(&text).unwrap())
}

fn new_style() -> NewEvent {
    serde_json::from_value(json!({
        "metadata": {"name": "from-new"},
        "eventTime": "2026-11-28T10:00:00.000000Z",
        "series": {"count": 3, "lastObservedTime": "2026-11-28T10:05:00.000000Z"},
        "reportingController": "kubeless.io/function-controller",
        "reportingInstance": "function-controller-0",
        "action": "Reconcile",
        "reason": "InvalidSpec",
        "regarding": {"apiVersion": "kubeless.io/v1beta1", "kind": "Function", "name": "hello",
                      "namespace": "default", "uid": "u-1"},
        "related": {"kind": "Deployment", "name": "hello", "namespace": "default"},
        "note": "spec.runtime: unknown runtime",
        "type": "Warning",
        "deprecatedCount": 4,
        "deprecatedFirstTimestamp": "2026-11-28T09:00:00Z",
        "deprecatedLastTimestamp": "2026-11-28T10:05:00Z",
        "deprecatedSource": {"component": "old-recorder", "host": "node-1"}
    }))
    .unwrap()
}

#[tokio::test]
async fn an_event_written_to_events_k8s_io_is_a_core_event() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let new: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");

    // A watch on the core API sees the Event created through events.k8s.io.
    let mut watch = core
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let created = new
        .create(&PostParams::default(), &new_style())
        .await
        .unwrap();
    assert_eq!(
        created.note.as_deref(),
        Some("spec.runtime: unknown runtime")
    );

    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(WatchEvent::Added(e)) = watch.try_next().await.unwrap() {
                return e;
            }
        }
    })
    .await
    .expect("the core watch sees the new Event");
    assert_eq!(seen.metadata.name.as_deref(), Some("from-new"));
    assert_eq!(
        seen.message.as_deref(),
        Some("spec.runtime: unknown runtime")
    );

    // Every field, mapped.
    let e = core.get("from-new").await.unwrap();
    assert_eq!(e.message.as_deref(), Some("spec.runtime: unknown runtime"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("Function"));
    assert_eq!(e.involved_object.name.as_deref(), Some("hello"));
    assert_eq!(e.involved_object.uid.as_deref(), Some("u-1"));
    assert_eq!(
        e.reporting_component.as_deref(),
        Some("kubeless.io/function-controller")
    );
    assert_eq!(
        e.reporting_instance.as_deref(),
        Some("function-controller-0")
    );
    assert_eq!(e.action.as_deref(), Some("Reconcile"));
    assert_eq!(e.reason.as_deref(), Some("InvalidSpec"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.count, Some(4));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(3));
    assert!(e.event_time.is_some() && e.first_timestamp.is_some() && e.last_timestamp.is_some());
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("old-recorder")
    );
    assert_eq!(
        e.related.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Deployment")
    );
    // The core object has no events.k8s.io names, and says it is a core Event.
    let json = raw(&client, "GET", "/api/v1/namespaces/default/events/from-new")
        .await
        .unwrap();
    assert_eq!(json["apiVersion"], "v1");
    for absent in [
        "note",
        "regarding",
        "reportingController",
        "deprecatedCount",
    ] {
        assert!(json.get(absent).is_none(), "{absent} in {json}");
    }
    assert_eq!(
        core.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // Core field selectors, including `source` (the reporting controller when no source
    // component... here the old source's component wins).
    for (sel, n) in [
        ("involvedObject.kind=Function,involvedObject.name=hello", 1),
        ("reason=InvalidSpec,type=Warning", 1),
        ("reportingComponent=kubeless.io/function-controller", 1),
        ("source=old-recorder", 1),
        ("involvedObject.name=other", 0),
    ] {
        let got = core.list(&ListParams::default().fields(sel)).await.unwrap();
        assert_eq!(got.items.len(), n, "{sel}");
    }

    // Patched through the core API, read through events.k8s.io.
    core.patch(
        "from-new",
        &PatchParams::default(),
        &Patch::Merge(json!({"message": "fixed", "count": 5})),
    )
    .await
    .unwrap();
    let e = new.get("from-new").await.unwrap();
    assert_eq!(e.note.as_deref(), Some("fixed"));
    assert_eq!(e.deprecated_count, Some(5));

    // Deleted through core: gone from both.
    core.delete("from-new", &DeleteParams::default())
        .await
        .unwrap();
    assert!(new.get_opt("from-new").await.unwrap().is_none());
    assert!(core.get_opt("from-new").await.unwrap().is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn a_core_event_is_an_events_k8s_io_event() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let new: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");

    let mut watch = new
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let old_style: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "from-core"},
        "involvedObject": {"kind": "Pod", "name": "hello-abc", "namespace": "default",
                           "fieldPath": "spec.containers{hello}"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container",
        "type": "Warning",
        "count": 7,
        "firstTimestamp": "2026-11-28T09:00:00Z",
        "lastTimestamp": "2026-11-28T09:30:00Z",
        "source": {"component": "kubelet", "host": "node-1"}
    }))
    .unwrap();
    core.create(&PostParams::default(), &old_style)
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(WatchEvent::Added(e)) = watch.try_next().await.unwrap() {
                return e;
            }
        }
    })
    .await
    .expect("the events.k8s.io watch sees the core Event");
    assert_eq!(
        seen.note.as_deref(),
        Some("Back-off restarting failed container")
    );

    let e = new.get("from-core").await.unwrap();
    assert_eq!(
        e.note.as_deref(),
        Some("Back-off restarting failed container")
    );
    let regarding = e.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(
        regarding.field_path.as_deref(),
        Some("spec.containers{hello}")
    );
    assert_eq!(e.deprecated_count, Some(7));
    assert!(e.deprecated_first_timestamp.is_some() && e.deprecated_last_timestamp.is_some());
    assert_eq!(
        e.deprecated_source.as_ref().and_then(|s| s.host.as_deref()),
        Some("node-1")
    );
    assert_eq!(e.reason.as_deref(), Some("BackOff"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    let json = raw(
        &client,
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events/from-core",
    )
    .await
    .unwrap();
    assert_eq!(json["apiVersion"], "events.k8s.io/v1");
    for absent in [
        "message",
        "involvedObject",
        "count",
        "source",
        "firstTimestamp",
    ] {
        assert!(json.get(absent).is_none(), "{absent} in {json}");
    }
    let list = raw(
        &client,
        "GET",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    )
    .await
    .unwrap();
    assert_eq!(list["apiVersion"], "events.k8s.io/v1");
    assert_eq!(
        list["items"][0]["note"],
        "Back-off restarting failed container"
    );

    // events.k8s.io's own field labels; core-only labels are refused there, as on the real
    // server, and events.k8s.io labels on core.
    for (sel, n) in [
        ("regarding.kind=Pod,regarding.name=hello-abc", 1),
        ("regarding.fieldPath=spec.containers{hello}", 1),
        ("reason=BackOff,type=Warning", 1),
        ("regarding.kind=Function", 0),
        ("metadata.name=from-core", 1),
    ] {
        let got = new.list(&ListParams::default().fields(sel)).await.unwrap();
        assert_eq!(got.items.len(), n, "{sel}");
    }
    for sel in ["involvedObject.kind=Pod", "source=kubelet", "note=x"] {
        let err = new
            .list(&ListParams::default().fields(sel))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 400 && s.message.contains("field label not supported")),
            "{sel}: {err:?}"
        );
    }
    for sel in ["regarding.kind=Pod", "message=x"] {
        let err = core
            .list(&ListParams::default().fields(sel))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 400),
            "{sel}: {err:?}"
        );
    }

    // Patched through events.k8s.io (merge and server-side apply), read through core.
    new.patch(
        "from-core",
        &PatchParams::default(),
        &Patch::Merge(json!({"note": "patched", "deprecatedCount": 8})),
    )
    .await
    .unwrap();
    let e = core.get("from-core").await.unwrap();
    assert_eq!(e.message.as_deref(), Some("patched"));
    assert_eq!(e.count, Some(8));
    new.patch(
        "from-core",
        &PatchParams::apply("test").force(),
        &Patch::Apply(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "from-core"}, "note": "applied"})),
    )
    .await
    .unwrap();
    assert_eq!(
        core.get("from-core").await.unwrap().message.as_deref(),
        Some("applied")
    );

    // An events.k8s.io body with a core field name: an unknown field there, not a message.
    let body: NewEvent = serde_json::from_value(json!({"metadata": {"name": "odd"},
        "eventTime": "2026-11-28T10:00:00.000000Z", "reason": "R", "action": "A",
        "reportingController": "c", "reportingInstance": "i"}))
    .unwrap();
    let mut odd = serde_json::to_value(&body).unwrap();
    odd["message"] = json!("not an events.k8s.io field");
    let req = http::Request::post(
        "/apis/events.k8s.io/v1/namespaces/default/events?fieldValidation=Strict",
    )
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&odd).unwrap())
    .unwrap();
    let err = client.request_text(req).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.message.contains("message")),
        "{err:?}"
    );

    // Deleted through events.k8s.io: gone from both.
    new.delete("from-core", &DeleteParams::default())
        .await
        .unwrap();
    assert!(core.get_opt("from-core").await.unwrap().is_none());
    assert!(
        new.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    server.shutdown().await;
}
