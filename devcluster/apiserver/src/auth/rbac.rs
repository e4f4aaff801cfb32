//! The RBAC authorizer: Roles, ClusterRoles (with aggregation), RoleBindings and
//! ClusterRoleBindings, evaluated as the real server's RBAC authorizer does.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Attributes, User};
use crate::errors::ApiError;
use crate::registry::GroupResource;
use crate::selectors::LabelSelector;
use crate::store::{State, Store};

/// What `system:public-info-viewer` lets everyone GET, anonymous users included.
fn public_info_path(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    )
}

/// The paths every authenticated user may GET (the real `system:discovery` ClusterRole).
fn discovery_path(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    matches!(
        p,
        "/api" | "/apis" | "/version" | "/openapi" | "/healthz" | "/livez" | "/readyz"
    ) || [
        "/api/",
        "/apis/",
        "/openapi/",
        "/healthz/",
        "/livez/",
        "/readyz/",
    ]
    .iter()
    .any(|pre| path.starts_with(pre))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Binding {
    #[serde(default)]
    subjects: Option<Vec<Subject>>,
    role_ref: RoleRef,
}

#[derive(Deserialize, Default)]
struct RoleRules {
    #[serde(default)]
    rules: Option<Vec<PolicyRule>>,
}

/// The rules every binding that names one user grants in one namespace ("" for cluster-scoped
/// requests), with the errors of bindings whose role is missing.
pub(super) struct Grants {
    pub(super) rules: Vec<PolicyRule>,
    pub(super) errors: Vec<String>,
}

/// The authorizer: RBAC plus the superuser group and discovery. It keeps the rules it worked
/// out per user and namespace until an RBAC object changes.
#[derive(Default)]
pub struct Authorizer {
    cache: Mutex<GrantCache>,
}

#[derive(Default)]
struct GrantCache {
    generation: u64,
    grants: HashMap<(String, String), Arc<Grants>>,
}

/// Cached (user, namespace) pairs kept at most; the cache starts over beyond this.
const MAX_CACHED: usize = 10_000;

impl Authorizer {
    /// Allows or refuses a request.
    pub fn authorize(&self, store: &Store, user: &User, a: &Attributes) -> Result<(), ApiError> {
        if user.is_superuser() {
            return Ok(());
        }
        if !a.resource_request
            && a.verb == "get"
            && (public_info_path(&a.path) || (user.is_authenticated() && discovery_path(&a.path)))
        {
            return Ok(());
        }
        // What `system:basic-user` grants every authenticated user: asking about itself.
        if user.is_authenticated()
            && a.resource_request
            && a.verb == "create"
            && a.group == "authorization.k8s.io"
            && matches!(
                a.resource.as_str(),
                "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            )
        {
            return Ok(());
        }
        let ns = if a.resource_request {
            a.namespace.as_str()
        } else {
            ""
        };
        let grants = self.grants(store, user, ns);
        if grants.rules.iter().any(|r| rule_allows(r, a)) {
            return Ok(());
        }
        Err(forbidden(user, a, &grants.errors))
    }

    fn grants(&self, store: &Store, user: &User, ns: &str) -> Arc<Grants> {
        // Read the generation first: what is computed below is at least that new.
        let generation = store.rbac_generation();
        let key = (user.name.clone(), ns.to_string());
        {
            let cache = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if cache.generation == generation
                && let Some(g) = cache.grants.get(&key)
            {
                return g.clone();
            }
        }
        let grants = Arc::new(store.read(|st| compute_grants(st, user, ns)));
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.generation != generation || cache.grants.len() >= MAX_CACHED {
            cache.grants.clear();
            cache.generation = generation;
        }
        cache.grants.insert(key, grants.clone());
        grants
    }
}

/// Collects the rules of every binding that names the user: ClusterRoleBindings, and the
/// RoleBindings of `ns` when it is set.
pub(super) fn compute_grants(store: &State, user: &User, ns: &str) -> Grants {
    let rbac = "rbac.authorization.k8s.io";
    let crb = GroupResource::new(rbac, "clusterrolebindings");
    let rb = GroupResource::new(rbac, "rolebindings");
    let mut bindings: Vec<(String, Arc<Value>)> = store
        .all(&crb, None)
        .into_iter()
        .map(|b| (String::new(), b))
        .collect();
    if !ns.is_empty() {
        bindings.extend(
            store
                .all(&rb, Some(ns))
                .into_iter()
                .map(|b| (ns.to_string(), b)),
        );
    }
    let mut grants = Grants {
        rules: Vec::new(),
        errors: Vec::new(),
    };
    for (binding_ns, b) in bindings {
        let Ok(binding) = Binding::deserialize(&*b) else {
            continue;
        };
        if !binding
            .subjects
            .iter()
            .flatten()
            .any(|s| applies_to(s, user, &binding_ns))
        {
            continue;
        }
        match role_rules(store, &binding.role_ref, &binding_ns) {
            Ok(rules) => grants.rules.extend(rules),
            Err(e) => grants.errors.push(e),
        }
    }
    grants
}

fn applies_to(s: &Subject, user: &User, binding_ns: &str) -> bool {
    match s.kind.as_str() {
        "User" => s.name == user.name,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}

/// The rules a binding grants: a Role in the binding's namespace, or a ClusterRole with the
/// rules of the ClusterRoles its aggregationRule selects.
pub(super) fn role_rules(store: &State, r: &RoleRef, ns: &str) -> Result<Vec<PolicyRule>, String> {
    let rbac = "rbac.authorization.k8s.io";
    match r.kind.as_str() {
        "Role" if !ns.is_empty() => {
            let role = store
                .get(&GroupResource::new(rbac, "roles"), ns, &r.name)
                .ok_or_else(|| format!("role.{rbac} {:?} not found", r.name))?;
            Ok(rules_of(&role))
        }
        "ClusterRole" => {
            let gr = GroupResource::new(rbac, "clusterroles");
            let role = store
                .get(&gr, "", &r.name)
                .ok_or_else(|| format!("clusterrole.{rbac} {:?} not found", r.name))?;
            let mut out = Vec::new();
            let mut seen = HashSet::new();
            aggregate(store, &gr, &role, &mut out, &mut seen);
            Ok(out)
        }
        other => Err(format!("unsupported roleRef kind {other:?}")),
    }
}

pub(super) fn rules_of(role: &Value) -> Vec<PolicyRule> {
    RoleRules::deserialize(role)
        .ok()
        .and_then(|r| r.rules)
        .unwrap_or_default()
}

/// Collects a ClusterRole's rules, or for an aggregated one the rules of every ClusterRole its
/// selectors match (what the real clusterrole-aggregation controller writes into `rules`).
fn aggregate(
    store: &State,
    gr: &GroupResource,
    role: &Value,
    out: &mut Vec<PolicyRule>,
    seen: &mut HashSet<String>,
) {
    let name = role
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !seen.insert(name) {
        return;
    }
    let Some(selectors) = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
    else {
        out.extend(rules_of(role));
        return;
    };
    let selectors: Vec<LabelSelector> = selectors
        .iter()
        .map(LabelSelector::from_label_selector)
        .collect();
    for other in store.all(gr, None) {
        if selectors.iter().any(|s| s.matches(&other)) {
            aggregate(store, gr, &other, out, seen);
        }
    }
}

pub(super) fn rule_allows(r: &PolicyRule, a: &Attributes) -> bool {
    let verb = r.verbs.iter().any(|v| v == "*" || *v == a.verb);
    if !verb {
        return false;
    }
    if !a.resource_request {
        return r.non_resource_urls.iter().flatten().any(|u| {
            u == "*"
                || *u == a.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| a.path.starts_with(prefix))
        });
    }
    let group = r
        .api_groups
        .iter()
        .flatten()
        .any(|g| g == "*" || *g == a.group);
    let combined = a.combined_resource();
    let resource = r.resources.iter().flatten().any(|res| {
        res == "*"
            || *res == combined
            || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource.as_str()))
    });
    let names = r.resource_names.as_ref().is_none_or(Vec::is_empty)
        || r.resource_names
            .iter()
            .flatten()
            .any(|n| !a.name.is_empty() && *n == a.name);
    group && resource && names
}

