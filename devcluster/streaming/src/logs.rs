//! Pod logs read from the files the pod runner writes:
//! `{logs_dir}/{namespace}/{pod}/{container}.log` (`.previous.log` for `previous=true`), with the
//! options of `PodLogOptions` (`follow`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//! `limitBytes`), as the API server's `pods/log` and a kubelet's `/containerLogs` serve them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use http::{HeaderValue, header};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

/// The query of a log request.
pub type Query = HashMap<String, String>;

/// A refused log request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// 400, with this message.
    #[error("{0}")]
    BadRequest(String),
    /// An invalid `PodLogOptions` (422), with the cause (`field: Reason: detail`).
    #[error("{0}")]
    Invalid(String),
}

/// `true`, or `1` as an API server passes flags on to a kubelet.
fn truthy(v: &str) -> bool {
    v == "true" || v == "1"
}

/// The log file of a container (its previous instance's when `previous`).
pub fn file(logs_dir: &Path, ns: &str, pod: &str, container: &str, previous: bool) -> PathBuf {
    logs_dir.join(ns).join(pod).join(if previous {
        format!("{container}.previous.log")
    } else {
        format!("{container}.log")
    })
}

const POLL: Duration = Duration::from_millis(200);

/// When the bytes of a log were written: `(offset, millis since the epoch)` pairs in offset
/// order, read from the `{log}.times` index the runner writes beside each log (one
/// `OFFSET MILLIS` line whenever the millisecond of writing changes; see devcluster-runner's
/// `LogSink`). Empty when the index is missing: every line then counts as written now.
#[derive(Debug, Default, Clone)]
pub struct WriteTimes(Vec<(u64, i64)>);

