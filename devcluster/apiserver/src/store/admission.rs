//! What a write goes through before it is stored: type and name checks, schema validation
//! and pruning, ServiceAccount and PodSecurity admission, and the defaults of create.

use serde_json::{Value, json};

use super::delete::is_deleting;
use super::names::name_error;
use super::{State, Store, meta, now_rfc3339, ns_gr};
use crate::errors::ApiError;
use crate::registry::{GroupResource, Registry, ResourceDef, Validator};

impl Store {
    /// Checks the object against its type (k8s-openapi) or CRD schema (pruning unknown fields).
    /// `old` is the stored object on updates (for CEL transition rules).
    pub(super) fn validate(
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

    pub(super) fn check_namespace(
        &self,
        st: &State,
        def: &ResourceDef,
        ns: &str,
    ) -> Result<(), ApiError> {
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
    pub(super) fn normalize(
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
        if body_version == crate::convert::EVENTS_V1 && crate::convert::is_core_event(&def.gr) {
            // Read in its own type before it becomes a core Event: what events.k8s.io/v1 does
            // not have (e.g. `message`) is unknown here, not a core field.
            crate::reqctx::take_unknown();
            let bad = crate::registry::shape::<k8s_openapi::api::events::v1::Event>(obj);
            let unknown = crate::reqctx::take_unknown();
            // The real message names the version alone: `Event in version "v1" ...`.
            crate::reqctx::unknown_fields(&def.kind, "v1", &unknown)?;
            unknown.iter().for_each(|p| remove_field(obj, p));
            if let Some(e) = bad {
                let name = meta(obj, "name").unwrap_or_default();
                return Err(ApiError::invalid_fields(
                    &def.kind,
                    "events.k8s.io",
                    &name,
                    &[e],
                ));
            }
        }
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

    /// ServiceAccount admission: `spec.serviceAccountName` defaults to `default`, and a Pod
    /// naming a ServiceAccount that does not exist is refused with 403, as on the real server.
    pub(super) fn admit_service_account(
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
    pub(super) fn admit_pod_security(
        st: &State,
        ns: &str,
        name: &str,
        pod: &Value,
    ) -> Result<(), ApiError> {
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
    pub(super) fn pod_security_warnings(
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
    pub(super) fn defaults_on_create(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
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
                let qos = crate::builtin::pod_qos_class(obj);
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
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

pub(super) fn crd_status(crd: &Value) -> Value {
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
