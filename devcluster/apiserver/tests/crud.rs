#![cfg(test)]
//! CRUD, conflicts, generation, selectors, paging and errors through kube::Client.

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "img"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn crud_conflict_generation_and_errors() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"app": "x"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some());
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_ref().unwrap().parse().unwrap();

    // Duplicate create: 409 AlreadyExists.
    let err = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "AlreadyExists");
        }
        other => panic!("unexpected {other:?}"),
    }

    // Update with the current resourceVersion works and increases it.
    let mut upd = created.clone();
    upd.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = cms
        .replace("a", &PostParams::default(), &upd)
        .await
        .unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    // Stale update: 409 Conflict.
    let err = cms
        .replace("a", &PostParams::default(), &upd)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );

    // Get and 404.
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["k"], "v2");
    let err = cms.get("missing").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{err:?}"
    );

    // 422 for an object that does not parse as its type (data values must be strings).
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}, "data": {"k": 5}});
    let err = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "ok-later"}}))
                .unwrap(),
        )
        .await;
    assert!(err.is_ok());
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &kube::api::ApiResource::erase::<ConfigMap>(&()),
    );
    let err = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422 && s.reason == "Invalid"),
        "{err:?}"
    );

    // 400 for a namespace mismatch between URL and body.
    let mut other_ns = cm("b", json!({}));
    other_ns.metadata.namespace = Some("kube-system".into());
    let err = cms
        .create(&PostParams::default(), &other_ns)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400),
        "{err:?}"
    );

    // Creating in a namespace that does not exist: 404.
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let err = nowhere
        .create(&PostParams::default(), &cm("c", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );

    // generation: bumped by spec changes only, not by metadata or status.
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d = deps
        .create(&PostParams::default(), &deployment("web"))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let d = deps
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert_eq!(d.status.as_ref().unwrap().ready_replicas, Some(1));
    let d = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    // Status is not changed through the main resource.
    let d = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(d.status.unwrap().ready_replicas, Some(1));

    // Scale subresource.
    let scale = deps.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    deps.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(5)
    );

    // Delete returns the object, then 404.
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("a").await.unwrap().is_none());

    // Cluster-scoped kinds and built-in namespaces.
    let nss: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = nss
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"default".to_string()) && names.contains(&"kube-system".to_string()));

    // Pods and services round-trip with server-set status.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    let p = pods.create(&PostParams::default(), &p).await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let s: Service = serde_json::from_value(
        json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .unwrap();
    svcs.create(&PostParams::default(), &s).await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn selectors_and_paging() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..10 {
        let tier = if i % 2 == 0 { "front" } else { "back" };
        let mut labels = json!({"app": "shop", "tier": tier});
        if i < 3 {
            labels["canary"] = json!("yes");
        }
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), labels))
            .await
            .unwrap();
    }
    let count = |sel: &str| {
        let cms = cms.clone();
        let sel = sel.to_string();
        async move {
            cms.list(&ListParams::default().labels(&sel))
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(count("tier=front").await, 5);
    assert_eq!(count("tier==back").await, 5);
    assert_eq!(count("tier!=front").await, 5);
    assert_eq!(count("tier in (front,back)").await, 10);
    assert_eq!(count("tier notin (front)").await, 5);
    assert_eq!(count("canary").await, 3);
    assert_eq!(count("!canary").await, 7);
    assert_eq!(count("app=shop,canary,tier=front").await, 2);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=cm-4"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let by_ns: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        by_ns
            .list(&ListParams::default().fields("metadata.namespace=default"))
            .await
            .unwrap()
            .items
            .len(),
        10
    );
    assert_eq!(
        by_ns
            .list(&ListParams::default().fields("metadata.namespace=kube-system"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );

    // limit/continue walks every object exactly once.
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    let mut pages = 0;
    loop {
        let page = cms.list(&lp).await.unwrap();
        pages += 1;
        seen.extend(page.items.into_iter().filter_map(|c| c.metadata.name));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = ListParams::default().limit(3).continue_token(&c),
            _ => break,
        }
        assert!(pages < 10);
    }
    assert_eq!(pages, 4);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10);
    server.shutdown().await;
}
