//! Property tests of the gateway's route table: for any set of routes and any request host and
//! path, `lookup` never panics, picks a route whose prefix ends at a path segment of the path,
//! forwards exactly the rest of the path, prefers the longest prefix and a route naming the host
//! over a host-less one, and never falls back from a routed host to another namespace's host-less
//! route; `normalise_host` is idempotent.
#![cfg(test)]

use http_trigger_controller::gateway::routes::{Route, RouteTable, normalise_host};
use proptest::prelude::*;

fn segment() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "ab", "api", "v1", "%2F", "é"]).prop_map(str::to_string)
}

fn prefix() -> impl Strategy<Value = String> {
    proptest::collection::vec(segment(), 0..3).prop_map(|s| format!("/{}", s.join("/")))
}

fn route() -> impl Strategy<Value = Route> {
    (
        proptest::option::of(prop::sample::select(vec!["x.io", "y.io"])),
        prefix(),
        0..3usize,
        prop::sample::select(vec!["tenant-a", "tenant-b"]),
    )
        .prop_map(|(host, prefix, i, ns)| Route {
            namespace: ns.into(),
            trigger: format!("t{i}"),
            host: host.map(str::to_string),
            prefix: if prefix == "/" {
                prefix
            } else {
                prefix.trim_end_matches('/').to_string()
            },
            cors: false,
            basic_auth_secret: None,
            target: None,
            scale_to_zero: false,
            runtime_paths: false,
        })
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(segment(), 0..4).prop_map(|s| format!("/{}", s.join("/"))),
        ".*",
    ]
}

/// Whether `prefix` matches `path` at a segment boundary.
fn matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn lookup_picks_the_longest_matching_prefix(
        routes in proptest::collection::vec(route(), 0..8),
        host in prop_oneof![prop::sample::select(vec!["x.io", "y.io", "z.io"]).prop_map(str::to_string), ".*"],
        path in path(),
    ) {
        let table = RouteTable::from_routes(routes.clone());
        prop_assert_eq!(table.len(), routes.len());
        let hit = table.lookup(&host, &path);
        let for_host = routes.iter().filter(|r| r.host.as_deref() == Some(host.as_str()));
        // A routed host's unmatched paths may fall back only to its own namespace's host-less
        // routes.
        let host_namespaces: Vec<&str> = for_host.clone().map(|r| r.namespace.as_str()).collect();
        let any_host = routes.iter().filter(|r| {
            r.host.is_none()
                && (host_namespaces.is_empty() || host_namespaces.contains(&r.namespace.as_str()))
        });
        let best = |rs: &mut dyn Iterator<Item = &Route>| {
            rs.filter(|r| matches(&r.prefix, &path)).map(|r| r.prefix.len()).max()
        };
        let want = best(&mut for_host.clone()).map(|l| (true, l)).or(best(&mut any_host.clone()).map(|l| (false, l)));
        match (hit, want) {
            (None, None) => {}
            (Some((r, rest)), Some((named, len))) => {
                prop_assert_eq!(r.host.is_some(), named, "a route naming the host wins");
                if !named && !host_namespaces.is_empty() {
                    prop_assert!(host_namespaces.contains(&r.namespace.as_str()), "another namespace's catch-all");
                }
                prop_assert_eq!(r.prefix.len(), len, "longest prefix wins");
                prop_assert!(matches(&r.prefix, &path));
                let expected = if r.prefix == "/" {
                    path.as_str()
                } else {
                    match &path[r.prefix.len()..] { "" => "/", rest => rest }
                };
                prop_assert_eq!(rest, expected);
            }
            (hit, want) => prop_assert!(false, "lookup gave {:?}, expected {:?}", hit.map(|(r, p)| (&r.prefix, p)), want),
        }
    }

    #[test]
    fn host_normalisation_is_idempotent(raw in prop_oneof![".*", "[ .a-zA-Z\\t]{0,8}(:[0-9]{1,5})?"]) {
        let once = normalise_host(&raw);
        prop_assert_eq!(normalise_host(&once), once.clone());
        prop_assert!(!once.chars().any(|c| c.is_ascii_uppercase()));
    }
}