impl WriteTimes {
    pub fn parse(text: &str) -> Self {
        Self(
            text.lines()
                .filter_map(|l| {
                    let (o, t) = l.split_once(' ')?;
                    Some((o.trim().parse().ok()?, t.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    /// Reads the index of `log` from byte `from` on (the part appended since an earlier read),
    /// adds its complete lines and returns where the next read starts.
    async fn read_more(&mut self, log: &std::path::Path, from: u64) -> u64 {
        let mut name = log.as_os_str().to_owned();
        name.push(".times");
        let Ok(mut f) = tokio::fs::File::open(std::path::PathBuf::from(name)).await else {
            return from;
        };
        let mut text = Vec::new();
        if f.seek(SeekFrom::Start(from)).await.is_err() || f.read_to_end(&mut text).await.is_err() {
            return from;
        }
        // A line still being written is read next time.
        let complete = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        self.0
            .extend(Self::parse(&String::from_utf8_lossy(&text[..complete])).0);
        from + complete as u64
    }

    /// When the line starting at `offset` was written.
    pub fn at(&self, offset: u64) -> Option<i64> {
        let i = self.0.partition_point(|(o, _)| *o <= offset);
        i.checked_sub(1).map(|i| self.0[i].1)
    }

    /// The offset of the first line written at or after `since_ms`; `None` when every line
    /// is older.
    pub fn first_since(&self, since_ms: i64) -> Option<u64> {
        self.0.iter().find(|(_, t)| *t >= since_ms).map(|(o, _)| *o)
    }
}

fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_else(Utc::now)
        .to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// Prefixes each line of `data`, which starts at byte `start` of the log, with the time it was
/// written (from `times`; now when unknown), as the kubelet does for `timestamps=true`.
fn stamp_written(data: &[u8], start: u64, times: &WriteTimes) -> Vec<u8> {
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Nanos, true);
    let mut out = Vec::with_capacity(data.len() + 40);
    let mut offset = start;
    for line in data.split_inclusive(|b| *b == b'\n') {
        match times.at(offset) {
            Some(ms) => out.extend_from_slice(rfc3339_ms(ms).as_bytes()),
            None => out.extend_from_slice(now.as_bytes()),
        }
        out.push(b' ');
        out.extend_from_slice(line);
        offset += line.len() as u64;
    }
    out
}

/// `sinceSeconds` / `sinceTime` as the earliest write time kept (millis since the epoch),
/// validated as the real server validates PodLogOptions.
fn since_ms(q: &Query) -> Result<Option<i64>, LogError> {
    let seconds = q.get("sinceSeconds").filter(|v| !v.is_empty());
    let time = q.get("sinceTime").filter(|v| !v.is_empty());
    let invalid = LogError::Invalid;
    match (seconds, time) {
        (Some(_), Some(_)) => Err(invalid(
            "sinceSeconds: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
                .into(),
        )),
        (Some(s), None) => {
            let secs: i64 = s
                .parse()
                .map_err(|_| LogError::BadRequest(format!("invalid sinceSeconds {s:?}")))?;
            if secs < 1 {
                return Err(invalid(format!(
                    "sinceSeconds: Invalid value: {secs}: must be greater than 0"
                )));
            }
            Ok(Some(
                Utc::now().timestamp_millis() - secs.saturating_mul(1000),
            ))
        }
        (None, Some(t)) => chrono::DateTime::parse_from_rfc3339(t)
            .map(|t| Some(t.timestamp_millis()))
            .map_err(|_| LogError::BadRequest(format!("invalid sinceTime {t:?}: not RFC 3339"))),
        (None, None) => Ok(None),
    }
}

/// Serves the log of `container` of pod `ns/name` as the query asks. A follow stream ends once
/// `alive` says the pod is gone (after what was written last).
pub async fn read(
    logs_dir: &Path,
    ns: &str,
    name: &str,
    container: &str,
    q: &Query,
    alive: impl Fn() -> bool + Send + 'static,
) -> Result<Response, LogError> {
    let previous = q.get("previous").is_some_and(|v| truthy(v));
    let file = file(logs_dir, ns, name, container, previous);
    let mut data = match tokio::fs::read(&file).await {
        Ok(d) => d,
        Err(_) if previous => {
            return Err(LogError::BadRequest(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        Err(_) => {
            return Err(LogError::BadRequest(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
            )));
        }
    };
    let offset = data.len() as u64;
    let since = since_ms(q)?;
    let timestamps = q.get("timestamps").is_some_and(|v| truthy(v));
    // The write-time index, read only when an option needs it.
    let mut times = WriteTimes::default();
    let mut times_read = 0u64;
    if since.is_some() || timestamps {
        times_read = times.read_more(&file, 0).await;
    }
    // Where `data` starts in the file, for the write times of its lines.
    let mut start = 0u64;
    if let Some(since) = since {
        let cut = if times.0.is_empty() {
            // No index (a log from before it existed): nothing is known to be older.
            0
        } else {
            times.first_since(since).unwrap_or(offset)
        };
        let cut = usize::try_from(cut).unwrap_or(data.len()).min(data.len());
        data = data[cut..].to_vec();
        start = cut as u64;
    }
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
        start += cut as u64;
        data = data[cut..].to_vec();
    }
    if let Some(limit) = q.get("limitBytes").and_then(|t| t.parse::<usize>().ok()) {
        data.truncate(limit);
    }
    if timestamps {
        data = stamp_written(&data, start, &times);
    }
    let follow = q.get("follow").is_some_and(|v| truthy(v)) && !previous;
    let mut resp = if !follow {
        Response::new(Body::from(data))
    } else {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
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
                let alive = alive();
                let Ok(mut f) = tokio::fs::File::open(&file).await else {
                    if alive { continue } else { return }
                };
                let len = f.metadata().await.map(|m| m.len()).unwrap_or(pos);
                if len < pos {
                    // The file was replaced (container restarted): start over, index too.
                    pos = 0;
                    times = WriteTimes::default();
                    times_read = 0;
                }
                if len > pos {
                    let mut buf = Vec::with_capacity((len - pos) as usize);
                    if f.seek(SeekFrom::Start(pos)).await.is_ok()
                        && f.read_to_end(&mut buf).await.is_ok()
                    {
                        pos += buf.len() as u64;
                        let chunk = if timestamps {
                            times_read = times.read_more(&file, times_read).await;
                            stamp_written(&buf, pos - buf.len() as u64, &times)
                        } else {
                            buf
                        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_times_answer_per_line_and_per_cut() {
        let t = WriteTimes::parse("0 1000\n6 2000\n18 3000\nbad line\n");
        assert_eq!(t.at(0), Some(1000));
        assert_eq!(t.at(5), Some(1000));
        assert_eq!(t.at(6), Some(2000));
        assert_eq!(t.at(30), Some(3000));
        assert_eq!(t.first_since(1500), Some(6));
        assert_eq!(t.first_since(3000), Some(18));
        assert_eq!(t.first_since(3001), None);
        let stamped = stamp_written(b"second line\nthird\n", 6, &t);
        let text = String::from_utf8_lossy(&stamped);
        assert!(
            text.starts_with("1970-01-01T00:00:02.000000000Z second line\n"),
            "{text}"
        );
        assert!(
            text.contains("1970-01-01T00:00:03.000000000Z third\n"),
            "{text}"
        );
    }
}
