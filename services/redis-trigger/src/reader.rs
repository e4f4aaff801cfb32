//! One reader: the consumer group `<prefix>_<function>` on the trigger's stream, read by the
//! consumer named after the pod. Each pass takes, in order, this consumer's own pending entries
//! (read before a restart but not acknowledged), entries that dead consumers left pending
//! longer than `claim_idle` (XAUTOCLAIM), then new entries (XREADGROUP BLOCK). An entry is
//! acknowledged (XACK) only once the function answered 2xx or it went to the dead-letter
//! stream: at least once, in stream order per function.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kubeless_api::conditions::reasons;
use kubeless_invoke::Event;
use kubeless_trigger::deliver::last_answer;
use kubeless_trigger::metrics::{PairMetrics, outcome};
use kubeless_trigger::{Delivery, Finished, UnitState, retry_policy};
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions};
use redis::{AsyncCommands, AsyncConnectionConfig, RedisResult, Value};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::unit::StateSender;
use crate::{ReaderConfig, ReaderKey, Shared};

/// `event-namespace` of the events this trigger sends.
pub const EVENT_NAMESPACE: &str = "redistriggers.kubeless.io";
const BATCH: usize = 16;
/// How long XREADGROUP waits for new entries before the next pass.
const BLOCK: Duration = Duration::from_secs(2);
/// Ceiling of the reconnect backoff and of the waits inside a delivery.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// The request body: the entry's `data` field when it has one, else every field as a JSON
/// object of strings.
pub fn body(entry: &StreamId) -> Vec<u8> {
    if let Some(data) = entry.map.get("data") {
        return bytes(data);
    }
    let fields: BTreeMap<&str, String> = (entry.map.iter())
        .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(&bytes(v)).into_owned()))
        .collect();
    serde_json::to_vec(&fields).unwrap_or_default()
}

fn bytes(v: &Value) -> Vec<u8> {
    redis::from_redis_value_ref(v).unwrap_or_default()
}

/// The event of one entry: its id is the `event-id`.
pub fn event(entry: &StreamId) -> Event {
    Event::new(EVENT_NAMESPACE)
        .with_body(body(entry))
        .with_event_id(entry.id.clone())
}

/// A dead letter: the entry's fields, then what failed where.
pub fn dead_letter_fields(
    entry: &StreamId,
    stream: &str,
    function: &str,
    error: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut fields: Vec<(String, Vec<u8>)> = (entry.map.iter())
        .map(|(k, v)| (k.clone(), bytes(v)))
        .collect();
    fields.sort();
    for (k, v) in [
        ("error", error),
        ("function", function),
        ("source-stream", stream),
        ("source-id", &entry.id),
    ] {
        fields.push((k.into(), v.into()));
    }
    fields
}

/// The unit's task: reads until `stop`, reconnecting with backoff while Redis is unreachable.
pub async fn run(
    shared: Arc<Shared>,
    key: ReaderKey,
    cfg: Arc<ReaderConfig>,
    state: StateSender,
    stop: CancellationToken,
) {
    // After `stop` the entry in flight has drain_timeout to finish; then it stays pending.
    let abandon = CancellationToken::new();
    let (s, a, drain) = (stop.clone(), abandon.clone(), shared.drain_timeout);
    let _drain = AbortOnDropHandle::new(tokio::spawn(async move {
        s.cancelled().await;
        tokio::time::sleep(drain).await;
        a.cancel();
    }));
    let mut failures = 0;
    while !stop.is_cancelled() {
        let Err(e) = read(&shared, &key, &cfg, &state, &stop, &abandon, &mut failures).await else {
            return;
        };
        failures += 1;
        tracing::warn!(reader = %key, error = %e, "Redis unavailable; reconnecting");
        let message = format!("stream {}: {e}", cfg.stream);
        state.set(UnitState::Failed {
            reason: reasons::BROKER_UNAVAILABLE,
            message,
        });
        let wait = kubeless_api::delivery::exponential_backoff(
            Duration::from_millis(500),
            2.0,
            MAX_WAIT,
            failures,
        );
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => {}
        }
    }
}

