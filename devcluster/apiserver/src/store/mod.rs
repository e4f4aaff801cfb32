//! The object store: every object as JSON keyed by group/resource and
//! namespace/name, one global resourceVersion counter, a bounded history of
//! changes for watch resume, a broadcast channel to live watchers, and the
//! garbage collector (finalizers, ownerReference cascade, namespace cleanup).

mod admission;
mod defaults;
mod delete;
mod gc;
mod names;
mod watch;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use base64::Engine as _;
use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::errors::ApiError;
use crate::fieldmanager::FieldSet;
use crate::persist::Persist;
use crate::registry::{GroupResource, Registry, ResourceDef};
use crate::selectors::{FieldSelector, LabelSelector};

pub(crate) use names::is_dns_label;
pub use watch::{EventType, Subscription, TooOld, WatchEvent};

/// How many changes are kept for watchers resuming from an older resourceVersion.
pub const HISTORY_LEN: usize = 100_000;

const BROADCAST_CAPACITY: usize = 16_384;

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

    pub fn parse_rv(s: &str) -> Option<u64> {
        parse_rv(s)
    }
}
