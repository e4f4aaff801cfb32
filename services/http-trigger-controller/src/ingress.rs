//! The pure part of the controller: HTTPTrigger + the function's Service -> networking.k8s.io/v1
//! Ingress. No API calls here, so every gateway and option is unit-tested.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use kubeless_api::function::DEFAULT_PORT;
use kubeless_api::{Function, HttpTrigger, labels, triggers::Gateway};

/// Annotation names, per ingress controller.
pub mod annotations {
    /// ingress-nginx: rewrite the matched path (Kubeless sent every call to `/`).
    pub const NGINX_REWRITE_TARGET: &str = "nginx.ingress.kubernetes.io/rewrite-target";
    /// ingress-nginx: answer CORS preflights and add the Access-Control-* headers.
    pub const NGINX_ENABLE_CORS: &str = "nginx.ingress.kubernetes.io/enable-cors";
    /// ingress-nginx: `basic` turns on basic auth.
    pub const NGINX_AUTH_TYPE: &str = "nginx.ingress.kubernetes.io/auth-type";
    /// ingress-nginx: Secret (same namespace) with the htpasswd file in key `auth`.
    pub const NGINX_AUTH_SECRET: &str = "nginx.ingress.kubernetes.io/auth-secret";
    /// ingress-nginx: realm shown by the browser's password prompt.
    pub const NGINX_AUTH_REALM: &str = "nginx.ingress.kubernetes.io/auth-realm";
    /// ingress-nginx: redirect http to https.
    pub const NGINX_SSL_REDIRECT: &str = "nginx.ingress.kubernetes.io/ssl-redirect";
    /// Generic (Traefik 1.x and others): CORS, as Kubeless wrote it.
    pub const GENERIC_ENABLE_CORS: &str = "ingress.kubernetes.io/enable-cors";
    /// Traefik 1.x: `basic` turns on basic auth.
    pub const TRAEFIK_AUTH_TYPE: &str = "ingress.kubernetes.io/auth-type";
    /// Traefik 1.x: Secret with the htpasswd file.
    pub const TRAEFIK_AUTH_SECRET: &str = "ingress.kubernetes.io/auth-secret";
    /// Kong: strip the matched path prefix before proxying (what nginx's rewrite does).
    pub const KONG_STRIP_PATH: &str = "konghq.com/strip-path";
    /// cert-manager (ingress-shim) and kube-lego: request a certificate through ACME.
    pub const TLS_ACME: &str = "kubernetes.io/tls-acme";
    /// Written by `kubectl apply`; never copied to the Ingress.
    pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
}

/// Realm of the nginx password prompt.
pub const AUTH_REALM: &str = "Authentication Required";

/// Why a trigger cannot be turned into an Ingress. Each maps to a condition reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("unknown gateway {0:?}: expected nginx, traefik or kong")]
    UnknownGateway(String),
    #[error("tls and tls-secret are mutually exclusive")]
    TlsConflict,
    #[error(
        "basic-auth-secret is not supported with gateway kong (Kong needs a KongPlugin/KongConsumer); \
         no Ingress is created so that the function is not exposed without authentication"
    )]
    BasicAuthUnsupported,
    #[error("function-name is empty")]
    NoFunction,
    #[error("the trigger has no namespace")]
    NoNamespace,
}

impl BuildError {
    /// Condition / Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BasicAuthUnsupported => REASON_BASIC_AUTH_UNSUPPORTED,
            Self::UnknownGateway(_) | Self::TlsConflict | Self::NoFunction | Self::NoNamespace => {
                kubeless_api::conditions::reasons::INVALID_SPEC
            }
        }
    }
}

/// Condition reason when basic auth is asked for with a gateway that cannot do it by annotation.
pub const REASON_BASIC_AUTH_UNSUPPORTED: &str = "BasicAuthUnsupported";

