//! One consumer group per (trigger, function).
//!
//! A dedicated OS thread owns the librdkafka consumer and polls it (so rebalance callbacks,
//! which must drain in-flight calls before partitions move, can block without stalling the
//! async runtime). Each record goes to a lane of its partition: one lane in `partition`
//! ordering, `lanes` lanes in `key` (chosen by key hash) and `none` (round robin) ordering.
//! Lanes are tokio tasks that deliver their records one at a time, so order within a lane is
//! kept, partitions and lanes run in parallel, and a process-wide semaphore bounds the calls in
//! flight.
//!
//! Offsets: auto-commit is off. Each partition has an [`OffsetTracker`]; a record is marked
//! done after a 2xx, a dead-letter acknowledgement or a skip, and only the contiguous done
//! prefix is committed: every `commit_interval` (async), and synchronously when partitions
//! are revoked (after draining) and when the consumer stops.
//!
//! Flow control: every assigned partition gets its own librdkafka queue
//! (`rd_kafka_queue_get_partition`), polled by the same thread. A partition with `max_queued`
//! records waiting in its lanes is not polled until they fall to half of that; librdkafka then
//! stops fetching it once its queue holds `queued.min.messages` (set to `max_queued`), so a slow
//! or failing partition neither grows memory nor blocks the others, and fetches it again 20 ms
//! later (`fetch.queue.backoff.ms`, not librdkafka's 1 s). Nothing is paused, so
//! nothing prefetched is thrown away and fetched again: that refetch, from the middle of a
//! batch, is what stalled the pause/resume flow control this replaced (see docs/kafka-trigger.md).
//!
//! Lag and health: a second thread per group asks the broker for the topic's metadata and each
//! partition's high watermark every `lag_interval`. These calls block, and a broker answers the
//! requests of one connection in order: behind a fetch it holds for `fetch.wait.max.ms` (500 ms)
//! at the end of a partition, each waits up to that long. On the poll thread one round (metadata
//! and 4 watermarks) stopped delivery for about 2.5 s; see docs/kafka-trigger.md.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, base_consumer::PartitionQueue,
};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::broker::BrokerArgs;
use crate::deliver::{Deliverer, Finished};
use crate::metrics::{ConsumerMetrics, TriggerMetrics};
use crate::offsets::OffsetTracker;
use crate::plan::{ConsumerSpec, Ordering};
use crate::record::Record;
use kubeless_invoke::{CallBody, Lane};

/// Knobs of every consumer.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Lanes per partition for `key` and `none` ordering.
    pub lanes: usize,
    /// Records waiting per partition before it is no longer polled (and, through
    /// `queued.min.messages`, librdkafka's prefetch per partition).
    pub max_queued: usize,
    /// How long a revoke or stop waits for in-flight calls before abandoning them (they are
    /// then redelivered by the next owner).
    pub drain_timeout: Duration,
    pub commit_interval: Duration,
    /// Watermark (lag) and topic metadata (health) refresh.
    pub lag_interval: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            lanes: 32,
            max_queued: 2_000,
            drain_timeout: Duration::from_secs(30),
            commit_interval: Duration::from_millis(500),
            lag_interval: Duration::from_secs(5),
        }
    }
}

/// What a consumer last saw of the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Starting,
    Ok,
    /// Broker unreachable or topic missing.
    Unavailable(String),
}

/// Health per consumer group, read by the status writer; a change wakes the control loop.
#[derive(Default)]
pub struct HealthMap {
    map: Mutex<HashMap<String, Health>>,
    changed: Arc<Notify>,
}

impl HealthMap {
    /// A map that notifies `changed` on every change.
    pub fn new(changed: Arc<Notify>) -> Self {
        Self {
            map: Mutex::default(),
            changed,
        }
    }

    /// The health of `group` (`None`: no consumer).
    pub fn get(&self, group: &str) -> Option<Health> {
        lock(&self.map).get(group).cloned()
    }

    fn set(&self, group: &str, h: Health) {
        let mut m = lock(&self.map);
        if m.get(group) != Some(&h) {
            if let Health::Unavailable(msg) = &h {
                tracing::warn!(group, reason = %msg, "broker unavailable for consumer");
            }
            m.insert(group.to_string(), h);
            self.changed.notify_one();
        }
    }

    fn remove(&self, group: &str) {
        if lock(&self.map).remove(group).is_some() {
            self.changed.notify_one();
        }
    }
}

