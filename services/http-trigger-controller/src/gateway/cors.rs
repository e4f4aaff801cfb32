//! CORS for triggers with `cors-enable`, with ingress-nginx's defaults so that a trigger
//! behaves the same behind the built-in gateway and behind ingress-nginx.

use http::Method;
use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, HeaderMap, HeaderValue, ORIGIN, VARY,
};

/// ingress-nginx's `cors-allow-methods` default.
pub const ALLOW_METHODS: &str = "GET, PUT, POST, DELETE, PATCH, OPTIONS";
/// ingress-nginx's `cors-allow-headers` default.
pub const ALLOW_HEADERS: &str = "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization";
/// ingress-nginx's `cors-max-age` default (20 days).
pub const MAX_AGE: &str = "1728000";

/// A browser preflight: OPTIONS with Origin and Access-Control-Request-Method.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS
        && headers.contains_key(ORIGIN)
        && headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
}

/// The allowed origin: the request's Origin echoed back (so credentials work, which `*` does
/// not allow), `*` without one.
fn allow_origin(request: &HeaderMap) -> HeaderValue {
    request
        .get(ORIGIN)
        .cloned()
        .unwrap_or(HeaderValue::from_static("*"))
}

/// Headers of the gateway's answer to a preflight (sent with status 204).
pub fn preflight_headers(request: &HeaderMap) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(6);
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin(request));
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    // Echo what the browser asks for when it asks; nginx's list otherwise.
    h.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        request
            .get(ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(HeaderValue::from_static(ALLOW_HEADERS)),
    );
    h.insert(
        ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE));
    h.insert(VARY, HeaderValue::from_static("Origin"));
    h
}

/// Adds the CORS headers to a function's answer (only for requests with an Origin).
pub fn decorate_response(request: &HeaderMap, response: &mut HeaderMap) {
    if !request.contains_key(ORIGIN) {
        return;
    }
    response.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin(request));
    response.insert(
        ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    response.append(VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preflight_detection() {
        let mut h = HeaderMap::new();
        h.insert(ORIGIN, HeaderValue::from_static("https://app.example"));
        assert!(!is_preflight(&Method::OPTIONS, &h));
        h.insert(
            ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_static("POST"),
        );
        assert!(is_preflight(&Method::OPTIONS, &h));
        assert!(!is_preflight(&Method::POST, &h));
    }

    #[test]
    fn preflight_echoes_origin_and_requested_headers() {
        let mut h = HeaderMap::new();
        h.insert(ORIGIN, HeaderValue::from_static("https://app.example"));
        h.insert(
            ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static("x-custom"),
        );
        let out = preflight_headers(&h);
        assert_eq!(out[ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_HEADERS], "x-custom");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_METHODS], ALLOW_METHODS);
        assert_eq!(out[ACCESS_CONTROL_MAX_AGE], MAX_AGE);
        let out = preflight_headers(&HeaderMap::new());
        assert_eq!(out[ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_HEADERS], ALLOW_HEADERS);
    }

    #[test]
    fn responses_get_headers_only_with_origin() {
        let mut resp = HeaderMap::new();
        decorate_response(&HeaderMap::new(), &mut resp);
        assert!(resp.is_empty());
        let mut req = HeaderMap::new();
        req.insert(ORIGIN, HeaderValue::from_static("https://a"));
        decorate_response(&req, &mut resp);
        assert_eq!(resp[ACCESS_CONTROL_ALLOW_ORIGIN], "https://a");
        assert_eq!(resp[VARY], "Origin");
    }
}
