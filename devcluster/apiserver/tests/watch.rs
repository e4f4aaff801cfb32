#![cfg(test)]
//! Watch: resume from a resourceVersion, selector transitions, bookmarks, 410, streaming lists.

use std::time::Duration;

use devcluster_apiserver::{ServerConfig, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn watch_resume_and_selectors() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("before", json!({"w": "1"})))
        .await
        .unwrap();
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    // Changes made after the list but before the watch starts are replayed.
    cms.create(&PostParams::default(), &cm("after", json!({"w": "1"})))
        .await
        .unwrap();
    cms.patch(
        "after",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"w": "2"}}})),
    )
    .await
    .unwrap();

    let all = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let selected = cms
        .watch(&WatchParams::default().labels("w=1").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let all: Vec<_> = all.take(2).try_collect().await.unwrap();
    let selected: Vec<_> = selected.take(2).try_collect().await.unwrap();
    assert!(matches!(&all[0], WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("after")));
    assert!(
        matches!(&all[1], WatchEvent::Modified(c) if c.metadata.name.as_deref() == Some("after"))
    );
    // For the w=1 watcher the label change moves the object out of the selection.
    assert!(matches!(&selected[0], WatchEvent::Added(_)));
    assert!(
        matches!(&selected[1], WatchEvent::Deleted(c) if c.metadata.name.as_deref() == Some("after"))
    );

    // Bookmarks arrive when asked for.
    let mut s = cms
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let mut got_bookmark = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(9);
    while let Ok(Some(ev)) = tokio::time::timeout_at(deadline, s.next()).await {
        if let WatchEvent::Bookmark(b) = ev.unwrap() {
            assert!(
                b.metadata.resource_version.parse::<u64>().unwrap() >= rv.parse::<u64>().unwrap()
            );
            got_bookmark = true;
            break;
        }
    }
    assert!(got_bookmark);

    // timeoutSeconds ends the stream.
    let started = std::time::Instant::now();
    let s = cms
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0")
        .await
        .unwrap();
    let n = s.boxed().count().await;
    assert!(n >= 2, "initial ADDED events for rv=0, got {n}");
    assert!(started.elapsed() < Duration::from_secs(5));
    server.shutdown().await;
}

#[tokio::test]
async fn too_old_resource_version_is_gone() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // Push the first changes out of the bounded history.
    let store = server.store();
    let def = store.lookup("", "v1", "configmaps").unwrap();
    let n = devcluster_apiserver::store::HISTORY_LEN + 10;
    for i in 0..n {
        let obj =
            json!({"metadata": {"name": format!("c{}", i % 50)}, "data": {"i": i.to_string()}});
        if i < 50 {
            store.create(&def, "v1", "default", obj).unwrap();
        } else {
            store
                .patch(
                    &def,
                    "v1",
                    "default",
                    &format!("c{}", i % 50),
                    devcluster_apiserver::patch::PatchKind::Merge,
                    &obj,
                    devcluster_apiserver::store::Sub::Main,
                )
                .unwrap();
        }
    }
    let mut s = cms
        .watch(&WatchParams::default().timeout(5), "5")
        .await
        .unwrap()
        .boxed();
    match s.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    // kube-runtime's watcher recovers by relisting.
    let w = watcher(cms.clone(), watcher::Config::default());
    let objs: Vec<ConfigMap> = tokio::time::timeout(Duration::from_secs(20), async {
        use kube::runtime::WatchStreamExt;
        let mut out = Vec::new();
        let mut s = w.default_backoff().boxed();
        while let Some(ev) = s.next().await {
            match ev.unwrap() {
                watcher::Event::InitApply(o) => out.push(o),
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        out
    })
    .await
    .unwrap();
    assert_eq!(objs.len(), 50);
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_list_and_paged_list_watchers() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..7 {
        cms.create(&PostParams::default(), &cm(&format!("s{i}"), json!({})))
            .await
            .unwrap();
    }
    for config in [
        watcher::Config::default().streaming_lists(),
        watcher::Config::default().page_size(2),
    ] {
        let mut s = watcher(cms.clone(), config).boxed();
        let mut init = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(10), s.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
            {
                watcher::Event::InitApply(_) => init += 1,
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
        assert_eq!(init, 7);
        cms.create(
            &PostParams::default(),
            &cm(&format!("live-{}", init), json!({})),
        )
        .await
        .ok();
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(10), s.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            if let watcher::Event::Apply(c) = ev {
                assert!(c.metadata.name.unwrap().starts_with("live-"));
                break;
            }
        }
        cms.delete("live-7", &Default::default()).await.unwrap();
    }
    server.shutdown().await;
}
