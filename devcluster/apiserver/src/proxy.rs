//! Service and pod proxy: forwards a request (any method, streaming body) to a
//! ready endpoint over plain HTTP/1.1, as the real API server's proxy subresource
//! does, HTTP/1.1 upgrades (WebSocket) included.

use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, Version, header};
use serde_json::Value;

use crate::app::App;
use crate::errors::ApiError;
use crate::registry::{GroupResource, ResourceDef};

/// Headers that describe one connection, not the message (RFC 9110 7.6.1), and the
/// client's credentials, which are for the API server only.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
];

/// Drops the hop-by-hop headers, those the `Connection` header names too. What is
/// left can go out on any HTTP version: the backend is spoken to in HTTP/1.1
/// whatever the client used, and an HTTP/2 client must get no connection headers.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for h in named {
        headers.remove(h);
    }
    for h in HOP_BY_HOP {
        headers.remove(*h);
    }
}

/// `name`, `name:port` or `scheme:name:port`.
fn split_name(raw: &str) -> (&str, Option<&str>) {
    let parts: Vec<&str> = raw.split(':').collect();
    match parts.as_slice() {
        [name] => (name, None),
        [name, port] => (name, Some(*port).filter(|p| !p.is_empty())),
        [_scheme, name, port, ..] => (name, Some(*port).filter(|p| !p.is_empty())),
        _ => (raw, None),
    }
}

fn port_matches(p: &Value, port: &str) -> bool {
    p.get("name").and_then(Value::as_str) == Some(port)
        || p.get("port")
            .and_then(Value::as_i64)
            .is_some_and(|n| n.to_string() == port)
}

/// Picks the backend address of a Service from its Endpoints (or EndpointSlices).
fn service_backend(
    app: &App,
    ns: &str,
    name: &str,
    port: Option<&str>,
) -> Result<String, ApiError> {
    let svc_gr = GroupResource::new("", "services");
    let svc = app
        .store
        .get(&svc_gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&svc_gr, name))?;
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let svc_port = match port {
        Some(p) => ports.iter().find(|sp| port_matches(sp, p)).cloned(),
        None => ports.first().cloned(),
    };
    let Some(svc_port) = svc_port else {
        return Err(ApiError::unavailable(format!(
            "no endpoints available for service \"{name}\""
        )));
    };
    let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
    let mut candidates = Vec::new();
    if let Some(ep) = app
        .store
        .get(&GroupResource::new("", "endpoints"), ns, name)
    {
        for sub in ep
            .get("subsets")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let sub_ports = sub
                .get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let p = sub_ports
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                .or(if sub_ports.len() == 1 {
                    sub_ports.first()
                } else {
                    None
                })
                .and_then(|p| p.get("port").and_then(Value::as_i64));
            let Some(p) = p else { continue };
            for a in sub
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(ip) = a.get("ip").and_then(Value::as_str) {
                    candidates.push(format!("{ip}:{p}"));
                }
            }
        }
    }
    if candidates.is_empty() {
        let slices = app.store.list(
            &GroupResource::new("discovery.k8s.io", "endpointslices"),
            Some(ns),
            &crate::selectors::LabelSelector::parse(&format!("kubernetes.io/service-name={name}"))
                .unwrap_or_default(),
            &Default::default(),
            None,
            None,
        )?;
        for s in slices.items {
            let sp = s
                .get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let p = sp
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                .or(if sp.len() == 1 { sp.first() } else { None })
                .and_then(|p| p.get("port").and_then(Value::as_i64));
            let Some(p) = p else { continue };
            for e in s
                .get("endpoints")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if e.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                    continue;
                }
                for ip in e
                    .get("addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    candidates.push(format!("{ip}:{p}"));
                }
            }
        }
    }
    if candidates.is_empty() {
        return Err(ApiError::unavailable(format!(
            "no endpoints available for service \"{name}\""
        )));
    }
    let i = app.rr.fetch_add(1, Ordering::Relaxed) % candidates.len();
    Ok(candidates.swap_remove(i))
}

