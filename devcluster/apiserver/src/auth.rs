//! Authentication and RBAC authorization, as the real API server does them.
//!
//! Two kinds of bearer token are accepted: the admin token of the kubeconfig the server writes
//! (a `system:masters` user that may do everything) and ServiceAccount tokens issued through
//! the TokenRequest subresource (`POST .../serviceaccounts/NAME/token`), optionally bound to a
//! Pod. Every other request gets 401. Requests of ServiceAccounts are then authorized by the
//! RBAC rules of the stored Roles, ClusterRoles and their bindings; a denied request gets the
//! real server's 403 Status.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef, Subject};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::errors::ApiError;
use crate::registry::GroupResource;
use crate::selectors::LabelSelector;
use crate::store::Store;

/// The user the admin token authenticates as.
pub const ADMIN_USER: &str = "devcluster-admin";
/// The group whose members may do everything (the real server's superuser group).
pub const MASTERS_GROUP: &str = "system:masters";
/// The `expirationSeconds` the kubelet asks for; the real server extends such pod-bound tokens
/// to a year (`--service-account-extend-token-expiration`, on by default).
pub const KUBELET_TOKEN_SECONDS: i64 = 3607;
const EXTENDED_TOKEN_SECONDS: i64 = 365 * 24 * 3600;
const DEFAULT_TOKEN_SECONDS: i64 = 3600;
const MIN_TOKEN_SECONDS: i64 = 600;
/// Issued tokens kept before a token request prunes those that can no longer authenticate.
const PRUNE_ABOVE: usize = 4096;

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    fn admin() -> Self {
        Self {
            name: ADMIN_USER.to_string(),
            groups: vec![MASTERS_GROUP.into(), "system:authenticated".into()],
        }
    }

    fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    fn is_authenticated(&self) -> bool {
        self.groups.iter().any(|g| g == "system:authenticated")
    }

    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS_GROUP)
    }
}

/// What a ServiceAccount token stands for.
#[derive(Debug, Clone)]
struct IssuedToken {
    namespace: String,
    service_account: String,
    service_account_uid: String,
    /// The Pod the token is bound to (name, uid): the token dies with it.
    pod: Option<(String, String)>,
    expires: DateTime<Utc>,
}

/// The admin token and the ServiceAccount tokens issued so far (in memory: a restart of the
/// server invalidates them, as a new signing key would).
pub struct Authenticator {
    admin_token: String,
    issued: Mutex<HashMap<String, IssuedToken>>,
}

impl Authenticator {
    pub fn new(admin_token: String) -> Self {
        Self {
            admin_token,
            issued: Mutex::new(HashMap::new()),
        }
    }

    /// The user behind an `Authorization` header value, or 401.
    pub fn authenticate(&self, store: &Store, header: Option<&str>) -> Result<User, ApiError> {
        // No bearer token: the anonymous user, as with the real server's default
        // --anonymous-auth (RBAC then decides; a wrong token is 401, not anonymous).
        let Some(token) = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
        else {
            return Ok(User::anonymous());
        };
        if token.is_empty() {
            return Err(ApiError::unauthorized());
        }
        if token == self.admin_token {
            return Ok(User::admin());
        }
        let issued = self
            .issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(token)
            .cloned()
            .ok_or_else(ApiError::unauthorized)?;
        // A token outlives neither its expiry, nor its ServiceAccount, nor the Pod it is bound
        // to; one that can never work again is forgotten.
        let uid_of = |gr: &GroupResource, name: &str| {
            store
                .get(gr, &issued.namespace, name)
                .and_then(|o| o.pointer("/metadata/uid")?.as_str().map(str::to_string))
        };
        let alive = issued.expires >= Utc::now()
            && uid_of(&sa_gr(), &issued.service_account).as_deref()
                == Some(issued.service_account_uid.as_str())
            && issued.pod.as_ref().is_none_or(|(pod, uid)| {
                uid_of(&GroupResource::new("", "pods"), pod).as_deref() == Some(uid.as_str())
            });
        if !alive {
            self.issued
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(token);
            return Err(ApiError::unauthorized());
        }
        Ok(User::service_account(
            &issued.namespace,
            &issued.service_account,
        ))
    }