/// The real server's 403: `pods "x" is forbidden: User "..." cannot get resource "pods/log" in
/// API group "" in the namespace "ns"`.
fn forbidden(user: &User, a: &Attributes, errors: &[String]) -> ApiError {
    let mut msg = if !a.resource_request {
        format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path)
    } else if a.namespace.is_empty() {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} at the cluster scope",
            user.name,
            a.verb,
            a.combined_resource(),
            a.group
        )
    } else {
        format!(
            "User {:?} cannot {} resource {:?} in API group {:?} in the namespace {:?}",
            user.name,
            a.verb,
            a.combined_resource(),
            a.group,
            a.namespace
        )
    };
    if !errors.is_empty() {
        msg = format!("{msg}: RBAC: [{}]", errors.join(", "));
    }
    let gr = GroupResource::new(&a.group, &a.resource);
    let message = if a.resource.is_empty() {
        format!("forbidden: {msg}")
    } else if a.name.is_empty() {
        format!("{} is forbidden: {msg}", gr.qualified())
    } else {
        format!("{} {:?} is forbidden: {msg}", gr.qualified(), a.name)
    };
    let mut e = ApiError::forbidden(message);
    // metav1.StatusDetails leaves out empty fields.
    let mut details = serde_json::Map::new();
    for (k, v) in [
        ("name", &a.name),
        ("group", &a.group),
        ("kind", &a.resource),
    ] {
        if !v.is_empty() {
            details.insert(k.into(), json!(v));
        }
    }
    e.details = Some(Value::Object(details));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_matching() {
        let rule: PolicyRule = serde_json::from_value(json!({
            "apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get"], "resourceNames": ["a"]
        }))
        .unwrap_or_default();
        let attr = |verb: &str, res: &str, sub: &str, name: &str| Attributes {
            verb: verb.into(),
            resource_request: true,
            resource: res.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Default::default()
        };
        assert!(rule_allows(&rule, &attr("get", "pods", "", "a")));
        assert!(!rule_allows(&rule, &attr("get", "pods", "", "b")));
        assert!(!rule_allows(&rule, &attr("list", "pods", "", "")));
        assert!(rule_allows(&rule, &attr("get", "services", "status", "a")));
        assert!(!rule_allows(&rule, &attr("get", "pods", "log", "a")));
    }
}