fn pod_backend(app: &App, ns: &str, name: &str, port: Option<&str>) -> Result<String, ApiError> {
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::unavailable(format!("pod \"{name}\" has no IP address yet")))?;
    let ports: Vec<Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let port = match port {
        Some(p) if p.parse::<u16>().is_ok() => p.to_string(),
        Some(p) => ports
            .iter()
            .find(|cp| cp.get("name").and_then(Value::as_str) == Some(p))
            .and_then(|cp| cp.get("containerPort").and_then(Value::as_i64))
            .map(|n| n.to_string())
            .ok_or_else(|| {
                ApiError::unavailable(format!("pod \"{name}\" has no port named {p}"))
            })?,
        None => ports
            .first()
            .and_then(|cp| cp.get("containerPort").and_then(Value::as_i64))
            .unwrap_or(80)
            .to_string(),
    };
    Ok(format!("{ip}:{port}"))
}

#[allow(clippy::too_many_arguments)]
pub async fn handle(
    app: &App,
    def: &ResourceDef,
    ns: &str,
    raw_name: &str,
    tail: &str,
    query: Option<String>,
    trailing_slash: bool,
    mut req: Request,
) -> Result<Response, ApiError> {
    let (name, port) = split_name(raw_name);
    let backend = if def.gr.resource == "services" {
        service_backend(app, ns, name, port)?
    } else {
        pod_backend(app, ns, name, port)?
    };
    let mut path = format!("/{tail}");
    if trailing_slash && !tail.is_empty() {
        path.push('/');
    }
    let pq = match query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path,
    };
    let uri: Uri = format!("http://{backend}{pq}")
        .parse()
        .map_err(|e| ApiError::bad_request(format!("bad proxy path: {e}")))?;
    // An HTTP/1.1 upgrade (a WebSocket, say) is passed on, as the real proxy does;
    // HTTP/2 has no Upgrade.
    let upgrade = requested_upgrade(&req).map(|proto| (proto, hyper::upgrade::on(&mut req)));
    let (mut parts, body) = req.into_parts();
    parts.uri = uri;
    // An HTTP/2 request (kubectl's, by ALPN) goes on as HTTP/1.1; the client sets
    // Host from the URI, as the real proxy addresses the endpoint.
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    parts.headers.remove(header::AUTHORIZATION);
    if let Some((proto, _)) = &upgrade {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        parts.headers.insert(header::UPGRADE, proto.clone());
    }
    let fwd = http::Request::from_parts(parts, body);
    let mut resp = app
        .proxy
        .request(fwd)
        .await
        .map_err(|e| ApiError::unavailable(format!("error trying to reach service: {e}")))?;
    let switched = match upgrade {
        Some((_, from_client)) if resp.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let from_backend = hyper::upgrade::on(&mut resp);
            tokio::spawn(splice(from_client, from_backend));
            resp.headers().get(header::UPGRADE).cloned()
        }
        _ => None,
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(proto) = switched {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        parts.headers.insert(header::UPGRADE, proto);
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// The protocol an HTTP/1.1 request asks to switch to (`Connection: upgrade`).
fn requested_upgrade(req: &Request) -> Option<HeaderValue> {
    let asks = req.version() == Version::HTTP_11
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| req.headers().get(header::UPGRADE).cloned())
        .flatten()
}

/// Copies bytes both ways between the client's and the backend's upgraded connections.
async fn splice(client: hyper::upgrade::OnUpgrade, backend: hyper::upgrade::OnUpgrade) {
    let (client, backend) = match futures::future::try_join(client, backend).await {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!("proxy upgrade failed: {e}");
            return;
        }
    };
    let mut client = hyper_util::rt::TokioIo::new(client);
    let mut backend = hyper_util::rt::TokioIo::new(backend);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
}
