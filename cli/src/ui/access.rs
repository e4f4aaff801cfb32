//! Who may use the dashboard. Every process on the machine (and, on devcluster, every function
//! pod) can open a connection to its port, so being able to connect proves nothing. The
//! credential is a random token that only the person who started `kubeless ui` sees: it is
//! printed once, in the URL. Opening that URL trades the token for an HttpOnly, SameSite=Strict
//! session cookie (a page cannot read it, another site's request does not carry it); scripts
//! send the token as `Authorization: Bearer`. Everything else gets 401.
//!
//! On top of that: the Host must be a loopback name, the bind address or an allowed name (DNS
//! rebinding), and cookie-authenticated writes must come from the dashboard's own origin and
//! carry the page's anti-forgery token (cross-site request forgery).

use std::net::IpAddr;

use axum::http::{HeaderMap, Method, Uri, header};
use rand::{Rng, distr::Alphanumeric};
use subtle::ConstantTimeEq;

/// The header the page's script sends the anti-forgery token in.
pub(crate) const CSRF_HEADER: &str = "x-kubeless-token";

/// The query parameter of the URL `kubeless ui` prints.
const TOKEN_PARAM: &str = "token";

/// The shortest token accepted from `--token-file`.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// A random string of `len` letters and digits (about 5.95 bits each).
pub(crate) fn random_secret(len: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(len)
        .map(char::from)
        .collect()
}

/// Whether a token from `--token-file` can be used: long enough to resist guessing, and made of
/// characters that go into a URL as they are.
pub(crate) fn check_token(token: &str) -> Result<(), String> {
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "the token is {} characters long; use at least {MIN_TOKEN_LEN}",
            token.len()
        ));
    }
    if let Some(c) = token
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-._~".contains(*c)))
    {
        return Err(format!(
            "the token holds {c:?}; use only letters, digits and - . _ ~"
        ));
    }
    Ok(())
}

/// Compares two secrets without an early exit on the first differing byte.
pub(crate) fn same_secret(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// The secrets of one run.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// What the printed URL and `Authorization: Bearer` carry.
    pub access: String,
    /// The session cookie's value, handed out for the access token; never printed.
    pub session: String,
    /// The session cookie's name (with the port: browsers send a host's cookies to every port).
    pub cookie: String,
    /// The anti-forgery token written into pages and checked on cookie-authenticated writes.
    pub csrf: String,
}

impl Keys {
    pub(crate) fn new(access: String, port: u16) -> Self {
        Self {
            access,
            session: random_secret(43),
            cookie: format!("kubeless-ui-{port}"),
            csrf: random_secret(32),
        }
    }

    /// The `Set-Cookie` value that opens a browser session.
    pub(crate) fn set_cookie(&self) -> String {
        format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie, self.session
        )
    }
}

/// The Host names the dashboard answers to: loopback names, the address it is bound to (any
/// address literal when bound to all interfaces), and `extra` (e.g. a proxy's public name).
/// A name that resolves to the machine but is not listed is a DNS rebinding attempt.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    pub bind: IpAddr,
    pub extra: Vec<String>,
}

impl Hosts {
    pub(crate) fn allows(&self, host: &str) -> bool {
        let name = host_name(host);
        if name.eq_ignore_ascii_case("localhost") {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>() {
            return ip.is_loopback() || ip == self.bind || self.bind.is_unspecified();
        }
        self.extra
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host) || h.eq_ignore_ascii_case(name))
    }
}

/// The name part of a Host header: `[::1]:80` -> `::1`, `a.example:8090` -> `a.example`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    }
}

/// How a request proved itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// The browser's session cookie: writes must also pass the anti-forgery checks.
    Cookie,
    /// `Authorization: Bearer <token>`: a browser never adds it by itself, so no forgery check.
    Bearer,
    /// The static assets, which hold no data.
    Anonymous,
}

/// What the guard decides about a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allow(Auth),
    /// The right token in the URL: set the session cookie and redirect here (the same page
    /// without the token).
    Login {
        location: String,
    },
    /// No valid cookie or bearer token (401).
    Unauthorized,
    /// Authenticated or not, refused (403): foreign Host, forged write.
    Refuse(&'static str),
}

