//! Small pure helpers: label selectors, generated names, template hashes,
//! pod IP allocation, owner references.

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::Resource;
use rand::Rng;
use sha2::{Digest, Sha256};

/// Label naming the template version of a Deployment's pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Letters Kubernetes uses in generated names (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `base` plus a random 5-character suffix, like `generateName`.
pub fn generate_name(base: &str) -> String {
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    // Pod names are DNS subdomains (253); keep room for the suffix.
    let base: String = base.chars().take(240).collect();
    format!("{base}{suffix}")
}

/// A short stable hash of a pod template, in name-safe letters.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    // serde_json of k8s-openapi types is deterministic (struct field order, BTreeMaps).
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest
        .iter()
        .take(10)
        .map(|b| NAME_ALPHABET[(*b as usize) % NAME_ALPHABET.len()] as char)
        .collect()
}

/// Whether `labels` satisfy a full LabelSelector (matchLabels and matchExpressions).
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(ml) = &sel.match_labels
        && !map_selector_matches(ml, labels)
    {
        return false;
    }
    for expr in sel.match_expressions.iter().flatten() {
        let values = expr.values.clone().unwrap_or_default();
        let value = labels.get(&expr.key);
        let ok = match expr.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// Whether `labels` contain every pair of a Service-style selector map.
pub fn map_selector_matches(
    sel: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// A controller owner reference to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    owner.controller_owner_ref(&())
}

/// The uid of the object's controller, if its kind is `kind`.
pub fn controller_uid<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
) -> Option<&'a str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.uid.as_str())
}

/// Whether a pod is being deleted.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Pod phase, "Pending" when unset.
pub fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Whether the pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Hands out loopback addresses `base + 2 ..= base + 65534`, round robin so a
/// freed address is not reused at once (stale endpoints would hit a new pod).
#[derive(Debug)]
pub struct IpAllocator {
    base: u32,
    next: u32,
    used: HashSet<u32>,
}

const IP_FIRST: u32 = 2;
const IP_LAST: u32 = 65534;

impl IpAllocator {
    pub fn new(base: Ipv4Addr) -> Self {
        Self {
            base: u32::from(base) & 0xFFFF_0000,
            next: IP_FIRST,
            used: HashSet::new(),
        }
    }

    /// Whether `ip` lies in this allocator's range.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let v = u32::from(ip);
        v & 0xFFFF_0000 == self.base && (IP_FIRST..=IP_LAST).contains(&(v & 0xFFFF))
    }

    /// Marks an address (e.g. from an existing pod's status) as taken.
    pub fn reserve(&mut self, ip: Ipv4Addr) -> bool {
        self.contains(ip) && self.used.insert(u32::from(ip) & 0xFFFF)
    }

    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in IP_FIRST..=IP_LAST {
            let candidate = self.next;
            self.next = if self.next >= IP_LAST {
                IP_FIRST
            } else {
                self.next + 1
            };
            if self.used.insert(candidate) {
                return Some(Ipv4Addr::from(self.base | candidate));
            }
        }
        None
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        if self.contains(ip) {
            self.used.remove(&(u32::from(ip) & 0xFFFF));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn generated_names() {
        let a = generate_name("web-");
        assert!(a.starts_with("web-") && a.len() == 9, "{a}");
        assert!(a[4..].bytes().all(|b| NAME_ALPHABET.contains(&b)));
        let names: HashSet<String> = (0..50).map(|_| generate_name("x-")).collect();
        assert!(names.len() > 45, "names should be random");
    }

    #[test]
    fn template_hash_tracks_changes() {
        let t1: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "python:3"}]}}))
        .unwrap();
        let mut t2 = t1.clone();
        assert_eq!(template_hash(&t1), template_hash(&t2));
        if let Some(spec) = t2.spec.as_mut() {
            spec.containers[0].image = Some("python:4".into());
        }
        assert_ne!(template_hash(&t1), template_hash(&t2));
        assert_eq!(template_hash(&t1).len(), 10);
    }

    #[test]
    fn selectors() {
        let labels: BTreeMap<String, String> =
            [("app".into(), "a".into()), ("tier".into(), "web".into())].into();
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "a".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["web".into(), "x".into()]),
                },
                LabelSelectorRequirement {
                    key: "gone".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert!(selector_matches(&sel, &labels));
        let sel2 = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "NotIn".into(),
                values: Some(vec!["web".into()]),
            }]),
        };
        assert!(!selector_matches(&sel2, &labels));
        assert!(map_selector_matches(
            &[("tier".to_string(), "web".to_string())].into(),
            &labels
        ));
        assert!(!map_selector_matches(
            &[("tier".to_string(), "db".to_string())].into(),
            &labels
        ));
    }

    #[test]
    fn ip_allocation_round_robin() {
        let mut a = IpAllocator::new(Ipv4Addr::new(127, 1, 0, 0));
        let first = a.allocate().unwrap();
        assert_eq!(first, Ipv4Addr::new(127, 1, 0, 2));
        assert!(a.reserve(Ipv4Addr::new(127, 1, 0, 3)));
        assert!(!a.reserve(Ipv4Addr::new(127, 1, 0, 3)));
        assert!(!a.reserve(Ipv4Addr::new(127, 2, 0, 9)));
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(127, 1, 0, 4));
        a.release(first);
        // Not reused straight away.
        assert_eq!(a.allocate().unwrap(), Ipv4Addr::new(127, 1, 0, 5));
        assert_eq!(a.allocate().unwrap().octets()[..2], [127, 1]);
    }
}
