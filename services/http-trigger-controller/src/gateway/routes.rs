//! The gateway's routing table: host + longest path prefix -> a function. Pure; rebuilt from the
//! watched HTTPTriggers, Functions and Services whenever one of them changes.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kubeless_api::{Function, HttpTrigger, scale::ScaleState};
use kubeless_invoke::FunctionTarget;

use crate::ingress::{self, FunctionPort};

/// One HTTPTrigger as the gateway serves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Namespace of the trigger and its function.
    pub namespace: String,
    /// The trigger's name (for logs).
    pub trigger: String,
    /// Lower-case host; `None` matches every host.
    pub host: Option<String>,
    /// `/` or `/a/b` (no trailing slash).
    pub prefix: String,
    /// Answer CORS preflights and add Access-Control-* headers.
    pub cors: bool,
    /// Secret (same namespace) with the allowed credentials.
    pub basic_auth_secret: Option<String>,
    /// The function's Service, port and timeout; `None` when the Function does not exist.
    pub target: Option<FunctionTarget>,
    /// The function has scale to zero on (a `ScaledToZero` condition): requests record
    /// activity and may be held while it wakes. `false` keeps the request path as it was.
    pub scale_to_zero: bool,
    /// Forward the runtime's own `/metrics` and `/healthz` too (the trigger's
    /// [`RUNTIME_PATHS_ANNOTATION`] is `"true"`); otherwise the gateway answers 404 for them.
    pub runtime_paths: bool,
}

/// Annotation on an HTTPTrigger: `"true"` routes the function runtime's own `/metrics` and
/// `/healthz` through the gateway (they are not public by default).
pub const RUNTIME_PATHS_ANNOTATION: &str = "kubeless.io/expose-runtime-paths";

/// Paths the function runtime serves itself (metrics, health), not the function.
pub const RUNTIME_PATHS: [&str; 2] = ["/metrics", "/healthz"];

/// A request path that climbs above the root (`/../x`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AboveRoot;

/// The path with RFC 3986 dot segments removed (`.` and `..`, also percent-encoded as `%2e`),
/// and runs of `/` folded into one, so `/a/../b`, `/a/%2e%2e/b` and `//b` all route as `/b`.
/// Borrows `raw` when there is nothing to do (the usual case). A path that climbs above the root
/// is refused.
pub fn normalise_path(raw: &str) -> Result<Cow<'_, str>, AboveRoot> {
    let needs = raw.contains("//")
        || raw.contains("/.")
        || raw.contains("%2e")
        || raw.contains("%2E")
        || !raw.starts_with('/');
    if !needs {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = raw.split('/').collect();
    let last = segments.len().saturating_sub(1);
    let mut trailing = false;
    for (i, seg) in segments.iter().enumerate() {
        let dots = if seg.contains('%') {
            seg.replace("%2e", ".").replace("%2E", ".")
        } else {
            (*seg).to_string()
        };
        match dots.as_str() {
            "" => trailing = i == last && i > 0,
            "." => trailing = i == last,
            ".." => {
                if out.pop().is_none() {
                    return Err(AboveRoot);
                }
                trailing = i == last;
            }
            _ => {
                out.push(seg);
                trailing = false;
            }
        }
    }
    let mut path = String::with_capacity(raw.len());
    for seg in &out {
        path.push('/');
        path.push_str(seg);
    }
    if path.is_empty() || trailing {
        path.push('/');
    }
    Ok(Cow::Owned(path))
}

impl Route {
    /// The route of a trigger, given its function (if it exists) and the function's Service.
    pub fn from_trigger(
        t: &HttpTrigger,
        function: Option<&Function>,
        service: Option<&Service>,
    ) -> Self {
        let namespace = t.namespace().unwrap_or_default();
        let target = function.map(|f| {
            let port = FunctionPort::resolve(service, Some(f));
            let mut target = FunctionTarget::new(namespace.clone(), f.name_any())
                .with_port(u16::try_from(port.port).unwrap_or(8080))
                // An invalid timeout is the function-controller's to report; use the default.
                .with_timeout(f.spec.timeout_duration().unwrap_or(Duration::from_secs(
                    kubeless_api::parse::DEFAULT_TIMEOUT_SECS,
                )));
            if let Some(name) = port.name {
                target = target.with_port_name(name);
            }
            target
        });
        Self {
            namespace,
            trigger: t.name_any(),
            host: ingress::trigger_host(t),
            prefix: ingress::trigger_path(t).trim_end_matches('/').to_string(),
            cors: t.spec.cors_enable == Some(true),
            basic_auth_secret: ingress::basic_auth_secret(t).map(str::to_string),
            target,
            scale_to_zero: function.is_some_and(|f| ScaleState::of(f) != ScaleState::Off),
            runtime_paths: t
                .annotations()
                .get(RUNTIME_PATHS_ANNOTATION)
                .is_some_and(|v| v == "true"),
        }
        .normalised()
    }

