//! `--data-dir` persistence: a snapshot written atomically (temp file, fsync,
//! rename) at start-up, plus an append-only log of changes since, fsynced in
//! batches by a writer thread. A torn last line after a crash is ignored.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use serde_json::{Value, json};

use crate::registry::GroupResource;

const SNAPSHOT: &str = "snapshot.json";
const LOG: &str = "changes.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("data dir {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("data dir snapshot {path} is not valid JSON: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Handle the store uses to log each change.
pub struct Persist {
    tx: mpsc::Sender<String>,
}

impl Persist {
    pub fn record(
        &self,
        rv: u64,
        gr: &GroupResource,
        key: &(String, String),
        obj: Option<&Arc<Value>>,
    ) {
        let line = json!({"rv": rv, "g": gr.group, "r": gr.resource, "ns": key.0, "name": key.1, "obj": obj.map(|o| &**o)});
        // The writer only stops at shutdown, after the last change.
        let _ = self.tx.send(line.to_string());
    }
}

pub type Loaded = (u64, Vec<(GroupResource, Value)>);

/// Reads the snapshot and log, compacts them into a new snapshot, and starts
/// the log writer.
pub fn open(dir: &Path) -> Result<(Loaded, Persist, JoinHandle<()>), PersistError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    let snap_path = dir.join(SNAPSHOT);
    let log_path = dir.join(LOG);
    let mut rv = 0u64;
    let mut objects: std::collections::BTreeMap<(GroupResource, String, String), Value> =
        Default::default();
    if snap_path.exists() {
        let raw = fs::read(&snap_path).map_err(io(&snap_path))?;
        let snap: Value = serde_json::from_slice(&raw).map_err(|source| PersistError::Corrupt {
            path: snap_path.clone(),
            source,
        })?;
        rv = snap.get("rv").and_then(Value::as_u64).unwrap_or(0);
        for item in snap
            .get("objects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let gr = GroupResource::new(
                item.get("g").and_then(Value::as_str).unwrap_or(""),
                item.get("r").and_then(Value::as_str).unwrap_or(""),
            );
            let Some(obj) = item.get("obj") else { continue };
            let ns = obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            objects.insert((gr, ns, name), obj.clone());
        }
    }
    if log_path.exists() {
        let f = File::open(&log_path).map_err(io(&log_path))?;
        for line in BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            // A line cut short by a crash ends the usable log.
            let Ok(rec) = serde_json::from_str::<Value>(&line) else {
                break;
            };
            let r = rec.get("rv").and_then(Value::as_u64).unwrap_or(0);
            if r <= rv {
                continue;
            }
            rv = r;
            let gr = GroupResource::new(
                rec.get("g").and_then(Value::as_str).unwrap_or(""),
                rec.get("r").and_then(Value::as_str).unwrap_or(""),
            );
            let ns = rec
                .get("ns")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let name = rec
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            match rec.get("obj") {
                Some(o) if !o.is_null() => {
                    objects.insert((gr, ns, name), o.clone());
                }
                _ => {
                    objects.remove(&(gr, ns, name));
                }
            }
        }
    }
    let loaded: Vec<(GroupResource, Value)> =
        objects.into_iter().map(|((gr, _, _), o)| (gr, o)).collect();
    write_snapshot(dir, rv, &loaded)?;
    // The snapshot now holds everything: start an empty log (atomically).
    let tmp = dir.join(format!("{LOG}.tmp"));
    File::create(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    fs::rename(&tmp, &log_path).map_err(io(&log_path))?;
    sync_dir(dir)?;
    let file = OpenOptions::new()
        .append(true)
        .open(&log_path)
        .map_err(io(&log_path))?;
    let (tx, rx) = mpsc::channel::<String>();
    let handle = std::thread::spawn(move || writer(file, rx));
    Ok(((rv, loaded), Persist { tx }, handle))
}

fn writer(file: File, rx: mpsc::Receiver<String>) {
    let mut out = BufWriter::new(file);
    while let Ok(first) = rx.recv() {
        let mut ok = writeln!(out, "{first}").is_ok();
        // Group commit: everything queued goes out with one fsync.
        while let Ok(line) = rx.try_recv() {
            ok &= writeln!(out, "{line}").is_ok();
        }
        ok &= out.flush().is_ok();
        ok &= out.get_ref().sync_data().is_ok();
        if !ok {
            tracing::error!(
                "devcluster: writing the data-dir change log failed; later changes may not persist"
            );
        }
    }
}

fn sync_dir(dir: &Path) -> Result<(), PersistError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

pub fn write_snapshot(
    dir: &Path,
    rv: u64,
    objects: &[(GroupResource, Value)],
) -> Result<(), PersistError> {
    let items: Vec<Value> = objects
        .iter()
        .map(|(gr, o)| json!({"g": gr.group, "r": gr.resource, "obj": o}))
        .collect();
    let body = json!({"rv": rv, "objects": items});
    let tmp = dir.join(format!("{SNAPSHOT}.tmp"));
    let snap = dir.join(SNAPSHOT);
    {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(body.to_string().as_bytes()).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, &snap).map_err(io(&snap))?;
    sync_dir(dir)
}
