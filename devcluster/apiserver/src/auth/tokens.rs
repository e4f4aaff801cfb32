//! Bearer tokens: the admin token and ServiceAccount tokens from the TokenRequest API.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use super::User;
use crate::errors::ApiError;
use crate::registry::GroupResource;
use crate::store::Store;

/// The `expirationSeconds` the kubelet asks for; the real server extends such pod-bound tokens
/// to a year (`--service-account-extend-token-expiration`, on by default).
pub const KUBELET_TOKEN_SECONDS: i64 = 3607;
const EXTENDED_TOKEN_SECONDS: i64 = 365 * 24 * 3600;
const DEFAULT_TOKEN_SECONDS: i64 = 3600;
const MIN_TOKEN_SECONDS: i64 = 600;
/// Issued tokens kept before a token request prunes those that can no longer authenticate.
const PRUNE_ABOVE: usize = 4096;

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
