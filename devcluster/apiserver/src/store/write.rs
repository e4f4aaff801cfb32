//! Create, update (PUT) and patch (merge, strategic, JSON, server-side apply), with
//! `managedFields` recorded for each write.

use rand::Rng as _;
use serde_json::{Value, json};

use super::admission::crd_status;
use super::delete::{finalizers, is_deleting, namespace_holds};
use super::{EventType, ObjKey, State, Store, Sub, Track, meta, now_rfc3339, ns_gr};
use crate::errors::ApiError;
use crate::fieldmanager;
use crate::patch::{self, PatchKind};
use crate::registry::{Registry, ResourceDef};

impl Store {
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

    pub(super) fn create_locked(
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
    pub(super) fn update_locked(
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
            // The one status field a Pod's status writes may not change (ValidatePodStatusUpdate).
            if def.gr.group.is_empty() && def.gr.resource == "pods" {
                let qos = |o: &Value| o.pointer("/status/qosClass").cloned();
                if let (Some(old), new) = (qos(cur), qos(&obj))
                    && new.as_ref() != Some(&old)
                {
                    let shown = new.map(|v| v.to_string()).unwrap_or_else(|| "\"\"".into());
                    return Err(ApiError::invalid(
                        &def.kind,
                        &def.gr.group,
                        &name,
                        &[format!(
                            "status.qosClass: Invalid value: {shown}: field is immutable"
                        )],
                    ));
                }
            }
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

fn writer_force() -> bool {
    crate::reqctx::write_options().is_some_and(|o| o.force)
}
