//! REST routing: discovery, CRUD, list/watch, patch, subresources, logs and proxies.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, Method, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::app::{App, Q, bytes_response, error_response, json_response};
use crate::errors::ApiError;
use crate::patch::PatchKind;
use crate::registry::ResourceDef;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, EventType, Propagation, Store, Sub, WatchEvent};
use crate::table::TableBuilder;

const MAX_BODY: usize = 64 * 1024 * 1024;
const DEFAULT_WATCH_TIMEOUT: u64 = 1800;
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

fn truthy(q: &Q, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

pub async fn handle(State(app): State<Arc<App>>, mut req: Request) -> Response {
    let path = req.uri().path().to_string();
    let public = matches!(path.as_str(), "/healthz" | "/livez" | "/readyz");
    if !public {
        let header = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok());
        let user =
            match app.auth.authenticate(&app.store, header).and_then(|u| {
                crate::auth::impersonate(&app.authorizer, &app.store, u, req.headers())
            }) {
                Ok(u) => u,
                Err(e) => return error_response(&e),
            };
        if !user.is_superuser() {
            let q: Q = Query::<Q>::try_from_uri(req.uri())
                .map(|q| q.0)
                .unwrap_or_default();
            let attrs = crate::auth::Attributes::from_request(req.method().as_str(), &path, &q);
            if let Err(e) = app.authorizer.authorize(&app.store, &user, &attrs) {
                return error_response(&e);
            }
        }
        req.extensions_mut().insert(user);
    }
    let directive = Query::<Q>::try_from_uri(req.uri())
        .ok()
        .and_then(|q| q.0.get("fieldValidation").cloned());
    let Some(validation) = crate::reqctx::FieldValidation::parse(directive.as_deref()) else {
        return error_response(&ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {:?}: supported values: \"Ignore\", \"Strict\", \"Warn\"",
            directive.unwrap_or_default()
        )));
    };
    let write = match write_options(&req) {
        Ok(w) => w,
        Err(e) => return error_response(&e),
    };
    let user = req.extensions().get::<crate::auth::User>().cloned();
    let (result, warnings) = crate::reqctx::scope(user, validation, async {
        crate::reqctx::set_write_options(write);
        route(&app, req).await
    })
    .await;
    let mut response = match result {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    for text in warnings {
        if let Some(v) = crate::reqctx::header_value(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

/// The real server's 422 for a bad `fieldManager` in CreateOptions, UpdateOptions or
/// PatchOptions.
fn options_invalid(
    options: &str,
    kind: kubeless_api::validate::ErrorType,
    detail: String,
) -> ApiError {
    ApiError::invalid_fields(
        options,
        "meta.k8s.io",
        "",
        &[kubeless_api::validate::FieldError {
            field: "fieldManager".into(),
            kind,
            detail,
        }],
    )
}

/// Who the request writes for: `?fieldManager=`, or as the real server defaults it, the
/// client's program name (its User-Agent up to the first '/'). A name over 128 bytes is
/// refused with the real 422.
fn write_options(req: &Request) -> Result<crate::reqctx::WriteOptions, ApiError> {
    let q: Q = Query::<Q>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let given = q.get("fieldManager").filter(|m| !m.is_empty());
    if let Some(m) = given
        && m.len() > crate::fieldmanager::MAX_MANAGER_LEN
    {
        let options = match *req.method() {
            Method::POST => "CreateOptions",
            Method::PUT => "UpdateOptions",
            _ => "PatchOptions",
        };
        return Err(options_invalid(
            options,
            kubeless_api::validate::ErrorType::TooLong,
            format!(
                "Too long: may not be more than {} bytes",
                crate::fieldmanager::MAX_MANAGER_LEN
            ),
        ));
    }
    let field_manager = match given {
        Some(m) => m.clone(),
        None => {
            let agent = req
                .headers()
                .get(header::USER_AGENT)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            let program = agent.split('/').next().unwrap_or("");
            program
                .chars()
                .take(crate::fieldmanager::MAX_MANAGER_LEN)
                .collect()
        }
    };
    Ok(crate::reqctx::WriteOptions {
        field_manager,
        force: truthy(&q, "force"),
        subresource: String::new(),
    })
}

async fn read_body(body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))
}

fn parse_json(b: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(b).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })
}

