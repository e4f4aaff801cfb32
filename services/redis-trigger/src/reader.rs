//! A reader: the consumer group of one (trigger, function) on the trigger's stream. Each pass
//! takes this consumer's own pending entries (read before a restart, never acknowledged), then
//! entries dead consumers left pending (XAUTOCLAIM), then new ones (XREADGROUP BLOCK). XACK comes
//! only after a 2xx or a dead letter: at least once, in stream order per function.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeless_api::{conditions::reasons, delivery::exponential_backoff};
use kubeless_invoke::{Event, Outcome};
use kubeless_trigger::{Delivery, UnitState, deliver::last_answer};
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions};
use redis::{AsyncCommands, RedisResult, Value, aio::MultiplexedConnection as Connection};
use tokio_util::sync::CancellationToken;

use crate::ReaderConfig;
use crate::runtime_gaps::{Parts, StateSender, record};

pub const EVENT_NAMESPACE: &str = "redistriggers.kubeless.io";
const BATCH: usize = 16;
/// How long XREADGROUP waits for new entries before the next pass.
const BLOCK: Duration = Duration::from_secs(2);
/// Ceiling of the reconnect backoff and of the waits inside a delivery.
const MAX_WAIT: Duration = Duration::from_secs(30);

/// The request body: the entry's `data` field, else all fields as a JSON object of strings.
pub fn body(entry: &StreamId) -> Vec<u8> {
    if let Some(data) = entry.map.get("data") {
        return bytes(data);
    }
    let text = |v| String::from_utf8_lossy(&bytes(v)).into_owned();
    let fields: BTreeMap<_, _> = entry.map.iter().map(|(k, v)| (k, text(v))).collect();
    serde_json::to_vec(&fields).unwrap_or_default()
}

fn bytes(v: &Value) -> Vec<u8> {
    redis::from_redis_value_ref(v).unwrap_or_default()
}

/// The event of an entry; the entry id is its `event-id`.
pub fn event(entry: &StreamId) -> Event {
    Event::new(EVENT_NAMESPACE)
        .with_body(body(entry))
        .with_event_id(entry.id.clone())
}

/// A dead letter: the entry's fields, then what failed where.
pub fn dead_letter_fields(
    e: &StreamId,
    stream: &str,
    fun: &str,
    error: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut fields: Vec<_> = e.map.iter().map(|(k, v)| (k.clone(), bytes(v))).collect();
    fields.sort();
    let why = [
        ("error", error),
        ("function", fun),
        ("source-stream", stream),
        ("source-id", &e.id),
    ];
    fields.extend(why.map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())));
    fields
}

/// A reader's task: reads until `stop`, reconnecting with backoff while Redis is unreachable.
pub async fn run(
    parts: Arc<Parts>,
    consumer: String,
    cfg: Arc<ReaderConfig>,
    state: StateSender,
    stop: CancellationToken,
) {
    let (reader, mut failures) = (
        Reader {
            parts,
            consumer,
            cfg,
            state,
            stop,
        },
        0,
    );
    while !reader.stop.is_cancelled() {
        let Err(e) = reader.read(&mut failures).await else {
            return;
        };
        failures += 1;
        tracing::warn!(group = reader.cfg.group, error = %e, "Redis unavailable; reconnecting");
        let message = format!("stream {}: {e}", reader.cfg.stream);
        reader.state.set(UnitState::Failed {
            reason: reasons::BROKER_UNAVAILABLE,
            message,
        });
        let wait = exponential_backoff(Duration::from_millis(500), 2.0, MAX_WAIT, failures);
        reader
            .stop
            .run_until_cancelled(tokio::time::sleep(wait))
            .await;
    }
}

struct Reader {
    parts: Arc<Parts>,
    consumer: String,
    cfg: Arc<ReaderConfig>,
    state: StateSender,
    stop: CancellationToken,
}

