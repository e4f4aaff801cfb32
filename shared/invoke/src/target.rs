//! Which function to call, and how long to wait for it.

use std::time::Duration;

use kubeless_api::{Function, function::DEFAULT_PORT_NAME};

pub use kubeless_api::parse::DEFAULT_TIMEOUT_SECS;

/// Kubeless default Service port of a function ([`kubeless_api::function::DEFAULT_PORT`]).
pub const DEFAULT_PORT: u16 = kubeless_api::function::DEFAULT_PORT as u16;

/// The function to call: its Service, port and timeout.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionTarget {
    pub namespace: String,
    pub name: String,
    /// The Service port number (used by cluster DNS, and to match EndpointSlice ports when no
    /// name is given).
    pub port: u16,
    /// The Service port name (EndpointSlice ports carry the Service port's name and the target
    /// port's number, so matching by name is the reliable way there).
    pub port_name: Option<String>,
    /// Per-attempt timeout: the function's `spec.timeout`.
    pub timeout: Duration,
}

impl FunctionTarget {
    /// A target with Kubeless defaults: port 8080, no port name, 180 s timeout.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            port: DEFAULT_PORT,
            port_name: None,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
        }
    }

    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    pub fn with_port_name(mut self, name: impl Into<String>) -> Self {
        self.port_name = Some(name.into());
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The target every trigger uses for a Function: the Function's own namespace (or
    /// `default_namespace` when the object has none), the first port of `spec.service` by number
    /// and name (EndpointSlices are matched by name), Kubeless's `http-function-port` 8080 when
    /// there is no service template, and `spec.timeout`. An invalid timeout or service template is
    /// the function-controller's to report on the Function; here the defaults stand in.
    pub fn for_function(function: &Function, default_namespace: &str) -> Self {
        let namespace = function
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| default_namespace.to_string());
        let name = function.metadata.name.clone().unwrap_or_default();
        let spec = &function.spec;
        let timeout = spec
            .timeout_duration()
            .unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_SECS));
        let first_port = match spec.service_spec() {
            Ok(Some(service)) => service.ports.and_then(|ports| ports.into_iter().next()),
            _ => None,
        };
        let (port, port_name) = match first_port {
            Some(p) => (
                u16::try_from(p.port).unwrap_or(DEFAULT_PORT),
                p.name.filter(|n| !n.is_empty()),
            ),
            None => (DEFAULT_PORT, Some(DEFAULT_PORT_NAME.to_string())),
        };
        Self {
            namespace,
            name,
            port,
            port_name,
            timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let t = FunctionTarget::new("ns", "f");
        assert_eq!(t.port, 8080);
        assert_eq!(t.timeout, Duration::from_secs(180));
        assert_eq!(t.port_name, None);
    }
}

#[cfg(test)]
mod function_tests {
    use super::*;
    use kubeless_api::FunctionSpec;

    fn function(spec: serde_json::Value) -> Function {
        let spec: FunctionSpec = serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}"));
        let mut f = Function::new("hello", spec);
        f.metadata.namespace = Some("team".into());
        f
    }

    #[test]
    fn kubeless_defaults_without_a_service_template() {
        let t = FunctionTarget::for_function(&function(serde_json::json!({"handler": "h.f"})), "x");
        assert_eq!(
            (t.namespace.as_str(), t.name.as_str(), t.port),
            ("team", "hello", 8080)
        );
        assert_eq!(t.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(t.timeout, Duration::from_secs(180));
    }

    #[test]
    fn first_service_port_and_timeout_win() {
        let f = function(serde_json::json!({
            "handler": "h.f",
            "timeout": "7",
            "service": {"ports": [{"name": "web", "port": 9000, "targetPort": 8080}, {"port": 1}]}
        }));
        let t = FunctionTarget::for_function(&f, "x");
        assert_eq!((t.port, t.port_name.as_deref()), (9000, Some("web")));
        assert_eq!(t.timeout, Duration::from_secs(7));
    }

    #[test]
    fn unnamed_port_and_bad_timeout_fall_back() {
        let f = function(serde_json::json!({
            "handler": "h.f",
            "timeout": "soon",
            "service": {"ports": [{"port": 8081}]}
        }));
        let t = FunctionTarget::for_function(&f, "x");
        assert_eq!((t.port, t.port_name), (8081, None));
        assert_eq!(t.timeout, Duration::from_secs(180));
    }
}
