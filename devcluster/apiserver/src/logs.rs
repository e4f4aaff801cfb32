//! Pod logs read from the files the runner writes:
//! `{logs_dir}/{namespace}/{pod}/{container}.log` (`.previous.log` for `previous=true`).

use std::convert::Infallible;
use std::io::SeekFrom;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use http::{HeaderValue, header};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::errors::ApiError;
use crate::http::{App, Q};
use crate::registry::GroupResource;

const POLL: Duration = Duration::from_millis(200);

fn names(pod: &Value, field: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name")?.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Prefixes each complete line with a timestamp (the time the server read it).
fn stamp(data: &[u8]) -> Vec<u8> {
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, true);
    let mut out = Vec::with_capacity(data.len() + 40);
    for line in data.split_inclusive(|b| *b == b'\n') {
        out.extend_from_slice(now.as_bytes());
        out.push(b' ');
        out.extend_from_slice(line);
    }
    out
}

pub async fn handle(app: &App, ns: &str, name: &str, q: &Q) -> Result<Response, ApiError> {
    let gr = GroupResource::new("", "pods");
    let pod = app
        .store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    let containers = names(&pod, "containers");
    let all: Vec<String> = containers
        .iter()
        .cloned()
        .chain(names(&pod, "initContainers"))
        .collect();
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if all.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None => {
            let default = pod
                .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
                .and_then(Value::as_str)
                .map(str::to_string);
            default
                .or_else(|| containers.first().cloned())
                .ok_or_else(|| ApiError::bad_request(format!("pod {name} has no containers")))?
        }
    };
    let previous = q.get("previous").is_some_and(|v| v == "true");
    let file = app.logs_dir.join(ns).join(name).join(if previous {
        format!("{container}.previous.log")
    } else {
        format!("{container}.log")
    });
    let mut data = match tokio::fs::read(&file).await {
        Ok(d) => d,
        Err(_) if previous => {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        Err(_) => {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        }
    };
    let offset = data.len() as u64;
    if let Some(n) = q.get("tailLines").and_then(|t| t.parse::<usize>().ok()) {
        let body = data.strip_suffix(b"\n").unwrap_or(&data);
        let starts: Vec<usize> = body
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        let cut = if n == 0 {
            data.len()
        } else if starts.len() >= n {
            starts[starts.len() - n]
        } else {
            0
        };
        data = data[cut..].to_vec();
    }
    if let Some(limit) = q.get("limitBytes").and_then(|t| t.parse::<usize>().ok()) {
        data.truncate(limit);
    }
    let timestamps = q.get("timestamps").is_some_and(|v| v == "true");
    if timestamps {
        data = stamp(&data);
    }
    let follow = q.get("follow").is_some_and(|v| v == "true") && !previous;
    let mut resp = if !follow {
        Response::new(Body::from(data))
    } else {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        let store = app.store.clone();
        let uid = pod.pointer("/metadata/uid").cloned();
        let (ns, name) = (ns.to_string(), name.to_string());
        tokio::spawn(async move {
            if tx.send(Bytes::from(data)).await.is_err() {
                return;
            }
            let mut pos = offset;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = tx.closed() => return,
                }
                let alive = store
                    .get(&gr, &ns, &name)
                    .is_some_and(|p| p.pointer("/metadata/uid").cloned() == uid);
                let Ok(mut f) = tokio::fs::File::open(&file).await else {
                    if alive { continue } else { return }
                };
                let len = f.metadata().await.map(|m| m.len()).unwrap_or(pos);
                if len < pos {
                    // The file was replaced (container restarted): start over.
                    pos = 0;
                }
                if len > pos {
                    let mut buf = Vec::with_capacity((len - pos) as usize);
                    if f.seek(SeekFrom::Start(pos)).await.is_ok()
                        && f.read_to_end(&mut buf).await.is_ok()
                    {
                        pos += buf.len() as u64;
                        let chunk = if timestamps { stamp(&buf) } else { buf };
                        if tx.send(Bytes::from(chunk)).await.is_err() {
                            return;
                        }
                    }
                }
                if !alive {
                    return;
                }
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
        });
        Response::new(Body::from_stream(stream))
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(resp)
}
