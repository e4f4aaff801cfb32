//! Credentials from a `kubernetes.io/dockerconfigjson` Secret's `.dockerconfigjson`.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Deserialize;

use crate::Error;

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Username and password for `registry` (host[:port]) from dockerconfigjson content ("auths" →
/// "auth" base64 or username/password), None if absent.
///
/// Keys may be written as `host[:port]`, with a scheme (`https://host/`) or with a path
/// (`https://index.docker.io/v1/`); Docker Hub's names (`docker.io`, `index.docker.io`,
/// `registry-1.docker.io`) match each other.
pub fn docker_config_auth(json: &[u8], registry: &str) -> Result<Option<(String, String)>, Error> {
    let config: DockerConfig = serde_json::from_slice(json).map_err(|e| Error::DockerConfig {
        reason: e.to_string(),
    })?;
    let wanted = normalize_host(registry);
    let Some((key, entry)) = config
        .auths
        .iter()
        .find(|(key, _)| normalize_host(key) == wanted)
    else {
        return Ok(None);
    };
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| Error::DockerConfig {
                reason: format!("auths.{key:?}.auth is not base64: {e}"),
            })?;
        let decoded = String::from_utf8(decoded).map_err(|_| Error::DockerConfig {
            reason: format!("auths.{key:?}.auth is not UTF-8"),
        })?;
        let Some((user, password)) = decoded.split_once(':') else {
            return Err(Error::DockerConfig {
                reason: format!("auths.{key:?}.auth is not base64 of USER:PASSWORD"),
            });
        };
        return Ok(Some((user.to_string(), password.to_string())));
    }
    match (&entry.username, &entry.password) {
        (Some(user), Some(password)) => Ok(Some((user.clone(), password.clone()))),
        _ => Err(Error::DockerConfig {
            reason: format!("auths.{key:?} has neither auth nor username and password"),
        }),
    }
}

/// `https://host:port/v1/` → `host:port`; Docker Hub's aliases → `docker.io`.
fn normalize_host(key: &str) -> String {
    let key = key.trim();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_field_and_username_password() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let json = format!(
            r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{auth}"}},"https://reg.example:443/v2/":{{"username":"bob","password":"pw"}},"https://index.docker.io/v1/":{{"auth":"{auth}"}}}}}}"#
        );
        assert_eq!(
            docker_config_auth(json.as_bytes(), "127.0.0.1:5000").unwrap(),
            Some(("alice".into(), "s3cr:et".into()))
        );
        assert_eq!(
            docker_config_auth(json.as_bytes(), "reg.example:443").unwrap(),
            Some(("bob".into(), "pw".into()))
        );
        assert_eq!(
            docker_config_auth(json.as_bytes(), "index.docker.io").unwrap(),
            Some(("alice".into(), "s3cr:et".into()))
        );
        assert_eq!(
            docker_config_auth(json.as_bytes(), "127.0.0.1:5001").unwrap(),
            None
        );
    }

    #[test]
    fn invalid_content_is_an_error() {
        assert!(docker_config_auth(b"not json", "r").is_err());
        assert!(docker_config_auth(br#"{"auths":{"r":{"auth":"%%%"}}}"#, "r").is_err());
        assert!(docker_config_auth(br#"{"auths":{"r":{}}}"#, "r").is_err());
        assert_eq!(docker_config_auth(br#"{}"#, "r").unwrap(), None);
    }
}
