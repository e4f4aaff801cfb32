//! The ClusterRoles a fresh real cluster has for users: `cluster-admin`, and the user-facing
//! `admin`, `edit` and `view`, which aggregate the `system:aggregate-to-*` roles (and each
//! other: `view` is part of `edit`, `edit` of `admin`), so a chart can extend them by label.
//! The rules list the kinds and subresources Kubernetes' own defaults grant.

use serde_json::{Value, json};

const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];
const READ: [&str; 3] = ["get", "list", "watch"];

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules})
}

fn aggregated(name: &str, labels: Value, selects: &str) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{selects}"): "true"}}
    ]});
    role
}

/// The default ClusterRoles, as objects to create when they are missing.
pub fn cluster_roles() -> Vec<Value> {
    let view_rules = vec![
        rule(
            "",
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
                "namespaces",
            ],
            &READ,
        ),
        rule(
            "apps",
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            &READ,
        ),
        rule(
            "autoscaling",
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            &READ,
        ),
        rule(
            "batch",
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            &READ,
        ),
        rule(
            "policy",
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            &READ,
        ),
        rule(
            "networking.k8s.io",
            &["ingresses", "ingresses/status", "networkpolicies"],
            &READ,
        ),
        rule("discovery.k8s.io", &["endpointslices"], &READ),
    ];
    let edit_rules = vec![
        rule(
            "",
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            &READ,
        ),
        rule("", &["serviceaccounts"], &["impersonate"]),
        rule(
            "",
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
            &WRITE,
        ),
        rule("", &["pods/eviction"], &["create"]),
        rule(
            "",
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            &WRITE,
        ),
        rule("", &["serviceaccounts/token"], &["create"]),
        rule(
            "apps",
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            &WRITE,
        ),
        rule("autoscaling", &["horizontalpodautoscalers"], &WRITE),
        rule("batch", &["cronjobs", "jobs"], &WRITE),
        rule(
            "networking.k8s.io",
            &["ingresses", "networkpolicies"],
            &WRITE,
        ),
        rule("policy", &["poddisruptionbudgets"], &WRITE),
    ];
    let admin_rules = vec![
        rule(
            "authorization.k8s.io",
            &["localsubjectaccessreviews"],
            &["create"],
        ),
        rule(
            "rbac.authorization.k8s.io",
            &["rolebindings", "roles"],
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
        ),
    ];
    let to = |what: &str| json!({format!("rbac.authorization.k8s.io/aggregate-to-{what}"): "true"});
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![
                json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
                json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
            ],
        ),
        aggregated("admin", json!({}), "admin"),
        aggregated("edit", to("admin"), "edit"),
        aggregated("view", to("edit"), "view"),
        cluster_role("system:aggregate-to-admin", to("admin"), admin_rules),
        cluster_role("system:aggregate-to-edit", to("edit"), edit_rules),
        cluster_role("system:aggregate-to-view", to("view"), view_rules),
    ]
}
