//! The resource types the server knows: built-in kinds (validated by their
//! k8s-openapi types) and CustomResourceDefinitions registered at run time.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::schema::Schema;

/// Group and plural resource name: the storage identity of a kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    /// `resource.group` (or `resource` for the core group), as the real server prints it.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// Where a kind's scale subresource reads and writes its numbers.
#[derive(Clone, Debug)]
pub struct ScaleSpec {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// A column of `kubectl get` table output.
#[derive(Clone, Debug)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i64,
    pub description: String,
}

/// Checks a built-in object: its shape (the k8s-openapi type) and then its field values, as
/// the real server's validation does; returns the field errors.
pub type BuiltinValidator = fn(&Value) -> Vec<kubeless_api::validate::FieldError>;

#[derive(Clone)]
pub enum Validator {
    Builtin(BuiltinValidator),
    /// Structural schema per version (None: accept anything).
    Crd(BTreeMap<String, Option<Arc<Schema>>>),
}

#[derive(Clone)]
pub struct ResourceDef {
    pub gr: GroupResource,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    pub kind: String,
    pub list_kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
    pub scale: Option<ScaleSpec>,
    pub validator: Validator,
    /// Printer columns for CRDs per version; built-ins use fixed columns in table.rs.
    pub columns: BTreeMap<String, Vec<PrinterColumn>>,
    pub is_crd: bool,
}

impl ResourceDef {
    /// The apiVersion of `version` (which is a whole `group/version` when the resource is
    /// served under another group too, see [`crate::convert::served_by`]).
    pub fn api_version(&self, version: &str) -> String {
        if version.contains('/') || self.gr.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.gr.group, version)
        }
    }
    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }
}

/// Decodes `v` as `T`; the fields `T` does not have are noted for the request
/// ([`crate::reqctx::note_unknown`]), to be warned about or refused as the client asked.
pub(crate) fn shape<T: DeserializeOwned>(v: &Value) -> Option<kubeless_api::validate::FieldError> {
    serde_ignored::deserialize(v, |path| crate::reqctx::note_unknown(field_path(&path)))
        .map(|_: T| ())
        .err()
        .map(|e| kubeless_api::validate::FieldError {
            field: "<nil>".into(),
            kind: kubeless_api::validate::ErrorType::TypeInvalid,
            detail: format!("Invalid value: \"object\": {e}"),
        })
}

/// A skipped field's path as the real server prints it: `spec.template.spec.containers[0].foo`.
fn field_path(path: &serde_ignored::Path) -> String {
    match path {
        serde_ignored::Path::Root => String::new(),
        serde_ignored::Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        serde_ignored::Path::Map { parent, key } => {
            let head = field_path(parent);
            if head.is_empty() {
                key.clone()
            } else {
                format!("{head}.{key}")
            }
        }
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => field_path(parent),
    }
}

/// The shape of `T`, then `values` on a well-formed object.
fn checked<T: DeserializeOwned>(
    v: &Value,
    values: fn(&Value) -> Vec<kubeless_api::validate::FieldError>,
) -> Vec<kubeless_api::validate::FieldError> {
    match shape::<T>(v) {
        Some(e) => vec![e],
        None => values(v),
    }
}

fn check<T: DeserializeOwned>(v: &Value) -> Vec<kubeless_api::validate::FieldError> {
    checked::<T>(v, crate::builtin::metadata_only)
}

struct B {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    scale: bool,
    validator: BuiltinValidator,
}

