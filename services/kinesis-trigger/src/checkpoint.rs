//! Durable per-shard checkpoints in a ConfigMap the trigger owns (`<trigger>-kinesis-checkpoints`,
//! one data key per shard id). Shard readers update the in-memory map after every record that
//! is done; a flusher writes the changed keys at most once per interval (and at once for shard
//! ends and on shutdown), so a crash redelivers at most what finished in the last interval.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::shards::Checkpoint;

/// Label on checkpoint ConfigMaps (so operators can find them).
pub const LABEL: &str = "kinesistriggers.kubeless.io/checkpoints";

struct Inner {
    values: BTreeMap<String, Checkpoint>,
    dirty: BTreeSet<String>,
}

/// One trigger's checkpoints.
pub struct CheckpointStore {
    api: Api<ConfigMap>,
    name: String,
    inner: Mutex<Inner>,
    /// Wakes the flusher for an immediate write.
    urgent: Notify,
}

impl CheckpointStore {
    /// Reads the ConfigMap, creating it (owned by the trigger, so deleting the trigger deletes
    /// its checkpoints) when missing. Values we cannot parse are ignored with a warning.
    pub async fn load(
        client: Client,
        namespace: &str,
        name: &str,
        owner: Option<OwnerReference>,
    ) -> Result<Arc<Self>, kube::Error> {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let cm = match api.get_opt(name).await? {
            Some(cm) => cm,
            None => {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(name.to_string());
                cm.metadata.labels = Some([(LABEL.to_string(), "true".to_string())].into());
                cm.metadata.owner_references = owner.map(|o| vec![o]);
                match api.create(&PostParams::default(), &cm).await {
                    Ok(cm) => cm,
                    // Another instance created it in between.
                    Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await?,
                    Err(e) => return Err(e),
                }
            }
        };
        let mut values = BTreeMap::new();
        for (k, v) in cm.data.unwrap_or_default() {
            match Checkpoint::parse(&v) {
                Some(c) => {
                    values.insert(k, c);
                }
                None => {
                    tracing::warn!(configmap = name, shard = %k, value = %v, "ignoring an unreadable checkpoint")
                }
            }
        }
        Ok(Arc::new(Self {
            api,
            name: name.to_string(),
            inner: Mutex::new(Inner {
                values,
                dirty: BTreeSet::new(),
            }),
            urgent: Notify::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain data behind; keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All checkpoints as last set (written or not).
    pub fn snapshot(&self) -> BTreeMap<String, Checkpoint> {
        self.lock().values.clone()
    }

    pub fn get(&self, shard: &str) -> Option<Checkpoint> {
        self.lock().values.get(shard).cloned()
    }

    /// Records a new checkpoint; written by the next flush.
    pub fn set(&self, shard: &str, checkpoint: Checkpoint) {
        let mut g = self.lock();
        g.values.insert(shard.to_string(), checkpoint);
        g.dirty.insert(shard.to_string());
    }

    /// Records a checkpoint and asks the flusher to write now (shard ends, start markers).
    pub fn set_urgent(&self, shard: &str, checkpoint: Checkpoint) {
        self.set(shard, checkpoint);
        self.urgent.notify_one();
    }

    /// Re-reads the ConfigMap and takes the stored value of every shard that is neither in
    /// `reading` (ours is newer) nor waiting to be written. With shard leases, other replicas
    /// move the checkpoints of the shards they read.
    pub async fn refresh(&self, reading: &BTreeSet<String>) -> Result<(), kube::Error> {
        let cm = self.api.get(&self.name).await?;
        let mut g = self.lock();
        for (k, v) in cm.data.unwrap_or_default() {
            if reading.contains(&k) || g.dirty.contains(&k) {
                continue;
            }
            if let Some(c) = Checkpoint::parse(&v) {
                g.values.insert(k, c);
            }
        }
        Ok(())
    }

    /// Writes the changed keys (one merge patch). On failure they stay dirty for the next try.
    pub async fn flush(&self) -> Result<usize, kube::Error> {
        let data: BTreeMap<String, String> = {
            let mut g = self.lock();
            let keys = std::mem::take(&mut g.dirty);
            keys.into_iter()
                .filter_map(|k| {
                    let v = g.values.get(&k)?.to_string();
                    Some((k, v))
                })
                .collect()
        };
        if data.is_empty() {
            return Ok(0);
        }
        let patch = json!({ "data": data });
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(data.len()),
            Err(e) => {
                self.lock().dirty.extend(data.into_keys());
                Err(e)
            }
        }
    }

    /// Flushes every `interval` (sooner when asked) until `cancel`, then a last time.
    pub async fn run_flusher(
        self: Arc<Self>,
        interval: Duration,
        cancel: CancellationToken,
        on_write: impl Fn(bool) + Send,
    ) {
        loop {
            let stop = tokio::select! {
                _ = tokio::time::sleep(interval) => false,
                _ = self.urgent.notified() => false,
                _ = cancel.cancelled() => true,
            };
            self.flush_logged(&on_write).await;
            if stop {
                return;
            }
        }
    }

    async fn flush_logged(&self, on_write: &impl Fn(bool)) {
        match self.flush().await {
            Ok(0) => {}
            Ok(_) => on_write(true),
            Err(e) => {
                on_write(false);
                tracing::warn!(configmap = %self.name, error = %e, "writing checkpoints failed; will retry");
            }
        }
    }
}

/// Owner reference making a trigger own its checkpoint ConfigMap. Not a controller reference:
/// the ConfigMap is state, not a child the trigger reconciles.
pub fn owner_reference(trigger: &str, uid: &str) -> Option<OwnerReference> {
    (!uid.is_empty()).then(|| OwnerReference {
        api_version: kubeless_api::API_VERSION.to_string(),
        kind: "KinesisTrigger".to_string(),
        name: trigger.to_string(),
        uid: uid.to_string(),
        controller: None,
        block_owner_deletion: None,
    })
}