fn parse_yaml_or_json(b: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice(b) {
        Ok(v) => Ok(v),
        Err(_) => serde_yaml_ng::from_slice(b)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
    }
}

struct Target<'a> {
    group: &'a str,
    version: &'a str,
    ns: Option<&'a str>,
    resource: &'a str,
    name: Option<&'a str>,
    sub: Option<&'a str>,
    tail: String,
    watch_path: bool,
}

fn parse_target<'a>(segs: &'a [&'a str]) -> Option<Target<'a>> {
    let (group, version, mut rest) = match segs {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let mut watch_path = false;
    if rest.first() == Some(&"watch") {
        watch_path = true;
        rest = &rest[1..];
    }
    let (ns, rest) = match rest {
        ["namespaces", ns, r, more @ ..] if *r != "status" && *r != "finalize" => (Some(*ns), {
            let mut v = vec![*r];
            v.extend_from_slice(more);
            v
        }),
        other => (None, other.to_vec()),
    };
    let resource = rest.first().copied()?;
    Some(Target {
        group,
        version,
        ns,
        resource,
        name: rest.get(1).copied(),
        sub: rest.get(2).copied(),
        tail: if rest.len() > 3 {
            rest[3..].join("/")
        } else {
            String::new()
        },
        watch_path,
    })
}

async fn route(app: &Arc<App>, req: Request) -> Result<Response, ApiError> {
    let path = req.uri().path().to_string();
    let q: Q = Query::<Q>::try_from_uri(req.uri())
        .map(|q| q.0)
        .unwrap_or_default();
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let reg = app.store.registry();
    if let ["apis", "authorization.k8s.io", "v1", review] = segs.as_slice()
        && matches!(*review, "selfsubjectaccessreviews" | "subjectaccessreviews")
    {
        if req.method() != Method::POST {
            return Err(ApiError::method_not_allowed());
        }
        let ct = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("application/json");
        let kind = if *review == "selfsubjectaccessreviews" {
            "SelfSubjectAccessReview"
        } else {
            "SubjectAccessReview"
        };
        let protobuf_body = crate::protobuf::is_protobuf(ct);
        if ct.contains("protobuf") && !protobuf_body {
            return Err(ApiError::unsupported_media_type(ct));
        }
        let ct = ct.to_string();
        let caller = req
            .extensions()
            .get::<crate::auth::User>()
            .cloned()
            .ok_or_else(ApiError::unauthorized)?;
        let bytes = read_body(req.into_body()).await?;
        let body = if protobuf_body {
            crate::protobuf::decode_object(&bytes, "authorization.k8s.io", "v1", kind)
                .map_err(|e| e.into_api_error(&ct))?
        } else {
            parse_json(&bytes)?
        };
        let review = crate::auth::access_review(&app.authorizer, &app.store, &caller, kind, &body)?;
        return Ok(json_response(201, &review));
    }
    match segs.as_slice() {
        [] => {
            let mut paths = vec![
                "/api".to_string(),
                "/api/v1".into(),
                "/apis".into(),
                "/version".into(),
                "/healthz".into(),
                "/openapi/v2".into(),
            ];
            for (g, vs) in reg.groups() {
                paths.push(format!("/apis/{g}"));
                for v in vs {
                    paths.push(format!("/apis/{g}/{v}"));
                }
            }
            return Ok(json_response(200, &json!({"paths": paths})));
        }
        ["healthz"] | ["livez"] | ["readyz"] => {
            return Ok(bytes_response(200, Bytes::from_static(b"ok")));
        }
        ["version"] => {
            return Ok(json_response(
                200,
                &json!({
                    "major": "1", "minor": "34", "gitVersion": "v1.34.0-devcluster", "gitCommit": "devcluster",
                    "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "rust",
                    "compiler": "rustc", "platform": "linux/amd64"
                }),
            ));
        }
        ["openapi", "v2"] => return openapi_v2(&req, &reg),
        ["openapi", "v3"] => return Ok(json_response(200, &crate::openapi::root(&reg))),
        ["openapi", "v3", rest @ ..] => {
            return crate::openapi::group_version(&reg, rest)
                .map(|doc| json_response(200, &doc))
                .ok_or_else(ApiError::path_not_found);
        }
        ["api"] => {
            return Ok(json_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": app.addr.to_string()}]}),
            ));
        }
        ["apis"] => return Ok(json_response(200, &reg.api_group_list())),
        ["apis", g] => {
            return reg
                .api_group(g)
                .map(|v| json_response(200, &v))
                .ok_or_else(ApiError::path_not_found);
        }
        ["api", v] => {
            return reg
                .api_resource_list("", v)
                .map(|v| json_response(200, &v))
                .ok_or_else(ApiError::path_not_found);
        }
        ["apis", g, v] => {
            return reg
                .api_resource_list(g, v)
                .map(|v| json_response(200, &v))
                .ok_or_else(ApiError::path_not_found);
        }
        _ => {}
    }
    if let [
        "apis",
        crate::metrics::GROUP,
        crate::metrics::VERSION,
        rest @ ..,
    ] = segs.as_slice()
        && !rest.is_empty()
    {
        return crate::metrics::handle(app, req.method(), rest, &q);
    }
    let t = parse_target(&segs).ok_or_else(ApiError::path_not_found)?;
    if let Some(sub) = t.sub {
        crate::reqctx::set_subresource(sub);
    }
    let def = reg
        .lookup(t.group, t.version, t.resource)
        .ok_or_else(ApiError::path_not_found)?;
    if t.ns.is_some() && !def.namespaced {
        return Err(ApiError::path_not_found());
    }
    let ns = t.ns.unwrap_or("");
    let method = req.method().clone();
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    let table = accept.contains("as=Table");
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    // A resource served under another group too (events.k8s.io/v1 Events are core Events)
    // works in the version `group/version`.
    let served_version = if def.gr.group != t.group {
        format!("{}/{}", t.group, t.version)
    } else {
        t.version.to_string()
    };
    let version = served_version.as_str();
    let protobuf_body = crate::protobuf::is_protobuf(&content_type);
    let token_request = t.sub == Some("token")
        && def.gr.group.is_empty()
        && def.gr.resource == "serviceaccounts"
        && method == Method::POST;
    let protobuf_ok = if token_request {
        true
    } else {
        t.sub.is_none()
            && method != Method::PATCH
            && crate::protobuf::supports(&def.gr.group, version, &def.kind)
    };
    if content_type.contains("protobuf")
        && matches!(method, Method::POST | Method::PUT | Method::PATCH)
        && !(protobuf_body && protobuf_ok)
    {
        // Protobuf is understood for creating and replacing the built-in kinds
        // kubectl's `create` subcommands send (see protobuf.rs); otherwise only
        // JSON (and YAML for apply).
        return Err(ApiError::unsupported_media_type(&content_type));
    }
    let object_body = |bytes: &[u8]| -> Result<Value, ApiError> {
        if protobuf_body {
            crate::protobuf::decode_object(bytes, &def.gr.group, version, &def.kind)
                .map_err(|e| e.into_api_error(&content_type))
        } else {
            parse_json(bytes)
        }
    };
    match (t.name, t.sub) {
        (None, _) => match method {
            Method::GET if t.watch_path || truthy(&q, "watch") => {
                Ok(watch(app, def, version, t.ns, &q, table).await)
            }
            Method::GET => list(app, &def, version, t.ns, &q, table),
            Method::POST => {
                if def.namespaced && t.ns.is_none() {
                    return Err(ApiError::path_not_found());
                }
                reject_dry_run(&q)?;
                let body = object_body(&read_body(req.into_body()).await?)?;
                let obj = app.store.create(&def, version, ns, body)?;
                Ok(json_response(201, &in_version(&def, version, obj)))
            }
            Method::DELETE => {
                let body = read_body(req.into_body()).await?;
                let opts = delete_opts(&q, &body)?;
                let labels = label_sel(&q)?;
                let fields = field_sel(&def, version, &q)?;
                let items: Vec<Value> = app
                    .store
                    .delete_collection(&def, t.ns, &labels, &fields, &opts)?
                    .into_iter()
                    .map(|o| in_version(&def, version, o))
                    .collect();
                Ok(json_response(
                    200,
                    &json!({"kind": def.list_kind, "apiVersion": def.api_version(version), "metadata": {}, "items": items}),
                ))
            }
            _ => Err(ApiError::method_not_allowed()),
        },
        (Some(name), None) => {
            if def.namespaced && t.ns.is_none() {
                return Err(ApiError::path_not_found());
            }
            match method {
                Method::GET if t.watch_path => {
                    let mut q2 = q.clone();
                    q2.insert("fieldSelector".into(), format!("metadata.name={name}"));
                    Ok(watch(app, def, version, t.ns, &q2, table).await)
                }
                Method::GET => {
                    let obj = app
                        .store
                        .get(&def.gr, ns, name)
                        .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
                    Ok(render_one(&def, version, &obj, table, &q))
                }
                Method::PUT => {
                    reject_dry_run(&q)?;
                    let body = object_body(&read_body(req.into_body()).await?)?;
                    Ok(json_response(
                        200,
                        &in_version(
                            &def,
                            version,
                            app.store.update(&def, version, ns, name, body, Sub::Main)?,
                        ),
                    ))
                }
                Method::PATCH => {
                    reject_dry_run(&q)?;
                    let body = read_body(req.into_body()).await?;
                    patch(
                        app,
                        &def,
                        version,
                        ns,
                        name,
                        &content_type,
                        &body,
                        &q,
                        Sub::Main,
                    )
                }
                Method::DELETE => {
                    reject_dry_run(&q)?;
                    let body = read_body(req.into_body()).await?;
                    let opts = delete_opts(&q, &body)?;
                    let gone = app.store.delete(&def, ns, name, &opts)?;
                    // The object itself (not a Status) is shown in the requested version.
                    let gone = if gone.get("kind").and_then(Value::as_str) == Some(&def.kind) {
                        in_version(&def, version, gone)
                    } else {
                        gone
                    };
                    Ok(json_response(200, &gone))
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
        (Some(name), Some(sub)) => {
            if def.namespaced && t.ns.is_none() {
                return Err(ApiError::path_not_found());
            }
            match sub {
                "status" if def.status => match method {
                    Method::GET => {
                        let obj = app
                            .store
                            .get(&def.gr, ns, name)
                            .ok_or_else(|| ApiError::not_found(&def.gr, name))?;
                        Ok(json_response(
                            200,
                            &in_version(&def, version, (*obj).clone()),
                        ))
                    }
                    Method::PUT => {
                        let body = parse_json(&read_body(req.into_body()).await?)?;
                        Ok(json_response(
                            200,
                            &in_version(
                                &def,
                                version,
                                app.store
                                    .update(&def, version, ns, name, body, Sub::Status)?,
                            ),
                        ))
                    }
                    Method::PATCH => {
                        let body = read_body(req.into_body()).await?;
                        patch(
                            app,
                            &def,
                            version,
                            ns,
                            name,
                            &content_type,
                            &body,
                            &q,
                            Sub::Status,
                        )
                    }
                    _ => Err(ApiError::method_not_allowed()),
                },
                "finalize"
                    if def.gr.resource == "namespaces"
                        && def.gr.group.is_empty()
                        && method == Method::PUT =>
                {
                    let body = parse_json(&read_body(req.into_body()).await?)?;
                    let spec = body.get("spec").cloned().unwrap_or(json!({}));
                    let merge = json!({"spec": spec});
                    let (obj, _) = app.store.patch(
                        &def,
                        version,
                        ns,
                        name,
                        PatchKind::Merge,
                        &merge,
                        Sub::Status,
                    )?;
                    Ok(json_response(200, &obj))
                }
                "scale" if def.scale.is_some() => {
                    let body = if method == Method::GET {
                        Bytes::new()
                    } else {
                        read_body(req.into_body()).await?
                    };
                    crate::scale::handle(
                        app,
                        &def,
                        version,
                        ns,
                        name,
                        &method,
                        &content_type,
                        &body,
                    )
                }
                "exec"
                    if def.gr.resource == "pods"
                        && def.gr.group.is_empty()
                        && matches!(method, Method::GET | Method::POST) =>
                {
                    crate::exec::handle(app, ns, name, req).await
                }
                "attach"
                    if def.gr.resource == "pods"
                        && def.gr.group.is_empty()
                        && matches!(method, Method::GET | Method::POST) =>
                {
                    crate::attach::handle(app, ns, name, req).await
                }
                "portforward"
                    if def.gr.resource == "pods"
                        && def.gr.group.is_empty()
                        && matches!(method, Method::GET | Method::POST) =>
                {
                    crate::portforward::handle(app, ns, name, req).await
                }
                "log"
                    if def.gr.resource == "pods"
                        && def.gr.group.is_empty()
                        && method == Method::GET =>
                {
                    crate::logs::handle(app, ns, name, &q).await
                }
                "proxy"
                    if def.gr.group.is_empty()
                        && (def.gr.resource == "pods" || def.gr.resource == "services") =>
                {
                    let query = req.uri().query().map(str::to_string);
                    crate::proxy::handle(
                        app,
                        &def,
                        ns,
                        name,
                        &t.tail,
                        query,
                        path.ends_with('/'),
                        req,
                    )
                    .await
                }
                "token"
                    if def.gr.resource == "serviceaccounts"
                        && def.gr.group.is_empty()
                        && method == Method::POST =>
                {
                    let bytes = read_body(req.into_body()).await?;
                    let body = if protobuf_body {
                        crate::protobuf::decode_object(
                            &bytes,
                            "authentication.k8s.io",
                            "v1",
                            "TokenRequest",
                        )
                        .map_err(|e| e.into_api_error(&content_type))?
                    } else {
                        parse_json(&bytes)?
                    };
                    let tr = app.auth.token_request(&app.store, ns, name, &body)?;
                    Ok(json_response(201, &tr))
                }
                _ => Err(ApiError::path_not_found()),
            }
        }
    }
}

fn reject_dry_run(q: &Q) -> Result<(), ApiError> {
    if q.get("dryRun").is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::bad_request(
            "dryRun is not supported by devcluster",
        ));
    }
    Ok(())
}

fn label_sel(q: &Q) -> Result<LabelSelector, ApiError> {
    LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)
}

/// The request's field selector; for Events, only the labels the real server supports in the
/// requested version, read from the stored core fields.
fn field_sel(def: &ResourceDef, version: &str, q: &Q) -> Result<FieldSelector, ApiError> {
    let sel = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    if crate::convert::is_core_event(&def.gr) {
        let api_version = def.api_version(version);
        sel.map_labels(|l| crate::convert::event_field_label(&api_version, l))
            .map_err(ApiError::bad_request)
    } else {
        Ok(sel)
    }
}

fn delete_opts(q: &Q, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_json(body)?
    };
    let prop = q
        .get("propagationPolicy")
        .cloned()
        .or_else(|| {
            b.get("propagationPolicy")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .or_else(|| {
            match b
                .get("orphanDependents")
                .and_then(Value::as_bool)
                .or(q.get("orphanDependents").map(|v| v == "true"))
            {
                Some(true) => Some("Orphan".into()),
                _ => None,
            }
        });
    let propagation = match prop.as_deref() {
        None | Some("") => None,
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported propagationPolicy {other:?}"
            )));
        }
    };
    if b.get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(ApiError::bad_request(
            "dryRun is not supported by devcluster",
        ));
    }
    Ok(DeleteOpts {
        propagation,
        precondition_uid: b
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        precondition_rv: b
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

#[allow(clippy::too_many_arguments)]
fn patch(
    app: &App,
    def: &ResourceDef,
    version: &str,
    ns: &str,
    name: &str,
    ct: &str,
    body: &[u8],
    q: &Q,
    sub: Sub,
) -> Result<Response, ApiError> {
    let kind =
        PatchKind::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
    let value = if kind == PatchKind::Apply {
        if q.get("fieldManager").is_none_or(String::is_empty) {
            return Err(options_invalid(
                "PatchOptions",
                kubeless_api::validate::ErrorType::Required,
                "Required value: is required for apply patch".into(),
            ));
        }
        parse_yaml_or_json(body)?
    } else {
        if q.contains_key("force") {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                &["force: Forbidden: may not be specified for non-apply patch".into()],
            ));
        }
        parse_json(body)?
    };
    let (obj, created) = app.store.patch(def, version, ns, name, kind, &value, sub)?;
    Ok(json_response(
        if created { 201 } else { 200 },
        &in_version(def, version, obj),
    ))
}