impl Reader {
    async fn read(&self, failures: &mut u32) -> RedisResult<()> {
        let (cfg, shared) = (&*self.cfg, &*self.parts);
        let timeout = redis::AsyncConnectionConfig::new().set_response_timeout(Some(BLOCK * 3));
        let client = redis::Client::open(cfg.url.as_str())?;
        let mut con = client
            .get_multiplexed_async_connection_with_config(&timeout)
            .await?;
        // The group starts at the first entry: a new function gets what the stream holds.
        let created = con.xgroup_create_mkstream::<_, _, _, ()>(&cfg.stream, &cfg.group, "0");
        if let Err(e) = created.await
            && e.code() != Some("BUSYGROUP")
        {
            return Err(e);
        }
        self.state.set(UnitState::running());
        *failures = 0;
        let (target, trigger) = (&cfg.target, &cfg.trigger);
        let function = format!("{}/{}", target.namespace, target.name);
        let delivery = Delivery {
            invoker: &shared.invoker,
            target,
            policy: &kubeless_trigger::retry_policy(&cfg.policy),
            function: &function,
            dead_letter: cfg.dead_letter.as_deref(),
            dead_letter_noun: "stream",
            regarding: Some((&shared.events, trigger)),
            max_wait: MAX_WAIT,
        };
        let trigger_name = format!(
            "{}/{}",
            target.namespace,
            trigger.name.as_deref().unwrap_or("")
        );
        let pair = shared.metrics.pair(&trigger_name, &target.name);
        let (mut own, mut claim_from) = (Some("0".to_string()), "0-0".to_string());
        while !self.stop.is_cancelled() {
            let entries = if let Some(after) = own.take() {
                let entries = self.group_read(&mut con, &after, None).await?;
                own = entries.last().map(|e| e.id.clone());
                entries
            } else {
                let (idle, me) = (cfg.claim_idle.as_millis() as u64, &self.consumer);
                let opts = StreamAutoClaimOptions::default().count(BATCH);
                let claimed: StreamAutoClaimReply =
                    (con.xautoclaim_options(&cfg.stream, &cfg.group, me, idle, &claim_from, opts))
                        .await?;
                claim_from = claimed.next_stream_id;
                if !claimed.claimed.is_empty() {
                    claimed.claimed
                } else {
                    let new = self.group_read(&mut con, ">", Some(BLOCK));
                    let Some(new) = self.stop.run_until_cancelled(new).await else {
                        break;
                    };
                    new?
                }
            };
            for entry in &entries {
                let dead_letter = |dlq: &str, o: &Outcome| {
                    let (mut con, dlq) = (con.clone(), dlq.to_string());
                    let fields = dead_letter_fields(entry, &cfg.stream, &function, &last_answer(o));
                    async move {
                        con.xadd::<_, _, _, _, ()>(dlq, "*", &fields)
                            .await
                            .map_err(|e| e.to_string())
                    }
                };
                let (started, at) = (Instant::now(), format!("{}@{}", cfg.stream, entry.id));
                pair.in_flight.inc();
                // Stopping waits for the entry; UnitTask's drain timeout cuts it off.
                let never = CancellationToken::new();
                let done = delivery
                    .deliver(&event(entry), &at, &never, dead_letter)
                    .await;
                pair.in_flight.dec();
                let Some(done) = done else { break };
                record(&pair, &done, started);
                con.xack::<_, _, _, ()>(&cfg.stream, &cfg.group, &[&entry.id])
                    .await?;
            }
        }
        Ok(())
    }

    /// XREADGROUP of the entries after `after` (`>`: never delivered to any consumer).
    async fn group_read(
        &self,
        con: &mut Connection,
        after: &str,
        block: Option<Duration>,
    ) -> RedisResult<Vec<StreamId>> {
        let cfg = &self.cfg;
        let mut opts = StreamReadOptions::default()
            .group(&cfg.group, &self.consumer)
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
}