/// The backend port of a function: the port number Kubernetes routes on, plus its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionPort {
    /// The Service port (not the targetPort: Kubeless used targetPort, which breaks when the
    /// two differ).
    pub port: i32,
    /// The Service port's name, when it has one.
    pub name: Option<String>,
}

impl Default for FunctionPort {
    fn default() -> Self {
        Self {
            port: DEFAULT_PORT,
            name: Some("http-function-port".into()),
        }
    }
}

impl FunctionPort {
    /// The first port of a ServiceSpec (the one Kubeless routes to).
    pub fn from_spec(spec: &ServiceSpec) -> Option<Self> {
        spec.ports.as_ref()?.first().map(Self::from_port)
    }

    fn from_port(p: &ServicePort) -> Self {
        Self {
            port: if p.port == 0 { DEFAULT_PORT } else { p.port },
            name: p.name.clone().filter(|n| !n.is_empty()),
        }
    }

    /// The live Service wins; then the Function's `service` template; then the default.
    pub fn resolve(service: Option<&Service>, function: Option<&Function>) -> Self {
        service
            .and_then(|s| s.spec.as_ref())
            .and_then(Self::from_spec)
            .or_else(|| {
                function
                    .and_then(|f| f.spec.service_spec().ok().flatten())
                    .and_then(|s| Self::from_spec(&s))
            })
            .unwrap_or_default()
    }
}

/// The normalised path of a trigger: `/` + path without leading/trailing slashes.
pub fn trigger_path(trigger: &HttpTrigger) -> String {
    let p = trigger
        .spec
        .path
        .as_deref()
        .unwrap_or("")
        .trim()
        .trim_matches('/');
    format!("/{p}")
}

/// The trigger's host, when set (lower-cased, trimmed).
pub fn trigger_host(trigger: &HttpTrigger) -> Option<String> {
    trigger
        .spec
        .host_name
        .as_deref()
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
}

/// The ACME certificate's Secret name for `tls: true`.
pub fn acme_secret_name(trigger: &HttpTrigger) -> String {
    format!("{}-tls", trigger.name_any())
}

/// Whether the trigger is served over TLS (its own secret or ACME).
pub fn uses_tls(trigger: &HttpTrigger) -> bool {
    trigger.spec.tls == Some(true)
        || trigger
            .spec
            .tls_secret
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty())
}

/// The external URL of the trigger. `fallback_host` (e.g. the Ingress load balancer address)
/// is used when the trigger has no host; with neither, only the path is known.
pub fn trigger_url(trigger: &HttpTrigger, fallback_host: Option<&str>) -> String {
    let path = trigger_path(trigger);
    let host = trigger_host(trigger).or_else(|| fallback_host.map(str::to_string));
    match host {
        Some(h) => {
            let scheme = if uses_tls(trigger) { "https" } else { "http" };
            format!("{scheme}://{h}{path}")
        }
        None => path,
    }
}

/// Checks the fields the Ingress depends on.
pub fn validate(trigger: &HttpTrigger) -> Result<Gateway, BuildError> {
    let spec = &trigger.spec;
    if spec.function_name.trim().is_empty() {
        return Err(BuildError::NoFunction);
    }
    let gateway = spec.gateway_kind().map_err(BuildError::UnknownGateway)?;
    let has_secret = spec
        .tls_secret
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty());
    if spec.tls == Some(true) && has_secret {
        return Err(BuildError::TlsConflict);
    }
    if gateway == Gateway::Kong && basic_auth_secret(trigger).is_some() {
        return Err(BuildError::BasicAuthUnsupported);
    }
    Ok(gateway)
}

