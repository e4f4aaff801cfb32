//! The object store: every object as JSON keyed by group/resource and
//! namespace/name, one global resourceVersion counter, a bounded history of
//! changes for watch resume, a broadcast channel to live watchers, and the
//! garbage collector (finalizers, ownerReference cascade, namespace cleanup).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use base64::Engine as _;
use chrono::{SecondsFormat, Utc};
use rand::Rng as _;
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::errors::ApiError;
use crate::fieldmanager::{self, FieldSet};
use crate::patch::{self, PatchKind};
use crate::persist::Persist;
use crate::registry::{GroupResource, Registry, ResourceDef, Validator};
use crate::selectors::{FieldSelector, LabelSelector};

/// How many changes are kept for watchers resuming from an older resourceVersion.
pub const HISTORY_LEN: usize = 100_000;
const BROADCAST_CAPACITY: usize = 16_384;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct WatchEvent {
    pub rv: u64,
    pub gr: GroupResource,
    pub namespace: String,
    pub etype: EventType,
    pub obj: Arc<Value>,
    /// The object before this change, so selector watchers see objects leave.
    pub prev: Option<Arc<Value>>,
    /// The object serialized once, shared by every watcher that sends it as is.
    pub encoded: std::sync::OnceLock<bytes::Bytes>,
}

type ObjKey = (String, String);

#[derive(Default)]
pub struct State {
    pub rv: u64,
    pub objects: HashMap<GroupResource, BTreeMap<ObjKey, Arc<Value>>>,
    uids: HashMap<String, (GroupResource, ObjKey)>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Every change with a resourceVersion above this is in `history`.
    history_floor: u64,
}

