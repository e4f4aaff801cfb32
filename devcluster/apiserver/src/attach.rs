//! `pods/attach` over WebSocket (`kubectl attach`), on the transport and channel protocol of
//! [`crate::exec`]; the session itself ([`devcluster_streaming::attach`]) follows the running
//! container's log from the moment of attach and feeds its stdin.

use std::sync::Arc;

use axum::extract::{Query, Request};
use axum::response::{IntoResponse, Response};
use devcluster_streaming::attach::{self as core, Target};
use devcluster_streaming::exec::failure;

use crate::app::App;
use crate::errors::ApiError;
use crate::exec;
use crate::registry::GroupResource;

pub async fn handle(
    app: &Arc<App>,
    ns: &str,
    name: &str,
    req: Request,
) -> Result<Response, ApiError> {
    let pairs = Query::<Vec<(String, String)>>::try_from_uri(req.uri())
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let opts = exec::options(pairs);
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let container = exec::pick_container(&pod, name, opts.container.clone())?;
    if !(opts.stdin || opts.stdout || opts.stderr) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let process = app
        .exec
        .get()
        .and_then(|b| b.container(ns, name, &container))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "container {container} is not running in pod {name} (attach needs the pod runner)"
            ))
        })?;
    exec::authorize_websocket_create(app, &req)?;
    let refusal = core::refusal(&container, &process, &opts);
    let log = devcluster_streaming::logs::file(&app.logs_dir, ns, name, &container, false);
    let target = Target::new(container.clone(), log, &process, &opts);
    let ws = exec::websocket_upgrade(req, "attach").await?;
    let app = app.clone();
    let (ns, pod) = (ns.to_string(), name.to_string());
    let running = move || {
        app.exec
            .get()
            .and_then(|b| b.container(&ns, &pod, &container))
            .is_some()
    };
    Ok(ws
        .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| {
            exec::over_websocket(socket, move |streams| async move {
                match refusal {
                    Some(msg) => failure(msg, Some("BadRequest"), None),
                    None => core::follow(&target, running, streams).await,
                }
            })
        })
        .into_response())
}
