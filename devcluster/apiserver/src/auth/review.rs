//! Impersonation (`Impersonate-User`, `Impersonate-Group`) and access reviews
//! (`SelfSubjectAccessReview`, `SubjectAccessReview`), both decided by the authorizer.

use serde_json::{Value, json};

use super::{Attributes, Authorizer, User};
use crate::errors::ApiError;
use crate::store::Store;

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
