//! Authentication and RBAC authorization, as the real API server does them.
//!
//! - [`tokens`]: who sent a request. The admin token of the kubeconfig the server writes is a
//!   `system:masters` user that may do everything; ServiceAccount tokens are issued through the
//!   TokenRequest subresource (`POST .../serviceaccounts/NAME/token`), optionally bound to a
//!   Pod; a request without a token is `system:anonymous`; any other token gets 401.
//! - [`request`]: what a request asks to do (verb, resource, subresource, namespace, name), read
//!   from its method, path and query as the real RequestInfo does.
//! - [`rbac`]: whether the stored Roles, ClusterRoles and bindings allow it; a refused request
//!   gets the real server's 403 Status.
//! - [`escalation`]: a non-superuser writes only Roles and bindings granting what it holds.
//! - [`review`]: impersonation headers and SelfSubjectAccessReview / SubjectAccessReview.

pub mod bootstrap;
pub mod escalation;
pub mod rbac;
pub mod request;
pub mod review;
pub mod tokens;

pub use rbac::Authorizer;
pub use request::Attributes;
pub use review::{access_review, impersonate};
pub use tokens::Authenticator;

/// The user the admin token authenticates as.
pub const ADMIN_USER: &str = "devcluster-admin";
/// The group whose members may do everything (the real server's superuser group).
pub const MASTERS_GROUP: &str = "system:masters";

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    fn admin() -> Self {
        Self {
            name: ADMIN_USER.to_string(),
            groups: vec![MASTERS_GROUP.into(), "system:authenticated".into()],
        }
    }

    fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    fn anonymous() -> Self {
        Self {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }

    fn is_authenticated(&self) -> bool {
        self.groups.iter().any(|g| g == "system:authenticated")
    }

    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS_GROUP)
    }
}