async fn read(
    shared: &Shared,
    key: &ReaderKey,
    cfg: &ReaderConfig,
    state: &StateSender,
    stop: &CancellationToken,
    abandon: &CancellationToken,
    failures: &mut u32,
) -> RedisResult<()> {
    let config =
        AsyncConnectionConfig::new().set_response_timeout(Some(BLOCK + Duration::from_secs(5)));
    let client = redis::Client::open(cfg.url.as_str())?;
    let mut con = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    // The group starts at the stream's first entry: a new function gets what the stream holds.
    let created: RedisResult<()> = con
        .xgroup_create_mkstream(&cfg.stream, &cfg.group, "0")
        .await;
    if let Err(e) = created
        && e.code() != Some("BUSYGROUP")
    {
        return Err(e);
    }
    state.set(UnitState::running());
    *failures = 0;
    let function = format!("{}/{}", key.namespace, key.function);
    let regarding = ObjectReference {
        api_version: Some(kubeless_api::API_VERSION.into()),
        kind: Some("RedisTrigger".into()),
        namespace: Some(key.namespace.clone()),
        name: Some(key.trigger.clone()),
        uid: cfg.trigger_uid.clone(),
        ..ObjectReference::default()
    };
    let policy = retry_policy(&cfg.policy);
    let delivery = Delivery {
        invoker: &shared.invoker,
        target: &cfg.target,
        policy: &policy,
        function: &function,
        dead_letter: cfg.dead_letter.as_deref(),
        dead_letter_noun: "stream",
        regarding: shared.events.as_ref().map(|e| (e, &regarding)),
        max_wait: MAX_WAIT,
    };
    let pair = (shared.metrics).pair(&format!("{}/{}", key.namespace, key.trigger), &key.function);
    let (mut own, mut claim_from) = (Some("0".to_string()), "0-0".to_string());
    while !stop.is_cancelled() {
        let entries = if let Some(after) = own.take() {
            let entries = group_read(&mut con, cfg, &shared.consumer, &after, None).await?;
            own = entries.last().map(|e| e.id.clone());
            entries
        } else {
            let idle = cfg.claim_idle.as_millis() as u64;
            let opts = StreamAutoClaimOptions::default().count(BATCH);
            let claimed: StreamAutoClaimReply = (con.xautoclaim_options(
                &cfg.stream,
                &cfg.group,
                &shared.consumer,
                idle,
                &claim_from,
                opts,
            ))
            .await?;
            claim_from = claimed.next_stream_id;
            if !claimed.claimed.is_empty() {
                claimed.claimed
            } else {
                tokio::select! {
                    r = group_read(&mut con, cfg, &shared.consumer, ">", Some(BLOCK)) => r?,
                    _ = stop.cancelled() => return Ok(()),
                }
            }
        };
        for entry in &entries {
            let coordinates = format!("{}@{}", cfg.stream, entry.id);
            let dead_letters = con.clone();
            let dead_letter = |dlq: &str, o: &kubeless_invoke::Outcome| {
                let (mut con, dlq) = (dead_letters.clone(), dlq.to_string());
                let fields = dead_letter_fields(entry, &cfg.stream, &function, &last_answer(o));
                async move {
                    con.xadd::<_, _, _, _, ()>(dlq, "*", &fields)
                        .await
                        .map_err(|e| e.to_string())
                }
            };
            let started = Instant::now();
            pair.in_flight.inc();
            let done = delivery
                .deliver(&event(entry), &coordinates, abandon, dead_letter)
                .await;
            pair.in_flight.dec();
            let Some(done) = done else { return Ok(()) };
            count(&pair, done.finished, done.retries, started);
            con.xack::<_, _, _, ()>(&cfg.stream, &cfg.group, &[&entry.id])
                .await?;
        }
    }
    Ok(())
}

async fn group_read(
    con: &mut MultiplexedConnection,
    cfg: &ReaderConfig,
    consumer: &str,
    after: &str,
    block: Option<Duration>,
) -> RedisResult<Vec<StreamId>> {
    let mut opts = StreamReadOptions::default()
        .group(&cfg.group, consumer)
        .count(BATCH);
    if let Some(block) = block {
        opts = opts.block(block.as_millis() as usize);
    }
    let reply: Option<redis::streams::StreamReadReply> =
        con.xread_options(&[&cfg.stream], &[after], &opts).await?;
    Ok(reply
        .into_iter()
        .flat_map(|r| r.keys)
        .flat_map(|k| k.ids)
        .collect())
}

fn count(pair: &PairMetrics, finished: Finished, retries: u64, started: Instant) {
    pair.retry.inc_by(retries);
    pair.latency.observe(started.elapsed().as_secs_f64());
    pair.outcome(match finished {
        Finished::Delivered => outcome::SUCCESS,
        Finished::DeadLettered => outcome::DEAD_LETTER,
        Finished::Skipped => outcome::SKIPPED,
    })
    .inc();
}
