#![cfg(test)]
//! Authentication and RBAC: ServiceAccount tokens from the TokenRequest API, Roles,
//! ClusterRoles, bindings, subresources, resourceNames, aggregation, group subjects, the real
//! server's 403 and 401 bodies, watch as its own verb, discovery, and ServiceAccount admission.

use devcluster_apiserver::{RunningServer, ServerConfig, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchParams,
};
use kube::core::Status;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

async fn admin(server: &RunningServer) -> Client {
    let mut config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// A client that sends `token` instead of the admin token.
async fn with_token(server: &RunningServer, token: &str) -> Client {
    let mut config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .unwrap();
    config.auth_info.token = Some(token.to_string().into());
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

async fn create<K>(client: &Client, ns: Option<&str>, mut v: Value) -> K
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let ar = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    v["apiVersion"] = json!(ar.api_version);
    v["kind"] = json!(ar.kind);
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    serde_json::from_value(serde_json::to_value(created).unwrap()).unwrap()
}

async fn namespace(client: &Client, name: &str) {
    create::<Namespace>(client, None, json!({"metadata": {"name": name}})).await;
}

async fn service_account(client: &Client, ns: &str, name: &str) {
    create::<ServiceAccount>(client, Some(ns), json!({"metadata": {"name": name}})).await;
}

/// A token for `ns/name` (unbound), requested by the admin.
async fn token(client: &Client, ns: &str, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let tr = sas
        .create_token_request(name, &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap();
    tr.status.unwrap().token
}

/// A ServiceAccount `app` in a fresh namespace, with a client that uses its token.
async fn sa_client(server: &RunningServer, admin: &Client, ns: &str) -> Client {
    namespace(admin, ns).await;
    service_account(admin, ns, "app").await;
    with_token(server, &token(admin, ns, "app").await).await
}

fn status(err: kube::Error) -> Box<Status> {
    match err {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn forbidden(err: kube::Error) -> String {
    let s = status(err);
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
    s.message
}

async fn role(client: &Client, ns: &str, name: &str, rules: Value) {
    create::<Role>(
        client,
        Some(ns),
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
}

async fn cluster_role(client: &Client, name: &str, rules: Value) {
    create::<ClusterRole>(
        client,
        None,
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
}

fn sa_subject(ns: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "name": name, "namespace": ns})
}

async fn role_binding(
    client: &Client,
    ns: &str,
    name: &str,
    kind: &str,
    role: &str,
    subjects: Value,
) {
    create::<RoleBinding>(
        client,
        Some(ns),
        json!({"metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
               "subjects": subjects}),
    )
    .await;
}

async fn cluster_role_binding(client: &Client, name: &str, role: &str, subjects: Value) {
    create::<ClusterRoleBinding>(
        client,
        None,
        json!({"metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": subjects}),
    )
    .await;
}

async fn config_map(client: &Client, ns: &str, name: &str) {
    create::<ConfigMap>(
        client,
        Some(ns),
        json!({"metadata": {"name": name}, "data": {"k": "v"}}),
    )
    .await;
}

#[tokio::test]
async fn role_allows_its_verbs_in_its_namespace_only() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    namespace(&admin, "other").await;
    config_map(&admin, "team", "settings").await;
    config_map(&admin, "other", "settings").await;
    role(
        &admin,
        "team",
        "read-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "app-read-cm",
        "Role",
        "read-cm",
        json!([sa_subject("team", "app")]),
    )
    .await;

    let team: Api<ConfigMap> = Api::namespaced(sa.clone(), "team");
    assert_eq!(team.get("settings").await.unwrap().data.unwrap()["k"], "v");
    assert_eq!(
        team.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    let msg = forbidden(
        team.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "new"}})).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        msg,
        r#"configmaps is forbidden: User "system:serviceaccount:team:app" cannot create resource "configmaps" in API group "" in the namespace "team""#
    );
    let msg = forbidden(
        team.delete("settings", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        msg,
        r#"configmaps "settings" is forbidden: User "system:serviceaccount:team:app" cannot delete resource "configmaps" in API group "" in the namespace "team""#
    );
    let secrets: Api<Secret> = Api::namespaced(sa.clone(), "team");
    forbidden(secrets.list(&ListParams::default()).await.unwrap_err());
    let other: Api<ConfigMap> = Api::namespaced(sa.clone(), "other");
    let msg = forbidden(other.get("settings").await.unwrap_err());
    assert!(msg.ends_with(r#"in the namespace "other""#), "{msg}");
    // All namespaces is a cluster-scope request, which a Role never grants.
    let all: Api<ConfigMap> = Api::all(sa.clone());
    let msg = forbidden(all.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        msg,
        r#"configmaps is forbidden: User "system:serviceaccount:team:app" cannot list resource "configmaps" in API group "" at the cluster scope"#
    );
    server.shutdown().await;
}

#[tokio::test]
async fn forbidden_status_body_is_the_real_servers() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    let deployments: Api<Deployment> = Api::namespaced(sa.clone(), "team");
    let s = status(deployments.get("web").await.unwrap_err());
    assert_eq!(s.code, 403);
    assert_eq!(s.reason, "Forbidden");
    assert_eq!(
        s.message,
        r#"deployments.apps "web" is forbidden: User "system:serviceaccount:team:app" cannot get resource "deployments" in API group "apps" in the namespace "team""#
    );
    let d = s.details.unwrap();
    assert_eq!(
        (d.name.as_str(), d.group.as_str(), d.kind.as_str()),
        ("web", "apps", "deployments")
    );
    // A binding to a role that does not exist says so, as the real RBAC authorizer does.
    role_binding(
        &admin,
        "team",
        "dangling",
        "Role",
        "missing",
        json!([sa_subject("team", "app")]),
    )
    .await;
    let msg = forbidden(deployments.get("web").await.unwrap_err());
    assert!(
        msg.ends_with(r#": RBAC: [role.rbac.authorization.k8s.io "missing" not found]"#),
        "{msg}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn cluster_role_through_role_binding_and_cluster_role_binding() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    namespace(&admin, "other").await;
    cluster_role(&admin, "cm-reader", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}])).await;
    cluster_role(
        &admin,
        "ns-reader",
        json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "cm",
        "ClusterRole",
        "cm-reader",
        json!([sa_subject("team", "app")]),
    )
    .await;

    // A RoleBinding to a ClusterRole grants its rules in the binding's namespace only.
    let team: Api<ConfigMap> = Api::namespaced(sa.clone(), "team");
    team.list(&ListParams::default()).await.unwrap();
    let other: Api<ConfigMap> = Api::namespaced(sa.clone(), "other");
    forbidden(other.list(&ListParams::default()).await.unwrap_err());
    let namespaces: Api<Namespace> = Api::all(sa.clone());
    let msg = forbidden(namespaces.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        msg,
        r#"namespaces is forbidden: User "system:serviceaccount:team:app" cannot list resource "namespaces" in API group "" at the cluster scope"#
    );

    // A ClusterRoleBinding grants them everywhere, cluster-scoped resources included.
    cluster_role_binding(
        &admin,
        "ns",
        "ns-reader",
        json!([sa_subject("team", "app")]),
    )
    .await;
    cluster_role_binding(
        &admin,
        "cm",
        "cm-reader",
        json!([sa_subject("team", "app")]),
    )
    .await;
    other.list(&ListParams::default()).await.unwrap();
    Api::<ConfigMap>::all(sa.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        namespaces
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            >= 6
    );
    namespaces.get("other").await.unwrap();

    // cluster-admin exists from the start, as on a real cluster.
    cluster_role_binding(
        &admin,
        "root",
        "cluster-admin",
        json!([sa_subject("team", "app")]),
    )
    .await;
    config_map(&sa, "other", "made-by-sa").await;
    server.shutdown().await;
}

#[tokio::test]
async fn subresource_rules() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    create::<Deployment>(
        &admin,
        Some("team"),
        json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "python:3"}]}}}}),
    )
    .await;
    create::<Pod>(
        &admin,
        Some("team"),
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "python:3"}]}}),
    )
    .await;
    role(
        &admin,
        "team",
        "sub",
        json!([
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}
        ]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "sub",
        "Role",
        "sub",
        json!([sa_subject("team", "app")]),
    )
    .await;

    let deployments: Api<Deployment> = Api::namespaced(sa.clone(), "team");
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedGeneration": 1}})),
        )
        .await
        .unwrap();
    // The subresource rules do not grant the object itself, nor other verbs on them.
    let msg = forbidden(deployments.get("web").await.unwrap_err());
    assert!(
        msg.contains(r#"cannot get resource "deployments" in API group "apps""#),
        "{msg}"
    );
    let msg = forbidden(deployments.get_status("web").await.unwrap_err());
    assert!(
        msg.contains(r#"cannot get resource "deployments/status" in API group "apps""#),
        "{msg}"
    );
    // pods/log is allowed: the pod has no log file yet, so the log handler answers (400), not
    // the authorizer.
    let pods: Api<Pod> = Api::namespaced(sa.clone(), "team");
    let s = status(pods.logs("p", &Default::default()).await.unwrap_err());
    assert_ne!(s.code, 403, "{s:?}");
    let msg = forbidden(pods.get("p").await.unwrap_err());
    assert!(msg.starts_with(r#"pods "p" is forbidden"#), "{msg}");

    // `*/status` matches the status subresource of any resource.
    role(
        &admin,
        "team",
        "any-scale",
        json!([{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "any-scale",
        "Role",
        "any-scale",
        json!([sa_subject("team", "app")]),
    )
    .await;
    deployments.get_status("web").await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn resource_names_limit_gets_and_single_object_watches() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    config_map(&admin, "team", "mine").await;
    config_map(&admin, "team", "theirs").await;
    role(
        &admin,
        "team",
        "one-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"], "verbs": ["get", "list", "watch", "update"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "one-cm",
        "Role",
        "one-cm",
        json!([sa_subject("team", "app")]),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), "team");
    cms.get("mine").await.unwrap();
    let msg = forbidden(cms.get("theirs").await.unwrap_err());
    assert!(
        msg.starts_with(r#"configmaps "theirs" is forbidden"#),
        "{msg}"
    );
    // A list of everything names no object: refused.
    forbidden(cms.list(&ListParams::default()).await.unwrap_err());
    // A list or watch narrowed to the one name by field selector is allowed (kube-runtime's
    // watcher of a single object does this).
    let one = cms
        .list(&ListParams::default().fields("metadata.name=mine"))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    let mut stream = cms
        .watch(
            &WatchParams::default()
                .fields("metadata.name=mine")
                .timeout(2),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    let first = stream.try_next().await.unwrap();
    assert!(first.is_some());
    forbidden(
        cms.list(&ListParams::default().fields("metadata.name=theirs"))
            .await
            .unwrap_err(),
    );
    server.shutdown().await;
}

#[tokio::test]
async fn watch_is_its_own_verb() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    role(
        &admin,
        "team",
        "list-only",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    role(
        &admin,
        "team",
        "watch-secrets",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["watch"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "a",
        "Role",
        "list-only",
        json!([sa_subject("team", "app")]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "b",
        "Role",
        "watch-secrets",
        json!([sa_subject("team", "app")]),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), "team");
    cms.list(&ListParams::default()).await.unwrap();
    let err = cms
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .err()
        .expect("watch without the watch verb must fail");
    let msg = forbidden(err);
    assert_eq!(
        msg,
        r#"configmaps is forbidden: User "system:serviceaccount:team:app" cannot watch resource "configmaps" in API group "" in the namespace "team""#
    );
    let secrets: Api<Secret> = Api::namespaced(sa.clone(), "team");
    let _stream = secrets
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap();
    forbidden(secrets.list(&ListParams::default()).await.unwrap_err());
    server.shutdown().await;
}

#[tokio::test]
async fn cluster_role_aggregation() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    create::<ClusterRole>(
        &admin,
        None,
        json!({"metadata": {"name": "monitoring"},
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-monitoring": "true"}}]},
               "rules": []}),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "mon",
        "ClusterRole",
        "monitoring",
        json!([sa_subject("team", "app")]),
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sa.clone(), "team");
    forbidden(cms.list(&ListParams::default()).await.unwrap_err());
    create::<ClusterRole>(
        &admin,
        None,
        json!({"metadata": {"name": "monitoring-cm", "labels": {"example.com/aggregate-to-monitoring": "true"}},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await;
    cms.list(&ListParams::default()).await.unwrap();
    // Unlabelled, the role no longer contributes.
    let crs: Api<ClusterRole> = Api::all(admin.clone());
    crs.patch(
        "monitoring-cm",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"labels": {"example.com/aggregate-to-monitoring": null}}}),
        ),
    )
    .await
    .unwrap();
    forbidden(cms.list(&ListParams::default()).await.unwrap_err());
    server.shutdown().await;
}

#[tokio::test]
async fn group_and_user_subjects() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    service_account(&admin, "team", "second").await;
    let second = with_token(&server, &token(&admin, "team", "second").await).await;
    namespace(&admin, "other").await;
    service_account(&admin, "other", "outsider").await;
    let outsider = with_token(&server, &token(&admin, "other", "outsider").await).await;

    cluster_role(
        &admin,
        "cm-list",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    cluster_role(
        &admin,
        "secret-list",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]),
    )
    .await;
    cluster_role(
        &admin,
        "sa-list",
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["list"]}]),
    )
    .await;
    // Every ServiceAccount of namespace team.
    role_binding(&admin, "team", "team-sas", "ClusterRole", "cm-list",
        json!([{"kind": "Group", "name": "system:serviceaccounts:team", "apiGroup": "rbac.authorization.k8s.io"}])).await;
    // Every ServiceAccount anywhere.
    role_binding(&admin, "team", "all-sas", "ClusterRole", "secret-list",
        json!([{"kind": "Group", "name": "system:serviceaccounts", "apiGroup": "rbac.authorization.k8s.io"}])).await;
    // Exactly one, named as a User.
    role_binding(&admin, "team", "by-user", "ClusterRole", "sa-list",
        json!([{"kind": "User", "name": "system:serviceaccount:team:second", "apiGroup": "rbac.authorization.k8s.io"}])).await;

    for c in [&sa, &second] {
        Api::<ConfigMap>::namespaced(c.clone(), "team")
            .list(&ListParams::default())
            .await
            .unwrap();
        Api::<Secret>::namespaced(c.clone(), "team")
            .list(&ListParams::default())
            .await
            .unwrap();
    }
    forbidden(
        Api::<ConfigMap>::namespaced(outsider.clone(), "team")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    Api::<Secret>::namespaced(outsider.clone(), "team")
        .list(&ListParams::default())
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(second.clone(), "team")
        .list(&ListParams::default())
        .await
        .unwrap();
    forbidden(
        Api::<ServiceAccount>::namespaced(sa.clone(), "team")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );

    // system:authenticated: everyone with a valid token.
    cluster_role_binding(&admin, "everyone", "sa-list",
        json!([{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}])).await;
    Api::<ServiceAccount>::namespaced(outsider.clone(), "team")
        .list(&ListParams::default())
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn discovery_is_open_and_other_paths_are_not() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    for path in [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/apps/v1",
        "/version",
        "/openapi/v2",
    ] {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        sa.request_text(req)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let discovery = kube::Discovery::new(sa.clone()).run().await.unwrap();
    assert!(discovery.has_group("apps"));
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let msg = forbidden(sa.request_text(req).await.unwrap_err());
    assert_eq!(
        msg,
        r#"forbidden: User "system:serviceaccount:team:app" cannot get path "/metrics""#
    );
    server.shutdown().await;
}

#[tokio::test]
async fn bad_tokens_get_401() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    namespace(&admin, "team").await;
    service_account(&admin, "team", "app").await;
    let unauthorized = |e: kube::Error| {
        let s = status(e);
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (401, "Unauthorized", "Unauthorized")
        );
    };
    let bogus = with_token(&server, "not-a-token").await;
    unauthorized(
        Api::<ConfigMap>::namespaced(bogus, "team")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );

    // A token dies with its ServiceAccount (a new one of the same name has a new uid).
    let t = token(&admin, "team", "app").await;
    let c = with_token(&server, &t).await;
    let req = http::Request::get("/api").body(Vec::new()).unwrap();
    c.request_text(req).await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team");
    sas.delete("app", &DeleteParams::default()).await.unwrap();
    service_account(&admin, "team", "app").await;
    let req = http::Request::get("/api").body(Vec::new()).unwrap();
    unauthorized(c.request_text(req).await.unwrap_err());

    // A pod-bound token dies with its pod.
    let pod: Pod = create(
        &admin,
        Some("team"),
        json!({"metadata": {"name": "p"}, "spec": {"serviceAccountName": "app", "containers": [{"name": "c", "image": "python:3"}]}}),
    )
    .await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team");
    let request = TokenRequest {
        spec: TokenRequestSpec {
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some("p".into()),
                uid: pod.metadata.uid.clone(),
            }),
            expiration_seconds: Some(3607),
            ..Default::default()
        },
        ..Default::default()
    };
    let tr = sas
        .create_token_request("app", &PostParams::default(), &request)
        .await
        .unwrap();
    let c = with_token(&server, &tr.status.unwrap().token).await;
    let req = http::Request::get("/api").body(Vec::new()).unwrap();
    c.request_text(req).await.unwrap();
    Api::<Pod>::namespaced(admin.clone(), "team")
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    let req = http::Request::get("/api").body(Vec::new()).unwrap();
    unauthorized(c.request_text(req).await.unwrap_err());
    server.shutdown().await;
}

