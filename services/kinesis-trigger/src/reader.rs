//! One shard's reader: GetRecords in a loop within the service limit (5 calls/s per shard),
//! each record delivered in order before the next, the checkpoint moved after each one, the
//! shard marked drained when Kinesis says it is closed and read to its end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_kinesis::Client as KinesisClient;
use aws_sdk_kinesis::primitives::DateTime;
use aws_sdk_kinesis::types::ShardIteratorType;
use bytes::Bytes;
use kubeless_invoke::{CallBody, Lane};
use tokio_util::sync::CancellationToken;

use crate::aws::{ReaderError, describe};
use crate::checkpoint::CheckpointStore;
use crate::deliver::{Deliverer, Record};
use crate::shards::{Checkpoint, Start};

/// Polling settings shared by every shard reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polling {
    /// Least time between two GetRecords calls on one shard (Kinesis allows 5/s; 200 ms is the
    /// floor).
    pub min_interval: Duration,
    /// Wait after a call that returned no records.
    pub idle_interval: Duration,
    /// GetRecords `Limit`.
    pub records_limit: i32,
    /// Upper bound of throttling and error backoff.
    pub max_backoff: Duration,
}

impl Default for Polling {
    fn default() -> Self {
        Self {
            min_interval: Duration::from_millis(250),
            idle_interval: Duration::from_secs(1),
            records_limit: 1000,
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Why a reader returned.
#[derive(Debug)]
pub enum ShardExit {
    /// Closed and read to the end; the checkpoint says [`Checkpoint::End`].
    Drained,
    Cancelled,
    Failed(ReaderError),
}

/// Reads one shard.
pub struct ShardReader {
    pub shard_id: String,
    pub kinesis: KinesisClient,
    pub deliverer: Arc<Deliverer>,
    pub store: Arc<CheckpointStore>,
    pub polling: Polling,
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl ShardReader {
    /// Runs until the shard is drained, `cancel` fires, or the stream is gone. A shard's
    /// records are delivered one at a time, in order: the reader keeps its own function
    /// connection and drives it from its own task ([`Lane`]).
    pub async fn run(self, start: Start, cancel: CancellationToken) -> ShardExit {
        let lane = Lane::default();
        lane.run(self.read(start, cancel, &lane)).await
    }

    async fn read(
        &self,
        start: Start,
        cancel: CancellationToken,
        lane: &Lane<CallBody>,
    ) -> ShardExit {
        let config = Arc::clone(&self.deliverer.config);
        let label = config.label();
        let metrics = self.deliverer.metrics.clone();
        let mut position = start;
        let mut iterator: Option<String> = None;
        let mut failures = 0u32;
        let mut last_call: Option<Instant> = None;
        let exit = loop {
            if cancel.is_cancelled() {
                break ShardExit::Cancelled;
            }
            let it = match iterator.take() {
                Some(it) => it,
                None => match self.acquire(&mut position).await {
                    Ok(Some(it)) => it,
                    Ok(None) => {
                        // No iterator for a shard means it is closed and fully read.
                        self.store.set_urgent(&self.shard_id, Checkpoint::End);
                        break ShardExit::Drained;
                    }
                    Err(Fatal(e)) => break ShardExit::Failed(e),
                    Err(Transient(msg)) => {
                        failures += 1;
                        tracing::warn!(trigger = %label, shard = %self.shard_id, error = %msg, "getting a shard iterator failed; retrying");
                        if !self.sleep(self.backoff(failures), &cancel).await {
                            break ShardExit::Cancelled;
                        }
                        continue;
                    }
                },
            };
            // Stay under 5 calls per second per shard.
            if let Some(t) = last_call {
                let since = t.elapsed();
                if since < self.polling.min_interval
                    && !self.sleep(self.polling.min_interval - since, &cancel).await
                {
                    break ShardExit::Cancelled;
                }
            }
            last_call = Some(Instant::now());
            let call = self
                .kinesis
                .get_records()
                .shard_iterator(&it)
                .limit(self.polling.records_limit)
                .send();
            let out = tokio::select! {
                r = call => r,
                _ = cancel.cancelled() => break ShardExit::Cancelled,
            };
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    let svc = e.as_service_error();
                    if svc.is_some_and(|s| s.is_expired_iterator_exception()) {
                        metrics.get_records(&label, "expired");
                        // Re-acquired from the last record done (never past the checkpoint).
                        continue;
                    }
                    if svc.is_some_and(|s| s.is_resource_not_found_exception()) {
                        break ShardExit::Failed(ReaderError::StreamNotFound(
                            config.stream.clone(),
                        ));
                    }
                    let throttled = svc.is_some_and(|s| {
                        s.is_provisioned_throughput_exceeded_exception()
                            || s.is_kms_throttling_exception()
                    });
                    metrics.get_records(&label, if throttled { "throttled" } else { "error" });
                    failures += 1;
                    if !throttled {
                        tracing::warn!(trigger = %label, shard = %self.shard_id, error = %describe(&e), "GetRecords failed; retrying");
                    }
                    // The iterator stays valid for 5 minutes: reuse it.
                    iterator = Some(it);
                    if !self.sleep(self.backoff(failures), &cancel).await {
                        break ShardExit::Cancelled;
                    }
                    continue;
                }
            };
            failures = 0;
            if let Some(ms) = out.millis_behind_latest() {
                metrics.millis_behind(&label, &self.shard_id, ms);
            }
            let records = out.records();
            metrics.get_records(&label, if records.is_empty() { "empty" } else { "ok" });
            for r in records {
                let record = Record {
                    shard_id: self.shard_id.clone(),
                    sequence_number: r.sequence_number().to_string(),
                    partition_key: r.partition_key().unwrap_or_default().to_string(),
                    data: Bytes::copy_from_slice(r.data().as_ref()),
                };
                if self
                    .deliverer
                    .deliver(&record, &cancel, Some(lane))
                    .await
                    .is_none()
                {
                    return self.finish(ShardExit::Cancelled);
                }
                self.store.set(
                    &self.shard_id,
                    Checkpoint::After(record.sequence_number.clone()),
                );
                position = Start::AfterSequence(record.sequence_number);
            }
            match out.next_shard_iterator() {
                Some(next) if !next.is_empty() => iterator = Some(next.to_string()),
                _ => {
                    self.store.set_urgent(&self.shard_id, Checkpoint::End);
                    break ShardExit::Drained;
                }
            }
            if records.is_empty() && !self.sleep(self.polling.idle_interval, &cancel).await {
                break ShardExit::Cancelled;
            }
        };
        self.finish(exit)
    }

    fn finish(&self, exit: ShardExit) -> ShardExit {
        tracing::info!(trigger = %self.deliverer.config.label(), shard = %self.shard_id, exit = ?exit, "shard reader stopped");
        exit
    }

    fn backoff(&self, failures: u32) -> Duration {
        kubeless_api::delivery::exponential_backoff(
            Duration::from_millis(250),
            2.0,
            self.polling.max_backoff,
            failures.saturating_add(1),
        )
    }

    /// `false` when cancelled.
    async fn sleep(&self, d: Duration, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = cancel.cancelled() => false,
        }
    }

    /// A shard iterator at `position`. LATEST is turned into AT_TIMESTAMP(now) and that is
    /// checkpointed first, so a restart before the first record does not skip what arrived
    /// while the trigger was down.
    async fn acquire(&self, position: &mut Start) -> Result<Option<String>, AcquireError> {
        let config = &self.deliverer.config;
        if *position == Start::Latest {
            let now = now_millis();
            self.store.set_urgent(&self.shard_id, Checkpoint::At(now));
            *position = Start::AtTimestamp(now);
        }
        let req = self
            .kinesis
            .get_shard_iterator()
            .stream_name(&config.stream)
            .shard_id(&self.shard_id);
        let req = match &*position {
            Start::AfterSequence(seq) => req
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .starting_sequence_number(seq),
            Start::AtTimestamp(ms) => req
                .shard_iterator_type(ShardIteratorType::AtTimestamp)
                .timestamp(DateTime::from_millis(*ms)),
            Start::TrimHorizon => req.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Start::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
        };
        match req.send().await {
            Ok(o) => Ok(o.shard_iterator().map(str::to_string)),
            Err(e) => {
                if e.as_service_error()
                    .is_some_and(|s| s.is_resource_not_found_exception())
                {
                    Err(Fatal(ReaderError::StreamNotFound(config.stream.clone())))
                } else {
                    Err(Transient(describe(&e)))
                }
            }
        }
    }
}

enum AcquireError {
    Fatal(ReaderError),
    Transient(String),
}
use AcquireError::{Fatal, Transient};