impl State {
    /// One object.
    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object of a resource, in one namespace or all (no selectors, no paging).
    pub fn all(&self, gr: &GroupResource, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(objs) = self.objects.get(gr) else {
            return Vec::new();
        };
        match ns {
            None => objs.values().cloned().collect(),
            Some(n) => {
                use std::ops::Bound;
                objs.range((
                    Bound::Included((n.to_string(), String::new())),
                    Bound::Unbounded,
                ))
                .take_while(|((ons, _), _)| ons == n)
                .map(|(_, o)| o.clone())
                .collect()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
}

/// How a write is recorded in `managedFields`.
#[derive(Debug, Clone)]
enum Track {
    /// Create, update, and patches other than apply.
    Update,
    /// Server-side apply of a configuration setting these fields.
    Apply { set: FieldSet, force: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// The resourceVersion asked for is older than the history kept (410 Gone).
#[derive(Debug, Clone, Copy)]
pub struct TooOld;

/// Changes to replay, then the live channel.
pub type Subscription = (Vec<Arc<WatchEvent>>, broadcast::Receiver<Arc<WatchEvent>>);

/// One page of a list.
pub struct ListResult {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

pub struct Store {
    state: Mutex<State>,
    registry: RwLock<Registry>,
    events: broadcast::Sender<Arc<WatchEvent>>,
    gc: Notify,
    persist: Option<Persist>,
    /// Bumped on every change to an RBAC object, so the authorizer knows when its cache is stale.
    rbac_generation: std::sync::atomic::AtomicU64,
}

pub fn now_rfc3339() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn meta(obj: &Value, field: &str) -> Option<String> {
    obj.get("metadata")?
        .get(field)?
        .as_str()
        .map(str::to_string)
}

fn parse_rv(s: &str) -> Option<u64> {
    s.parse().ok()
}

/// A DNS-1123 label: at most 63 lower case alphanumerics or '-', alphanumeric at both ends.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain as Kubernetes checks it: at most 253 characters of dot-separated
/// labels (the labels themselves are not limited to 63 here).
fn is_dns_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label_ok)
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter (Service names).
fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// The real server's name rule per kind: DNS-1035 label for Services, DNS-1123 label for
/// Namespaces, DNS-1123 subdomain for everything else (custom resources included).
fn name_error(def: &ResourceDef, name: &str) -> Option<String> {
    let core = def.gr.group.is_empty();
    match def.gr.resource.as_str() {
        "services" if core && !is_dns1035_label(name) => Some(format!(
            "metadata.name: Invalid value: \"{name}\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )),
        "namespaces" if core && !is_dns_label(name) => Some(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )),
        "services" | "namespaces" if core => None,
        // RBAC objects need only be a path segment (`system:aggregate-to-view`).
        "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
            if def.gr.group == "rbac.authorization.k8s.io" =>
        {
            if name == "." || name == ".." {
                Some(format!(
                    "metadata.name: Invalid value: \"{name}\": may not be '{name}'"
                ))
            } else {
                ["/", "%"].into_iter().find(|c| name.contains(c)).map(|c| {
                    format!("metadata.name: Invalid value: \"{name}\": may not contain '{c}'")
                })
            }
        }
        _ if !is_dns_subdomain(name) => Some(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )),
        _ => None,
    }
}

/// Removes the field at `path` (`spec.containers[0].foo`, as unknown fields are named).
fn remove_field(obj: &mut Value, path: &str) {
    let mut steps: Vec<(&str, Vec<usize>)> = Vec::new();
    for part in path.split('.') {
        let (name, rest) = part.split_once('[').unwrap_or((part, ""));
        let indexes = rest
            .split('[')
            .filter_map(|i| i.trim_end_matches(']').parse().ok())
            .collect();
        steps.push((name, indexes));
    }
    let Some(((last, last_idx), parents)) = steps.split_last() else {
        return;
    };
    if !last_idx.is_empty() {
        return;
    }
    let mut node = obj;
    for (name, indexes) in parents {
        let Some(next) = node.get_mut(*name) else {
            return;
        };
        node = next;
        for i in indexes {
            let Some(next) = node.get_mut(*i) else {
                return;
            };
            node = next;
        }
    }
    if let Some(map) = node.as_object_mut() {
        map.remove(*last);
    }
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Whether anything other than metadata and status differs (spec-like content).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let skip = |k: &str| matches!(k, "metadata" | "status" | "apiVersion" | "kind");
    let differs = |a: &serde_json::Map<String, Value>, b: &serde_json::Map<String, Value>| {
        a.iter()
            .filter(|(k, _)| !skip(k))
            .any(|(k, v)| b.get(k) != Some(v))
    };
    differs(o, n) || differs(n, o)
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn set_finalizers(obj: &mut Value, f: &[String]) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if f.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(f));
        }
    }
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn ns_gr() -> GroupResource {
    GroupResource::new("", "namespaces")
}

fn crd_gr() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}

impl Store {
    pub fn new(persist: Option<Persist>) -> Arc<Self> {
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        Arc::new(Self {
            state: Mutex::new(State::default()),
            registry: RwLock::new(Registry::with_builtins()),
            events,
            gc: Notify::new(),
            persist,
            rbac_generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough JSON maps; keep serving.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn registry(&self) -> Registry {
        self.registry
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceDef>> {
        self.registry
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .lookup(group, version, resource)
    }

    pub fn def(&self, gr: &GroupResource) -> Option<Arc<ResourceDef>> {
        self.registry
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(gr)
    }

    /// Changes whenever a Role, ClusterRole or binding is created, changed or deleted.
    pub fn rbac_generation(&self) -> u64 {
        self.rbac_generation
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Loads objects (from the data dir) without emitting events.
    pub fn load(&self, rv: u64, objects: Vec<(GroupResource, Value)>) {
        let mut st = self.lock();
        st.rv = rv;
        st.history_floor = rv;
        for (gr, obj) in objects {
            let ns = meta(&obj, "namespace").unwrap_or_default();
            let Some(name) = meta(&obj, "name") else {
                continue;
            };
            if gr == crd_gr() {
                self.register_crd(&obj);
            }
            if let Some(uid) = meta(&obj, "uid") {
                st.uids
                    .insert(uid, (gr.clone(), (ns.clone(), name.clone())));
            }
            st.objects
                .entry(gr)
                .or_default()
                .insert((ns, name), Arc::new(obj));
        }
    }

    /// Every object with its resource, for snapshots.
    pub fn dump(&self) -> (u64, Vec<(GroupResource, Arc<Value>)>) {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, objs) in &st.objects {
            for o in objs.values() {
                out.push((gr.clone(), o.clone()));
            }
        }
        (st.rv, out)
    }

    /// What a fresh real cluster has: the four namespaces, each with its `default`
    /// ServiceAccount, and the default ClusterRoles (`cluster-admin`, `admin`, `edit`, `view`
    /// and the roles they aggregate).
    pub fn ensure_default_namespaces(&self) {
        let Some(def) = self.def(&ns_gr()) else {
            return;
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if self.get(&ns_gr(), "", name).is_none() {
                let _ = self.create(
                    &def,
                    "v1",
                    "",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
                );
            }
            // Namespaces from a data dir written before ServiceAccounts were made.
            let mut st = self.lock();
            self.ensure_default_service_account(&mut st, name);
        }
        let cr = GroupResource::new("rbac.authorization.k8s.io", "clusterroles");
        let Some(def) = self.def(&cr) else { return };
        for role in crate::auth::bootstrap::cluster_roles() {
            let name = meta(&role, "name").unwrap_or_default();
            if self.get(&cr, "", &name).is_none()
                && let Err(e) = self.create(&def, "v1", "", role)
            {
                tracing::warn!("devcluster: ClusterRole {name}: {}", e.message);
            }
        }
    }

    fn register_crd(&self, crd: &Value) {
        if let Ok(def) = Registry::def_from_crd(crd) {
            let mut reg = self
                .registry
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            reg.defs.insert(def.gr.clone(), Arc::new(def));
        }
    }

    fn unregister_crd(&self, crd: &Value) {
        if let Ok(def) = Registry::def_from_crd(crd) {
            let mut reg = self
                .registry
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if reg.defs.get(&def.gr).is_some_and(|d| d.is_crd) {
                reg.defs.remove(&def.gr);
            }
        }
    }

    /// Records a change: bumps the resourceVersion, stores or removes, keeps history,
    /// tells watchers and the data dir.
    fn commit(
        &self,
        st: &mut State,
        gr: &GroupResource,
        key: ObjKey,
        mut obj: Value,
        etype: EventType,
    ) -> Arc<Value> {
        st.rv += 1;
        let rv = st.rv;
        if gr.group == "rbac.authorization.k8s.io" {
            self.rbac_generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let obj = Arc::new(obj);
        let objs = st.objects.entry(gr.clone()).or_default();
        let prev = if etype == EventType::Deleted {
            objs.remove(&key)
        } else {
            objs.insert(key.clone(), obj.clone())
        };
        if let Some(uid) = meta(&obj, "uid") {
            if etype == EventType::Deleted {
                st.uids.remove(&uid);
            } else {
                st.uids.insert(uid, (gr.clone(), key.clone()));
            }
        }
        let ev = Arc::new(WatchEvent {
            rv,
            gr: gr.clone(),
            namespace: key.0.clone(),
            etype,
            obj: obj.clone(),
            prev,
            encoded: std::sync::OnceLock::new(),
        });
        if st.history.len() >= HISTORY_LEN
            && let Some(old) = st.history.pop_front()
        {
            st.history_floor = old.rv;
        }
        st.history.push_back(ev.clone());
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(ev);
        if let Some(p) = &self.persist {
            p.record(rv, gr, &key, (etype != EventType::Deleted).then_some(&obj));
        }
        if *gr == crd_gr() {
            if etype == EventType::Deleted {
                self.unregister_crd(&obj);
            } else {
                self.register_crd(&obj);
            }
        }
        obj
    }

    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.lock().get(gr, ns, name)
    }

    /// Every object of a resource, in one namespace or all (no selectors, no paging).
    pub fn all(&self, gr: &GroupResource, ns: Option<&str>) -> Vec<Arc<Value>> {
        self.lock().all(gr, ns)
    }

    /// Runs `f` on the current state, under the store's lock (keep it short).
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    /// Lists objects (one namespace or all) matching the selectors, one page at a time.
    pub fn list(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListResult, ApiError> {
        let (start_after, snapshot_rv) = match continue_token {
            Some(t) if !t.is_empty() => {
                let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(t)
                    .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
                let v: Value = serde_json::from_slice(&raw)
                    .map_err(|_| ApiError::bad_request("continue key is not valid"))?;
                let ns = v
                    .get("ns")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let name = v
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                (Some((ns, name)), v.get("rv").and_then(Value::as_u64))
            }
            _ => (None, None),
        };
        let st = self.lock();
        if let Some(rv) = snapshot_rv
            && rv < st.history_floor
        {
            return Err(ApiError::gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        let rv = snapshot_rv.unwrap_or(st.rv);
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0u64;
        if let Some(objs) = st.objects.get(gr) {
            use std::ops::Bound;
            let lower = match &start_after {
                Some(k) => Bound::Excluded(k.clone()),
                None => match ns {
                    Some(n) => Bound::Included((n.to_string(), String::new())),
                    None => Bound::Unbounded,
                },
            };
            for ((ons, oname), obj) in objs.range((lower, Bound::Unbounded)) {
                if let Some(n) = ns
                    && ons != n
                {
                    if ons.as_str() > n {
                        break;
                    }
                    continue;
                }
                if !labels.matches(obj) || !fields.matches(obj) {
                    continue;
                }
                if let Some(l) = limit
                    && l > 0
                    && items.len() >= l
                {
                    if next.is_none() {
                        let last: &Arc<Value> = items.last().unwrap_or(obj);
                        let key = json!({"ns": meta(last, "namespace").unwrap_or_default(), "name": meta(last, "name").unwrap_or_default(), "rv": rv});
                        next = Some(
                            base64::engine::general_purpose::URL_SAFE_NO_PAD
                                .encode(key.to_string()),
                        );
                    }
                    remaining += 1;
                    let _ = (ons, oname);
                    continue;
                }
                items.push(obj.clone());
            }
        }
        Ok(ListResult {
            items,
            resource_version: rv,
            remaining: next.as_ref().map(|_| remaining),
            continue_token: next,
        })
    }

    /// Checks the object against its type (k8s-openapi) or CRD schema (pruning unknown fields).
    /// `old` is the stored object on updates (for CEL transition rules).
    fn validate(
        &self,
        def: &ResourceDef,
        version: &str,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let name = meta(obj, "name").unwrap_or_default();
        if let Some(cause) = name_error(def, &name) {
            return Err(ApiError::invalid(&def.kind, &def.gr.group, &name, &[cause]));
        }
        match &def.validator {
            Validator::Builtin(f) => {
                crate::reqctx::take_unknown();
                let errors = f(obj);
                let unknown = crate::reqctx::take_unknown();
                crate::reqctx::unknown_fields(&def.kind, version, &unknown)?;
                // The real server decodes into its types, so what they lack is not stored.
                unknown.iter().for_each(|p| remove_field(obj, p));
                if errors.is_empty() {
                    Ok(())
                } else {
                    Err(ApiError::invalid_fields(
                        &def.kind,
                        &def.gr.group,
                        &name,
                        &errors,
                    ))
                }
            }
            Validator::Crd(schemas) => {
                let schema = schemas.get(version).cloned().flatten();
                if let Some(s) = schema {
                    let (errors, unknown) = s.validate_and_prune(obj, old);
                    crate::reqctx::unknown_fields(&def.kind, version, &unknown)?;
                    if !errors.is_empty() {
                        return Err(ApiError::invalid_fields(
                            &def.kind,
                            &def.gr.group,
                            &name,
                            &errors,
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    fn check_namespace(&self, st: &State, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
        if !def.namespaced {
            return Ok(());
        }
        match st
            .objects
            .get(&ns_gr())
            .and_then(|m| m.get(&(String::new(), ns.to_string())))
        {
            None => Err(ApiError::not_found(&ns_gr(), ns)),
            Some(n) if is_deleting(n) => Err(ApiError::forbidden(format!(
                "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                def.gr.qualified()
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Fills type, namespace and name; rejects mismatches with the URL.
    fn normalize(
        def: &ResourceDef,
        version: &str,
        ns: &str,
        obj: &mut Value,
        url_name: Option<&str>,
    ) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        let api_version = def.api_version(version);
        if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
            && av != api_version
            && !def.versions.iter().any(|v| def.api_version(v) == av)
        {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({api_version})"
            )));
        }
        if let Some(k) = obj.get("kind").and_then(Value::as_str)
            && k != def.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )));
        }
        // A body may name another served version than the URL: it is read in its own.
        let body_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .map_or(api_version.clone(), str::to_string);
        obj["apiVersion"] = json!(body_version);
        if let Some(stored) = crate::convert::storage_api_version(&def.gr) {
            *obj = crate::convert::convert(&def.gr, obj, stored);
        } else {
            obj["apiVersion"] = json!(api_version);
        }
        obj["kind"] = json!(def.kind);
        if def.gr.group.is_empty() && def.kind == "Secret" {
            fold_string_data(obj);
        }
        crate::builtin::default_pod_template(&def.gr.group, &def.gr.resource, obj);
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let m = &mut obj["metadata"];
        if def.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => m["namespace"] = json!(ns),
            }
        } else if let Some(map) = m.as_object_mut() {
            map.remove("namespace");
        }
        if let Some(n) = url_name {
            match m.get("name").and_then(Value::as_str) {
                Some(b) if !b.is_empty() && b != n => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({b}) does not match the name on the URL ({n})"
                    )));
                }
                _ => m["name"] = json!(n),
            }
        }
        Ok(())
    }

    pub fn create(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        Self::normalize(def, version, ns, &mut obj, None)?;
        let m = &mut obj["metadata"];
        if m.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            match m.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    m["name"] = json!(format!("{prefix}{}", random_suffix()))
                }
                _ => {
                    return Err(ApiError::invalid(
                        &def.kind,
                        &def.gr.group,
                        "",
                        &[
                            "metadata.name: Required value: name or generateName is required"
                                .into(),
                        ],
                    ));
                }
            }
        }
        let mut st = self.lock();
        self.create_locked(&mut st, def, version, ns, obj, Track::Update)
    }

    fn create_locked(
        &self,
        st: &mut State,
        def: &ResourceDef,
        version: &str,
        ns: &str,
        mut obj: Value,
        track: Track,
    ) -> Result<Value, ApiError> {
        let name = meta(&obj, "name").unwrap_or_default();
        self.check_namespace(st, def, ns)?;
        if def.gr.group.is_empty() && def.gr.resource == "pods" {
            Self::admit_service_account(st, ns, &name, &mut obj)?;
            Self::admit_pod_security(st, ns, &name, &obj)?;
        }
        let key = (
            if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.clone(),
        );
        if st
            .objects
            .get(&def.gr)
            .is_some_and(|m| m.contains_key(&key))
        {
            return Err(ApiError::already_exists(&def.gr, &name));
        }
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("resourceVersion");
        }
        self.defaults_on_create(def, &mut obj)?;
        self.validate(def, version, &mut obj, None)?;
        if let Some(user) = crate::reqctx::user() {
            crate::auth::escalation::check(st, &user, &def.gr, ns, &obj, None)?;
        }
        Self::pod_security_warnings(st, def, ns, &obj, None);
        Self::track(def, version, Sub::Main, None, &mut obj, track)?;
        let created = (*self.commit(st, &def.gr, key, obj, EventType::Added)).clone();
        if def.gr == ns_gr() {
            self.ensure_default_service_account(st, &name);
        }
        Ok(created)
    }

    /// The `default` ServiceAccount the real controller-manager creates in every namespace.
    fn ensure_default_service_account(&self, st: &mut State, ns: &str) {
        let gr = GroupResource::new("", "serviceaccounts");
        let exists = st
            .objects
            .get(&gr)
            .is_some_and(|m| m.contains_key(&(ns.to_string(), "default".to_string())));
        if exists {
            return;
        }
        if let Some(def) = self.def(&gr) {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": ns}});
            if let Err(e) = self.create_locked(st, &def, "v1", ns, sa, Track::Update) {
                tracing::warn!("devcluster: default ServiceAccount in {ns}: {}", e.message);
            }
        }
    }

    /// ServiceAccount admission: `spec.serviceAccountName` defaults to `default`, and a Pod
    /// naming a ServiceAccount that does not exist is refused with 403, as on the real server.
    fn admit_service_account(
        st: &State,
        ns: &str,
        name: &str,
        pod: &mut Value,
    ) -> Result<(), ApiError> {
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let sa = match spec.get("serviceAccountName").and_then(Value::as_str) {
            Some(s) if !s.is_empty() => s.to_string(),
            _ => match spec.get("serviceAccount").and_then(Value::as_str) {
                Some(s) if !s.is_empty() => s.to_string(),
                _ => "default".to_string(),
            },
        };
        spec.insert("serviceAccountName".into(), json!(sa));
        spec.insert("serviceAccount".into(), json!(sa));
        let exists = st
            .objects
            .get(&GroupResource::new("", "serviceaccounts"))
            .is_some_and(|m| m.contains_key(&(ns.to_string(), sa.clone())));
        if exists {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "pods {name:?} is forbidden: error looking up service account {ns}/{sa}: serviceaccount {sa:?} not found"
        )))
    }

    /// PodSecurity admission in enforce mode: a Pod that breaks its namespace's enforced level
    /// is refused with 403, as the real admission plugin does.
    fn admit_pod_security(st: &State, ns: &str, name: &str, pod: &Value) -> Result<(), ApiError> {
        let Some(namespace) = Self::namespace_of(st, ns) else {
            return Ok(());
        };
        let Some(level) = crate::podsecurity::enforced_level(namespace) else {
            return Ok(());
        };
        let violations = crate::podsecurity::violations(level, pod);
        if violations.is_empty() {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "pods {name:?} is forbidden: violates PodSecurity {:?}: {}",
            crate::podsecurity::policy_name(namespace, "enforce", level),
            violations.join(", ")
        )))
    }

    fn namespace_of<'a>(st: &'a State, ns: &str) -> Option<&'a Value> {
        st.objects
            .get(&ns_gr())
            .and_then(|m| m.get(&(String::new(), ns.to_string())))
            .map(|v| &**v)
    }

    /// PodSecurity's `warn` mode (and its checks of workload objects' pod templates), and the
    /// warnings for a namespace whose enforce level is raised over the pods it holds: added to
    /// the request's answer as `Warning` headers.
    fn pod_security_warnings(
        st: &State,
        def: &ResourceDef,
        ns: &str,
        obj: &Value,
        old: Option<&Value>,
    ) {
        let warnings = if def.gr == ns_gr() {
            let Some(old) = old else { return };
            let name = meta(obj, "name").unwrap_or_default();
            let pods = st
                .objects
                .get(&GroupResource::new("", "pods"))
                .into_iter()
                .flat_map(|m| m.iter())
                .filter(|((pod_ns, _), _)| *pod_ns == name)
                .map(|(_, pod)| &**pod);
            crate::podsecurity::namespace_warnings(old, obj, pods)
        } else {
            // A Pod update changes nothing PodSecurity checks (the pod spec is immutable).
            if old.is_some() && def.gr.resource == "pods" {
                return;
            }
            let Some(namespace) = Self::namespace_of(st, ns) else {
                return;
            };
            crate::podsecurity::write_warnings(namespace, &def.gr.group, &def.gr.resource, obj)
        };
        warnings.into_iter().for_each(crate::reqctx::warn);
    }

    /// What the real server's create strategies set: fresh status, namespace finalizer,
    /// CRD acceptance.
    fn defaults_on_create(&self, def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
        // The node strategy alone lets a create set the status (the kubelet registers
        // its node with capacity and conditions in one request).
        let node = def.gr.group.is_empty() && def.gr.resource == "nodes";
        if def.status
            && !node
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        match (def.gr.group.as_str(), def.gr.resource.as_str()) {
            ("", "namespaces") => {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
                obj["status"] = json!({"phase": "Active"});
            }
            // SetDefaults_Secret: an empty type is Opaque.
            ("", "secrets")
                if obj
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty() =>
            {
                obj["type"] = json!("Opaque");
            }
            ("", "pods") => {
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
            ("", "services") => {
                obj["status"] = json!({"loadBalancer": {}});
                if obj.pointer("/spec/type").is_none()
                    && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
                {
                    spec.insert("type".into(), json!("ClusterIP"));
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let crd_def = Registry::def_from_crd(obj).map_err(|e| {
                    ApiError::invalid(
                        "CustomResourceDefinition",
                        "apiextensions.k8s.io",
                        &meta(obj, "name").unwrap_or_default(),
                        &[e],
                    )
                })?;
                let want = crd_def.gr.qualified();
                let name = meta(obj, "name").unwrap_or_default();
                if name != want {
                    return Err(ApiError::invalid(
                        "CustomResourceDefinition",
                        "apiextensions.k8s.io",
                        &name,
                        &[format!(
                            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                        )],
                    ));
                }
                if let Some(existing) = self.def(&crd_def.gr)
                    && !existing.is_crd
                {
                    return Err(ApiError::invalid("CustomResourceDefinition", "apiextensions.k8s.io", &name, &["spec.group: Invalid value: the group and plural are served by a built-in type".into()]));
                }
                obj["status"] = crd_status(obj);
            }
            _ => {}
        }
        Ok(())
    }

    /// PUT on an object or its status.
    pub fn update(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: &str,
        name: &str,
        mut obj: Value,
        sub: Sub,
    ) -> Result<Value, ApiError> {
        Self::normalize(def, version, ns, &mut obj, Some(name))?;
        let mut st = self.lock();
        let key = (
            if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let cur = st.objects.get(&def.gr).and_then(|m| m.get(&key)).cloned();
        let Some(cur) = cur else {
            return Err(ApiError::not_found(&def.gr, name));
        };
        if let Some(rv) = meta(&obj, "resourceVersion")
            && !rv.is_empty()
            && Some(rv) != meta(&cur, "resourceVersion")
        {
            return Err(ApiError::conflict(&def.gr, name));
        }
        self.update_locked(&mut st, def, version, key, &cur, obj, sub, Track::Update)
    }

    /// Applies an update to `cur` (already read under the lock) and commits it.
    #[allow(clippy::too_many_arguments)]
    fn update_locked(
        &self,
        st: &mut State,
        def: &ResourceDef,
        version: &str,
        key: ObjKey,
        cur: &Value,
        mut obj: Value,
        sub: Sub,
        track: Track,
    ) -> Result<Value, ApiError> {
        let name = key.1.clone();
        if sub == Sub::Status {
            // Only status changes through /status; everything else stays.
            let mut merged = cur.clone();
            match obj.get("status") {
                Some(s) => merged["status"] = s.clone(),
                None => {
                    if let Some(m) = merged.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            obj = merged;
        } else {
            if def.status {
                match cur.get("status") {
                    Some(s) => obj["status"] = s.clone(),
                    None => {
                        if let Some(m) = obj.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            let cm = cur.get("metadata").cloned().unwrap_or_default();
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                for f in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    match cm.get(f) {
                        Some(v) => m.insert(f.into(), v.clone()),
                        None => m.remove(f),
                    };
                }
                if let Some(g) = cm.get("generateName") {
                    m.entry("generateName").or_insert(g.clone());
                }
            }
            if def.gr == ns_gr() {
                // Namespace spec.finalizers change only through /finalize.
                if let Some(spec) = cur.get("spec") {
                    obj["spec"] = spec.clone();
                }
            }
            if spec_changed(cur, &obj) {
                let g = cur
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                obj["metadata"]["generation"] = json!(g + 1);
            }
        }
        self.validate(def, version, &mut obj, Some(cur))?;
        if sub == Sub::Main {
            if let Some(user) = crate::reqctx::user() {
                crate::auth::escalation::check(st, &user, &def.gr, &key.0, &obj, Some(cur))?;
            }
            Self::pod_security_warnings(st, def, &key.0, &obj, Some(cur));
        }
        if *def.gr.resource == *"customresourcedefinitions"
            && def.gr.group == "apiextensions.k8s.io"
        {
            Registry::def_from_crd(&obj)
                .map_err(|e| ApiError::invalid(&def.kind, &def.gr.group, &name, &[e]))?;
            if sub == Sub::Main {
                obj["status"] = crd_status(&obj);
            }
        }
        Self::track(def, version, sub, Some(cur), &mut obj, track)?;
        if is_deleting(&obj) && finalizers(&obj).is_empty() && !namespace_holds(def, &obj) {
            let removed = self.commit(st, &def.gr, key, obj, EventType::Deleted);
            self.after_removal(st, def, &removed);
            return Ok((*removed).clone());
        }
        // Nothing changed: the real server does not bump the resourceVersion.
        let mut cmp = obj.clone();
        if let Some(m) = cmp.get_mut("metadata").and_then(Value::as_object_mut) {
            m.insert(
                "resourceVersion".into(),
                json!(meta(cur, "resourceVersion")),
            );
        }
        if cmp == *cur {
            return Ok(cur.clone());
        }
        Ok((*self.commit(st, &def.gr, key, obj, EventType::Modified)).clone())
    }

    /// PATCH on an object or its status. Returns the object and whether it was created (apply).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        def: &ResourceDef,
        version: &str,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &Value,
        sub: Sub,
    ) -> Result<(Value, bool), ApiError> {
        let mut st = self.lock();
        let key = (
            if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let cur = st.objects.get(&def.gr).and_then(|m| m.get(&key)).cloned();
        let config = (kind == PatchKind::Apply).then(|| patch::apply_config(body));
        let Some(cur) = cur else {
            if let Some(config) = config
                && sub == Sub::Main
            {
                let ks = crate::openapi::field_schema(def, version);
                let writer = Self::writer(def, version, sub);
                let (mut obj, set) =
                    fieldmanager::apply_merge(ks.root(), def.status, None, &config, &writer);
                Self::normalize(def, version, ns, &mut obj, Some(name))?;
                let force = writer_force();
                return self
                    .create_locked(&mut st, def, version, ns, obj, Track::Apply { set, force })
                    .map(|o| (o, true));
            }
            return Err(ApiError::not_found(&def.gr, name));
        };
        // The patch applies to the object as the requested version shows it.
        let mut obj = if crate::convert::storage_api_version(&def.gr).is_some() {
            crate::convert::convert(&def.gr, &cur, &def.api_version(version))
        } else {
            (*cur).clone()
        };
        let mut track = Track::Update;
        match kind {
            PatchKind::Merge => patch::merge_patch(&mut obj, body),
            PatchKind::Strategic => patch::strategic_merge(&mut obj, body),
            PatchKind::Json => patch::json_patch(&mut obj, body).map_err(|e| {
                ApiError::invalid(
                    &def.kind,
                    &def.gr.group,
                    name,
                    &[format!(
                        "the server rejected our request due to an error in our request: {e}"
                    )],
                )
            })?,
            PatchKind::Apply => {
                if let Some(rv) = body
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    && Some(rv.to_string()) != meta(&cur, "resourceVersion")
                {
                    return Err(ApiError::conflict(&def.gr, name));
                }
                let ks = crate::openapi::field_schema(def, version);
                let writer = Self::writer(def, version, sub);
                let config = config.unwrap_or_default();
                let (merged, set) =
                    fieldmanager::apply_merge(ks.root(), def.status, Some(&obj), &config, &writer);
                obj = merged;
                track = Track::Apply {
                    set,
                    force: writer_force(),
                };
            }
        }
        if kind != PatchKind::Apply
            && let Some(rv) = meta(&obj, "resourceVersion")
            && Some(&rv) != meta(&cur, "resourceVersion").as_ref()
        {
            return Err(ApiError::conflict(&def.gr, name));
        }
        Self::normalize(def, version, ns, &mut obj, Some(name))?;
        self.update_locked(&mut st, def, version, key, &cur, obj, sub, track)
            .map(|o| (o, false))
    }

    /// Who the current request writes for (the server itself outside a request).
    fn writer(def: &ResourceDef, version: &str, sub: Sub) -> fieldmanager::Writer {
        let options = crate::reqctx::write_options();
        let subresource = match sub {
            Sub::Status => "status",
            Sub::Main if options.as_ref().is_some_and(|o| o.subresource == "scale") => "scale",
            Sub::Main => "",
        };
        let manager = options.map_or_else(|| "kube-apiserver".to_string(), |o| o.field_manager);
        fieldmanager::Writer {
            manager,
            subresource,
            api_version: def.api_version(version),
            time: now_rfc3339(),
        }
    }

    /// Records the write in `obj`'s managed fields (`old` is None on create); an apply that
    /// changes fields others own fails here with the real 409.
    fn track(
        def: &ResourceDef,
        version: &str,
        sub: Sub,
        old: Option<&Value>,
        obj: &mut Value,
        track: Track,
    ) -> Result<(), ApiError> {
        // Objects are stored in one version; their shape is that version's.
        let stored = crate::convert::storage_api_version(&def.gr)
            .and_then(|av| av.rsplit('/').next().map(str::to_string))
            .unwrap_or_else(|| version.to_string());
        let ks = crate::openapi::field_schema(def, &stored);
        let writer = Self::writer(def, version, sub);
        match track {
            Track::Update => {
                fieldmanager::record_update(ks.root(), def.status, old, obj, &writer);
                Ok(())
            }
            Track::Apply { set, force } => {
                fieldmanager::record_apply(ks.root(), def.status, old, obj, set, force, &writer)
                    .map_err(|c| ApiError::apply_conflict(&c))
            }
        }
    }

    pub fn delete(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let mut st = self.lock();
        let out = self.delete_locked(&mut st, def, ns, name, opts);
        drop(st);
        self.gc.notify_one();
        out
    }

    fn delete_locked(
        &self,
        st: &mut State,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let key = (
            if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let Some(cur) = st.objects.get(&def.gr).and_then(|m| m.get(&key)).cloned() else {
            return Err(ApiError::not_found(&def.gr, name));
        };
        if let Some(uid) = &opts.precondition_uid
            && Some(uid) != meta(&cur, "uid").as_ref()
        {
            return Err(ApiError::conflict_msg(
                &def.gr,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta(&cur, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && Some(rv) != meta(&cur, "resourceVersion").as_ref()
        {
            return Err(ApiError::conflict_msg(
                &def.gr,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta(&cur, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let mut obj = (*cur).clone();
        let propagation = opts.propagation.unwrap_or(Propagation::Background);
        if propagation == Propagation::Orphan
            && let Some(uid) = meta(&cur, "uid")
        {
            self.orphan_dependents(st, &uid);
        }
        if is_deleting(&cur) {
            if propagation == Propagation::Foreground
                && !finalizers(&cur).iter().any(|f| f == "foregroundDeletion")
            {
                let mut f = finalizers(&obj);
                f.push("foregroundDeletion".into());
                set_finalizers(&mut obj, &f);
                return Ok((*self.commit(st, &def.gr, key, obj, EventType::Modified)).clone());
            }
            return Ok((*cur).clone());
        }
        let now = now_rfc3339();
        if def.gr == ns_gr() {
            obj["metadata"]["deletionTimestamp"] = json!(now);
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            obj["status"] = json!({"phase": "Terminating"});
            return Ok((*self.commit(st, &def.gr, key, obj, EventType::Modified)).clone());
        }
        let mut f = finalizers(&obj);
        if propagation == Propagation::Foreground {
            f.push("foregroundDeletion".into());
            set_finalizers(&mut obj, &f);
        }
        if !f.is_empty() {
            obj["metadata"]["deletionTimestamp"] = json!(now);
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return Ok((*self.commit(st, &def.gr, key, obj, EventType::Modified)).clone());
        }
        let removed = self.commit(st, &def.gr, key, obj, EventType::Deleted);
        self.after_removal(st, def, &removed);
        Ok((*removed).clone())
    }

    /// Deleting a CRD deletes every object it served.
    fn after_removal(&self, st: &mut State, def: &ResourceDef, removed: &Value) {
        // The real ServiceAccount controller puts a deleted `default` back, unless its
        // namespace is going away.
        if def.gr == GroupResource::new("", "serviceaccounts")
            && meta(removed, "name").as_deref() == Some("default")
            && let Some(ns) = meta(removed, "namespace")
            && st
                .objects
                .get(&ns_gr())
                .and_then(|m| m.get(&(String::new(), ns.clone())))
                .is_some_and(|n| !is_deleting(n))
        {
            self.ensure_default_service_account(st, &ns);
        }
        if def.gr == crd_gr()
            && let Ok(crd_def) = Registry::def_from_crd(removed)
        {
            let keys: Vec<ObjKey> = st
                .objects
                .get(&crd_def.gr)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for key in keys {
                if let Some(o) = st
                    .objects
                    .get(&crd_def.gr)
                    .and_then(|m| m.get(&key))
                    .cloned()
                {
                    self.commit(st, &crd_def.gr, key, (*o).clone(), EventType::Deleted);
                }
            }
        }
        self.gc.notify_one();
    }

    fn orphan_dependents(&self, st: &mut State, uid: &str) {
        let mut todo = Vec::new();
        for (gr, objs) in &st.objects {
            for (key, o) in objs {
                if owner_uids(o).iter().any(|u| u == uid) {
                    todo.push((gr.clone(), key.clone(), o.clone()));
                }
            }
        }
        for (gr, key, o) in todo {
            let mut obj = (*o).clone();
            if let Some(refs) = obj
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                if refs.is_empty()
                    && let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut)
                {
                    m.remove("ownerReferences");
                }
            }
            self.commit(st, &gr, key, obj, EventType::Modified);
        }
    }

    /// Deletes every object of a kind in a namespace matching the selectors.
    pub fn delete_collection(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        opts: &DeleteOpts,
    ) -> Result<Vec<Value>, ApiError> {
        let list = self.list(&def.gr, ns, labels, fields, None, None)?;
        let mut out = Vec::new();
        let mut st = self.lock();
        for o in list.items {
            let ons = meta(&o, "namespace").unwrap_or_default();
            let name = meta(&o, "name").unwrap_or_default();
            if let Ok(v) = self.delete_locked(&mut st, def, &ons, &name, opts) {
                out.push(v);
            }
        }
        drop(st);
        self.gc.notify_one();
        Ok(out)
    }

    /// Subscribes to changes after `from_rv`; returns the changes already in history.
    /// Err(TooOld) when `from_rv` is older than the history kept (410 Gone).
    pub fn watch_from(&self, gr: &GroupResource, from_rv: u64) -> Result<Subscription, TooOld> {
        let st = self.lock();
        let rx = self.events.subscribe();
        let replay = Self::history_since(&st, gr, from_rv)?;
        Ok((replay, rx))
    }

    /// Changes after `from_rv` still in history (used after a lagging receiver).
    pub fn replay_since(
        &self,
        gr: &GroupResource,
        from_rv: u64,
    ) -> Result<Vec<Arc<WatchEvent>>, TooOld> {
        let st = self.lock();
        Self::history_since(&st, gr, from_rv)
    }

    fn history_since(
        st: &State,
        gr: &GroupResource,
        from_rv: u64,
    ) -> Result<Vec<Arc<WatchEvent>>, TooOld> {
        if from_rv < st.history_floor {
            return Err(TooOld);
        }
        let start = st.history.partition_point(|e| e.rv <= from_rv);
        Ok(st
            .history
            .range(start..)
            .filter(|e| e.gr == *gr)
            .cloned()
            .collect())
    }

    /// Current objects plus a subscription starting right after them.
    pub fn snapshot_and_watch(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<WatchEvent>>) {
        let st = self.lock();
        let rx = self.events.subscribe();
        let items = st
            .objects
            .get(gr)
            .map(|m| {
                m.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|x| x == n))
                    .map(|(_, o)| o.clone())
                    .collect()
            })
            .unwrap_or_default();
        (items, st.rv, rx)
    }

    pub fn parse_rv(s: &str) -> Option<u64> {
        parse_rv(s)
    }

    /// Runs the garbage collector until shut down: namespace cleanup, cascade
    /// deletion of dependents whose owners are gone, foreground deletion.
    pub async fn gc_loop(self: Arc<Self>) {
        loop {
            self.gc.notified().await;
            for _ in 0..20 {
                if !self.gc_pass() {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    }

    /// One pass of the collector; returns whether it changed anything.
    pub fn gc_pass(&self) -> bool {
        let reg = self.registry();
        let mut st = self.lock();
        let mut dependents: HashMap<String, Vec<(GroupResource, ObjKey, bool)>> = HashMap::new();
        let mut orphans = Vec::new();
        let mut foreground = Vec::new();
        let mut per_ns: HashMap<String, Vec<(GroupResource, ObjKey, bool)>> = HashMap::new();
        let terminating: Vec<String> = st
            .objects
            .get(&ns_gr())
            .map(|m| {
                m.values()
                    .filter(|o| is_deleting(o))
                    .filter_map(|o| meta(o, "name"))
                    .collect()
            })
            .unwrap_or_default();
        for (gr, objs) in &st.objects {
            for (key, o) in objs {
                let deleting = is_deleting(o);
                let owners = owner_uids(o);
                if !owners.is_empty() {
                    if owners.iter().all(|u| !st.uids.contains_key(u)) {
                        if !deleting {
                            orphans.push((gr.clone(), key.clone()));
                        }
                    } else {
                        for u in owners {
                            dependents.entry(u).or_default().push((
                                gr.clone(),
                                key.clone(),
                                deleting,
                            ));
                        }
                    }
                }
                if deleting && finalizers(o).iter().any(|f| f == "foregroundDeletion") {
                    foreground.push((gr.clone(), key.clone(), meta(o, "uid").unwrap_or_default()));
                }
                if !key.0.is_empty() && terminating.contains(&key.0) && *gr != ns_gr() {
                    per_ns.entry(key.0.clone()).or_default().push((
                        gr.clone(),
                        key.clone(),
                        deleting,
                    ));
                }
            }
        }
        let mut changed = false;
        let background = DeleteOpts::default();
        let delete = |st: &mut State, gr: &GroupResource, key: &ObjKey| {
            if let Some(def) = reg.get(gr) {
                let _ = self.delete_locked(st, &def, &key.0, &key.1, &background);
            }
        };
        for (gr, key) in orphans {
            delete(&mut st, &gr, &key);
            changed = true;
        }
        for (gr, key, uid) in foreground {
            let deps = dependents.get(&uid).cloned().unwrap_or_default();
            if deps.is_empty() {
                if let Some(o) = st.objects.get(&gr).and_then(|m| m.get(&key)).cloned() {
                    let mut obj = (*o).clone();
                    let f: Vec<String> = finalizers(&obj)
                        .into_iter()
                        .filter(|f| f != "foregroundDeletion")
                        .collect();
                    set_finalizers(&mut obj, &f);
                    if let Some(def) = reg.get(&gr) {
                        let _ = self.update_locked(
                            &mut st,
                            &def,
                            def.preferred_version(),
                            key,
                            &o,
                            obj,
                            Sub::Main,
                            Track::Update,
                        );
                    }
                    changed = true;
                }
            } else {
                for (dgr, dkey, deleting) in deps {
                    if !deleting {
                        delete(&mut st, &dgr, &dkey);
                        changed = true;
                    }
                }
            }
        }
        for ns in terminating {
            let contents = per_ns.remove(&ns).unwrap_or_default();
            if contents.is_empty() {
                let key = (String::new(), ns.clone());
                if let Some(o) = st.objects.get(&ns_gr()).and_then(|m| m.get(&key)).cloned() {
                    let mut obj = (*o).clone();
                    obj["spec"] = json!({});
                    if finalizers(&obj).is_empty() {
                        self.commit(&mut st, &ns_gr(), key, obj, EventType::Deleted);
                    } else {
                        self.commit(&mut st, &ns_gr(), key, obj, EventType::Modified);
                    }
                    changed = true;
                }
            } else {
                for (gr, key, deleting) in contents {
                    if !deleting {
                        delete(&mut st, &gr, &key);
                        changed = true;
                    }
                }
            }
        }
        changed
    }
}

fn writer_force() -> bool {
    crate::reqctx::write_options().is_some_and(|o| o.force)
}

/// A namespace stays while its spec.finalizers are set, even with no metadata finalizers.
fn namespace_holds(def: &ResourceDef, obj: &Value) -> bool {
    def.gr == ns_gr()
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

fn crd_status(crd: &Value) -> Value {
    let now = now_rfc3339();
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
        "storedVersions": stored,
    })
}

/// `stringData` is write-only, as on the real server: its entries are base64-encoded into `data`
/// (winning over the same key there) and the field is dropped, so readers only ever see `data`.
fn fold_string_data(obj: &mut Value) {
    use base64::Engine as _;
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = map.remove("stringData") else {
        return;
    };
    if !map.get("data").is_some_and(Value::is_object) {
        map.insert("data".into(), json!({}));
    }
    if let Some(Value::Object(data)) = map.get_mut("data") {
        for (key, value) in strings {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            data.insert(
                key,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

#[cfg(test)]
mod string_data_tests {
    use super::*;

    #[test]
    fn string_data_becomes_base64_data() {
        let mut secret = json!({
            "kind": "Secret",
            "data": {"kept": "a2VwdA==", "both": "b2xk"},
            "stringData": {"both": "new", "plain": "hello"}
        });
        fold_string_data(&mut secret);
        assert_eq!(
            secret,
            json!({"kind": "Secret", "data": {"kept": "a2VwdA==", "both": "bmV3", "plain": "aGVsbG8="}})
        );
    }
}