    /// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: issues a token for the
    /// ServiceAccount, bound to a Pod when `spec.boundObjectRef` names one.
    pub fn token_request(
        &self,
        store: &Store,
        ns: &str,
        name: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let sa = store
            .get(&sa_gr(), ns, name)
            .ok_or_else(|| ApiError::not_found(&sa_gr(), name))?;
        let sa_uid = sa
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let invalid = |field: &str, msg: String| {
            ApiError::invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                &[format!("{field}: {msg}")],
            )
        };
        let requested = match body.pointer("/spec/expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_TOKEN_SECONDS,
            Some(v) => v.as_i64().ok_or_else(|| {
                ApiError::bad_request("spec.expirationSeconds must be an integer")
            })?,
        };
        if requested < MIN_TOKEN_SECONDS {
            return Err(invalid(
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {requested}: may not specify a duration less than 10 minutes"
                ),
            ));
        }
        let mut pod = None;
        if let Some(r) = body
            .pointer("/spec/boundObjectRef")
            .filter(|r| !r.is_null())
        {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
            let obj_name = r.get("name").and_then(Value::as_str).unwrap_or_default();
            if kind != "Pod" {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {kind}: devcluster binds tokens to Pods only"
                )));
            }
            let pods = GroupResource::new("", "pods");
            let p = store
                .get(&pods, ns, obj_name)
                .ok_or_else(|| ApiError::not_found(&pods, obj_name))?;
            let pod_sa = p
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if pod_sa != name {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                )));
            }
            let uid = p
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if let Some(want) = r.get("uid").and_then(Value::as_str)
                && !want.is_empty()
                && want != uid
            {
                return Err(ApiError::conflict_msg(
                    &GroupResource::new("", "Pod"),
                    obj_name,
                    &format!(
                        "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                ));
            }
            pod = Some((obj_name.to_string(), uid));
        }
        let effective = if pod.is_some() && requested == KUBELET_TOKEN_SECONDS {
            EXTENDED_TOKEN_SECONDS
        } else {
            requested
        };
        let now = Utc::now();
        let expires = now + Duration::seconds(effective);
        let token = format!(
            "devcluster-sa.{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let mut issued = self
            .issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Tokens of pods and ServiceAccounts that are gone, never presented again, would
        // otherwise pile up over a long session.
        if issued.len() >= PRUNE_ABOVE {
            issued.retain(|_, t| {
                t.expires >= now
                    && store
                        .get(&sa_gr(), &t.namespace, &t.service_account)
                        .is_some()
                    && t.pod.as_ref().is_none_or(|(pod, _)| {
                        store
                            .get(&GroupResource::new("", "pods"), &t.namespace, pod)
                            .is_some()
                    })
            });
        }
        issued.insert(
            token.clone(),
            IssuedToken {
                namespace: ns.to_string(),
                service_account: name.to_string(),
                service_account_uid: sa_uid,
                pod,
                expires,
            },
        );
        drop(issued);
        let mut spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        spec["expirationSeconds"] = json!(requested);
        if spec.get("audiences").is_none_or(Value::is_null) {
            spec["audiences"] = json!(["https://kubernetes.default.svc"]);
        }
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": (now + Duration::seconds(requested))
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            },
        }))
    }
}

fn sa_gr() -> GroupResource {
    GroupResource::new("", "serviceaccounts")
}

/// What a request asks to do, parsed from its method, path and query as the real server's
/// RequestInfoFactory does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub path: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