/// Writes `obj` with the apiVersion of the requested version.
/// (converted when the kind is stored in another version, see convert.rs).
fn versioned(def: &ResourceDef, version: &str, obj: &Value) -> Option<Value> {
    let want = def.api_version(version);
    if obj.get("apiVersion").and_then(Value::as_str) == Some(want.as_str()) {
        None
    } else if crate::convert::storage_api_version(&def.gr).is_some() {
        Some(crate::convert::convert(&def.gr, obj, &want))
    } else {
        let mut o = obj.clone();
        o["apiVersion"] = json!(want);
        Some(o)
    }
}

/// `obj` as the requested version shows it.
fn in_version(def: &ResourceDef, version: &str, obj: Value) -> Value {
    versioned(def, version, &obj).unwrap_or(obj)
}

fn render_one(def: &ResourceDef, version: &str, obj: &Value, table: bool, q: &Q) -> Response {
    if table {
        let tb = TableBuilder::new(def, version, q.get("includeObject").map(String::as_str));
        let rv = obj
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(json!(""));
        return json_response(
            200,
            &tb.table(vec![tb.row(obj)], json!({"resourceVersion": rv})),
        );
    }
    match versioned(def, version, obj) {
        Some(o) => json_response(200, &o),
        None => json_response(200, obj),
    }
}

