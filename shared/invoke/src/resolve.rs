//! Finding where to send a function's events.
//!
//! * [`ClusterDnsResolver`]: the Service's cluster DNS name; kube-proxy balances.
//! * [`EndpointSliceResolver`]: the ready pod addresses from the Service's EndpointSlices,
//!   balanced here (round robin), skipping addresses that just refused connections.
//! * [`StaticResolver`]: fixed URLs, for tests and local use.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Uri;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::target::FunctionTarget;

/// Label that ties an EndpointSlice to its Service.
pub use kubeless_api::labels::SERVICE_NAME_LABEL;

/// A base URL to send events to (`http://host:port/`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    // `Uri` clones share its storage, so handing one to every request costs no copy.
    uri: Uri,
}

impl Endpoint {
    /// Parses an absolute `http://` URL.
    pub fn parse(s: &str) -> Result<Self, ResolveError> {
        let invalid = |reason: &'static str| ResolveError::InvalidUrl {
            url: s.to_string(),
            reason,
        };
        let uri: Uri = s.parse().map_err(|_| invalid("not a URL"))?;
        if uri.scheme_str() != Some("http") {
            return Err(invalid("only http:// is supported"));
        }
        if uri.authority().is_none() {
            return Err(invalid("no host"));
        }
        Ok(Self { uri })
    }

    pub fn uri(&self) -> &Uri {
        &self.uri
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.uri, f)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ResolveError {
    #[error("no ready endpoint for function {namespace}/{name}")]
    NoEndpoints { namespace: String, name: String },
    #[error("invalid endpoint URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
}

impl ResolveError {
    /// No endpoints may appear once pods are ready; a bad URL will not fix itself.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::NoEndpoints { .. })
    }
}

/// Endpoint resolution strategy.
pub trait Resolve: Send + Sync {
    /// Where to send the next event for `target`.
    fn resolve(&self, target: &FunctionTarget) -> Result<Endpoint, ResolveError>;

    /// Called when connecting to `endpoint` failed, so it can be avoided for a while.
    fn report_failure(&self, _target: &FunctionTarget, _endpoint: &Endpoint) {}
}

/// `http://<name>.<namespace>.svc.<cluster-domain>:<port>/`.
#[derive(Debug, Clone)]
pub struct ClusterDnsResolver {
    cluster_domain: String,
}

impl Default for ClusterDnsResolver {
    fn default() -> Self {
        Self::new(kubeless_api::function::DEFAULT_CLUSTER_DOMAIN)
    }
}

impl ClusterDnsResolver {
    pub fn new(cluster_domain: impl Into<String>) -> Self {
        Self {
            cluster_domain: cluster_domain.into().trim_matches('.').to_string(),
        }
    }
}

impl Resolve for ClusterDnsResolver {
    fn resolve(&self, t: &FunctionTarget) -> Result<Endpoint, ResolveError> {
        let url = kubeless_api::function::in_cluster_url(
            &t.name,
            &t.namespace,
            i32::from(t.port),
            &self.cluster_domain,
        );
        Endpoint::parse(&format!("{url}/"))
    }
}

/// Map keyed by (namespace, name) whose lookups borrow `&str` (no key allocation per call).
#[derive(Debug)]
struct NsMap<V>(HashMap<String, HashMap<String, V>>);

impl<V> Default for NsMap<V> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<V> NsMap<V> {
    fn get(&self, ns: &str, name: &str) -> Option<&V> {
        self.0.get(ns)?.get(name)
    }
    fn get_mut(&mut self, ns: &str, name: &str) -> Option<&mut V> {
        self.0.get_mut(ns)?.get_mut(name)
    }
    fn insert(&mut self, ns: String, name: String, v: V) {
        self.0.entry(ns).or_default().insert(name, v);
    }
    fn entry_or_default(&mut self, ns: &str, name: &str) -> &mut V
    where
        V: Default,
    {
        self.0
            .entry(ns.to_string())
            .or_default()
            .entry(name.to_string())
            .or_default()
    }
    fn remove(&mut self, ns: &str, name: &str) -> Option<V> {
        let inner = self.0.get_mut(ns)?;
        let v = inner.remove(name);
        if inner.is_empty() {
            self.0.remove(ns);
        }
        v
    }
}

