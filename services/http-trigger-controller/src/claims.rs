//! Who may route a host: the tenancy rule both the gateway and the Ingress controller apply
//! before they serve an HTTPTrigger. Pure, so every attack is a unit test.
//!
//! A host (and every path under it) belongs to one namespace:
//! - the namespace an install-level policy gives it: `--host-claims` (`NAMESPACE=PATTERN`,
//!   exact names or `*.suffix`), then `--tenant-domain D`, which gives `*.NS.D` and `NS.D` to
//!   namespace `NS`;
//! - otherwise the namespace of the oldest trigger naming it (creation time, then namespace
//!   and name: a later claim never wins).
//!
//! Triggers without a host serve every host not otherwise routed, so "no host" is one more
//! host under the same rule: only the namespace that claimed it first may use it.
//! Triggers of other namespaces on an owned host are refused (`RouteConflict`); triggers of the
//! owner namespace share the host, the longest path prefix winning as before.

use std::collections::{BTreeMap, HashMap};

use kube::ResourceExt;
use kubeless_api::HttpTrigger;

use crate::gateway::routes::normalise_host;
use crate::ingress;

/// The install's host policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostPolicy {
    /// `*.NS.DOMAIN` and `NS.DOMAIN` belong to namespace `NS`.
    pub tenant_domain: Option<String>,
    /// (namespace, pattern): exact host names, or `*.suffix` for every name under `suffix`.
    pub claims: Vec<(String, String)>,
}

/// A flag value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--host-claims entry {0:?}: expected NAMESPACE=HOST or NAMESPACE=*.SUFFIX")]
pub struct BadClaim(pub String);

impl HostPolicy {
    /// From the flags: `domain` may be empty; `claims` is `ns=pattern,ns=pattern`.
    pub fn from_flags(domain: &str, claims: &str) -> Result<Self, BadClaim> {
        let domain = normalise_host(domain.trim().trim_start_matches('.'));
        let mut parsed = Vec::new();
        for entry in claims.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (ns, pattern) = entry
                .split_once('=')
                .map(|(n, p)| (n.trim(), p.trim()))
                .filter(|(n, p)| !n.is_empty() && !p.is_empty())
                .ok_or_else(|| BadClaim(entry.to_string()))?;
            let pattern = match pattern.strip_prefix("*.") {
                Some(suffix) => format!("*.{}", normalise_host(suffix)),
                None => normalise_host(pattern),
            };
            parsed.push((ns.to_string(), pattern));
        }
        Ok(Self {
            tenant_domain: (!domain.is_empty()).then_some(domain),
            claims: parsed,
        })
    }

    /// The namespace the policy gives `host` (normalised), if any.
    pub fn owner_of<'a>(&'a self, host: &'a str) -> Option<&'a str> {
        if host.is_empty() {
            return None;
        }
        for (ns, pattern) in &self.claims {
            let hit = match pattern.strip_prefix("*.") {
                Some(suffix) => host
                    .strip_suffix(suffix)
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                None => host == pattern,
            };
            if hit {
                return Some(ns);
            }
        }
        let domain = self.tenant_domain.as_deref()?;
        let head = host.strip_suffix(domain)?.strip_suffix('.')?;
        // `NS.DOMAIN` or `anything.NS.DOMAIN`: the label right before the domain.
        let ns = head.rsplit('.').next()?;
        (!ns.is_empty()).then_some(ns)
    }
}

/// Why a trigger may not route its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The host as matched (`""` for a trigger without a host).
    pub host: String,
    /// The namespace the host belongs to.
    pub owner_namespace: String,
    /// The owner's trigger that claimed it first, when ownership came from a claim.
    pub owner_trigger: Option<String>,
}

impl Refusal {
    /// The `RouteConflict` message.
    pub fn message(&self) -> String {
        let host = if self.host.is_empty() {
            "routes without a host (every host)".to_string()
        } else {
            format!("host {}", self.host)
        };
        match &self.owner_trigger {
            Some(t) => format!(
                "{host} belongs to namespace {} (HTTPTrigger {t} claimed it first); this trigger is not served",
                self.owner_namespace
            ),
            None => format!(
                "{host} belongs to namespace {} by the install's host policy; this trigger is not served",
                self.owner_namespace
            ),
        }
    }
}

/// The host key of a trigger: its normalised host, `""` without one.
pub fn host_key(t: &HttpTrigger) -> String {
    ingress::trigger_host(t)
        .map(|h| normalise_host(&h))
        .unwrap_or_default()
}