    fn normalised(mut self) -> Self {
        if self.prefix.is_empty() {
            self.prefix = "/".into();
        }
        self
    }

    /// The path to send to the function when `path` matches this route: the prefix is
    /// stripped (like nginx's `rewrite-target: /`, but the rest of the path is kept).
    pub fn rewrite<'p>(&self, path: &'p str) -> Option<&'p str> {
        if self.prefix == "/" {
            return Some(path);
        }
        let rest = path.strip_prefix(self.prefix.as_str())?;
        if rest.is_empty() {
            Some("/")
        } else if rest.starts_with('/') {
            Some(rest)
        } else {
            // `/foo` does not match `/foobar`: prefixes end at a path segment.
            None
        }
    }
}

/// Routes by host; each list is sorted by prefix length, longest first.
#[derive(Debug, Default, Clone)]
pub struct RouteTable {
    by_host: HashMap<String, Vec<Arc<Route>>>,
    any_host: Vec<Arc<Route>>,
}

impl RouteTable {
    /// A table from ready-made routes (tests, benches).
    pub fn from_routes(routes: impl IntoIterator<Item = Route>) -> Self {
        let mut table = Self::default();
        for r in routes {
            let r = Arc::new(r);
            match &r.host {
                Some(h) => table.by_host.entry(h.clone()).or_default().push(r),
                None => table.any_host.push(r),
            }
        }
        // Longest prefix first; ties broken by namespace and name so the winner is stable.
        let order = |a: &Arc<Route>, b: &Arc<Route>| {
            b.prefix
                .len()
                .cmp(&a.prefix.len())
                .then_with(|| a.namespace.cmp(&b.namespace))
                .then_with(|| a.trigger.cmp(&b.trigger))
        };
        for list in table.by_host.values_mut() {
            list.sort_by(order);
        }
        table.any_host.sort_by(order);
        table
    }

    /// The table for a set of triggers; `function` and `service` look up by (namespace, name).
    /// Triggers the host policy refuses ([`crate::claims::refusals`]) are left out.
    pub fn build<'a>(
        triggers: impl IntoIterator<Item = &'a HttpTrigger>,
        refused: &std::collections::BTreeMap<(String, String), crate::claims::Refusal>,
        function: impl Fn(&str, &str) -> Option<Arc<Function>>,
        service: impl Fn(&str, &str) -> Option<Arc<Service>>,
    ) -> Self {
        let served = triggers
            .into_iter()
            .filter(|t| !refused.contains_key(&(t.namespace().unwrap_or_default(), t.name_any())));
        Self::from_routes(served.map(|t| {
            let ns = t.namespace().unwrap_or_default();
            let name = t.spec.function_name.trim();
            let f = function(&ns, name);
            let s = service(&ns, name);
            Route::from_trigger(t, f.as_deref(), s.as_deref())
        }))
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.any_host.len() + self.by_host.values().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The route for `host` (lower-case, no port) and `path`, and the path to forward.
    /// Routes naming the host win over host-less ones, as in an Ingress. A host that has routes
    /// is its namespace's, every path under it: its unmatched paths fall back only to host-less
    /// routes of that namespace, never to another namespace's catch-all.
    pub fn lookup<'p>(&self, host: &str, path: &'p str) -> Option<(&Arc<Route>, &'p str)> {
        let named = self.by_host.get(host);
        if let Some(hit) =
            named.and_then(|list| list.iter().find_map(|r| r.rewrite(path).map(|p| (r, p))))
        {
            return Some(hit);
        }
        self.any_host
            .iter()
            .filter(|r| named.is_none_or(|list| list.iter().any(|n| n.namespace == r.namespace)))
            .find_map(|r| r.rewrite(path).map(|p| (r, p)))
    }
}

/// The host of a request for routing: lower-case, without port.
pub fn normalise_host(raw: &str) -> String {
    normalised_host(raw).into_owned()
}

/// [`normalise_host`], borrowing `raw` when it is already normal (the usual case: a lower-case
/// name without port), so routing a request allocates nothing for its host.
pub fn normalised_host(raw: &str) -> Cow<'_, str> {
    let plain = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
    let bytes = raw.as_bytes();
    if bytes.iter().all(|&b| plain(b)) && !raw.ends_with('.') {
        return Cow::Borrowed(raw);
    }
    Cow::Owned(normalise_slow(raw))
}