/// The basic-auth Secret name, when set.
pub fn basic_auth_secret(trigger: &HttpTrigger) -> Option<&str> {
    trigger
        .spec
        .basic_auth_secret
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The Ingress class name per gateway (spec.ingressClassName; the class annotation is
/// deprecated).
pub fn ingress_class(gateway: Gateway) -> &'static str {
    match gateway {
        Gateway::Nginx => "nginx",
        Gateway::Traefik => "traefik",
        Gateway::Kong => "kong",
    }
}

/// The annotations for a gateway and the trigger's options, before the trigger's own
/// annotations are laid over them.
pub fn gateway_annotations(trigger: &HttpTrigger, gateway: Gateway) -> BTreeMap<String, String> {
    use annotations::*;
    let mut a = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        a.insert(k.to_string(), v.to_string());
    };
    match gateway {
        Gateway::Nginx => put(NGINX_REWRITE_TARGET, "/"),
        Gateway::Kong => put(KONG_STRIP_PATH, "true"),
        Gateway::Traefik => {}
    }
    if trigger.spec.cors_enable == Some(true) {
        match gateway {
            Gateway::Nginx => put(NGINX_ENABLE_CORS, "true"),
            Gateway::Traefik | Gateway::Kong => put(GENERIC_ENABLE_CORS, "true"),
        }
    }
    if let Some(secret) = basic_auth_secret(trigger) {
        match gateway {
            Gateway::Nginx => {
                put(NGINX_AUTH_TYPE, "basic");
                put(NGINX_AUTH_SECRET, secret);
                put(NGINX_AUTH_REALM, AUTH_REALM);
            }
            Gateway::Traefik => {
                put(TRAEFIK_AUTH_TYPE, "basic");
                put(TRAEFIK_AUTH_SECRET, secret);
            }
            // Rejected by `validate`.
            Gateway::Kong => {}
        }
    }
    if trigger.spec.tls == Some(true) {
        put(TLS_ACME, "true");
        if gateway == Gateway::Nginx {
            put(NGINX_SSL_REDIRECT, "true");
        }
    }
    a
}

/// Builds the Ingress for `trigger` routing to `port` of the function's Service.
///
/// Name, namespace and owner are the trigger's; labels are Kubeless's function labels. The
/// trigger's own annotations are copied last, so a user can override ours (e.g. a different
/// rewrite-target).
pub fn build_ingress(trigger: &HttpTrigger, port: &FunctionPort) -> Result<Ingress, BuildError> {
    let gateway = validate(trigger)?;
    let namespace = trigger.namespace().ok_or(BuildError::NoNamespace)?;
    let function = trigger.spec.function_name.trim().to_string();

    let mut annotations = gateway_annotations(trigger, gateway);
    for (k, v) in trigger.annotations() {
        if k != annotations::LAST_APPLIED {
            annotations.insert(k.clone(), v.clone());
        }
    }

    let host = trigger_host(trigger);
    let tls_secret = match (&trigger.spec.tls, trigger.spec.tls_secret.as_deref()) {
        (_, Some(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        (Some(true), _) => Some(acme_secret_name(trigger)),
        _ => None,
    };
    let tls = tls_secret.map(|secret_name| {
        vec![IngressTLS {
            hosts: host.clone().map(|h| vec![h]),
            secret_name: Some(secret_name),
        }]
    });

    let backend = IngressBackend {
        service: Some(IngressServiceBackend {
            name: function.clone(),
            port: Some(ServiceBackendPort {
                number: Some(port.port),
                name: None,
            }),
        }),
        resource: None,
    };
    let rule = IngressRule {
        host,
        http: Some(HTTPIngressRuleValue {
            paths: vec![HTTPIngressPath {
                path: Some(trigger_path(trigger)),
                path_type: "Prefix".into(),
                backend,
            }],
        }),
    };

    // Ours win over the trigger's: other components select on them.
    let mut labels = trigger.labels().clone();
    labels.extend(labels::function_labels(&function));
    Ok(Ingress {
        metadata: ObjectMeta {
            name: Some(trigger.name_any()),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: trigger.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: Some(ingress_class(gateway).into()),
            rules: Some(vec![rule]),
            tls,
            default_backend: None,
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests;