#[tokio::test]
async fn token_request_is_checked() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    namespace(&admin, "team").await;
    service_account(&admin, "team", "app").await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team");
    let s = status(
        sas.create_token_request("nobody", &PostParams::default(), &TokenRequest::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (s.code, s.message.as_str()),
        (404, r#"serviceaccounts "nobody" not found"#)
    );
    let short = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(60),
            ..Default::default()
        },
        ..Default::default()
    };
    let s = status(
        sas.create_token_request("app", &PostParams::default(), &short)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422, "{s:?}");
    assert!(
        s.message
            .contains("may not specify a duration less than 10 minutes"),
        "{}",
        s.message
    );
    // A token bound to a pod that runs as another ServiceAccount is refused.
    create::<Pod>(
        &admin,
        Some("team"),
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "python:3"}]}}),
    )
    .await;
    let bound = TokenRequest {
        spec: TokenRequestSpec {
            bound_object_ref: Some(BoundObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                name: Some("p".into()),
                uid: None,
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let s = status(
        sas.create_token_request("app", &PostParams::default(), &bound)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 400, "{s:?}");
    // ServiceAccounts may not mint tokens unless RBAC lets them.
    let sa = with_token(&server, &token(&admin, "team", "app").await).await;
    let msg = forbidden(
        Api::<ServiceAccount>::namespaced(sa, "team")
            .create_token_request("app", &PostParams::default(), &TokenRequest::default())
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains(r#"cannot create resource "serviceaccounts/token""#),
        "{msg}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn service_account_admission() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    namespace(&admin, "team").await;
    // The default ServiceAccount appears with the namespace, in the built-in namespaces too.
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), "team");
    sas.get("default").await.unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "kube-system")
        .get("default")
        .await
        .unwrap();
    // Deleted, it comes back (the real ServiceAccount controller does this), with a new uid.
    let before = sas.get("default").await.unwrap().metadata.uid;
    sas.delete("default", &DeleteParams::default())
        .await
        .unwrap();
    let after = sas.get("default").await.unwrap().metadata.uid;
    assert_ne!(before, after);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team");
    let p: Pod = create(
        &admin,
        Some("team"),
        json!({"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "python:3"}]}}),
    )
    .await;
    assert_eq!(
        p.spec.unwrap().service_account_name.as_deref(),
        Some("default")
    );
    let missing: Pod = serde_json::from_value(json!({"metadata": {"name": "lost"},
        "spec": {"serviceAccountName": "ghost", "containers": [{"name": "c", "image": "python:3"}]}}))
    .unwrap();
    let msg = forbidden(
        pods.create(&PostParams::default(), &missing)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        msg,
        r#"pods "lost" is forbidden: error looking up service account team/ghost: serviceaccount "ghost" not found"#
    );
    server.shutdown().await;
}

/// A client for the admin kubeconfig that impersonates `user` (and `groups`).
async fn impersonating(server: &RunningServer, token: Option<&str>, user: &str) -> Client {
    let mut config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .unwrap();
    if let Some(t) = token {
        config.auth_info.token = Some(t.to_string().into());
    }
    config.auth_info.impersonate = Some(user.to_string());
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let _sa = sa_client(&server, &admin, "team").await;
    role(
        &admin,
        "team",
        "read-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "app-read-cm",
        "Role",
        "read-cm",
        json!([sa_subject("team", "app")]),
    )
    .await;
    // The admin may act as the ServiceAccount, and then has only its rights.
    let as_app = impersonating(&server, None, "system:serviceaccount:team:app").await;
    Api::<ConfigMap>::namespaced(as_app.clone(), "team")
        .list(&ListParams::default())
        .await
        .unwrap();
    let msg = forbidden(
        Api::<Secret>::namespaced(as_app, "team")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains(r#"User "system:serviceaccount:team:app" cannot list resource "secrets""#),
        "{msg}"
    );
    // A ServiceAccount may not impersonate anyone without the verb.
    service_account(&admin, "team", "other").await;
    let other_token = token(&admin, "team", "other").await;
    let sneaky = impersonating(
        &server,
        Some(&other_token),
        "system:serviceaccount:team:app",
    )
    .await;
    let msg = forbidden(
        Api::<ConfigMap>::namespaced(sneaky, "team")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        msg,
        r#"serviceaccounts "app" is forbidden: User "system:serviceaccount:team:other" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "team""#
    );
    // kubectl --as, when kubectl is installed (Debian's kubernetes-client).
    if std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok()
    {
        let kubectl = |what: &'static str| {
            tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(server.kubeconfig_path())
                .args([
                    "get",
                    what,
                    "-n",
                    "team",
                    "--as",
                    "system:serviceaccount:team:app",
                ])
                .output()
        };
        let ok = kubectl("configmaps").await.unwrap();
        assert!(ok.status.success(), "{ok:?}");
        let refused = kubectl("secrets").await.unwrap();
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(
            err.contains(r#"User "system:serviceaccount:team:app" cannot list resource "secrets""#),
            "{refused:?}"
        );
    }
    let sneaky = impersonating(&server, Some(&other_token), "jane").await;
    let msg = forbidden(
        Api::<ConfigMap>::namespaced(sneaky, "team")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains(r#"cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{msg}"
    );
    server.shutdown().await;
}

async fn review(client: &Client, kind: &str, spec: Value) -> bool {
    let path = format!(
        "/apis/authorization.k8s.io/v1/{}",
        kind.to_lowercase() + "s"
    );
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec});
    let req = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let answer: Value = serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    answer["status"]["allowed"].as_bool().unwrap()
}

#[tokio::test]
async fn access_reviews_answer_like_the_authorizer() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let sa = sa_client(&server, &admin, "team").await;
    role(
        &admin,
        "team",
        "read-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    role_binding(
        &admin,
        "team",
        "app-read-cm",
        "Role",
        "read-cm",
        json!([sa_subject("team", "app")]),
    )
    .await;
    let attrs = |res: &str| json!({"resourceAttributes": {"namespace": "team", "verb": "list", "resource": res}});
    // Any authenticated user may ask about itself.
    assert!(review(&sa, "SelfSubjectAccessReview", attrs("configmaps")).await);
    assert!(!review(&sa, "SelfSubjectAccessReview", attrs("secrets")).await);
    // Asking about someone else needs RBAC; the admin may.
    let mut spec = attrs("configmaps");
    spec["user"] = json!("system:serviceaccount:team:app");
    assert!(review(&admin, "SubjectAccessReview", spec.clone()).await);
    spec["resourceAttributes"]["namespace"] = json!("default");
    assert!(!review(&admin, "SubjectAccessReview", spec.clone()).await);
    let req = http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"spec": spec})).unwrap())
        .unwrap();
    forbidden(sa.request_text(req).await.unwrap_err());
    // Discovery lists them, so kubectl finds them.
    let d = kube::Discovery::new(admin.clone()).run().await.unwrap();
    assert!(d.has_group("authorization.k8s.io"));

    // kube-rs impersonation plus a SelfSubjectAccessReview: what `kubectl auth can-i --as`
    // does (kubectl itself sends the review as protobuf, which devcluster does not read yet).
    let as_app = impersonating(&server, None, "system:serviceaccount:team:app").await;
    assert!(review(&as_app, "SelfSubjectAccessReview", attrs("configmaps")).await);
    assert!(!review(&as_app, "SelfSubjectAccessReview", attrs("secrets")).await);
    server.shutdown().await;
}