/// The refused triggers among `triggers`, by (namespace, name). Triggers being deleted claim
/// nothing.
pub fn refusals<'a>(
    triggers: impl IntoIterator<Item = &'a HttpTrigger>,
    policy: &HostPolicy,
) -> BTreeMap<(String, String), Refusal> {
    let mut by_host: HashMap<String, Vec<&HttpTrigger>> = HashMap::new();
    for t in triggers {
        if t.metadata.deletion_timestamp.is_none() {
            by_host.entry(host_key(t)).or_default().push(t);
        }
    }
    let mut out = BTreeMap::new();
    for (host, mut claimants) in by_host {
        let (owner, first) = match policy.owner_of(&host) {
            Some(ns) => (ns.to_string(), None),
            None => {
                claimants.sort_by(|a, b| {
                    let created = |t: &HttpTrigger| t.metadata.creation_timestamp.clone();
                    created(a)
                        .cmp(&created(b))
                        .then_with(|| a.namespace().cmp(&b.namespace()))
                        .then_with(|| a.name_any().cmp(&b.name_any()))
                });
                let Some(first) = claimants.first() else {
                    continue;
                };
                (
                    first.namespace().unwrap_or_default(),
                    Some(first.name_any()),
                )
            }
        };
        for t in claimants {
            let ns = t.namespace().unwrap_or_default();
            if ns != owner {
                out.insert(
                    (ns, t.name_any()),
                    Refusal {
                        host: host.clone(),
                        owner_namespace: owner.clone(),
                        owner_trigger: first.clone(),
                    },
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kubeless_api::HttpTriggerSpec;

    fn trigger(ns: &str, name: &str, host: Option<&str>, path: &str, age_s: i64) -> HttpTrigger {
        let mut t = HttpTrigger::new(
            name,
            HttpTriggerSpec {
                function_name: "f".into(),
                host_name: host.map(str::to_string),
                path: Some(path.into()),
                ..HttpTriggerSpec::default()
            },
        );
        t.metadata.namespace = Some(ns.into());
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        t.metadata.creation_timestamp = Some(Time(
            now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(age_s))
                .unwrap(),
        ));
        t
    }

    fn refused(ts: &[HttpTrigger], policy: &HostPolicy) -> Vec<String> {
        refusals(ts.iter(), policy)
            .keys()
            .map(|(ns, n)| format!("{ns}/{n}"))
            .collect()
    }

    #[test]
    fn a_later_claim_from_another_namespace_is_refused_whatever_it_sorts_as() {
        let victim = trigger("tenant-b", "orders", Some("shop.example.com"), "/", 100);
        // Same host and path, a namespace that sorts first, created later.
        let same = trigger("aa-attacker", "steal", Some("shop.example.com"), "/", 10);
        // A longer prefix under the victim's host.
        let longer = trigger(
            "aa-attacker",
            "deeper",
            Some("shop.example.com"),
            "/api/v2",
            5,
        );
        // Case, trailing dot and port do not make another host.
        let spelled = trigger("aa-attacker", "caps", Some("SHOP.Example.com."), "/", 5);
        let port = trigger("aa-attacker", "port", Some("shop.example.com:8080"), "/", 5);
        let ts = [victim, same, longer, spelled, port];
        let r = refusals(ts.iter(), &HostPolicy::default());
        assert_eq!(
            refused(&ts, &HostPolicy::default()),
            [
                "aa-attacker/caps",
                "aa-attacker/deeper",
                "aa-attacker/port",
                "aa-attacker/steal"
            ]
        );
        let why = &r[&("aa-attacker".to_string(), "steal".to_string())];
        assert_eq!(why.owner_namespace, "tenant-b");
        assert!(
            why.message()
                .contains("HTTPTrigger orders claimed it first")
        );
    }

    #[test]
    fn the_owner_namespace_shares_its_host_and_hostless_routes_have_one_owner() {
        let ts = [
            trigger("a", "one", Some("h.example"), "/x", 50),
            trigger("a", "two", Some("h.example"), "/y", 10),
            trigger("a", "any", None, "/", 40),
            trigger("b", "any", None, "/other", 20),
        ];
        assert_eq!(refused(&ts, &HostPolicy::default()), ["b/any"]);
        let r = refusals(ts.iter(), &HostPolicy::default());
        assert!(
            r[&("b".into(), "any".into())]
                .message()
                .contains("routes without a host")
        );
    }

    #[test]
    fn the_install_policy_beats_first_claim() {
        let policy = HostPolicy::from_flags(
            "apps.example.com",
            "payments=pay.example.com,web=*.example.org",
        )
        .unwrap();
        assert_eq!(
            policy.owner_of("f.tenant-b.apps.example.com"),
            Some("tenant-b")
        );
        assert_eq!(
            policy.owner_of("tenant-b.apps.example.com"),
            Some("tenant-b")
        );
        assert_eq!(policy.owner_of("apps.example.com"), None);
        assert_eq!(policy.owner_of("pay.example.com"), Some("payments"));
        assert_eq!(policy.owner_of("a.b.example.org"), Some("web"));
        assert_eq!(policy.owner_of("example.org"), None);
        assert_eq!(policy.owner_of("evilexample.org"), None);
        let ts = [
            // An attacker first on a host the policy gives to tenant-b: still refused.
            trigger(
                "aa-attacker",
                "early",
                Some("f.tenant-b.apps.example.com"),
                "/",
                100,
            ),
            trigger(
                "tenant-b",
                "late",
                Some("f.tenant-b.apps.example.com"),
                "/",
                1,
            ),
            trigger("payments", "pay", Some("pay.example.com"), "/", 1),
            trigger("aa-attacker", "pay", Some("pay.example.com"), "/", 100),
        ];
        assert_eq!(
            refused(&ts, &policy),
            ["aa-attacker/early", "aa-attacker/pay"]
        );
        assert!(HostPolicy::from_flags("", "nohost").is_err());
        assert!(HostPolicy::from_flags("", "=x").is_err());
    }

    #[test]
    fn a_deleted_owner_hands_the_host_on() {
        let mut old = trigger("tenant-b", "orders", Some("h"), "/", 100);
        let next = trigger("aa-attacker", "steal", Some("h"), "/", 10);
        assert_eq!(
            refused(&[old.clone(), next.clone()], &HostPolicy::default()),
            ["aa-attacker/steal"]
        );
        old.metadata.deletion_timestamp = old.metadata.creation_timestamp.clone();
        assert!(refused(&[old, next], &HostPolicy::default()).is_empty());
    }
}
