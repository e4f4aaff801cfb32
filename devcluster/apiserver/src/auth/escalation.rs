//! RBAC escalation prevention, as the real server's RBAC storage applies it to every writer
//! that is not a superuser: a Role or ClusterRole may hold only rules its writer holds (unless
//! the writer may `escalate` it), an aggregated ClusterRole needs `escalate`, and a binding may
//! name only a role whose rules its writer holds (unless the writer may `bind` it).

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde::Deserialize;
use serde_json::{Value, json};

use super::rbac::{compute_grants, role_rules, rules_of};
use super::{Attributes, User};
use crate::errors::ApiError;
use crate::registry::GroupResource;
use crate::store::State;

const RBAC: &str = "rbac.authorization.k8s.io";

/// Checks a write of `obj` (a Role, ClusterRole, RoleBinding or ClusterRoleBinding in `ns`)
/// by `user`; `old` is the stored object on updates. Other kinds pass.
pub fn check(
    st: &State,
    user: &User,
    gr: &GroupResource,
    ns: &str,
    obj: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if gr.group != RBAC || user.is_superuser() {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match gr.resource.as_str() {
        "roles" | "clusterroles" => {
            let rules = rules_of(obj);
            let aggregated = obj.get("aggregationRule").is_some_and(|a| !a.is_null());
            if old.is_some_and(|o| {
                rules_of(o) == rules && o.get("aggregationRule") == obj.get("aggregationRule")
            }) {
                return Ok(());
            }
            if allowed(st, user, "escalate", &gr.resource, ns, name) {
                return Ok(());
            }
            if aggregated {
                return Err(forbidden(
                    gr,
                    name,
                    "must have cluster-admin privileges to use the aggregationRule".into(),
                ));
            }
            confirm_no_escalation(st, user, gr, ns, name, &rules)
        }
        "rolebindings" | "clusterrolebindings" => {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Binding {
                role_ref: RoleRef,
            }
            let Ok(Binding { role_ref }) = Binding::deserialize(obj) else {
                return Ok(()); // the shape check refuses it
            };
            if old
                .and_then(|o| Binding::deserialize(o).ok())
                .is_some_and(|b| b.role_ref == role_ref)
            {
                return Ok(());
            }
            let role_resource = match role_ref.kind.as_str() {
                "Role" => "roles",
                _ => "clusterroles",
            };
            let role_ns = if role_resource == "roles" { ns } else { "" };
            let bind_ns = if gr.resource == "rolebindings" {
                ns
            } else {
                ""
            };
            if allowed(st, user, "bind", role_resource, role_ns, &role_ref.name)
                || allowed(st, user, "bind", role_resource, bind_ns, &role_ref.name)
            {
                return Ok(());
            }
            let rules = role_rules(st, &role_ref, bind_ns).map_err(|e| forbidden(gr, name, e))?;
            confirm_no_escalation(st, user, gr, bind_ns, name, &rules)
        }
        _ => Ok(()),
    }
}

/// Whether the user's own rules allow `verb` on the RBAC `resource` named `name`.
fn allowed(st: &State, user: &User, verb: &str, resource: &str, ns: &str, name: &str) -> bool {
    let a = Attributes {
        verb: verb.into(),
        resource_request: true,
        group: RBAC.into(),
        namespace: ns.into(),
        resource: resource.into(),
        name: name.into(),
        ..Default::default()
    };
    compute_grants(st, user, ns)
        .rules
        .iter()
        .any(|r| super::rbac::rule_allows(r, &a))
}

fn confirm_no_escalation(
    st: &State,
    user: &User,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    rules: &[PolicyRule],
) -> Result<(), ApiError> {
    let grants = compute_grants(st, user, ns);
    let missing = not_covered(&grants.rules, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    let mut msg = format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        missing.join("\n")
    );
    if !grants.errors.is_empty() {
        msg.push_str(&format!(
            "; resolution errors: [{}]",
            grants.errors.join(" ")
        ));
    }
    Err(forbidden(gr, name, msg))
}

/// One permission a rule grants: a verb on one resource (and name) of one group, or on one
/// non-resource URL.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Atom {
    Resource {
        group: String,
        resource: String,
        name: String,
        verb: String,
    },
    Url {
        url: String,
        verb: String,
    },
}

