//! One trigger's stream reader: credentials, checkpoints, ListShards every few seconds, one
//! [`ShardReader`] per shard that may be read now (children after their parents), restarts
//! with backoff when the stream or the Secret is missing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kubeless_invoke::Invoker;
use kubeless_trigger::{StateSender, UnitContext, UnitState, UnitTask};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::aws::{self, ReaderError};
use crate::checkpoint::{CheckpointStore, owner_reference};
use crate::deliver::Deliverer;
use crate::leases::{ShardLeaseSettings, ShardLeases, share};
use crate::metrics::StreamMetrics;
use crate::plan::{ReaderConfig, checkpoint_configmap_name};
use crate::reader::{Polling, ShardExit, ShardReader};
use crate::shards::{Checkpoint, Decision, ShardInfo, StartSettings, decide};

/// Timing settings of every trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub polling: Polling,
    /// ListShards period (finds children after a split or merge).
    pub list_shards_interval: Duration,
    /// Checkpoint writes are coalesced to at most one per interval.
    pub checkpoint_interval: Duration,
    /// Cap of the wait between setup attempts and "function unavailable" rounds.
    pub max_backoff: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            polling: Polling::default(),
            list_shards_interval: Duration::from_secs(10),
            checkpoint_interval: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What every trigger reader shares.
#[derive(Clone)]
pub struct Shared {
    pub client: Client,
    pub invoker: Invoker,
    pub metrics: StreamMetrics,
    /// The runtime's delivery families.
    pub runtime_metrics: kubeless_trigger::TriggerMetrics,
    pub timing: Timing,
    /// `Some`: share shards with other replicas through a Lease per shard.
    pub shard_leases: Option<ShardLeaseSettings>,
    /// Delivery failures and dead letters as Warning Events on the trigger.
    pub events: kubeless_service::ThrottledEvents,
    /// Scale to zero: traffic records and wake-ups (`None` in benches).
    pub activity: Option<Arc<kubeless_invoke::Activity>>,
}

/// Starts a trigger's reader as a unit of the control loop. Stopping it stops the shard
/// readers (a delivery in progress is abandoned and redelivered later) and writes the last
/// checkpoints; dropping it (a crash in tests) aborts them.
pub fn spawn(ctx: &UnitContext, shared: Shared, config: Arc<ReaderConfig>) -> UnitTask {
    UnitTask::spawn(ctx, move |state, cancel| {
        supervise(shared, config, state, cancel)
    })
}

async fn supervise(
    shared: Shared,
    config: Arc<ReaderConfig>,
    state: StateSender,
    cancel: CancellationToken,
) {
    let label = config.label();
    let mut failures = 0u32;
    loop {
        match run_once(&shared, &config, &state, &cancel).await {
            Ok(()) => break,
            Err(e) => {
                failures += 1;
                tracing::warn!(trigger = %label, reason = e.reason(), error = %error_chain(&e), "stream reader failed; retrying");
                state.set(UnitState::Failed {
                    reason: e.reason(),
                    message: error_chain(&e),
                });
            }
        }
        let wait = (Duration::from_secs(1) * 2u32.saturating_pow(failures.min(6)))
            .min(shared.timing.max_backoff);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancel.cancelled() => break,
        }
    }
    shared.metrics.set_shards(&label, 0);
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

struct Running {
    cancel: CancellationToken,
    task: AbortOnDropHandle<ShardExit>,
}