fn builtins() -> Vec<B> {
    use k8s_openapi::api as a;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    vec![
        B {
            group: "",
            version: "v1",
            resource: "namespaces",
            kind: "Namespace",
            namespaced: false,
            short: &["ns"],
            status: true,
            scale: false,
            validator: check::<a::core::v1::Namespace>,
        },
        // devcluster's one node, which the pod runner registers (`kubectl top node`
        // reads its allocatable resources).
        B {
            group: "",
            version: "v1",
            resource: "nodes",
            kind: "Node",
            namespaced: false,
            short: &["no"],
            status: true,
            scale: false,
            validator: check::<a::core::v1::Node>,
        },
        B {
            group: "",
            version: "v1",
            resource: "configmaps",
            kind: "ConfigMap",
            namespaced: true,
            short: &["cm"],
            status: false,
            scale: false,
            validator: |v| checked::<a::core::v1::ConfigMap>(v, crate::builtin::config_data),
        },
        B {
            group: "",
            version: "v1",
            resource: "secrets",
            kind: "Secret",
            namespaced: true,
            short: &[],
            status: false,
            scale: false,
            validator: |v| checked::<a::core::v1::Secret>(v, crate::builtin::config_data),
        },
        B {
            group: "",
            version: "v1",
            resource: "serviceaccounts",
            kind: "ServiceAccount",
            namespaced: true,
            short: &["sa"],
            status: false,
            scale: false,
            validator: check::<a::core::v1::ServiceAccount>,
        },
        B {
            group: "",
            version: "v1",
            resource: "services",
            kind: "Service",
            namespaced: true,
            short: &["svc"],
            status: true,
            scale: false,
            validator: |v| checked::<a::core::v1::Service>(v, crate::builtin::service),
        },
        B {
            group: "",
            version: "v1",
            resource: "endpoints",
            kind: "Endpoints",
            namespaced: true,
            short: &["ep"],
            status: false,
            scale: false,
            validator: check::<a::core::v1::Endpoints>,
        },
        B {
            group: "",
            version: "v1",
            resource: "pods",
            kind: "Pod",
            namespaced: true,
            short: &["po"],
            status: true,
            scale: false,
            validator: |v| checked::<a::core::v1::Pod>(v, crate::builtin::pod),
        },
        B {
            group: "",
            version: "v1",
            resource: "events",
            kind: "Event",
            namespaced: true,
            short: &["ev"],
            status: false,
            scale: false,
            validator: check::<a::core::v1::Event>,
        },
        B {
            group: "apps",
            version: "v1",
            resource: "deployments",
            kind: "Deployment",
            namespaced: true,
            short: &["deploy"],
            status: true,
            scale: true,
            validator: |v| checked::<a::apps::v1::Deployment>(v, crate::builtin::deployment),
        },
        B {
            group: "batch",
            version: "v1",
            resource: "jobs",
            kind: "Job",
            namespaced: true,
            short: &[],
            status: true,
            scale: false,
            validator: |v| checked::<a::batch::v1::Job>(v, crate::builtin::job),
        },
        B {
            group: "batch",
            version: "v1",
            resource: "cronjobs",
            kind: "CronJob",
            namespaced: true,
            short: &["cj"],
            status: true,
            scale: false,
            validator: |v| checked::<a::batch::v1::CronJob>(v, crate::builtin::cronjob),
        },
        B {
            group: "networking.k8s.io",
            version: "v1",
            resource: "ingresses",
            kind: "Ingress",
            namespaced: true,
            short: &["ing"],
            status: true,
            scale: false,
            validator: check::<a::networking::v1::Ingress>,
        },
        B {
            group: "autoscaling",
            version: "v2",
            resource: "horizontalpodautoscalers",
            kind: "HorizontalPodAutoscaler",
            namespaced: true,
            short: &["hpa"],
            status: true,
            scale: false,
            validator: |v| {
                checked::<a::autoscaling::v2::HorizontalPodAutoscaler>(v, crate::builtin::hpa)
            },
        },
        B {
            group: "coordination.k8s.io",
            version: "v1",
            resource: "leases",
            kind: "Lease",
            namespaced: true,
            short: &[],
            status: false,
            scale: false,
            validator: check::<a::coordination::v1::Lease>,
        },
        B {
            group: "events.k8s.io",
            version: "v1",
            resource: "events",
            kind: "Event",
            namespaced: true,
            short: &["ev"],
            status: false,
            scale: false,
            validator: check::<a::events::v1::Event>,
        },
        B {
            group: "discovery.k8s.io",
            version: "v1",
            resource: "endpointslices",
            kind: "EndpointSlice",
            namespaced: true,
            short: &[],
            status: false,
            scale: false,
            validator: check::<a::discovery::v1::EndpointSlice>,
        },
        B {
            group: "apiextensions.k8s.io",
            version: "v1",
            resource: "customresourcedefinitions",
            kind: "CustomResourceDefinition",
            namespaced: false,
            short: &["crd", "crds"],
            status: true,
            scale: false,
            validator: check::<ext::CustomResourceDefinition>,
        },
        B {
            group: "rbac.authorization.k8s.io",
            version: "v1",
            resource: "roles",
            kind: "Role",
            namespaced: true,
            short: &[],
            status: false,
            scale: false,
            validator: check::<a::rbac::v1::Role>,
        },
        B {
            group: "rbac.authorization.k8s.io",
            version: "v1",
            resource: "rolebindings",
            kind: "RoleBinding",
            namespaced: true,
            short: &[],
            status: false,
            scale: false,
            validator: check::<a::rbac::v1::RoleBinding>,
        },
        B {
            group: "rbac.authorization.k8s.io",
            version: "v1",
            resource: "clusterroles",
            kind: "ClusterRole",
            namespaced: false,
            short: &[],
            status: false,
            scale: false,
            validator: check::<a::rbac::v1::ClusterRole>,
        },
        B {
            group: "rbac.authorization.k8s.io",
            version: "v1",
            resource: "clusterrolebindings",
            kind: "ClusterRoleBinding",
            namespaced: false,
            short: &[],
            status: false,
            scale: false,
            validator: check::<a::rbac::v1::ClusterRoleBinding>,
        },
    ]
}

