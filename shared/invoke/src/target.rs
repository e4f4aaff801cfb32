//! Which function to call, and how long to wait for it.

use std::time::Duration;

/// Kubeless default of `spec.timeout`, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 180;
/// Kubeless default Service port of a function.
pub const DEFAULT_PORT: u16 = 8080;

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
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid function timeout {value:?}: expected a positive whole number of seconds")]
pub struct InvalidTimeout {
    pub value: String,
}

/// Parses a function's `spec.timeout` (whole seconds as a string). Empty means the default 180 s.
pub fn parse_timeout(value: &str) -> Result<Duration, InvalidTimeout> {
    let v = value.trim();
    if v.is_empty() {
        return Ok(Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    }
    match v.parse::<u64>() {
        Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
        _ => Err(InvalidTimeout {
            value: value.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_parsing() {
        assert_eq!(parse_timeout("180"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_timeout(" 5 "), Ok(Duration::from_secs(5)));
        assert_eq!(parse_timeout(""), Ok(Duration::from_secs(180)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("-3").is_err());
        assert!(parse_timeout("1.5").is_err());
        assert!(parse_timeout("3m").is_err());
    }

    #[test]
    fn defaults() {
        let t = FunctionTarget::new("ns", "f");
        assert_eq!(t.port, 8080);
        assert_eq!(t.timeout, Duration::from_secs(180));
        assert_eq!(t.port_name, None);
    }
}
