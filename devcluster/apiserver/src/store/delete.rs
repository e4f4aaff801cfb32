//! Delete and deletecollection: preconditions, finalizers, propagation (background,
//! foreground, orphan), and what goes with a removed object.

use serde_json::{Value, json};

use super::{
    DeleteOpts, EventType, ObjKey, Propagation, State, Store, crd_gr, meta, now_rfc3339, ns_gr,
};
use crate::errors::ApiError;
use crate::registry::{GroupResource, Registry, ResourceDef};
use crate::selectors::{FieldSelector, LabelSelector};

impl Store {
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

    pub(super) fn delete_locked(
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
    pub(super) fn after_removal(&self, st: &mut State, def: &ResourceDef, removed: &Value) {
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
}

pub(super) fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn set_finalizers(obj: &mut Value, f: &[String]) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if f.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), json!(f));
        }
    }
}

pub(super) fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub(super) fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A namespace stays while its spec.finalizers are set, even with no metadata finalizers.
pub(super) fn namespace_holds(def: &ResourceDef, obj: &Value) -> bool {
    def.gr == ns_gr()
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}