fn atoms(rule: &PolicyRule) -> Vec<Atom> {
    let mut out = Vec::new();
    let urls = rule.non_resource_urls.as_deref().unwrap_or_default();
    for verb in &rule.verbs {
        for url in urls {
            out.push(Atom::Url {
                url: url.clone(),
                verb: verb.clone(),
            });
        }
        let names: Vec<&str> = match rule.resource_names.as_deref() {
            Some(n) if !n.is_empty() => n.iter().map(String::as_str).collect(),
            _ => vec![""],
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for name in &names {
                    out.push(Atom::Resource {
                        group: group.clone(),
                        resource: resource.clone(),
                        name: (*name).to_string(),
                        verb: verb.clone(),
                    });
                }
            }
        }
    }
    out
}

fn has(list: Option<&Vec<String>>, want: &str) -> bool {
    list.into_iter().flatten().any(|v| v == "*" || v == want)
}

/// Whether an owner rule covers an atom; a requested `*` is covered only by `*`.
fn covers(owner: &PolicyRule, atom: &Atom) -> bool {
    match atom {
        Atom::Resource {
            group,
            resource,
            name,
            verb,
        } => {
            let resource_ok = owner.resources.iter().flatten().any(|r| {
                r == "*"
                    || r == resource
                    || r.strip_prefix("*/")
                        .is_some_and(|sub| resource.split_once('/').is_some_and(|(_, s)| s == sub))
            });
            let names = owner.resource_names.as_deref().unwrap_or_default();
            has(Some(&owner.verbs), verb)
                && has(owner.api_groups.as_ref(), group)
                && resource_ok
                && (names.is_empty() || (!name.is_empty() && names.iter().any(|n| n == name)))
        }
        Atom::Url { url, verb } => {
            has(Some(&owner.verbs), verb)
                && owner.non_resource_urls.iter().flatten().any(|u| {
                    u == "*" || u == url || u.strip_suffix('*').is_some_and(|p| url.starts_with(p))
                })
        }
    }
}

/// The requested permissions no owner rule covers, compacted to one line per resource (or URL)
/// with its verbs, in the real server's wording.
fn not_covered(owner: &[PolicyRule], requested: &[PolicyRule]) -> Vec<String> {
    let mut verbs: BTreeMap<Atom, Vec<String>> = BTreeMap::new();
    for atom in requested.iter().flat_map(atoms) {
        if owner.iter().any(|r| covers(r, &atom)) {
            continue;
        }
        let (key, verb) = match atom {
            Atom::Resource {
                group,
                resource,
                name,
                verb,
            } => (
                Atom::Resource {
                    group,
                    resource,
                    name,
                    verb: String::new(),
                },
                verb,
            ),
            Atom::Url { url, verb } => (
                Atom::Url {
                    url,
                    verb: String::new(),
                },
                verb,
            ),
        };
        let list = verbs.entry(key).or_default();
        if !list.contains(&verb) {
            list.push(verb);
        }
    }
    let quoted = |v: &[String]| {
        v.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    verbs
        .into_iter()
        .map(|(key, verbs)| match key {
            Atom::Resource {
                group,
                resource,
                name,
                ..
            } => {
                let names = if name.is_empty() {
                    String::new()
                } else {
                    format!(", ResourceNames:[{name:?}]")
                };
                format!(
                    "{{APIGroups:[{group:?}], Resources:[{resource:?}]{names}, Verbs:[{}]}}",
                    quoted(&verbs)
                )
            }
            Atom::Url { url, .. } => {
                format!("{{NonResourceURLs:[{url:?}], Verbs:[{}]}}", quoted(&verbs))
            }
        })
        .collect()
}

fn forbidden(gr: &GroupResource, name: &str, msg: String) -> ApiError {
    let mut e = ApiError::forbidden(format!("{} {name:?} is forbidden: {msg}", gr.qualified()));
    e.details = Some(json!({"name": name, "group": gr.group, "kind": gr.resource}));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn coverage_follows_the_real_rules() {
        let owner = [
            rule(
                json!({"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list"]}),
            ),
            rule(json!({"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["*"]})),
            rule(
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
            ),
            rule(json!({"nonResourceURLs": ["/metrics*"], "verbs": ["get"]})),
        ];
        let ok = [
            rule(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})),
            rule(
                json!({"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update"]}),
            ),
            rule(
                json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
            ),
            rule(json!({"nonResourceURLs": ["/metrics/x"], "verbs": ["get"]})),
        ];
        assert!(not_covered(&owner, &ok).is_empty());
        let too_much = [
            rule(
                json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "delete"]}),
            ),
            rule(json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]})),
        ];
        assert_eq!(
            not_covered(&owner, &too_much),
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "*"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}"#,
            ]
        );
    }
}
