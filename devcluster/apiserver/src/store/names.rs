//! The real server's rules for object names (DNS-1123 labels and subdomains, DNS-1035 labels).

use crate::registry::ResourceDef;

/// A DNS-1123 label: at most 63 lower case alphanumerics or '-', alphanumeric at both ends.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain as Kubernetes checks it: at most 253 characters of dot-separated
/// labels (the labels themselves are not limited to 63 here).
fn is_dns_subdomain(s: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label_ok)
}

/// A DNS-1035 label: a DNS-1123 label that starts with a letter (Service names).
fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// The real server's name rule per kind: DNS-1035 label for Services, DNS-1123 label for
/// Namespaces, DNS-1123 subdomain for everything else (custom resources included).
pub(super) fn name_error(def: &ResourceDef, name: &str) -> Option<String> {
    let core = def.gr.group.is_empty();
    match def.gr.resource.as_str() {
        "services" if core && !is_dns1035_label(name) => Some(format!(
            "metadata.name: Invalid value: \"{name}\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )),
        "namespaces" if core && !is_dns_label(name) => Some(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        )),
        "services" | "namespaces" if core => None,
        // RBAC objects need only be a path segment (`system:aggregate-to-view`).
        "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings"
            if def.gr.group == "rbac.authorization.k8s.io" =>
        {
            if name == "." || name == ".." {
                Some(format!(
                    "metadata.name: Invalid value: \"{name}\": may not be '{name}'"
                ))
            } else {
                ["/", "%"].into_iter().find(|c| name.contains(c)).map(|c| {
                    format!("metadata.name: Invalid value: \"{name}\": may not contain '{c}'")
                })
            }
        }
        _ if !is_dns_subdomain(name) => Some(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )),
        _ => None,
    }
}