#[tokio::test]
async fn requests_without_a_token_are_anonymous() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let mut config = kube::Config::from_custom_kubeconfig(server.kubeconfig(), &Default::default())
        .await
        .unwrap();
    config.auth_info = Default::default();
    config.default_retry = false;
    let anon = Client::try_from(config).unwrap();
    // system:public-info-viewer: /version and the health checks.
    let req = http::Request::get("/version").body(Vec::new()).unwrap();
    anon.request_text(req).await.unwrap();
    // Discovery is for authenticated users only.
    let req = http::Request::get("/api").body(Vec::new()).unwrap();
    let msg = forbidden(anon.request_text(req).await.unwrap_err());
    assert_eq!(
        msg,
        r#"forbidden: User "system:anonymous" cannot get path "/api""#
    );
    let cms: Api<ConfigMap> = Api::namespaced(anon.clone(), "default");
    let msg = forbidden(cms.list(&ListParams::default()).await.unwrap_err());
    assert!(
        msg.contains(r#"User "system:anonymous" cannot list resource "configmaps""#),
        "{msg}"
    );
    // RBAC can grant to system:unauthenticated, as on a real server.
    role(
        &admin,
        "default",
        "anon-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    role_binding(&admin, "default", "anon-cm", "Role", "anon-cm",
        json!([{"kind": "Group", "name": "system:unauthenticated", "apiGroup": "rbac.authorization.k8s.io"}])).await;
    cms.list(&ListParams::default()).await.unwrap();
    server.shutdown().await;
}