/// Everything consumers share.
pub struct Shared {
    pub brokers: BrokerArgs,
    pub deliverer: Arc<Deliverer>,
    pub in_flight: Arc<Semaphore>,
    pub metrics: TriggerMetrics,
    pub runtime: tokio::runtime::Handle,
    pub tuning: Tuning,
    pub health: Arc<HealthMap>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("invalid broker settings")]
    Config(#[source] crate::broker::BrokerConfigError),
    #[error("creating the Kafka consumer failed")]
    Create(#[source] KafkaError),
    #[error("subscribing to topic {topic} failed")]
    Subscribe {
        topic: String,
        #[source]
        source: KafkaError,
    },
    #[error("starting the consumer thread failed")]
    Thread(#[source] std::io::Error),
}

/// A running consumer; [`ConsumerHandle::stop`] drains and commits.
pub struct ConsumerHandle {
    stop: CancellationToken,
    /// Cancelled once the calls in flight are done (or abandoned), before the final commit.
    drained: CancellationToken,
    stopped: oneshot::Receiver<()>,
    group: String,
}

/// How long a stop waits for the final commit and the group leave once the calls are drained.
/// A broker that does not answer (frozen, partitioned) must not hold the process: what was not
/// committed is redelivered, which at-least-once allows.
pub const FINAL_COMMIT_WAIT: Duration = Duration::from_millis(1500);

impl ConsumerHandle {
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Stops taking records, waits for in-flight calls (up to the drain timeout), commits and
    /// leaves the group.
    pub async fn stop(self) {
        let Self {
            stop,
            drained,
            mut stopped,
            group,
        } = self;
        stop.cancel();
        tokio::select! {
            _ = &mut stopped => return,
            _ = drained.cancelled() => {}
        }
        if tokio::time::timeout(FINAL_COMMIT_WAIT, stopped)
            .await
            .is_err()
        {
            tracing::warn!(%group, wait = ?FINAL_COMMIT_WAIT, "the broker did not take the final commit in time; stopping without it (records after the last commit will be redelivered)");
        }
    }
}

struct PartitionWork {
    /// The partition's own librdkafka queue (split at assignment). `None` for records that
    /// reached the consumer queue before the split, which are routed all the same.
    queue: Option<PartitionQueue<GroupContext>>,
    lanes: Vec<mpsc::UnboundedSender<Record>>,
    tasks: Vec<JoinHandle<()>>,
    tracker: Arc<Mutex<OffsetTracker>>,
    queued: Arc<AtomicUsize>,
    /// `max_queued` records were waiting: not polled until they fall to half.
    full: bool,
    /// Stop starting records (revoke / stop).
    revoked: CancellationToken,
    /// Cancel calls in flight (drain timeout passed).
    abort: CancellationToken,
    next_lane: usize,
}

struct GroupState {
    spec: ConsumerSpec,
    shared: Arc<Shared>,
    metrics: ConsumerMetrics,
    parts: Mutex<HashMap<i32, PartitionWork>>,
    /// Wakes the poll thread: a queue became non-empty, or a full partition has room again.
    wake: Wake,
    /// The consumer, for splitting partition queues at assignment (weak: the consumer holds
    /// this state through its context).
    consumer: OnceLock<Weak<BaseConsumer<GroupContext>>>,
    last_poll_error: Mutex<Option<Instant>>,
}

/// A flag and a condition variable: `notify` from any thread (librdkafka's included), `wait` on
/// the poll thread. A notification before the wait is not lost.
#[derive(Default)]
struct Wake {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Wake {
    fn notify(&self) {
        *lock(&self.flag) = true;
        self.cv.notify_one();
    }

    fn wait(&self, timeout: Duration) {
        let mut woken = lock(&self.flag);
        if !*woken {
            woken = match self.cv.wait_timeout(woken, timeout) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        *woken = false;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct GroupContext {
    state: Arc<GroupState>,
}

impl ClientContext for GroupContext {
    fn error(&self, error: KafkaError, reason: &str) {
        // Connection-level trouble (all brokers down, resolve failures) arrives here.
        tracing::warn!(group = %self.state.spec.group, %error, reason, "librdkafka error");
        if matches!(
            error.rdkafka_error_code(),
            Some(rdkafka::types::RDKafkaErrorCode::AllBrokersDown)
                | Some(rdkafka::types::RDKafkaErrorCode::Resolve)
                | Some(rdkafka::types::RDKafkaErrorCode::Authentication)
                | Some(rdkafka::types::RDKafkaErrorCode::SSL)
        ) {
            self.state.shared.health.set(
                &self.state.spec.group,
                Health::Unavailable(format!("{error}: {reason}")),
            );
        }
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts: Vec<i32> = tpl
                .elements_for_topic(&self.state.spec.topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            tracing::info!(group = %self.state.spec.group, ?parts, "partitions revoked: draining");
            self.state.metrics.revoked.inc();
            self.state.release(consumer, &parts, None);
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let parts: Vec<i32> = tpl
                .elements_for_topic(&self.state.spec.topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            tracing::info!(group = %self.state.spec.group, ?parts, "partitions assigned");
            self.state.metrics.assigned.inc();
            // Split right after the assignment, before the first fetch answers, so the
            // partition's records come through its own queue.
            self.state.split_queues(&parts);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            self.state.metrics.commit_failures.inc();
            tracing::warn!(group = %self.state.spec.group, error = %e, "offset commit failed; will retry");
            let parts = lock(&self.state.parts);
            for el in offsets.elements() {
                if let (Some(w), Offset::Offset(o)) = (parts.get(&el.partition()), el.offset()) {
                    lock(&w.tracker).commit_failed(o);
                }
            }
        }
    }
}

impl GroupState {
    fn start_partition(self: &Arc<Self>, partition: i32) -> PartitionWork {
        let lanes = match self.spec.ordering {
            Ordering::Partition => 1,
            Ordering::Key | Ordering::None => self.shared.tuning.lanes.max(1),
        };
        tracing::debug!(group = %self.spec.group, partition, lanes, "starting partition lanes");
        let tracker = Arc::new(Mutex::new(OffsetTracker::new()));
        let queued = Arc::new(AtomicUsize::new(0));
        let revoked = CancellationToken::new();
        let abort = CancellationToken::new();
        let mut senders = Vec::with_capacity(lanes);
        let mut tasks = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            tasks.push(self.shared.runtime.spawn(lane(
                rx,
                Arc::clone(self),
                Arc::clone(&tracker),
                Arc::clone(&queued),
                revoked.clone(),
                abort.clone(),
            )));
        }
        PartitionWork {
            queue: None,
            lanes: senders,
            tasks,
            tracker,
            queued,
            full: false,
            revoked,
            abort,
            next_lane: 0,
        }
    }

    /// Gives each newly assigned partition its own queue, woken into the poll thread.
    fn split_queues(self: &Arc<Self>, partitions: &[i32]) {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut parts = lock(&self.parts);
        for &p in partitions {
            // Every handle of a partition's queue is the same librdkafka queue, and dropping one
            // (rdkafka 0.39's `PartitionQueue::drop`) switches that queue's callback off: an old
            // handle must go before the new one sets its callback, or the partition's wake-ups
            // are lost (the poll thread's 50 ms tick would still find its records, late).
            if let Some(w) = parts.get_mut(&p) {
                drop(w.queue.take());
            }
            let Some(mut queue) = consumer.split_partition_queue(&self.spec.topic, p) else {
                tracing::warn!(group = %self.spec.group, partition = p, "no queue for the partition; its records come through the consumer queue");
                continue;
            };
            let state = Arc::downgrade(self);
            queue.set_nonempty_callback(move || {
                if let Some(s) = state.upgrade() {
                    s.wake.notify();
                }
            });
            let w = parts.entry(p).or_insert_with(|| self.start_partition(p));
            w.queue = Some(queue);
        }
    }

    /// Hands a record that came through the consumer queue to its lane.
    fn dispatch(self: &Arc<Self>, record: Record) {
        let mut parts = lock(&self.parts);
        let w = parts
            .entry(record.partition)
            .or_insert_with(|| self.start_partition(record.partition));
        if self.route(w, record) {
            w.full = true;
        }
    }

    /// Hands a record to its lane. Returns whether the partition is now full.
    fn route(&self, w: &mut PartitionWork, record: Record) -> bool {
        if !lock(&w.tracker).received(record.offset) {
            return false;
        }
        let n = w.lanes.len();
        let lane = match (self.spec.ordering, &record.key) {
            (Ordering::Partition, _) => 0,
            (Ordering::Key, Some(key)) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut h);
                (h.finish() % n as u64) as usize
            }
            (Ordering::Key, None) | (Ordering::None, _) => {
                w.next_lane = (w.next_lane + 1) % n;
                w.next_lane
            }
        };
        let queued = w.queued.fetch_add(1, AtomicOrdering::AcqRel) + 1;
        if w.lanes[lane].send(record).is_err() {
            // The lane ended (revoked); the record stays undone and is redelivered later.
            w.queued.fetch_sub(1, AtomicOrdering::AcqRel);
        }
        queued >= self.shared.tuning.max_queued
    }

    /// Takes up to `budget` records from each partition queue that has room. Returns whether
    /// it took any.
    fn poll_partitions(&self, budget: usize) -> bool {
        let low = self.shared.tuning.max_queued / 2;
        let mut took = false;
        let mut parts = lock(&self.parts);
        for w in parts.values_mut() {
            if w.full {
                if w.queued.load(AtomicOrdering::Acquire) > low {
                    continue;
                }
                w.full = false;
            }
            for _ in 0..budget {
                let Some(queue) = &w.queue else { break };
                let record = match queue.poll(Duration::ZERO) {
                    Some(Ok(m)) => Record::from_message(&m),
                    Some(Err(e)) => {
                        self.poll_error(&e);
                        break;
                    }
                    None => break,
                };
                took = true;
                if self.route(w, record) {
                    w.full = true;
                    break;
                }
            }
        }
        took
    }

    /// Logs a poll error (at most once in 10 s) and marks the broker unavailable when the
    /// error says so.
    fn poll_error(&self, e: &KafkaError) {
        {
            let mut last = lock(&self.last_poll_error);
            if last.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                tracing::warn!(group = %self.spec.group, error = %e, "consumer error");
                *last = Some(Instant::now());
            }
        }
        if let KafkaError::MessageConsumption(code) = e {
            self.shared
                .health
                .set(&self.spec.group, Health::Unavailable(format!("{code:?}")));
        }
    }

    /// Offsets to commit now (those that moved).
    fn pending_commits(&self) -> TopicPartitionList {
        let parts = lock(&self.parts);
        let mut tpl = TopicPartitionList::new();
        for (p, w) in parts.iter() {
            if let Some(o) = lock(&w.tracker).take_commit() {
                let _ = tpl.add_partition_offset(&self.spec.topic, *p, Offset::Offset(o));
            }
        }
        tpl
    }

    /// Stops and drains the given partitions (all when `None`-like empty slice is not enough:
    /// pass every key), then commits their done prefix synchronously. Runs on the poll thread.
    fn release(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        partitions: &[i32],
        drained: Option<&CancellationToken>,
    ) {
        let mut works: Vec<(i32, PartitionWork)> = {
            let mut parts = lock(&self.parts);
            partitions
                .iter()
                .filter_map(|p| parts.remove(p).map(|w| (*p, w)))
                .collect()
        };
        if works.is_empty() {
            if let Some(d) = drained {
                d.cancel();
            }
            return;
        }
        for (_, w) in works.iter_mut() {
            w.revoked.cancel();
            w.lanes.clear();
        }
        let drain = self.shared.tuning.drain_timeout;
        let started = Instant::now();
        let finished = self.shared.runtime.block_on(async {
            let all =
                futures::future::join_all(works.iter_mut().flat_map(|(_, w)| w.tasks.iter_mut()));
            tokio::time::timeout(drain, all).await.is_ok()
        });
        if !finished {
            tracing::warn!(
                group = %self.spec.group, ?drain,
                "in-flight calls did not finish in time; abandoning them (they will be redelivered)"
            );
            for (_, w) in works.iter() {
                w.abort.cancel();
            }
            self.shared.runtime.block_on(async {
                let rest = futures::future::join_all(
                    works
                        .iter_mut()
                        .flat_map(|(_, w)| w.tasks.iter_mut())
                        .filter(|t| !t.is_finished()),
                );
                let _ = tokio::time::timeout(Duration::from_secs(2), rest).await;
            });
            for (_, w) in works.iter() {
                for t in &w.tasks {
                    t.abort();
                }
            }
        }
        if let Some(d) = drained {
            d.cancel();
        }
        let mut tpl = TopicPartitionList::new();
        for (p, w) in &works {
            if let Some(o) = lock(&w.tracker).committable() {
                let _ = tpl.add_partition_offset(&self.spec.topic, *p, Offset::Offset(o));
            }
            self.metrics.forget_partition(*p);
        }
        if tpl.count() > 0 {
            match consumer.commit(&tpl, CommitMode::Sync) {
                Ok(()) => tracing::info!(
                    group = %self.spec.group, offsets = ?tpl.to_topic_map(), drained_in = ?started.elapsed(),
                    "committed after draining"
                ),
                Err(e) => {
                    self.metrics.commit_failures.inc();
                    tracing::warn!(group = %self.spec.group, error = %e, "final commit failed; records after the last commit will be redelivered");
                }
            }
        }
    }

    /// Checks the topic's metadata (health), then each owned partition's high watermark (lag).
    /// Blocking broker round trips; `stopped` is asked between them.
    fn update_lag_and_health(
        &self,
        consumer: &BaseConsumer<GroupContext>,
        stopped: &dyn Fn() -> bool,
    ) {
        let topic = &self.spec.topic;
        let health = match consumer.fetch_metadata(Some(topic), LAG_QUERY_TIMEOUT) {
            Err(e) => Health::Unavailable(format!("cannot reach the brokers: {e}")),
            Ok(md) => match md.topics().iter().find(|t| t.name() == topic) {
                Some(t) if t.error().is_none() && !t.partitions().is_empty() => Health::Ok,
                Some(t) => Health::Unavailable(match t.error() {
                    Some(e) => format!(
                        "topic {topic}: {:?}",
                        rdkafka::types::RDKafkaErrorCode::from(e)
                    ),
                    None => format!("topic {topic} has no partitions"),
                }),
                None => Health::Unavailable(format!("topic {topic} does not exist")),
            },
        };
        if stopped() {
            // The stopping poll thread removes the group's entry: do not bring it back.
            return;
        }
        let ok = health == Health::Ok;
        self.shared.health.set(&self.spec.group, health);
        if !ok {
            return;
        }
        let positions: Vec<(i32, Option<i64>)> = lock(&self.parts)
            .iter()
            .map(|(p, w)| (*p, lock(&w.tracker).position()))
            .collect();
        for (p, pos) in positions {
            if stopped() {
                return;
            }
            if let (Ok((_, high)), Some(pos)) =
                (consumer.fetch_watermarks(topic, p, LAG_QUERY_TIMEOUT), pos)
            {
                // Only while the partition is still ours: a revoke forgets its series after
                // removing it from `parts`, so a late answer must not bring the series back.
                let parts = lock(&self.parts);
                if parts.contains_key(&p) {
                    self.metrics.set_lag(p, high - pos);
                }
            }
        }
    }
}

async fn lane(
    mut rx: mpsc::UnboundedReceiver<Record>,
    state: Arc<GroupState>,
    tracker: Arc<Mutex<OffsetTracker>>,
    queued: Arc<AtomicUsize>,
    revoked: CancellationToken,
    abort: CancellationToken,
) {
    let shared = &state.shared;
    // A partition's only lane calls one record at a time: it keeps its own function connection
    // and drives it from this task, so a call does not cross tasks and threads twice.
    let own = (state.spec.ordering == Ordering::Partition).then(Lane::<CallBody>::default);
    let records = async {
        while let Some(record) = rx.recv().await {
            if revoked.is_cancelled() {
                break;
            }
            let permit = tokio::select! {
                biased;
                _ = revoked.cancelled() => break,
                p = Arc::clone(&shared.in_flight).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let started = Instant::now();
            state.metrics.in_flight.inc();
            let result = shared
                .deliverer
                .deliver(&state.spec, &record, &abort, &state.metrics, own.as_ref())
                .await;
            state.metrics.in_flight.dec();
            drop(permit);
            let Some(finished) = result else { break };
            match finished {
                Finished::Delivered => state.metrics.delivered.inc(),
                Finished::DeadLettered => state.metrics.dead_lettered.inc(),
                Finished::Skipped => state.metrics.skipped.inc(),
            };
            state
                .metrics
                .latency
                .observe(started.elapsed().as_secs_f64());
            lock(&tracker).done(record.offset);
            let before = queued.fetch_sub(1, AtomicOrdering::AcqRel);
            if before == shared.tuning.max_queued / 2 + 1 {
                // Down to half: a full partition is polled again.
                state.wake.notify();
            }
        }
    };
    match &own {
        Some(own) => own.run(records).await,
        None => records.await,
    }
}

/// The consumer properties the trigger sets unless the brokers' own properties set them.
fn tune(config: &mut rdkafka::ClientConfig, max_queued: usize) {
    if config.get("queued.min.messages").is_none() {
        // librdkafka's prefetch per partition queue: as many records as the lanes may hold.
        config.set(
            "queued.min.messages",
            max_queued.clamp(1, 10_000_000).to_string(),
        );
    }
    if config.get("fetch.queue.backoff.ms").is_none() {
        // Once a partition's queue holds `queued.min.messages`, librdkafka puts off its next
        // fetch by this much (1000 ms by default), even if the lanes empty the queue long
        // before: the partition then got nothing for up to a second (seen in the bench as
        // 0.5-0.8 s without a record, after about 2,000 records per partition).
        config.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    }
}

/// Starts the consumer of `spec` on its own thread.
pub fn start(spec: ConsumerSpec, shared: Arc<Shared>) -> Result<ConsumerHandle, ConsumerError> {
    let mut config = shared
        .brokers
        .consumer_config(&spec.group)
        .map_err(ConsumerError::Config)?;
    tune(&mut config, shared.tuning.max_queued);
    let metrics =
        shared
            .metrics
            .consumer(&spec.namespace, &spec.trigger, &spec.function, &spec.topic);
    let state = Arc::new(GroupState {
        spec: spec.clone(),
        shared: Arc::clone(&shared),
        metrics,
        parts: Mutex::new(HashMap::new()),
        wake: Wake::default(),
        consumer: OnceLock::new(),
        last_poll_error: Mutex::new(None),
    });
    let mut consumer: BaseConsumer<GroupContext> = config
        .create_with_context(GroupContext {
            state: Arc::clone(&state),
        })
        .map_err(ConsumerError::Create)?;
    // Rebalances, commit results and errors arrive on the consumer queue: wake for them too.
    let woken = Arc::downgrade(&state);
    consumer.set_nonempty_callback(move || {
        if let Some(s) = woken.upgrade() {
            s.wake.notify();
        }
    });
    let consumer = Arc::new(consumer);
    let _ = state.consumer.set(Arc::downgrade(&consumer));
    consumer
        .subscribe(&[&spec.topic])
        .map_err(|source| ConsumerError::Subscribe {
            topic: spec.topic.clone(),
            source,
        })?;
    shared.health.set(&spec.group, Health::Starting);
    let stop = CancellationToken::new();
    let (done_tx, done_rx) = oneshot::channel();
    let thread_stop = stop.clone();
    let drained = CancellationToken::new();
    let thread_drained = drained.clone();
    // The lag thread runs until `lag_stop` is dropped (by the poll thread when it ends); it
    // drops `lag_done` when it returns.
    let (lag_stop, lag_stop_rx) = std::sync::mpsc::channel::<()>();
    let (lag_done, lag_done_rx) = std::sync::mpsc::channel::<()>();
    let lag_name: String = format!("kl-{}", spec.function).chars().take(15).collect();
    let lag_consumer = Arc::downgrade(&consumer);
    let lag_state = Arc::clone(&state);
    let lag_cancel = stop.clone();
    std::thread::Builder::new()
        .name(lag_name)
        .spawn(move || {
            lag_loop(&lag_consumer, &lag_state, &lag_cancel, &lag_stop_rx);
            drop(lag_done);
        })
        .map_err(ConsumerError::Thread)?;
    let name: String = format!("kt-{}", spec.function).chars().take(15).collect();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            poll_loop(&consumer, &state, &thread_stop, &thread_drained);
            // The lag thread holds the consumer only during a round: wait for it to end so that
            // the drop below is the last one. A round stuck on a dead broker is not waited for
            // past LAG_STOP_WAIT; the consumer is then closed when that round returns.
            drop(lag_stop);
            let _ = lag_done_rx.recv_timeout(LAG_STOP_WAIT);
            // After the lag thread, which would otherwise set it again.
            state.shared.health.remove(&state.spec.group);
            // Dropping the consumer leaves the group (its revoke finds nothing left to drain).
            drop(consumer);
            let _ = done_tx.send(());
        })
        .map_err(ConsumerError::Thread)?;
    tracing::info!(group = %spec.group, topic = %spec.topic, function = %spec.function, ordering = %spec.ordering, "consumer started");
    Ok(ConsumerHandle {
        stop,
        drained,
        stopped: done_rx,
        group: spec.group,
    })
}

/// Records taken from one queue before the loop moves on (fairness between partitions).
const POLL_BUDGET: usize = 512;
/// Longest sleep of an idle poll thread (commits are due on time).
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// librdkafka's `fetch.queue.backoff.ms` unless the brokers' properties set it: how soon a
/// partition whose queue was full is fetched again.
const FETCH_QUEUE_BACKOFF_MS: &str = "20";

/// Timeout of each request of a lag round. Well above `fetch.wait.max.ms` (500 ms), which the
/// request may wait behind: an in-flight request that times out makes librdkafka drop the
/// connection (`socket.max.fails` = 1), and with it the fetches in flight.
const LAG_QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stopping poll thread waits for the lag thread's current request.
const LAG_STOP_WAIT: Duration = Duration::from_secs(6);

/// Refreshes health and lag every `lag_interval`, the first time right away, until `stop`'s
/// sender is dropped. Its own thread: these are blocking broker round trips (see the module
/// docs), which must not hold up the poll thread and so the delivery of records. Once the
/// consumer is asked to stop (`cancel`) it sends no more requests, so it is usually gone before
/// the poll thread has drained and waits for it.
fn lag_loop(
    consumer: &Weak<BaseConsumer<GroupContext>>,
    state: &GroupState,
    cancel: &CancellationToken,
    stop: &std::sync::mpsc::Receiver<()>,
) {
    let interval = state.shared.tuning.lag_interval;
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let Some(c) = consumer.upgrade() else { return };
        let started = Instant::now();
        state.update_lag_and_health(&c, &|| {
            cancel.is_cancelled()
                || matches!(
                    stop.try_recv(),
                    Ok(()) | Err(std::sync::mpsc::TryRecvError::Disconnected)
                )
        });
        drop(c);
        tracing::debug!(group = %state.spec.group, took = ?started.elapsed(), "lag and health refreshed");
        match stop.recv_timeout(interval) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn poll_loop(
    consumer: &BaseConsumer<GroupContext>,
    state: &Arc<GroupState>,
    stop: &CancellationToken,
    drained: &CancellationToken,
) {
    let tuning = state.shared.tuning.clone();
    let mut last_commit = Instant::now();
    while !stop.is_cancelled() {
        // The consumer queue first: rebalances and commit results are served here, and any
        // record that arrived before its partition's queue was split is older than that
        // queue's records, so it is routed first.
        let mut busy = false;
        for _ in 0..POLL_BUDGET {
            match consumer.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    let record = Record::from_message(&m);
                    drop(m);
                    state.dispatch(record);
                    busy = true;
                }
                Some(Err(e)) => {
                    state.poll_error(&e);
                    break;
                }
                None => break,
            }
        }
        busy |= state.poll_partitions(POLL_BUDGET);
        if last_commit.elapsed() >= tuning.commit_interval {
            last_commit = Instant::now();
            let tpl = state.pending_commits();
            if tpl.count() > 0
                && let Err(e) = consumer.commit(&tpl, CommitMode::Async)
            {
                state.metrics.commit_failures.inc();
                tracing::warn!(group = %state.spec.group, error = %e, "commit request failed");
                let parts = lock(&state.parts);
                for el in tpl.elements() {
                    if let (Some(w), Offset::Offset(o)) = (parts.get(&el.partition()), el.offset())
                    {
                        lock(&w.tracker).commit_failed(o);
                    }
                }
            }
        }
        if !busy {
            state.wake.wait(IDLE_WAIT);
        }
    }
    let all: Vec<i32> = lock(&state.parts).keys().copied().collect();
    state.release(consumer, &all, Some(drained));
    tracing::info!(group = %state.spec.group, "consumer stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_and_fetch_backoff_follow_the_lanes_unless_set() {
        let mut c = rdkafka::ClientConfig::new();
        tune(&mut c, 2_000);
        assert_eq!(c.get("queued.min.messages"), Some("2000"));
        // Not librdkafka's 1 s: a partition whose lanes emptied its queue is fetched again soon.
        assert_eq!(
            c.get("fetch.queue.backoff.ms"),
            Some(FETCH_QUEUE_BACKOFF_MS)
        );

        let mut own = rdkafka::ClientConfig::new();
        own.set("queued.min.messages", "10");
        own.set("fetch.queue.backoff.ms", "500");
        tune(&mut own, 2_000);
        assert_eq!(own.get("queued.min.messages"), Some("10"));
        assert_eq!(own.get("fetch.queue.backoff.ms"), Some("500"));
    }
}