/// Fixed endpoints: one for every target, or per (namespace, name), balanced round robin.
#[derive(Debug, Default)]
pub struct StaticResolver {
    fallback: Vec<Endpoint>,
    by_function: NsMap<Vec<Endpoint>>,
    next: AtomicUsize,
}

impl StaticResolver {
    /// Every target goes to `endpoint`.
    pub fn single(endpoint: Endpoint) -> Self {
        Self {
            fallback: vec![endpoint],
            ..Self::default()
        }
    }

    /// Adds endpoints for one function.
    pub fn with_function(mut self, namespace: &str, name: &str, endpoints: Vec<Endpoint>) -> Self {
        self.by_function
            .insert(namespace.to_string(), name.to_string(), endpoints);
        self
    }
}

impl Resolve for StaticResolver {
    fn resolve(&self, t: &FunctionTarget) -> Result<Endpoint, ResolveError> {
        let list = self
            .by_function
            .get(&t.namespace, &t.name)
            .unwrap_or(&self.fallback);
        if list.is_empty() {
            return Err(ResolveError::NoEndpoints {
                namespace: t.namespace.clone(),
                name: t.name.clone(),
            });
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % list.len();
        Ok(list[i].clone())
    }
}

/// One ready address from an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointAddr {
    pub host: String,
    pub port: u16,
}

impl EndpointAddr {
    /// `http://host:port/`, with IPv6 hosts in brackets.
    pub fn to_endpoint(&self) -> Result<Endpoint, ResolveError> {
        let s = if self.host.contains(':') {
            format!("http://[{}]:{}/", self.host, self.port)
        } else {
            format!("http://{}:{}/", self.host, self.port)
        };
        Endpoint::parse(&s)
    }
}

