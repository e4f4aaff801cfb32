//! A reader: the consumer group of one (trigger, function) on the trigger's stream. Each pass
//! takes this consumer's own pending entries (read before a restart, never acknowledged), then
//! entries dead consumers left pending (XAUTOCLAIM), then new ones (XREADGROUP BLOCK). XACK comes
//! only after a 2xx or a dead letter: at least once, in stream order per function.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kubeless_invoke::Event;
use kubeless_trigger::{Failure, PairDelivery, Parts, StateSender, UnitState, reconnecting};
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId};
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::{AsyncCommands, RedisResult, Value};
use tokio_util::sync::CancellationToken;

use crate::ReaderConfig;

pub const EVENT_NAMESPACE: &str = "redistriggers.kubeless.io";
const BATCH: usize = 16;
/// How long XREADGROUP waits for new entries before the next pass, in milliseconds.
const BLOCK_MS: usize = 2000;

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
pub fn dlq_fields(e: &StreamId, stream: &str, f: &str, error: &str) -> Vec<(String, Vec<u8>)> {
    let mut fields: Vec<_> = e.map.iter().map(|(k, v)| (k.clone(), bytes(v))).collect();
    fields.sort();
    let keys = ["error", "function", "source-stream", "source-id"];
    let why = keys.iter().zip([error, f, stream, &e.id]);
    fields.extend(why.map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())));
    fields
}

/// The unit of one (trigger, function) pair.
pub struct Reader {
    pub parts: Arc<Parts>,
    pub cfg: Arc<ReaderConfig>,
}

impl Reader {
    /// Reads until `stop`; the consumer is named after the pod, so a restarted pod finds its
    /// pending entries.
    pub async fn run(self, state: StateSender, stop: CancellationToken) {
        let (cfg, parts) = (&*self.cfg, &*self.parts);
        let delivery = PairDelivery::new(parts, &cfg.to);
        let what = format!("stream {}", cfg.stream);
        reconnecting(&state, &stop, &what, || self.read(&delivery, &state, &stop)).await;
    }

    async fn read(
        &self,
        delivery: &PairDelivery,
        state: &StateSender,
        stop: &CancellationToken,
    ) -> RedisResult<()> {
        let cfg = &*self.cfg;
        let function = format!("{}/{}", cfg.to.target.namespace, cfg.to.target.name);
        let timeout =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(6)));
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
        state.set(UnitState::running());
        let group = || {
            StreamReadOptions::default()
                .group(&cfg.group, &self.parts.pod)
                .count(BATCH)
        };
        let (opts, blocking, keys) = (group(), group().block(BLOCK_MS), [&cfg.stream]);
        // An entry in flight is finished; a stop that waits too long drops the unit (drain).
        let never = CancellationToken::new();
        let (mut own, mut claim_from) = (Some("0".to_string()), "0-0".to_string());
        while !stop.is_cancelled() {
            let entries = if let Some(after) = own.take() {
                let entries = ids(con.xread_options(&keys, &[&after], &opts).await?);
                own = entries.last().map(|e| e.id.clone());
                entries
            } else {
                let (idle, me) = (cfg.claim_idle.as_millis() as u64, &self.parts.pod);
                let opts = StreamAutoClaimOptions::default().count(BATCH);
                let claimed: StreamAutoClaimReply =
                    (con.xautoclaim_options(&cfg.stream, &cfg.group, me, idle, &claim_from, opts))
                        .await?;
                claim_from = claimed.next_stream_id;
                if !claimed.claimed.is_empty() {
                    claimed.claimed
                } else {
                    let new = con.xread_options(&keys, &[">"], &blocking);
                    let Some(new) = stop.run_until_cancelled(new).await else {
                        break;
                    };
                    ids(new?)
                }
            };
            // An entry trimmed while pending comes without fields (XAUTOCLAIM drops it later);
            // once stopped, only the entry in flight is finished.
            let live = entries.iter().filter(|e| !e.map.is_empty());
            for entry in live.take_while(|_| !stop.is_cancelled()) {
                let dead_letter = |dlq: String, f: Failure| {
                    let mut con = con.clone();
                    let fields = dlq_fields(entry, &cfg.stream, &function, &f.error);
                    async move {
                        con.xadd::<_, _, _, _, ()>(dlq, "*", &fields)
                            .await
                            .map_err(|e| e.to_string())
                    }
                };
                let at = format!("{}@{}", cfg.stream, entry.id);
                let event = event(entry);
                (delivery.deliver(None, &event, &at, "stream", &never, dead_letter)).await;
                con.xack::<_, _, _, ()>(&cfg.stream, &cfg.group, &[&entry.id])
                    .await?;
            }
        }
        Ok(())
    }
}

fn ids(reply: Option<StreamReadReply>) -> Vec<StreamId> {
    // One stream is read: at most one key.
    let key = reply.and_then(|r| r.keys.into_iter().next());
    key.map(|k| k.ids).unwrap_or_default()
}