fn list(
    app: &App,
    def: &ResourceDef,
    version: &str,
    ns: Option<&str>,
    q: &Q,
    table: bool,
) -> Result<Response, ApiError> {
    let labels = label_sel(q)?;
    let fields = field_sel(def, version, q)?;
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok());
    let page = app.store.list(
        &def.gr,
        ns,
        &labels,
        &fields,
        limit,
        q.get("continue").map(String::as_str),
    )?;
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(c) = &page.continue_token {
        metadata["continue"] = json!(c);
        metadata["remainingItemCount"] = json!(page.remaining);
    }
    if table {
        let tb = TableBuilder::new(def, version, q.get("includeObject").map(String::as_str));
        let rows = page.items.iter().map(|o| tb.row(o)).collect();
        return Ok(json_response(200, &tb.table(rows, metadata)));
    }
    // Written by hand so 10,000 items are not cloned into one big Value.
    let mut buf = Vec::with_capacity(256 + page.items.len() * 512);
    buf.extend_from_slice(
        format!(
            "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
            json!(def.list_kind),
            json!(def.api_version(version)),
            metadata
        )
        .as_bytes(),
    );
    for (i, o) in page.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        let res = match versioned(def, version, o) {
            Some(v) => serde_json::to_writer(&mut buf, &v),
            None => serde_json::to_writer(&mut buf, &**o),
        };
        res.map_err(|e| ApiError::internal(e.to_string()))?;
    }
    buf.extend_from_slice(b"]}");
    Ok(bytes_response(200, Bytes::from(buf)))
}