/// The ready addresses of a Service's EndpointSlices for the target's port. Pure.
///
/// * An endpoint counts unless `conditions.ready` is `false` (unset means ready).
/// * Only its first address is used (the API says consumers treat the rest as interchangeable).
/// * Port: the slice port named `port_name` when given; otherwise the slice's only port;
///   otherwise the port whose number equals `port` (slices carry target port numbers, so this
///   only works when port and targetPort are equal). A slice without ports uses `port`.
/// * The result is sorted and without duplicates, so balancing does not depend on slice order.
pub fn ready_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port: u16,
    port_name: Option<&str>,
) -> Vec<EndpointAddr> {
    let mut out = Vec::new();
    for slice in slices {
        let Some(slice_port) = slice_port(slice, port, port_name) else {
            continue;
        };
        for ep in &slice.endpoints {
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            if let Some(host) = ep.addresses.first().filter(|h| !h.is_empty()) {
                out.push(EndpointAddr {
                    host: host.clone(),
                    port: slice_port,
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn slice_port(slice: &EndpointSlice, port: u16, port_name: Option<&str>) -> Option<u16> {
    let ports = slice.ports.as_deref().unwrap_or_default();
    if ports.is_empty() {
        return Some(port);
    }
    let number = |p: &k8s_openapi::api::discovery::v1::EndpointPort| {
        p.port.and_then(|n| u16::try_from(n).ok())
    };
    if let Some(name) = port_name {
        return ports
            .iter()
            .find(|p| p.name.as_deref().unwrap_or("") == name)
            .and_then(number);
    }
    if let [only] = ports {
        return number(only);
    }
    ports.iter().filter_map(number).find(|n| *n == port)
}

/// Default time an endpoint that refused a connection is skipped.
pub const DEFAULT_FAILURE_COOLDOWN: Duration = Duration::from_secs(5);

type ServiceKey = (String, String);
type Services = NsMap<ServiceEntry>;
type PortKey = (u16, Option<String>);

#[derive(Default)]
struct ServiceEntry {
    slices: BTreeMap<String, EndpointSlice>,
    /// Endpoints computed per port selection; cleared when the slices change.
    computed: HashMap<PortKey, Vec<Endpoint>>,
    next: usize,
    failed_until: HashMap<Endpoint, Instant>,
}

/// Client-side balancing over EndpointSlices. Feed it slices with [`apply`](Self::apply) /
/// [`delete`](Self::delete) / [`replace_all`](Self::replace_all), or let
/// [`spawn_watch`](Self::spawn_watch) do that from the API server.
pub struct EndpointSliceResolver {
    services: Mutex<Services>,
    cooldown: Duration,
    synced: tokio::sync::watch::Sender<bool>,
}

impl fmt::Debug for EndpointSliceResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointSliceResolver")
            .field("cooldown", &self.cooldown)
            .finish_non_exhaustive()
    }
}

impl Default for EndpointSliceResolver {
    fn default() -> Self {
        Self::new(DEFAULT_FAILURE_COOLDOWN)
    }
}

fn service_key(slice: &EndpointSlice) -> Option<(ServiceKey, String)> {
    let ns = slice.metadata.namespace.clone().unwrap_or_default();
    let svc = slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)?
        .clone();
    let name = slice.metadata.name.clone().unwrap_or_default();
    Some(((ns, svc), name))
}

impl EndpointSliceResolver {
    /// `cooldown`: how long an endpoint that failed to connect is skipped.
    pub fn new(cooldown: Duration) -> Self {
        Self {
            services: Mutex::new(Services::default()),
            cooldown,
            synced: tokio::sync::watch::Sender::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Services> {
        // The map stays consistent even if a holder panicked: every update is a single insert/remove.
        self.services.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or updates a slice (ignored without the service-name label).
    pub fn apply(&self, slice: EndpointSlice) {
        let Some((key, name)) = service_key(&slice) else {
            return;
        };
        let mut map = self.lock();
        let entry = map.entry_or_default(&key.0, &key.1);
        entry.slices.insert(name, slice);
        entry.computed.clear();
    }

    /// Removes a slice.
    pub fn delete(&self, slice: &EndpointSlice) {
        let Some((key, name)) = service_key(slice) else {
            return;
        };
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(&key.0, &key.1) {
            entry.slices.remove(&name);
            entry.computed.clear();
            if entry.slices.is_empty() {
                map.remove(&key.0, &key.1);
            }
        }
    }

    /// Replaces every slice (after a watch (re)list).
    pub fn replace_all(&self, slices: Vec<EndpointSlice>) {
        let mut fresh = Services::default();
        for slice in slices {
            if let Some((key, name)) = service_key(&slice) {
                fresh
                    .entry_or_default(&key.0, &key.1)
                    .slices
                    .insert(name, slice);
            }
        }
        let mut map = self.lock();
        // Keep round-robin positions and failure marks of services that still exist.
        for (ns, services) in fresh.0.iter_mut() {
            for (name, entry) in services.iter_mut() {
                if let Some(old) = map.get_mut(ns, name) {
                    entry.next = old.next;
                    entry.failed_until = std::mem::take(&mut old.failed_until);
                }
            }
        }
        *map = fresh;
    }

    /// Marks the initial list as complete.
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Resolves once the initial list is in.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// The ready endpoints currently known for `target` (sorted).
    pub fn endpoints(&self, target: &FunctionTarget) -> Vec<Endpoint> {
        let mut map = self.lock();
        match map.get_mut(&target.namespace, &target.name) {
            Some(entry) => computed(entry, target).to_vec(),
            None => Vec::new(),
        }
    }

    /// Watches EndpointSlices with the service-name label (in `namespace`, or all namespaces)
    /// and keeps this resolver up to date until the returned task is aborted.
    pub fn spawn_watch(
        self: &std::sync::Arc<Self>,
        client: kube::Client,
        namespace: Option<&str>,
    ) -> tokio::task::JoinHandle<()> {
        use futures::StreamExt;
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};

        let api: kube::Api<EndpointSlice> = match namespace {
            Some(ns) => kube::Api::namespaced(client, ns),
            None => kube::Api::all(client),
        };
        let me = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            let config = watcher::Config::default().labels(SERVICE_NAME_LABEL);
            let stream = watcher::watcher(api, config).default_backoff();
            futures::pin_mut!(stream);
            let mut buffer: Vec<EndpointSlice> = Vec::new();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Apply(s)) => me.apply(s),
                    Ok(Event::Delete(s)) => me.delete(&s),
                    Ok(Event::Init) => buffer.clear(),
                    Ok(Event::InitApply(s)) => buffer.push(s),
                    Ok(Event::InitDone) => {
                        me.replace_all(std::mem::take(&mut buffer));
                        me.mark_synced();
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "EndpointSlice watch failed; retrying")
                    }
                }
            }
        })
    }
}