impl Attributes {
    pub fn from_request(method: &str, path: &str, query: &HashMap<String, String>) -> Self {
        let mut a = Attributes {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
            ..Default::default()
        };
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return a;
        }
        let mut rest = &parts[1..];
        if parts[0] == "apis" {
            if rest.len() < 3 {
                return a;
            }
            a.group = rest[0].to_string();
            rest = &rest[1..];
        }
        a.resource_request = true;
        a.version = rest[0].to_string();
        rest = &rest[1..];
        let mut via_method = false;
        if matches!(rest.first(), Some(&"watch") | Some(&"proxy")) {
            if rest.len() < 2 {
                return a;
            }
            a.verb = rest[0].to_string();
            rest = &rest[1..];
        } else {
            via_method = true;
            a.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_string();
        }
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            a.namespace = rest[1].to_string();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        if rest.len() >= 3 && a.verb != "proxy" {
            a.subresource = rest[2].to_string();
        }
        if rest.len() >= 2 {
            a.name = rest[1].to_string();
        }
        if let Some(r) = rest.first() {
            a.resource = r.to_string();
        }
        if a.name.is_empty() && a.verb == "get" {
            let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
            a.verb = if watch { "watch" } else { "list" }.to_string();
            // A list or watch of one object by field selector is authorized by its name.
            if let Some(name) = query
                .get("fieldSelector")
                .and_then(|s| exact_name_selector(s))
            {
                a.name = name;
            }
        }
        if via_method && a.name.is_empty() && a.verb == "delete" {
            a.verb = "deletecollection".into();
        }
        a
    }

    /// The resource with its subresource, as rules name it (`pods/log`).
    fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// `metadata.name=X` (or `==`) as the only term of a field selector.
fn exact_name_selector(s: &str) -> Option<String> {
    let terms: Vec<&str> = s.split(',').filter(|t| !t.trim().is_empty()).collect();
    let [term] = terms.as_slice() else {
        return None;
    };
    let (k, v) = term.split_once("==").or_else(|| {
        if term.contains("!=") {
            None
        } else {
            term.split_once('=')
        }
    })?;
    (k.trim() == "metadata.name" && !v.trim().is_empty() && !v.contains('/'))
        .then(|| v.trim().to_string())
}