/// The token in the query string, and the rest of the query without it.
fn query_token(uri: &Uri) -> Option<(&str, String)> {
    let query = uri.query()?;
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((TOKEN_PARAM, v)) if token.is_none() => token = Some(v),
            _ if pair == TOKEN_PARAM => token = Some(""),
            _ => rest.push(pair),
        }
    }
    token.map(|t| (t, rest.join("&")))
}

/// Where a login redirects: the same path and query without the token, never another site
/// (`//evil.example` would be a protocol-relative URL).
fn login_location(path: &str, rest: &str) -> String {
    let path = if !path.starts_with('/') || path.starts_with("//") || path.contains('\\') {
        "/"
    } else {
        path
    };
    if rest.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{rest}")
    }
}

/// The session cookie's value(s) in the request's `Cookie` headers.
fn has_session(headers: &HeaderMap, keys: &Keys) -> bool {
    let mut found = false;
    for value in headers.get_all(header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((name, v)) = pair.trim().split_once('=') {
                // No early return: the time does not tell which cookie matched.
                found |= name == keys.cookie && same_secret(v, &keys.session);
            }
        }
    }
    found
}

/// The request's `Authorization: Bearer` token, if it sends one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Host check, then the credential (URL token on a GET, bearer token, session cookie), then for
/// cookie-authenticated writes the same-origin and anti-forgery checks. Form posts carry the
/// anti-forgery token as a field, which their handlers check.
pub(crate) fn check(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    keys: &Keys,
    hosts: &Hosts,
) -> Verdict {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !hosts.allows(host) {
        return Verdict::Refuse("this dashboard does not answer to this host name");
    }
    let read = method == Method::GET || method == Method::HEAD;
    if read && uri.path().starts_with("/assets/") {
        return Verdict::Allow(Auth::Anonymous);
    }
    if read && let Some((token, rest)) = query_token(uri) {
        return if same_secret(token, &keys.access) {
            Verdict::Login {
                location: login_location(uri.path(), &rest),
            }
        } else {
            Verdict::Unauthorized
        };
    }
    if let Some(token) = bearer(headers) {
        return if same_secret(token, &keys.access) {
            Verdict::Allow(Auth::Bearer)
        } else {
            Verdict::Unauthorized
        };
    }
    if !has_session(headers, keys) {
        return Verdict::Unauthorized;
    }
    if read {
        return Verdict::Allow(Auth::Cookie);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host));
        if !same {
            return Verdict::Refuse("cross-site request refused");
        }
    }
    if uri.path().starts_with("/api/") {
        let given = headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !same_secret(given, &keys.csrf) {
            return Verdict::Refuse("missing or wrong dashboard token: reload the page");
        }
    }
    Verdict::Allow(Auth::Cookie)
}

/// Whether a posted form may proceed: bearer requests need no anti-forgery field; cookie ones
/// need this run's.
pub(crate) fn form_allowed(auth: Auth, keys: &Keys, field: &str) -> bool {
    match auth {
        Auth::Bearer => true,
        Auth::Cookie => same_secret(field, &keys.csrf),
        Auth::Anonymous => false,
    }
}