fn computed<'e>(entry: &'e mut ServiceEntry, target: &FunctionTarget) -> &'e [Endpoint] {
    let key = (target.port, target.port_name.clone());
    let slices = &entry.slices;
    entry.computed.entry(key).or_insert_with(|| {
        ready_endpoints(slices.values(), target.port, target.port_name.as_deref())
            .iter()
            .filter_map(|a| a.to_endpoint().ok())
            .collect()
    })
}

impl Resolve for EndpointSliceResolver {
    fn resolve(&self, target: &FunctionTarget) -> Result<Endpoint, ResolveError> {
        let no_endpoints = || ResolveError::NoEndpoints {
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        };
        let mut map = self.lock();
        let entry = map
            .get_mut(&target.namespace, &target.name)
            .ok_or_else(no_endpoints)?;
        let start = entry.next;
        let now = Instant::now();
        entry.failed_until.retain(|_, until| *until > now);
        let failed = std::mem::take(&mut entry.failed_until);
        let list = computed(entry, target);
        let n = list.len();
        if n == 0 {
            entry.failed_until = failed;
            return Err(no_endpoints());
        }
        // First healthy endpoint in round-robin order; when all failed recently, try the next
        // one anyway rather than fail without trying.
        let pick = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| !failed.contains_key(&list[i]))
            .unwrap_or(start % n);
        let endpoint = list[pick].clone();
        entry.next = pick + 1;
        entry.failed_until = failed;
        Ok(endpoint)
    }

    fn report_failure(&self, target: &FunctionTarget, endpoint: &Endpoint) {
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(&target.namespace, &target.name) {
            entry
                .failed_until
                .insert(endpoint.clone(), Instant::now() + self.cooldown);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{
        Endpoint as SliceEndpoint, EndpointConditions, EndpointPort,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ep(addr: &str, ready: Option<bool>) -> SliceEndpoint {
        SliceEndpoint {
            addresses: vec![addr.to_string()],
            conditions: Some(EndpointConditions {
                ready,
                ..EndpointConditions::default()
            }),
            ..SliceEndpoint::default()
        }
    }

    fn port(name: &str, n: i32) -> EndpointPort {
        EndpointPort {
            name: Some(name.to_string()),
            port: Some(n),
            ..EndpointPort::default()
        }
    }

    fn slice(
        name: &str,
        svc: &str,
        ports: Vec<EndpointPort>,
        eps: Vec<SliceEndpoint>,
    ) -> EndpointSlice {
        EndpointSlice {
            address_type: "IPv4".into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), svc.to_string())].into()),
                ..ObjectMeta::default()
            },
            ports: Some(ports),
            endpoints: eps,
        }
    }

    fn addrs(v: &[EndpointAddr]) -> Vec<String> {
        v.iter().map(|a| format!("{}:{}", a.host, a.port)).collect()
    }

    #[test]
    fn not_ready_endpoints_are_skipped_and_unknown_counts_as_ready() {
        let s = slice(
            "f-1",
            "f",
            vec![port("http-function-port", 8080)],
            vec![
                ep("10.0.0.2", Some(true)),
                ep("10.0.0.3", Some(false)),
                ep("10.0.0.1", None),
            ],
        );
        assert_eq!(
            addrs(&ready_endpoints([&s], 8080, None)),
            vec!["10.0.0.1:8080", "10.0.0.2:8080"]
        );
    }

    #[test]
    fn port_matched_by_name_then_single_then_number() {
        let multi = slice(
            "f-1",
            "f",
            vec![port("metrics", 9090), port("http-function-port", 8081)],
            vec![ep("10.0.0.1", None)],
        );
        // by name (slice ports carry the target port number)
        assert_eq!(
            addrs(&ready_endpoints([&multi], 8080, Some("http-function-port"))),
            vec!["10.0.0.1:8081"]
        );
        // unknown name: nothing
        assert!(ready_endpoints([&multi], 8080, Some("nope")).is_empty());
        // no name, several ports: by number
        assert_eq!(
            addrs(&ready_endpoints([&multi], 9090, None)),
            vec!["10.0.0.1:9090"]
        );
        assert!(ready_endpoints([&multi], 8080, None).is_empty());
        // no name, single port: that port whatever its number
        let single = slice("f-2", "f", vec![port("", 3000)], vec![ep("10.0.0.2", None)]);
        assert_eq!(
            addrs(&ready_endpoints([&single], 8080, None)),
            vec!["10.0.0.2:3000"]
        );
        // unnamed single port matches an empty name
        assert_eq!(
            addrs(&ready_endpoints([&single], 8080, Some(""))),
            vec!["10.0.0.2:3000"]
        );
    }

    #[test]
    fn slices_merge_sorted_and_deduplicated() {
        let a = slice(
            "f-a",
            "f",
            vec![port("http", 8080)],
            vec![ep("10.0.0.9", None), ep("10.0.0.1", None)],
        );
        let b = slice(
            "f-b",
            "f",
            vec![port("http", 8080)],
            vec![ep("10.0.0.1", None), ep("10.0.0.5", None)],
        );
        assert_eq!(
            addrs(&ready_endpoints([&a, &b], 8080, Some("http"))),
            vec!["10.0.0.1:8080", "10.0.0.5:8080", "10.0.0.9:8080"]
        );
    }

    #[test]
    fn first_address_only_and_empty_skipped() {
        let mut e = ep("10.0.0.1", None);
        e.addresses.push("10.0.0.2".into());
        let empty = SliceEndpoint::default();
        let s = slice("f-1", "f", vec![port("http", 8080)], vec![e, empty]);
        assert_eq!(
            addrs(&ready_endpoints([&s], 8080, None)),
            vec!["10.0.0.1:8080"]
        );
    }

    #[test]
    fn endpoint_urls_are_validated() {
        assert!(Endpoint::parse("http://10.0.0.1:8080/").is_ok());
        assert!(Endpoint::parse("https://10.0.0.1:8080/").is_err());
        assert!(Endpoint::parse("/just/a/path").is_err());
        assert!(Endpoint::parse("not a url").is_err());
    }

    #[test]
    fn ipv6_endpoints_get_brackets() {
        let a = EndpointAddr {
            host: "fd00::1".into(),
            port: 8080,
        };
        assert_eq!(
            a.to_endpoint().unwrap().to_string(),
            "http://[fd00::1]:8080/"
        );
    }

    #[test]
    fn dns_resolver_builds_service_url() {
        let r = ClusterDnsResolver::new("corp.local.");
        let t = FunctionTarget::new("team", "hello").with_port(9000);
        assert_eq!(
            r.resolve(&t).unwrap().to_string(),
            "http://hello.team.svc.corp.local:9000/"
        );
        let t = FunctionTarget::new("default", "f");
        assert_eq!(
            ClusterDnsResolver::default()
                .resolve(&t)
                .unwrap()
                .to_string(),
            "http://f.default.svc.cluster.local:8080/"
        );
    }

    #[test]
    fn slice_resolver_round_robins_and_skips_failed() {
        let r = EndpointSliceResolver::new(Duration::from_secs(60));
        r.apply(slice(
            "f-1",
            "f",
            vec![port("http", 8080)],
            vec![
                ep("10.0.0.1", None),
                ep("10.0.0.2", None),
                ep("10.0.0.3", None),
            ],
        ));
        let t = FunctionTarget::new("default", "f");
        let picks: Vec<String> = (0..6).map(|_| r.resolve(&t).unwrap().to_string()).collect();
        assert_eq!(
            picks,
            vec![
                "http://10.0.0.1:8080/",
                "http://10.0.0.2:8080/",
                "http://10.0.0.3:8080/",
                "http://10.0.0.1:8080/",
                "http://10.0.0.2:8080/",
                "http://10.0.0.3:8080/"
            ]
        );
        r.report_failure(&t, &Endpoint::parse("http://10.0.0.2:8080/").unwrap());
        let picks: Vec<String> = (0..4).map(|_| r.resolve(&t).unwrap().to_string()).collect();
        assert!(
            !picks.contains(&"http://10.0.0.2:8080/".to_string()),
            "{picks:?}"
        );
        // all failed: still returns one rather than nothing
        for a in ["10.0.0.1", "10.0.0.3"] {
            r.report_failure(&t, &Endpoint::parse(&format!("http://{a}:8080/")).unwrap());
        }
        assert!(r.resolve(&t).is_ok());
    }

    #[test]
    fn failure_cooldown_expires() {
        let r = EndpointSliceResolver::new(Duration::from_millis(0));
        r.apply(slice(
            "f-1",
            "f",
            vec![port("http", 8080)],
            vec![ep("10.0.0.1", None), ep("10.0.0.2", None)],
        ));
        let t = FunctionTarget::new("default", "f");
        r.report_failure(&t, &Endpoint::parse("http://10.0.0.1:8080/").unwrap());
        let picks: Vec<String> = (0..2).map(|_| r.resolve(&t).unwrap().to_string()).collect();
        assert!(picks.contains(&"http://10.0.0.1:8080/".to_string()));
    }

    #[test]
    fn slice_updates_and_deletes_are_seen() {
        let r = EndpointSliceResolver::default();
        let t = FunctionTarget::new("default", "f");
        assert!(matches!(
            r.resolve(&t),
            Err(ResolveError::NoEndpoints { .. })
        ));
        let s = slice(
            "f-1",
            "f",
            vec![port("http", 8080)],
            vec![ep("10.0.0.1", Some(false))],
        );
        r.apply(s.clone());
        assert!(matches!(
            r.resolve(&t),
            Err(ResolveError::NoEndpoints { .. })
        ));
        r.apply(slice(
            "f-1",
            "f",
            vec![port("http", 8080)],
            vec![ep("10.0.0.1", Some(true))],
        ));
        assert_eq!(r.resolve(&t).unwrap().to_string(), "http://10.0.0.1:8080/");
        r.delete(&s);
        assert!(r.resolve(&t).is_err());
        r.replace_all(vec![slice(
            "g-1",
            "g",
            vec![port("http", 8080)],
            vec![ep("10.0.0.7", None)],
        )]);
        assert!(r.resolve(&t).is_err());
        assert_eq!(
            r.endpoints(&FunctionTarget::new("default", "g")),
            vec![Endpoint::parse("http://10.0.0.7:8080/").unwrap()]
        );
        // slices without the service label are ignored
        let mut unlabeled = slice("h-1", "h", vec![], vec![ep("10.0.0.8", None)]);
        unlabeled.metadata.labels = None;
        r.apply(unlabeled);
        assert!(r.endpoints(&FunctionTarget::new("default", "h")).is_empty());
    }

    #[test]
    fn static_resolver_round_robin_and_fallback() {
        let a = Endpoint::parse("http://127.0.0.1:1/").unwrap();
        let b = Endpoint::parse("http://127.0.0.1:2/").unwrap();
        let r = StaticResolver::default().with_function("ns", "f", vec![a.clone(), b.clone()]);
        let t = FunctionTarget::new("ns", "f");
        assert_eq!(r.resolve(&t).unwrap(), a);
        assert_eq!(r.resolve(&t).unwrap(), b);
        assert!(r.resolve(&FunctionTarget::new("ns", "other")).is_err());
        let s = StaticResolver::single(a.clone());
        assert_eq!(s.resolve(&FunctionTarget::new("x", "y")).unwrap(), a);
    }
}