/// The paths every authenticated user may GET (the real `system:discovery` ClusterRole).
/// What `system:public-info-viewer` lets everyone GET, anonymous users included.
fn public_info_path(path: &str) -> bool {
    matches!(
        path,
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    )
}

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
struct Grants {
    rules: Vec<PolicyRule>,
    errors: Vec<String>,
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
        let grants = Arc::new(compute_grants(store, user, ns));
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
fn compute_grants(store: &Store, user: &User, ns: &str) -> Grants {
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
fn role_rules(store: &Store, r: &RoleRef, ns: &str) -> Result<Vec<PolicyRule>, String> {
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

fn rules_of(role: &Value) -> Vec<PolicyRule> {
    RoleRules::deserialize(role)
        .ok()
        .and_then(|r| r.rules)
        .unwrap_or_default()
}

/// Collects a ClusterRole's rules, or for an aggregated one the rules of every ClusterRole its
/// selectors match (what the real clusterrole-aggregation controller writes into `rules`).
fn aggregate(
    store: &Store,
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

fn rule_allows(r: &PolicyRule, a: &Attributes) -> bool {
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

/// Applies the `Impersonate-User` and `Impersonate-Group` headers: the caller needs the
/// `impersonate` verb on `users` (`serviceaccounts` for a ServiceAccount's name) and on
/// `groups`, as on the real server; the request then runs as the impersonated user.
pub fn impersonate(
    authorizer: &Authorizer,
    store: &Store,
    user: User,
    headers: &http::HeaderMap,
) -> Result<User, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let names = values("Impersonate-User");
    let groups = values("Impersonate-Group");
    let Some(name) = names.first() else {
        if groups.is_empty() {
            return Ok(user);
        }
        return Err(ApiError::bad_request(
            "requested impersonation of groups without impersonating a user",
        ));
    };
    let check = |resource: &str, namespace: &str, obj: &str| {
        authorizer.authorize(
            store,
            &user,
            &Attributes {
                verb: "impersonate".into(),
                resource_request: true,
                resource: resource.into(),
                namespace: namespace.into(),
                name: obj.into(),
                ..Default::default()
            },
        )
    };
    let service_account = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    let mut as_groups = groups.clone();
    match service_account {
        Some((ns, sa)) => {
            check("serviceaccounts", ns, sa)?;
            if groups.is_empty() {
                as_groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => check("users", "", name)?,
    }
    for g in &groups {
        check("groups", "", g)?;
    }
    if !as_groups.iter().any(|g| g == "system:authenticated") {
        as_groups.push("system:authenticated".into());
    }
    Ok(User {
        name: name.clone(),
        groups: as_groups,
    })
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` (about the caller) and
/// `subjectaccessreviews` (about `spec.user` and `spec.groups`): whether the request described
/// by `spec.resourceAttributes` or `spec.nonResourceAttributes` would be allowed.
pub fn access_review(
    authorizer: &Authorizer,
    store: &Store,
    caller: &User,
    kind: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
    let subject = if kind == "SelfSubjectAccessReview" {
        caller.clone()
    } else {
        let name = spec
            .get("user")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let groups: Vec<String> = spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|g| g.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if name.is_empty() && groups.is_empty() {
            return Err(ApiError::invalid(
                kind,
                "authorization.k8s.io",
                "",
                &["spec.user: Invalid value: \"\": at least one of user or group must be specified".into()],
            ));
        }
        User { name, groups }
    };
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let attrs = if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        Attributes {
            verb: text(r, "verb"),
            resource_request: true,
            path: String::new(),
            group: text(r, "group"),
            version: text(r, "version"),
            namespace: text(r, "namespace"),
            resource: text(r, "resource"),
            subresource: text(r, "subresource"),
            name: text(r, "name"),
        }
    } else if let Some(n) = spec.get("nonResourceAttributes").filter(|n| n.is_object()) {
        Attributes {
            verb: text(n, "verb"),
            path: text(n, "path"),
            ..Default::default()
        }
    } else {
        return Err(ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            &["spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified".into()],
        ));
    };
    let allowed = authorizer.authorize(store, &subject, &attrs).is_ok();
    Ok(json!({
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": {"allowed": allowed},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn request_info_like_the_real_server() {
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns1/pods", &q(&[]));
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "ns1", "pods")
        );
        let a = Attributes::from_request(
            "GET",
            "/api/v1/namespaces/ns1/pods",
            &q(&[("watch", "true")]),
        );
        assert_eq!(a.verb, "watch");
        let a = Attributes::from_request("GET", "/api/v1/watch/namespaces/ns1/pods/p", &q(&[]));
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "p"));
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns1/pods/p/log", &q(&[]));
        assert_eq!(
            (a.verb.as_str(), a.combined_resource().as_str()),
            ("get", "pods/log")
        );
        let a = Attributes::from_request(
            "PUT",
            "/apis/apps/v1/namespaces/n/deployments/d/scale",
            &q(&[]),
        );
        assert_eq!(
            (
                a.group.as_str(),
                a.verb.as_str(),
                a.combined_resource().as_str()
            ),
            ("apps", "update", "deployments/scale")
        );
        let a = Attributes::from_request("DELETE", "/api/v1/namespaces/n/configmaps", &q(&[]));
        assert_eq!(a.verb, "deletecollection");
        let a = Attributes::from_request("GET", "/api/v1/namespaces/n", &q(&[]));
        assert_eq!(
            (a.namespace.as_str(), a.resource.as_str(), a.name.as_str()),
            ("n", "namespaces", "n")
        );
        let a = Attributes::from_request("PUT", "/api/v1/namespaces/n/finalize", &q(&[]));
        assert_eq!(a.combined_resource(), "namespaces/finalize");
        let a = Attributes::from_request(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/n/leases",
            &q(&[("fieldSelector", "metadata.name=lock")]),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "lock"));
        let a = Attributes::from_request("GET", "/apis/apps/v1", &q(&[]));
        assert!(!a.resource_request);
        let a = Attributes::from_request(
            "POST",
            "/api/v1/namespaces/n/serviceaccounts/sa/token",
            &q(&[]),
        );
        assert_eq!(
            (a.verb.as_str(), a.combined_resource().as_str()),
            ("create", "serviceaccounts/token")
        );
    }

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