/// Creates `v` as `K` with `client`, returning the API error.
async fn create_err<K>(client: &Client, ns: Option<&str>, mut v: Value) -> kube::Error
where
    K: Resource<DynamicType = ()>,
{
    let ar = ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    v["apiVersion"] = json!(ar.api_version);
    v["kind"] = json!(ar.kind);
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj)
        .await
        .expect_err("the write must be refused")
}

#[tokio::test]
async fn roles_and_bindings_grant_only_what_their_writer_holds() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let app = sa_client(&server, &admin, "esc").await;
    // The ServiceAccount may manage Roles and RoleBindings, and read ConfigMaps.
    role(
        &admin,
        "esc",
        "rbac-writer",
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "get"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}
        ]),
    )
    .await;
    role_binding(
        &admin,
        "esc",
        "rbac-writer",
        "Role",
        "rbac-writer",
        json!([sa_subject("esc", "app")]),
    )
    .await;

    // A Role within what it holds is fine; one granting Secrets is an escalation.
    role(
        &app,
        "esc",
        "cm-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
    )
    .await;
    let msg = forbidden(
        create_err::<Role>(
            &app,
            Some("esc"),
            json!({"metadata": {"name": "secret-reader"},
                   "rules": [{"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "delete"]}]}),
        )
        .await,
    );
    assert_eq!(
        msg,
        "roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: user \"system:serviceaccount:esc:app\" \
         (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:esc\" \"system:authenticated\"]) \
         is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}\n\
         {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"delete\"]}"
    );

    // Binding a role it holds all of is fine; binding `edit` (which it does not hold) is not.
    role_binding(
        &app,
        "esc",
        "self",
        "Role",
        "cm-reader",
        json!([sa_subject("esc", "app")]),
    )
    .await;
    let msg = forbidden(
        create_err::<RoleBinding>(
            &app,
            Some("esc"),
            json!({"metadata": {"name": "grab-edit"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                   "subjects": [sa_subject("esc", "app")]}),
        )
        .await,
    );
    assert!(
        msg.starts_with("rolebindings.rbac.authorization.k8s.io \"grab-edit\" is forbidden: user \"system:serviceaccount:esc:app\"")
            && msg.contains("{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\" \"list\" \"watch\" \"create\""),
        "{msg}"
    );
    // An aggregated ClusterRole needs escalate even with nothing in it.
    cluster_role_binding(
        &admin,
        "esc-cr-writer",
        "esc-cr-writer",
        json!([sa_subject("esc", "app")]),
    )
    .await;
    cluster_role(
        &admin,
        "esc-cr-writer",
        json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}]),
    )
    .await;
    let msg = forbidden(
        create_err::<ClusterRole>(
            &app,
            None,
            json!({"metadata": {"name": "agg"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}),
        )
        .await,
    );
    assert!(
        msg.ends_with("must have cluster-admin privileges to use the aggregationRule"),
        "{msg}"
    );

    // With `bind` on `edit`, and `escalate` on roles, the same writes pass.
    role(
        &admin,
        "esc",
        "binder",
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["edit"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}
        ]),
    )
    .await;
    role_binding(
        &admin,
        "esc",
        "binder",
        "Role",
        "binder",
        json!([sa_subject("esc", "app")]),
    )
    .await;
    role_binding(
        &app,
        "esc",
        "grab-edit",
        "ClusterRole",
        "edit",
        json!([sa_subject("esc", "app")]),
    )
    .await;
    role(
        &app,
        "esc",
        "secret-reader",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
    )
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn default_cluster_roles_view_edit_admin() {
    let server = start(ServerConfig::default()).await.unwrap();
    let admin = admin(&server).await;
    let app = sa_client(&server, &admin, "roles").await;
    config_map(&admin, "roles", "settings").await;
    let cms: Api<ConfigMap> = Api::namespaced(app.clone(), "roles");
    let secrets: Api<Secret> = Api::namespaced(app.clone(), "roles");
    forbidden(cms.get("settings").await.unwrap_err());

    // view: read most things, but not Secrets, and write nothing.
    role_binding(
        &admin,
        "roles",
        "v",
        "ClusterRole",
        "view",
        json!([sa_subject("roles", "app")]),
    )
    .await;
    cms.get("settings").await.unwrap();
    forbidden(secrets.list(&ListParams::default()).await.unwrap_err());
    forbidden(
        create_err::<ConfigMap>(&app, Some("roles"), json!({"metadata": {"name": "new"}})).await,
    );

    // edit (aggregates view): writes workloads and Secrets, not RBAC.
    role_binding(
        &admin,
        "roles",
        "e",
        "ClusterRole",
        "edit",
        json!([sa_subject("roles", "app")]),
    )
    .await;
    config_map(&app, "roles", "new").await;
    secrets.list(&ListParams::default()).await.unwrap();
    forbidden(
        create_err::<Role>(
            &app,
            Some("roles"),
            json!({"metadata": {"name": "r"}, "rules": []}),
        )
        .await,
    );

    // admin (aggregates edit): Roles and RoleBindings too, within what it holds.
    role_binding(
        &admin,
        "roles",
        "a",
        "ClusterRole",
        "admin",
        json!([sa_subject("roles", "app")]),
    )
    .await;
    role(
        &app,
        "roles",
        "r",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
    )
    .await;
    // ...and a chart can extend them by label.
    create::<ClusterRole>(
        &admin,
        None,
        json!({"metadata": {"name": "functions-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
               "rules": [{"apiGroups": ["kubeless.io"], "resources": ["functions"], "verbs": ["get", "list", "watch"]}]}),
    )
    .await;
    let clusterroles: Api<ClusterRole> = Api::all(admin.clone());
    for name in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:aggregate-to-view",
    ] {
        clusterroles.get(name).await.unwrap();
    }
    server.shutdown().await;
}