/// One life of a trigger's reader: returns `Ok` when cancelled, `Err` when it must start over.
async fn run_once(
    shared: &Shared,
    config: &Arc<ReaderConfig>,
    state: &StateSender,
    cancel: &CancellationToken,
) -> Result<(), ReaderError> {
    let label = config.label();
    let credentials =
        aws::credentials(&shared.client, &config.namespace, config.secret.as_deref()).await?;
    let kinesis = aws::client(config, credentials);
    // Fails fast with StreamNotFound before anything is created.
    let mut listing = aws::list_shards(&kinesis, &config.stream).await?;
    let cm_name = checkpoint_configmap_name(&config.trigger);
    let store = CheckpointStore::load(
        shared.client.clone(),
        &config.namespace,
        &cm_name,
        owner_reference(&config.trigger, &config.trigger_uid),
    )
    .await
    .map_err(|source| ReaderError::Checkpoints {
        name: cm_name.clone(),
        source,
    })?;
    let flush_cancel = CancellationToken::new();
    let writes = shared.metrics.checkpoint_writes.clone();
    let flusher = AbortOnDropHandle::new(tokio::spawn(Arc::clone(&store).run_flusher(
        shared.timing.checkpoint_interval,
        flush_cancel.clone(),
        move |ok| {
            writes
                .get_or_create(&[("result", if ok { "ok" } else { "error" })])
                .inc();
        },
    )));
    let deliverer = Arc::new(Deliverer::new(shared, kinesis.clone(), Arc::clone(config)));
    let start = StartSettings {
        position: config.starting,
        timestamp_ms: config.starting_timestamp_ms,
    };
    let reader_done = Arc::new(Notify::new());
    let mut readers: BTreeMap<String, Running> = BTreeMap::new();
    let leases = shared.shard_leases.clone().map(|settings| {
        ShardLeases::new(
            shared.client.clone(),
            &config.namespace,
            &config.trigger,
            settings,
            owner_reference(&config.trigger, &config.trigger_uid),
        )
    });
    let mut held: BTreeSet<String> = BTreeSet::new();
    let result = 'outer: loop {
        if let Some(leases) = &leases {
            let mut b = Balance {
                leases,
                store: &store,
                readers: &mut readers,
                held: &mut held,
                metrics: &shared.metrics,
                label: &label,
            };
            if let Err(e) = b.run(&listing, start, config.shard.as_deref()).await {
                tracing::warn!(trigger = %label, error = %e, "shard leases: this round failed; keeping the shards held");
            }
        }
        // With shard leases, status lists every readable shard (the same on every replica, so
        // replicas do not overwrite each other's status); otherwise the shards read here.
        let mut readable: BTreeSet<String> = BTreeSet::new();
        for (shard, decision) in decide(&listing, &store.snapshot(), start, config.shard.as_deref())
        {
            if matches!(decision, Decision::Read(_)) {
                readable.insert(shard.clone());
            }
            match decision {
                Decision::Skip => store.set_urgent(&shard, Checkpoint::Skipped),
                Decision::MarkEnd => {
                    // Everything up to the ending sequence number is done; nothing follows.
                    store.set_urgent(&shard, Checkpoint::End);
                    if let Some(r) = readers.remove(&shard) {
                        r.cancel.cancel();
                        let _ = r.task.await;
                        shared.metrics.forget_shard(&label, &shard);
                    }
                    tracing::info!(trigger = %label, shard = %shard, "closed shard drained");
                    reader_done.notify_one();
                }
                Decision::Read(from)
                    if !readers.contains_key(&shard)
                        && (leases.is_none() || held.contains(&shard)) =>
                {
                    tracing::info!(trigger = %label, shard = %shard, start = ?from, "reading shard");
                    let reader = ShardReader {
                        shard_id: shard.clone(),
                        kinesis: kinesis.clone(),
                        deliverer: Arc::clone(&deliverer),
                        store: Arc::clone(&store),
                        polling: shared.timing.polling,
                    };
                    let token = cancel.child_token();
                    let done = Arc::clone(&reader_done);
                    let t = token.clone();
                    let task = AbortOnDropHandle::new(tokio::spawn(async move {
                        let exit = reader.run(from, t).await;
                        done.notify_one();
                        exit
                    }));
                    readers.insert(
                        shard,
                        Running {
                            cancel: token,
                            task,
                        },
                    );
                }
                _ => {}
            }
        }
        shared.metrics.set_shards(&label, readers.len());
        let shards: Vec<String> = if leases.is_some() {
            readable.into_iter().collect()
        } else {
            readers.keys().cloned().collect()
        };
        state.set(UnitState::Running { detail: shards });
        tokio::select! {
            _ = tokio::time::sleep(shared.timing.list_shards_interval) => {}
            _ = reader_done.notified() => {}
            _ = cancel.cancelled() => break Ok(()),
        }
        let finished: Vec<String> = readers
            .iter()
            .filter(|(_, r)| r.task.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for shard in finished {
            let Some(r) = readers.remove(&shard) else {
                continue;
            };
            shared.metrics.forget_shard(&label, &shard);
            match r.task.await {
                Ok(ShardExit::Failed(e)) => break 'outer Err(e),
                Ok(ShardExit::Drained) => {
                    tracing::info!(trigger = %label, shard = %shard, "shard drained");
                }
                Ok(ShardExit::Cancelled) => {}
                Err(e) => {
                    tracing::error!(trigger = %label, shard = %shard, error = %e, "shard reader panicked; restarting it")
                }
            }
        }
        match aws::list_shards(&kinesis, &config.stream).await {
            Ok(l) => listing = l,
            Err(e) => break Err(e),
        }
    };
    for r in readers.values() {
        r.cancel.cancel();
    }
    for (shard, r) in readers {
        let _ = r.task.await;
        shared.metrics.forget_shard(&label, &shard);
    }
    flush_cancel.cancel();
    let _ = flusher.await;
    if let Some(leases) = &leases {
        // After the last checkpoints are written: whoever takes the shards over resumes there.
        for shard in &held {
            if let Err(e) = leases.release(shard).await {
                tracing::warn!(trigger = %label, shard = %shard, error = %e, "releasing a shard lease failed (it expires)");
            }
        }
        if let Err(e) = leases.leave().await {
            tracing::debug!(trigger = %label, error = %e, "releasing the member lease failed");
        }
    }
    result
}