/// All resource types currently served.
#[derive(Clone, Default)]
pub struct Registry {
    pub defs: BTreeMap<GroupResource, Arc<ResourceDef>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut defs = BTreeMap::new();
        for b in builtins() {
            let gr = GroupResource::new(b.group, b.resource);
            let singular = b.kind.to_ascii_lowercase();
            let def = ResourceDef {
                gr: gr.clone(),
                // HPAs are stored once (v2) and served as v1 too (src/convert.rs).
                versions: if b.resource == "horizontalpodautoscalers" {
                    vec![b.version.to_string(), "v1".to_string()]
                } else {
                    vec![b.version.to_string()]
                },
                kind: b.kind.to_string(),
                list_kind: format!("{}List", b.kind),
                singular,
                namespaced: b.namespaced,
                short_names: b.short.iter().map(|s| (*s).to_string()).collect(),
                // kubectl's `get all` expands the "all" category.
                categories: if matches!(
                    b.resource,
                    "pods"
                        | "services"
                        | "deployments"
                        | "jobs"
                        | "cronjobs"
                        | "horizontalpodautoscalers"
                ) {
                    vec!["all".to_string()]
                } else {
                    Vec::new()
                },
                status: b.status,
                scale: b.scale.then(|| ScaleSpec {
                    spec_replicas_path: ".spec.replicas".into(),
                    status_replicas_path: ".status.replicas".into(),
                    label_selector_path: Some(".spec.selector".into()),
                }),
                validator: Validator::Builtin(b.validator),
                columns: BTreeMap::new(),
                is_crd: false,
            };
            defs.insert(gr, Arc::new(def));
        }
        Self { defs }
    }

    /// The definition serving `group/version/resource`, if that version is served.
    /// The resource serving `group/version/resource`: events.k8s.io/v1 events are served by
    /// the core events (with the version `events.k8s.io/v1`).
    pub fn lookup(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceDef>> {
        if let Some(gr) = crate::convert::served_by(group, version, resource) {
            return self.defs.get(&gr).cloned();
        }
        let def = self.defs.get(&GroupResource::new(group, resource))?;
        def.versions
            .iter()
            .any(|v| v == version)
            .then(|| def.clone())
    }

    pub fn get(&self, gr: &GroupResource) -> Option<Arc<ResourceDef>> {
        self.defs.get(gr).cloned()
    }

    /// Groups with their served versions, in a stable order (core group excluded).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for def in self.defs.values() {
            if def.gr.group.is_empty() {
                continue;
            }
            let entry = out.entry(def.gr.group.clone()).or_default();
            for v in &def.versions {
                if !entry.contains(v) {
                    entry.push(v.clone());
                }
            }
        }
        // Access reviews: created and answered, never stored (src/auth/review.rs).
        out.entry("authorization.k8s.io".into())
            .or_default()
            .push("v1".into());
        // Served by src/metrics.rs from the runner's measurements, not stored.
        out.entry(crate::metrics::GROUP.into())
            .or_default()
            .push(crate::metrics::VERSION.into());
        out
    }

    /// APIGroupList for `/apis`.
    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .map(|(name, versions)| {
                let vs: Vec<Value> = versions
                    .iter()
                    .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
                    .collect();
                let preferred = vs.first().cloned().unwrap_or(Value::Null);
                json!({"name": name, "versions": vs, "preferredVersion": preferred})
            })
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// APIGroup for `/apis/{group}`.
    pub fn api_group(&self, group: &str) -> Option<Value> {
        let versions = self.groups().remove(group)?;
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        let preferred = vs.first().cloned().unwrap_or(Value::Null);
        Some(
            json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": vs, "preferredVersion": preferred}),
        )
    }

    /// APIResourceList for `/api/v1` or `/apis/{group}/{version}`.
    pub fn api_resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let mut resources = Vec::new();
        for def in self.defs.values() {
            if def.gr.group != group || !def.versions.iter().any(|v| v == version) {
                continue;
            }
            let mut r = json!({
                "name": def.gr.resource,
                "singularName": def.singular,
                "namespaced": def.namespaced,
                "kind": def.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            });
            if !def.short_names.is_empty() {
                r["shortNames"] = json!(def.short_names);
            }
            if !def.categories.is_empty() {
                r["categories"] = json!(def.categories);
            }
            resources.push(r);
            if def.status {
                resources.push(json!({"name": format!("{}/status", def.gr.resource), "singularName": "", "namespaced": def.namespaced, "kind": def.kind, "verbs": ["get", "patch", "update"]}));
            }
            if def.scale.is_some() {
                resources.push(json!({"name": format!("{}/scale", def.gr.resource), "singularName": "", "namespaced": def.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
            }
            if def.gr.group.is_empty() && def.gr.resource == "pods" {
                resources.push(json!({"name": "pods/attach", "singularName": "", "namespaced": true, "kind": "PodAttachOptions", "verbs": ["create", "get"]}));
                resources.push(json!({"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]}));
                resources.push(json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}));
                resources.push(json!({"name": "pods/portforward", "singularName": "", "namespaced": true, "kind": "PodPortForwardOptions", "verbs": ["create", "get"]}));
                resources.push(json!({"name": "pods/proxy", "singularName": "", "namespaced": true, "kind": "PodProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]}));
            }
            if def.gr.group.is_empty() && def.gr.resource == "serviceaccounts" {
                resources.push(json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true, "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
            }
            if def.gr.group.is_empty() && def.gr.resource == "services" {
                resources.push(json!({"name": "services/proxy", "singularName": "", "namespaced": true, "kind": "ServiceProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]}));
            }
        }
        if group == "authorization.k8s.io" && version == "v1" {
            for (name, kind) in [
                ("selfsubjectaccessreviews", "SelfSubjectAccessReview"),
                ("subjectaccessreviews", "SubjectAccessReview"),
            ] {
                resources.push(json!({"name": name, "singularName": "", "namespaced": false, "kind": kind, "verbs": ["create"]}));
            }
        }
        if group == crate::metrics::GROUP && version == crate::metrics::VERSION {
            resources.extend(crate::metrics::api_resources());
        }
        if resources.is_empty() {
            return None;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
        )
    }

    /// Builds the definition served for a stored CRD object, or an error message
    /// when the CRD cannot be served.
    pub fn def_from_crd(crd: &Value) -> Result<ResourceDef, String> {
        let spec = crd.get("spec").ok_or("spec is required")?;
        let group = spec
            .get("group")
            .and_then(Value::as_str)
            .ok_or("spec.group is required")?;
        let names = spec.get("names").ok_or("spec.names is required")?;
        let plural = names
            .get("plural")
            .and_then(Value::as_str)
            .ok_or("spec.names.plural is required")?;
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("spec.names.kind is required")?;
        let singular = names
            .get("singular")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_ascii_lowercase());
        let list_kind = names
            .get("listKind")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List"));
        let str_list = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let scope = spec
            .get("scope")
            .and_then(Value::as_str)
            .unwrap_or("Namespaced");
        let mut versions = Vec::new();
        let mut schemas = BTreeMap::new();
        let mut columns = BTreeMap::new();
        let mut status = false;
        let mut scale = None;
        let all = spec
            .get("versions")
            .and_then(Value::as_array)
            .ok_or("spec.versions is required")?;
        // The storage version is listed first so it is the preferred one.
        let mut ordered: Vec<&Value> = all.iter().collect();
        ordered.sort_by_key(|v| !v.get("storage").and_then(Value::as_bool).unwrap_or(false));
        for v in ordered {
            if !v.get("served").and_then(Value::as_bool).unwrap_or(true) {
                continue;
            }
            let name = v
                .get("name")
                .and_then(Value::as_str)
                .ok_or("spec.versions[].name is required")?;
            versions.push(name.to_string());
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .map(|s| Schema::parse(s).map(Arc::new))
                .transpose()?;
            schemas.insert(name.to_string(), schema);
            if let Some(sub) = v.get("subresources") {
                status |= sub.get("status").is_some();
                if let Some(sc) = sub.get("scale") {
                    scale = Some(ScaleSpec {
                        spec_replicas_path: sc
                            .get("specReplicasPath")
                            .and_then(Value::as_str)
                            .unwrap_or(".spec.replicas")
                            .to_string(),
                        status_replicas_path: sc
                            .get("statusReplicasPath")
                            .and_then(Value::as_str)
                            .unwrap_or(".status.replicas")
                            .to_string(),
                        label_selector_path: sc
                            .get("labelSelectorPath")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    });
                }
            }
            let cols: Vec<PrinterColumn> = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .filter_map(|c| {
                            Some(PrinterColumn {
                                name: c.get("name")?.as_str()?.to_string(),
                                type_: c
                                    .get("type")
                                    .and_then(Value::as_str)
                                    .unwrap_or("string")
                                    .to_string(),
                                json_path: c.get("jsonPath")?.as_str()?.to_string(),
                                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                                description: c
                                    .get("description")
                                    .and_then(Value::as_str)
                                    .unwrap_or("")
                                    .to_string(),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            columns.insert(name.to_string(), cols);
        }
        if versions.is_empty() {
            return Err("spec.versions must contain a served version".into());
        }
        Ok(ResourceDef {
            gr: GroupResource::new(group, plural),
            versions,
            kind: kind.to_string(),
            list_kind,
            singular,
            namespaced: scope != "Cluster",
            short_names: str_list(names.get("shortNames")),
            categories: str_list(names.get("categories")),
            status,
            scale,
            validator: Validator::Crd(schemas),
            columns,
            is_crd: true,
        })
    }
}