struct WatchFilter {
    gr: crate::registry::GroupResource,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.ns
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event type this watcher sees, if any (objects entering or leaving the selection).
    fn classify(&self, ev: &WatchEvent) -> Option<&'static str> {
        if ev.gr != self.gr {
            return None;
        }
        let now = self.matches(&ev.obj);
        match ev.etype {
            EventType::Added => now.then_some("ADDED"),
            EventType::Deleted => now.then_some("DELETED"),
            EventType::Modified => {
                let before = ev.prev.as_ref().is_none_or(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }
}

struct Encoder {
    def: Arc<ResourceDef>,
    version: String,
    table: Option<TableBuilder>,
}

impl Encoder {
    /// Encodes a stored change, reusing the serialization other watchers made.
    fn change(&self, etype: &str, ev: &WatchEvent) -> Bytes {
        if self.table.is_some() || versioned(&self.def, &self.version, &ev.obj).is_some() {
            return self.event(etype, &ev.obj);
        }
        let obj = ev
            .encoded
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*ev.obj).unwrap_or_default()));
        let mut buf = Vec::with_capacity(obj.len() + 32);
        buf.extend_from_slice(b"{\"type\":\"");
        buf.extend_from_slice(etype.as_bytes());
        buf.extend_from_slice(b"\",\"object\":");
        buf.extend_from_slice(obj);
        buf.extend_from_slice(b"}\n");
        Bytes::from(buf)
    }

    fn event(&self, etype: &str, obj: &Value) -> Bytes {
        let object = match &self.table {
            Some(tb) => tb.table(
                vec![tb.row(obj)],
                json!({"resourceVersion": obj.pointer("/metadata/resourceVersion")}),
            ),
            None => match versioned(&self.def, &self.version, obj) {
                Some(v) => v,
                None => {
                    let mut buf = Vec::with_capacity(512);
                    buf.extend_from_slice(b"{\"type\":\"");
                    buf.extend_from_slice(etype.as_bytes());
                    buf.extend_from_slice(b"\",\"object\":");
                    if serde_json::to_writer(&mut buf, obj).is_err() {
                        return Bytes::new();
                    }
                    buf.extend_from_slice(b"}\n");
                    return Bytes::from(buf);
                }
            },
        };
        Bytes::from(format!("{}\n", json!({"type": etype, "object": object})))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.def.kind, "apiVersion": self.def.api_version(&self.version), "metadata": meta});
        Bytes::from(format!("{}\n", json!({"type": "BOOKMARK", "object": obj})))
    }
}