/// One round of the shard-lease mode: renew, drop lost shards, hand back or take shards so this
/// replica holds its share.
struct Balance<'a> {
    leases: &'a ShardLeases,
    store: &'a Arc<CheckpointStore>,
    readers: &'a mut BTreeMap<String, Running>,
    held: &'a mut BTreeSet<String>,
    metrics: &'a StreamMetrics,
    label: &'a str,
}

impl Balance<'_> {
    async fn stop_reader(&mut self, shard: &str) {
        if let Some(r) = self.readers.remove(shard) {
            r.cancel.cancel();
            let _ = r.task.await;
            self.metrics.forget_shard(self.label, shard);
        }
    }

    async fn run(
        &mut self,
        listing: &[ShardInfo],
        start: StartSettings,
        only: Option<&str>,
    ) -> Result<(), kube::Error> {
        self.leases.announce().await?;
        for shard in self.held.clone() {
            if !self.leases.hold(&shard).await? {
                tracing::warn!(trigger = %self.label, shard = %shard, "lost the shard lease; stopping its reader");
                self.held.remove(&shard);
                self.stop_reader(&shard).await;
            }
        }
        let reading: BTreeSet<String> = self.readers.keys().cloned().collect();
        self.store.refresh(&reading).await?;
        let readable: Vec<String> = decide(listing, &self.store.snapshot(), start, only)
            .into_iter()
            .filter(|(_, d)| matches!(d, Decision::Read(_)))
            .map(|(s, _)| s)
            .collect();
        // Drained (or not yet readable) shards: nothing to hold.
        for shard in self.held.clone() {
            if !readable.contains(&shard) && !self.readers.contains_key(&shard) {
                self.store.flush().await?;
                self.leases.release(&shard).await?;
                self.held.remove(&shard);
            }
        }
        let target = share(readable.len(), self.leases.live_members().await?);
        if self.held.len() > target {
            // Hand one back per round: stop, write its checkpoint, then release.
            if let Some(shard) = self.held.iter().next_back().cloned() {
                tracing::info!(trigger = %self.label, shard = %shard, target, "handing a shard to another replica");
                self.stop_reader(&shard).await;
                self.store.flush().await?;
                self.leases.release(&shard).await?;
                self.held.remove(&shard);
            }
            return Ok(());
        }
        let mut acquired = false;
        for shard in &readable {
            if self.held.len() >= target {
                break;
            }
            if !self.held.contains(shard) && self.leases.hold(shard).await? {
                tracing::info!(trigger = %self.label, shard = %shard, "took the shard lease");
                self.held.insert(shard.clone());
                acquired = true;
            }
        }
        if acquired {
            // The previous holder flushed before releasing: read its last checkpoints.
            self.store.refresh(&reading).await?;
        }
        Ok(())
    }
}
