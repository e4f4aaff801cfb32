//! The garbage collector: cascade deletion of dependents whose owners are gone, foreground
//! deletion, and the cleanup of terminating namespaces.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::delete::{finalizers, is_deleting, owner_uids, set_finalizers};
use super::{DeleteOpts, EventType, ObjKey, State, Store, Sub, Track, meta, ns_gr};
use crate::registry::GroupResource;

impl Store {
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
