//! What a request asks to do, as the real server's RequestInfoFactory reads it.

use std::collections::HashMap;

/// What a request asks to do, parsed from its method, path and query as the real server's
/// RequestInfoFactory does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub path: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

impl Attributes {
    pub fn from_request(method: &str, path: &str, query: &HashMap<String, String>) -> Self {
        let mut a = Attributes {
            verb: method.to_ascii_lowercase(),
            path: path.to_string(),
            ..Default::default()
        };
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return a;
        }
        let mut rest = &parts[1..];
        if parts[0] == "apis" {
            if rest.len() < 3 {
                return a;
            }
            a.group = rest[0].to_string();
            rest = &rest[1..];
        }
        a.resource_request = true;
        a.version = rest[0].to_string();
        rest = &rest[1..];
        let mut via_method = false;
        if matches!(rest.first(), Some(&"watch") | Some(&"proxy")) {
            if rest.len() < 2 {
                return a;
            }
            a.verb = rest[0].to_string();
            rest = &rest[1..];
        } else {
            via_method = true;
            a.verb = match method {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_string();
        }
        if rest.first() == Some(&"namespaces") && rest.len() > 1 {
            a.namespace = rest[1].to_string();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        if rest.len() >= 3 && a.verb != "proxy" {
            a.subresource = rest[2].to_string();
        }
        if rest.len() >= 2 {
            a.name = rest[1].to_string();
        }
        if let Some(r) = rest.first() {
            a.resource = r.to_string();
        }
        if a.name.is_empty() && a.verb == "get" {
            let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
            a.verb = if watch { "watch" } else { "list" }.to_string();
            // A list or watch of one object by field selector is authorized by its name.
            if let Some(name) = query
                .get("fieldSelector")
                .and_then(|s| exact_name_selector(s))
            {
                a.name = name;
            }
        }
        if via_method && a.name.is_empty() && a.verb == "delete" {
            a.verb = "deletecollection".into();
        }
        a
    }

    /// The resource with its subresource, as rules name it (`pods/log`).
    pub(crate) fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// `metadata.name=X` (or `==`) as the only term of a field selector.
fn exact_name_selector(s: &str) -> Option<String> {
    let terms: Vec<&str> = s.split(',').filter(|t| !t.trim().is_empty()).collect();
    let [term] = terms.as_slice() else {
        return None;
    };
    let (k, v) = term.split_once("==").or_else(|| {
        if term.contains("!=") {
            None
        } else {
            term.split_once('=')
        }
    })?;
    (k.trim() == "metadata.name" && !v.trim().is_empty() && !v.contains('/'))
        .then(|| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn request_info_like_the_real_server() {
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns1/pods", &q(&[]));
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "ns1", "pods")
        );
        let a = Attributes::from_request(
            "GET",
            "/api/v1/namespaces/ns1/pods",
            &q(&[("watch", "true")]),
        );
        assert_eq!(a.verb, "watch");
        let a = Attributes::from_request("GET", "/api/v1/watch/namespaces/ns1/pods/p", &q(&[]));
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "p"));
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns1/pods/p/log", &q(&[]));
        assert_eq!(
            (a.verb.as_str(), a.combined_resource().as_str()),
            ("get", "pods/log")
        );
        let a = Attributes::from_request(
            "PUT",
            "/apis/apps/v1/namespaces/n/deployments/d/scale",
            &q(&[]),
        );
        assert_eq!(
            (
                a.group.as_str(),
                a.verb.as_str(),
                a.combined_resource().as_str()
            ),
            ("apps", "update", "deployments/scale")
        );
        let a = Attributes::from_request("DELETE", "/api/v1/namespaces/n/configmaps", &q(&[]));
        assert_eq!(a.verb, "deletecollection");
        let a = Attributes::from_request("GET", "/api/v1/namespaces/n", &q(&[]));
        assert_eq!(
            (a.namespace.as_str(), a.resource.as_str(), a.name.as_str()),
            ("n", "namespaces", "n")
        );
        let a = Attributes::from_request("PUT", "/api/v1/namespaces/n/finalize", &q(&[]));
        assert_eq!(a.combined_resource(), "namespaces/finalize");
        let a = Attributes::from_request(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/n/leases",
            &q(&[("fieldSelector", "metadata.name=lock")]),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "lock"));
        let a = Attributes::from_request("GET", "/apis/apps/v1", &q(&[]));
        assert!(!a.resource_request);
        let a = Attributes::from_request(
            "POST",
            "/api/v1/namespaces/n/serviceaccounts/sa/token",
            &q(&[]),
        );
        assert_eq!(
            (a.verb.as_str(), a.combined_resource().as_str()),
            ("create", "serviceaccounts/token")
        );
    }
}