fn gone_event(rv: u64) -> Bytes {
    let e = ApiError::gone(format!("too old resource version: {rv}"));
    Bytes::from(format!(
        "{}\n",
        json!({"type": "ERROR", "object": e.status()})
    ))
}

async fn watch(
    app: &Arc<App>,
    def: Arc<ResourceDef>,
    version: &str,
    ns: Option<&str>,
    q: &Q,
    table: bool,
) -> Response {
    let labels = match label_sel(q) {
        Ok(l) => l,
        Err(e) => return error_response(&e),
    };
    let fields = match field_sel(&def, version, q) {
        Ok(f) => f,
        Err(e) => return error_response(&e),
    };
    let filter = WatchFilter {
        gr: def.gr.clone(),
        ns: ns.map(str::to_string),
        labels,
        fields,
    };
    let enc = Encoder {
        table: table
            .then(|| TableBuilder::new(&def, version, q.get("includeObject").map(String::as_str))),
        def,
        version: version.to_string(),
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(DEFAULT_WATCH_TIMEOUT);
    let bookmarks = truthy(q, "allowWatchBookmarks");
    let initial = truthy(q, "sendInitialEvents");
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    let store = app.store.clone();
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let _ = run_watch(
            store, filter, enc, timeout, bookmarks, initial, rv_param, tx,
        )
        .await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// Streams one watch until timeout, client disconnect, or a gap in history (410).
#[allow(clippy::too_many_arguments)]
async fn run_watch(
    store: Arc<Store>,
    filter: WatchFilter,
    enc: Encoder,
    timeout: u64,
    bookmarks: bool,
    initial: bool,
    rv_param: String,
    tx: mpsc::Sender<Bytes>,
) -> Result<(), ()> {
    let send = |b: Bytes| {
        let tx = tx.clone();
        async move { tx.send(b).await.map_err(|_| ()) }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let mut rx: broadcast::Receiver<Arc<WatchEvent>>;
    let mut last: u64;
    if initial || rv_param.is_empty() || rv_param == "0" {
        let (items, rv, r) = store.snapshot_and_watch(&filter.gr, filter.ns.as_deref());
        rx = r;
        last = rv;
        for o in items {
            if filter.matches(&o) {
                send(enc.event("ADDED", &o)).await?;
            }
        }
        if initial {
            send(enc.bookmark(rv, true)).await?;
        }
    } else {
        let Some(from) = Store::parse_rv(&rv_param) else {
            send(gone_event(0)).await?;
            return Ok(());
        };
        match store.watch_from(&filter.gr, from) {
            Ok((replay, r)) => {
                rx = r;
                last = from;
                for ev in replay {
                    last = last.max(ev.rv);
                    if let Some(t) = filter.classify(&ev) {
                        send(enc.change(t, &ev)).await?;
                    }
                }
            }
            Err(_) => {
                send(gone_event(from)).await?;
                return Ok(());
            }
        }
    }
    let mut seen = last;
    let mut ticker = tokio::time::interval(BOOKMARK_EVERY);
    ticker.tick().await;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    if ev.rv <= last {
                        continue;
                    }
                    seen = seen.max(ev.rv);
                    if ev.gr != filter.gr {
                        continue;
                    }
                    last = ev.rv;
                    if let Some(t) = filter.classify(&ev) {
                        send(enc.change(t, &ev)).await?;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Fell behind the live channel: catch up from history.
                    match store.replay_since(&filter.gr, last) {
                        Ok(replay) => {
                            for ev in replay {
                                last = last.max(ev.rv);
                                if let Some(t) = filter.classify(&ev) {
                                    send(enc.change(t, &ev)).await?;
                                }
                            }
                            seen = seen.max(last);
                        }
                        Err(_) => {
                            send(gone_event(last)).await?;
                            return Ok(());
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            },
            _ = ticker.tick(), if bookmarks => {
                send(enc.bookmark(seen.max(last), false)).await?;
            }
            _ = tokio::time::sleep_until(deadline) => return Ok(()),
            _ = tx.closed() => return Ok(()),
        }
    }
}

/// kubectl 1.20 fetches /openapi/v2 as protobuf (gnostic Document) for
/// validation and apply; an empty document makes it skip schema checks and
/// fall back to its built-in types, like a server without those schemas.
/// `/openapi/v2`: the Swagger 2.0 document in gnostic's protobuf (what kubectl asks for) or
/// JSON; any other media type gets the real server's 406.
fn openapi_v2(req: &Request, reg: &crate::registry::Registry) -> Result<Response, ApiError> {
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let wanted: Vec<&str> = accept
        .split(',')
        .map(|m| m.split(';').next().unwrap_or("").trim())
        .filter(|m| !m.is_empty())
        .collect();
    let protobuf = wanted.contains(&crate::openapi_v2::PROTOBUF_MEDIA_TYPE);
    let json = wanted.is_empty()
        || wanted
            .iter()
            .any(|m| matches!(*m, "application/json" | "application/*" | "*/*"));
    if !protobuf && !json {
        return Err(ApiError::not_acceptable(accept));
    }
    let doc = crate::openapi::swagger(reg);
    if !protobuf {
        return Ok(json_response(200, &doc));
    }
    let mut r = Response::new(Body::from(crate::openapi_v2::encode(&doc)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::openapi_v2::PROTOBUF_CONTENT_TYPE),
    );
    Ok(r)
}