/// The 401 page: what to open instead. No data, no token.
pub(crate) fn unauthorized_page() -> String {
    r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Open the dashboard's link · Kubeless</title>
<link rel="stylesheet" href="/assets/style.css">
</head>
<body>
<main id="main">
<h1>Open the link <code>kubeless ui</code> printed</h1>
<p>This dashboard answers only a browser that opened the link the <code>kubeless ui</code>
command printed when it started (<code>http://127.0.0.1:PORT/?token=…</code>): open that link
again. Scripts send the same token as <code>Authorization: Bearer TOKEN</code>.</p>
</main>
</body>
</html>
"#
    .to_string()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn keys() -> Keys {
        Keys {
            access: "A".repeat(20),
            session: "S".repeat(20),
            cookie: "kubeless-ui-8090".into(),
            csrf: "C".repeat(20),
        }
    }

    fn local() -> Hosts {
        Hosts {
            bind: "127.0.0.1".parse().unwrap(),
            extra: vec![],
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    const HOST: (&str, &str) = ("host", "127.0.0.1:8090");

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:8090",
            "127.0.0.1:1",
            "127.3.4.5",
            "[::1]:80",
            "LOCALHOST",
        ] {
            assert!(local().allows(h), "{h}");
        }
        for h in [
            "evil.example:8090",
            "10.0.0.1",
            "",
            "localhost.evil.example",
        ] {
            assert!(!local().allows(h), "{h}");
        }
    }

    #[test]
    fn hosts_are_loopback_the_bind_address_or_listed() {
        let l = local();
        assert!(l.allows("127.0.0.1:8090") && l.allows("localhost") && l.allows("[::1]:1"));
        assert!(!l.allows("evil.example:8090") && !l.allows("10.0.0.5:8090") && !l.allows(""));
        let bound = Hosts {
            bind: "10.0.0.5".parse().unwrap(),
            extra: vec!["dash.example".into()],
        };
        assert!(bound.allows("10.0.0.5:8090") && bound.allows("dash.example:443"));
        assert!(bound.allows("127.0.0.1:8090"));
        assert!(!bound.allows("10.0.0.6:8090") && !bound.allows("evil.example"));
        // Bound to every interface: any address literal, still no unlisted name.
        let all = Hosts {
            bind: "0.0.0.0".parse().unwrap(),
            extra: vec![],
        };
        assert!(all.allows("192.168.1.4:8090"));
        assert!(!all.allows("rebind.evil.example:8090"));
    }

    #[test]
    fn nothing_without_a_credential() {
        let k = keys();
        for (m, p) in [
            (Method::GET, "/"),
            (Method::GET, "/functions/hello"),
            (Method::GET, "/api/functions/hello/logs"),
            (Method::POST, "/functions/hello/delete"),
        ] {
            assert_eq!(
                check(&m, &uri(p), &headers(&[HOST]), &k, &local()),
                Verdict::Unauthorized,
                "{m} {p}"
            );
        }
        // The anti-forgery token a page carries is not a credential.
        assert_eq!(
            check(
                &Method::POST,
                &uri("/api/functions/x/call"),
                &headers(&[HOST, (CSRF_HEADER, &k.csrf)]),
                &k,
                &local()
            ),
            Verdict::Unauthorized
        );
        // Static assets hold no data.
        assert_eq!(
            check(
                &Method::GET,
                &uri("/assets/style.css"),
                &headers(&[HOST]),
                &k,
                &local()
            ),
            Verdict::Allow(Auth::Anonymous)
        );
    }

    #[test]
    fn the_printed_url_logs_in_and_drops_the_token() {
        let k = keys();
        let login = |u: &str| check(&Method::GET, &uri(u), &headers(&[HOST]), &k, &local());
        assert_eq!(
            login(&format!("/?token={}", k.access)),
            Verdict::Login {
                location: "/".into()
            }
        );
        assert_eq!(
            login(&format!(
                "/functions/new?runtime=go1.22&token={}&name=a",
                k.access
            )),
            Verdict::Login {
                location: "/functions/new?runtime=go1.22&name=a".into()
            }
        );
        // Never a redirect to another site.
        assert_eq!(
            login(&format!("//evil.example/?token={}", k.access)),
            Verdict::Login {
                location: "/".into()
            }
        );
        assert_eq!(login("/?token=wrong"), Verdict::Unauthorized);
        assert_eq!(
            login(&format!("/?token={}x", k.access)),
            Verdict::Unauthorized
        );
        assert_eq!(login("/?token="), Verdict::Unauthorized);
        // The session cookie is HttpOnly and SameSite=Strict, and is not the token.
        let c = k.set_cookie();
        assert!(
            c.contains("HttpOnly") && c.contains("SameSite=Strict"),
            "{c}"
        );
        assert!(!c.contains(&k.access));
    }

    #[test]
    fn session_cookie_and_bearer() {
        let k = keys();
        let cookie = format!("other=1; {}={}", k.cookie, k.session);
        assert_eq!(
            check(
                &Method::GET,
                &uri("/functions"),
                &headers(&[HOST, ("cookie", &cookie)]),
                &k,
                &local()
            ),
            Verdict::Allow(Auth::Cookie)
        );
        // Another port's dashboard cookie, or a wrong value, is no session here.
        for bad in [
            format!("kubeless-ui-9999={}", k.session),
            format!("{}=nope", k.cookie),
        ] {
            assert_eq!(
                check(
                    &Method::GET,
                    &uri("/functions"),
                    &headers(&[HOST, ("cookie", &bad)]),
                    &k,
                    &local()
                ),
                Verdict::Unauthorized,
                "{bad}"
            );
        }
        let bearer = format!("Bearer {}", k.access);
        assert_eq!(
            check(
                &Method::POST,
                &uri("/functions/hello/delete"),
                &headers(&[HOST, ("authorization", &bearer)]),
                &k,
                &local()
            ),
            Verdict::Allow(Auth::Bearer)
        );
        assert_eq!(
            check(
                &Method::GET,
                &uri("/functions"),
                &headers(&[HOST, ("authorization", "Bearer wrong")]),
                &k,
                &local()
            ),
            Verdict::Unauthorized
        );
        // The session cookie is not a bearer token.
        let session_as_bearer = format!("Bearer {}", k.session);
        assert_eq!(
            check(
                &Method::GET,
                &uri("/functions"),
                &headers(&[HOST, ("authorization", &session_as_bearer)]),
                &k,
                &local()
            ),
            Verdict::Unauthorized
        );
        assert!(form_allowed(Auth::Bearer, &k, ""));
        assert!(form_allowed(Auth::Cookie, &k, &k.csrf));
        assert!(!form_allowed(Auth::Cookie, &k, "guess"));
        assert!(!form_allowed(Auth::Anonymous, &k, &k.csrf));
    }

    #[test]
    fn rebinding_and_forgery_are_refused_even_with_a_session() {
        let k = keys();
        let cookie = format!("{}={}", k.cookie, k.session);
        let bearer = format!("Bearer {}", k.access);
        // DNS rebinding: a page of another site that resolves to 127.0.0.1.
        assert!(matches!(
            check(
                &Method::GET,
                &uri("/functions"),
                &headers(&[("host", "evil.example:8090"), ("authorization", &bearer)]),
                &k,
                &local()
            ),
            Verdict::Refuse(_)
        ));
        // A form posted from another origin.
        assert!(matches!(
            check(
                &Method::POST,
                &uri("/functions"),
                &headers(&[HOST, ("cookie", &cookie), ("origin", "http://evil.example")]),
                &k,
                &local()
            ),
            Verdict::Refuse(_)
        ));
        // Same-origin forms pass the guard (their handler checks the anti-forgery field).
        assert_eq!(
            check(
                &Method::POST,
                &uri("/functions"),
                &headers(&[
                    HOST,
                    ("cookie", &cookie),
                    ("origin", "http://127.0.0.1:8090")
                ]),
                &k,
                &local()
            ),
            Verdict::Allow(Auth::Cookie)
        );
        // The JSON API needs the anti-forgery header with a cookie.
        let api = uri("/api/functions/x/call");
        for given in [None, Some("nope")] {
            let mut h = headers(&[HOST, ("cookie", &cookie)]);
            if let Some(g) = given {
                h.insert(CSRF_HEADER, HeaderValue::from_str(g).unwrap());
            }
            assert!(matches!(
                check(&Method::POST, &api, &h, &k, &local()),
                Verdict::Refuse(_)
            ));
        }
        assert_eq!(
            check(
                &Method::POST,
                &api,
                &headers(&[HOST, ("cookie", &cookie), (CSRF_HEADER, &k.csrf)]),
                &k,
                &local()
            ),
            Verdict::Allow(Auth::Cookie)
        );
    }

    #[test]
    fn token_files_hold_long_url_safe_tokens() {
        assert!(check_token(&"a".repeat(MIN_TOKEN_LEN)).is_ok());
        assert!(check_token("Ab-._~0123456789xyz").is_ok());
        assert!(check_token("short").is_err());
        assert!(check_token(&format!("{}&x=1", "a".repeat(20))).is_err());
        assert!(check_token(&format!("{} b", "a".repeat(20))).is_err());
        let t = random_secret(48);
        assert!(check_token(&t).is_ok() && t.len() == 48);
        assert_ne!(t, random_secret(48));
    }
}