fn normalise_slow(raw: &str) -> String {
    let raw = raw.trim();
    // IPv6 literal: keep the brackets, drop the port.
    let host = if raw.starts_with('[') {
        raw.split_once(']')
            .map(|(h, _)| format!("{h}]"))
            .unwrap_or_else(|| raw.to_string())
    } else {
        raw.split(':').next().unwrap_or("").to_string()
    };
    // Trimmed again: whitespace before the port (`"a :80"`) is not part of the host.
    host.trim_start()
        .trim_end_matches(|c: char| c == '.' || c.is_whitespace())
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeless_api::HttpTriggerSpec;

    fn route(host: Option<&str>, prefix: &str, name: &str) -> Route {
        Route {
            namespace: "default".into(),
            trigger: name.into(),
            host: host.map(str::to_string),
            prefix: prefix.into(),
            cors: false,
            basic_auth_secret: None,
            target: None,
            scale_to_zero: false,
            runtime_paths: false,
        }
    }

    fn hit(t: &RouteTable, host: &str, path: &str) -> Option<(String, String)> {
        t.lookup(host, path)
            .map(|(r, p)| (r.trigger.clone(), p.to_string()))
    }

    #[test]
    fn longest_prefix_wins_and_prefix_is_stripped() {
        let t = RouteTable::from_routes([
            route(None, "/", "root"),
            route(None, "/api", "api"),
            route(None, "/api/v2", "v2"),
        ]);
        assert_eq!(hit(&t, "x", "/"), Some(("root".into(), "/".into())));
        assert_eq!(hit(&t, "x", "/api"), Some(("api".into(), "/".into())));
        assert_eq!(hit(&t, "x", "/api/"), Some(("api".into(), "/".into())));
        assert_eq!(
            hit(&t, "x", "/api/v1/users"),
            Some(("api".into(), "/v1/users".into()))
        );
        assert_eq!(hit(&t, "x", "/api/v2/u"), Some(("v2".into(), "/u".into())));
        // segment boundary: /apix is not under /api
        assert_eq!(hit(&t, "x", "/apix"), Some(("root".into(), "/apix".into())));
    }

    #[test]
    fn host_routes_win_and_unknown_paths_miss() {
        let t = RouteTable::from_routes([
            route(Some("a.example.com"), "/x", "a-x"),
            route(None, "/x", "any-x"),
            route(None, "/y", "any-y"),
        ]);
        assert_eq!(hit(&t, "a.example.com", "/x").unwrap().0, "a-x");
        assert_eq!(hit(&t, "b.example.com", "/x").unwrap().0, "any-x");
        // host has no /y route: the host-less one serves it
        assert_eq!(hit(&t, "a.example.com", "/y").unwrap().0, "any-y");
        assert_eq!(hit(&t, "a.example.com", "/z"), None);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn dot_segments_and_double_slashes_are_removed() {
        let n = |p| normalise_path(p).map(|c| c.into_owned());
        assert!(matches!(normalise_path("/a/b?"), Ok(Cow::Borrowed(_))));
        assert_eq!(n("/a/../b").unwrap(), "/b");
        assert_eq!(n("/a/%2e%2e/b").unwrap(), "/b");
        assert_eq!(n("/a/%2E./b/./c/").unwrap(), "/b/c/");
        assert_eq!(n("//a///b").unwrap(), "/a/b");
        assert_eq!(n("/a/..").unwrap(), "/");
        assert_eq!(n("/a/b/.").unwrap(), "/a/b/");
        assert_eq!(n("/..").unwrap_err(), AboveRoot);
        assert_eq!(n("/a/../../etc/passwd").unwrap_err(), AboveRoot);
        assert_eq!(n("/%2e%2e/x").unwrap_err(), AboveRoot);
        // Dots inside a segment are a name, not a step.
        assert_eq!(n("/a/..b/.c").unwrap(), "/a/..b/.c");
        // An attacker's `/public/../admin` reaches the admin route, as the function would
        // have resolved it: never a prefix check bypassed by the raw path.
        let t =
            RouteTable::from_routes([route(None, "/public", "pub"), route(None, "/admin", "adm")]);
        let p = n("/public/../admin/x").unwrap();
        assert_eq!(hit(&t, "h", &p), Some(("adm".into(), "/x".into())));
    }

    #[test]
    fn another_namespaces_catch_all_gets_no_path_of_a_routed_host() {
        let in_ns = |ns: &str, host, prefix, name| Route {
            namespace: ns.into(),
            ..route(host, prefix, name)
        };
        let t = RouteTable::from_routes([
            in_ns("tenant-b", Some("shop.example.com"), "/api", "shop"),
            in_ns("tenant-b", None, "/help", "help"),
            in_ns("aa-attacker", None, "/", "catch-all"),
        ]);
        assert_eq!(
            hit(&t, "shop.example.com", "/api/x"),
            Some(("shop".into(), "/x".into()))
        );
        // The host's own namespace may still serve it from a host-less route.
        assert_eq!(
            hit(&t, "shop.example.com", "/help"),
            Some(("help".into(), "/".into()))
        );
        assert_eq!(hit(&t, "shop.example.com", "/other"), None);
        assert_eq!(hit(&t, "shop.example.com", "/"), None);
        // Hosts nobody routes are the catch-all's.
        assert_eq!(
            hit(&t, "elsewhere.example.com", "/other"),
            Some(("catch-all".into(), "/other".into()))
        );
    }

    #[test]
    fn ties_are_stable() {
        let t = RouteTable::from_routes([route(None, "/p", "b"), route(None, "/p", "a")]);
        assert_eq!(hit(&t, "h", "/p").unwrap().0, "a");
    }

    #[test]
    fn hosts_are_normalised() {
        assert_eq!(normalise_host("Example.COM:8080"), "example.com");
        assert_eq!(normalise_host("example.com."), "example.com");
        assert_eq!(normalise_host("[::1]:80"), "[::1]");
        assert_eq!(normalise_host("127.0.0.1"), "127.0.0.1");
    }

    proptest::proptest! {
        /// The borrowing fast path gives what the full normalisation gives.
        #[test]
        fn the_fast_path_agrees_with_the_full_one(
            raw in proptest::prop_oneof![".*", "[-.a-zA-Z0-9 :\\[\\]]{0,12}"]
        ) {
            let fast = normalised_host(&raw);
            proptest::prop_assert_eq!(fast.as_ref(), normalise_slow(&raw));
        }
    }

    #[test]
    fn route_from_trigger_uses_function_timeout_and_service_port() {
        let mut t = HttpTrigger::new(
            "trig",
            HttpTriggerSpec {
                function_name: "hello".into(),
                host_name: Some("Hello.Example.com".into()),
                path: Some("/greet/".into()),
                cors_enable: Some(true),
                basic_auth_secret: Some("creds".into()),
                ..HttpTriggerSpec::default()
            },
        );
        t.metadata.namespace = Some("ns".into());
        let mut f = Function::new("hello", Default::default());
        f.spec.timeout = Some("7".into());
        let r = Route::from_trigger(&t, Some(&f), None);
        assert_eq!(r.host.as_deref(), Some("hello.example.com"));
        assert_eq!(r.prefix, "/greet");
        assert!(r.cors);
        assert_eq!(r.basic_auth_secret.as_deref(), Some("creds"));
        let target = r.target.unwrap();
        assert_eq!(target.timeout, Duration::from_secs(7));
        assert_eq!(target.port, 8080);
        assert_eq!(target.port_name.as_deref(), Some("http-function-port"));
        assert_eq!(
            (target.namespace.as_str(), target.name.as_str()),
            ("ns", "hello")
        );
        assert!(!r.scale_to_zero);
        // no function: a route that answers 503
        assert!(Route::from_trigger(&t, None, None).target.is_none());
        // no path: the root
        t.spec.path = None;
        assert_eq!(Route::from_trigger(&t, None, None).prefix, "/");
    }

    #[test]
    fn scale_to_zero_follows_the_functions_condition() {
        use kubeless_api::{
            Condition, FunctionStatus,
            scale::{SCALED_TO_ZERO, reasons},
        };
        let mut t = HttpTrigger::new(
            "trig",
            HttpTriggerSpec {
                function_name: "hello".into(),
                ..HttpTriggerSpec::default()
            },
        );
        t.metadata.namespace = Some("ns".into());
        let mut f = Function::new("hello", Default::default());
        assert!(!Route::from_trigger(&t, Some(&f), None).scale_to_zero);
        for (at_zero, reason) in [(false, reasons::ACTIVE), (true, reasons::IDLE)] {
            f.status = Some(FunctionStatus {
                conditions: vec![Condition::new(SCALED_TO_ZERO, at_zero, reason, "")],
                ..Default::default()
            });
            assert!(Route::from_trigger(&t, Some(&f), None).scale_to_zero);
        }
        assert!(!Route::from_trigger(&t, None, None).scale_to_zero);
    }
}
