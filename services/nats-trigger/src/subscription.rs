//! One task per (trigger, function): a core NATS queue subscription or a durable JetStream pull
//! consumer, at most `maxInFlight` calls at a time. Setup failures are retried with backoff
//! and reported through the unit's state; stopping drains the calls in flight.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures::StreamExt;
use kubeless_api::conditions::reasons;
use kubeless_trigger::{StateSender, UnitContext, UnitState, UnitTask};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::deliver::Deliverer;
use crate::plan::{JetStreamConfig, Mode};
use crate::pull::Puller;

/// Starts the subscription task of `deliverer` as a unit of the control loop.
pub fn spawn(ctx: &UnitContext, deliverer: Deliverer, drain_timeout: Duration) -> UnitTask {
    UnitTask::spawn(ctx, move |state, token| {
        run(deliverer, token, state, drain_timeout)
    })
}

/// Why one run of a subscription ended.
struct SetupFailure {
    reason: &'static str,
    message: String,
}

fn broker(message: impl std::fmt::Display) -> SetupFailure {
    SetupFailure {
        reason: reasons::BROKER_UNAVAILABLE,
        message: message.to_string(),
    }
}

/// How long a stopping core subscription keeps taking messages the client already received.
const DRAIN_RECEIVE: Duration = Duration::from_millis(500);
/// How long a JetStream pull request waits on the server for messages.
const PULL_EXPIRES: Duration = Duration::from_secs(30);
/// How often the server reports a pull request it holds; two missed mean it holds none (after
/// a server restart, say) and the next request goes out.
const PULL_HEARTBEAT: Duration = Duration::from_secs(2);

async fn run(d: Deliverer, token: CancellationToken, state: StateSender, drain_timeout: Duration) {
    let mut backoff = Duration::from_millis(500);
    loop {
        let result = match &d.config.mode {
            Mode::Core => run_core(&d, &token, &state, drain_timeout).await,
            Mode::JetStream(js) => run_jetstream(&d, js, &token, &state, drain_timeout).await,
        };
        if token.is_cancelled() {
            return;
        }
        let failure = result
            .err()
            .unwrap_or_else(|| broker("the subscription ended"));
        tracing::warn!(subscription = %d.key, reason = failure.reason, error = %failure.message, ?backoff, "subscription failed; retrying");
        state.set(UnitState::Failed {
            reason: failure.reason,
            message: failure.message,
        });
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

async fn run_core(
    d: &Deliverer,
    token: &CancellationToken,
    state: &StateSender,
    drain_timeout: Duration,
) -> Result<(), SetupFailure> {
    let setup = async {
        let sub = d
            .nats
            .queue_subscribe(d.config.topic.clone(), d.config.queue_group.clone())
            .await
            .map_err(broker)?;
        // The subscription is registered locally before the server confirms it; a flush makes
        // sure the server knows it before we report Running.
        d.nats.flush().await.map_err(broker)?;
        Ok(sub)
    };
    // While the server is unreachable the flush waits for it: a stop must not.
    let mut sub = tokio::select! {
        r = setup => r?,
        _ = token.cancelled() => return Ok(()),
    };
    state.set(UnitState::running());
    tracing::info!(subscription = %d.key, topic = %d.config.topic, group = %d.config.queue_group, "core NATS queue subscription running");
    let limit = Arc::new(Semaphore::new(d.config.max_in_flight as usize));
    let mut calls = JoinSet::new();
    let mut draining: Option<tokio::time::Instant> = None;
    loop {
        let permit = match Arc::clone(&limit).acquire_owned().await {
            Ok(p) => p,
            Err(_) => break,
        };
        let next = if let Some(deadline) = draining {
            // What the client buffered arrives at once; an unreachable server never ends the
            // stream, so stop taking messages after a short while (calls in flight still get
            // the drain timeout below).
            match tokio::time::timeout_at(deadline, sub.next()).await {
                Ok(m) => m,
                Err(_) => break,
            }
        } else {
            tokio::select! {
                m = sub.next() => m,
                _ = token.cancelled() => {
                    // Unsubscribe but hand out what the client already buffered.
                    draining = Some(tokio::time::Instant::now() + DRAIN_RECEIVE);
                    if let Err(e) = sub.drain().await {
                        tracing::debug!(error = %e, "draining the subscription failed");
                        break;
                    }
                    continue;
                }
            }
        };
        let Some(msg) = next else { break };
        let d = d.clone();
        calls.spawn(async move {
            d.core(msg).await;
            drop(permit);
        });
        while calls.try_join_next().is_some() {}
    }
    finish(calls, drain_timeout).await;
    if token.is_cancelled() {
        Ok(())
    } else {
        Err(broker("the NATS subscription was closed"))
    }
}

async fn run_jetstream(
    d: &Deliverer,
    cfg: &JetStreamConfig,
    token: &CancellationToken,
    state: &StateSender,
    drain_timeout: Duration,
) -> Result<(), SetupFailure> {
    let js = jetstream::new(d.nats.clone());
    let setup = async {
        let stream = find_stream(&js, &d.config.topic, cfg).await?;
        consumer(&stream, &d.config.topic, cfg, d.config.max_in_flight).await
    };
    let consumer = tokio::select! {
        r = setup => r?,
        _ = token.cancelled() => return Ok(()),
    };
    // At least 2 per request: with a batch of 1 the next message is only asked for once the
    // previous one arrived. One extra buffered message waits at most one call (< function
    // timeout < ack wait).
    let batch = (d.config.max_in_flight as usize).max(2);
    let messages = Puller::start(js, consumer, batch, PULL_EXPIRES, PULL_HEARTBEAT);
    let mut messages = tokio::select! {
        r = messages => r.map_err(broker)?,
        _ = token.cancelled() => return Ok(()),
    };
    state.set(UnitState::running());
    tracing::info!(subscription = %d.key, durable = %cfg.durable, "JetStream consumer running");
    let limit = Arc::new(Semaphore::new(d.config.max_in_flight as usize));
    let mut calls = JoinSet::new();
    let mut ended = None;
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&limit).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = token.cancelled() => break,
        };
        // Messages not taken before a stop are given back below.
        let next = tokio::select! {
            m = messages.next() => m,
            _ = token.cancelled() => break,
        };
        match next {
            Ok(Some(msg)) => {
                let d = d.clone();
                calls.spawn(async move {
                    d.jetstream(msg).await;
                    drop(permit);
                });
            }
            Ok(None) => {
                ended = Some(broker("the JetStream message stream ended"));
                break;
            }
            Err(e) => {
                ended = Some(broker(e));
                break;
            }
        }
        while calls.try_join_next().is_some() {}
    }
    let released = tokio::time::timeout(DRAIN_RECEIVE, messages.release())
        .await
        .unwrap_or(0);
    if released > 0 {
        tracing::info!(subscription = %d.key, released, "gave back messages not taken");
    }
    finish(calls, drain_timeout).await;
    match ended {
        Some(f) if !token.is_cancelled() => Err(f),
        _ => Ok(()),
    }
}

/// Waits for the calls in flight, aborting what is left after `timeout`.
async fn finish(mut calls: JoinSet<()>, timeout: Duration) {
    let drained = tokio::time::timeout(timeout, async {
        while calls.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = calls.len(),
            "calls still running after the drain timeout; aborting them"
        );
        calls.shutdown().await;
    }
}

async fn find_stream(
    js: &jetstream::Context,
    topic: &str,
    cfg: &JetStreamConfig,
) -> Result<stream::Stream, SetupFailure> {
    let not_found = |what: String| SetupFailure {
        reason: reasons::SOURCE_NOT_FOUND,
        message: what,
    };
    let name = match &cfg.stream {
        Some(name) => Some(name.clone()),
        None => match js.stream_by_subject(topic.to_string()).await {
            Ok(name) => Some(name),
            Err(e) if cfg.create_stream.is_some() => {
                tracing::debug!(error = %e, "no stream holds the subject yet");
                None
            }
            Err(e) => {
                return Err(not_found(format!(
                    "no JetStream stream holds subject {topic:?} ({e}); create one or set the annotation {}=true",
                    crate::plan::CREATE_STREAM_ANNOTATION
                )));
            }
        },
    };
    if let Some(name) = &name {
        match js.get_stream(name).await {
            Ok(s) => return Ok(s),
            Err(e) if cfg.create_stream.is_none() => {
                return Err(not_found(format!("JetStream stream {name:?}: {e}")));
            }
            Err(_) => {}
        }
    }
    let Some(create) = &cfg.create_stream else {
        return Err(not_found(format!("no JetStream stream for {topic:?}")));
    };
    tracing::info!(stream = %create, subject = %topic, "creating JetStream stream");
    js.get_or_create_stream(stream::Config {
        name: create.clone(),
        subjects: vec![topic.to_string()],
        ..Default::default()
    })
    .await
    .map_err(broker)
}

async fn consumer(
    stream: &stream::Stream,
    topic: &str,
    cfg: &JetStreamConfig,
    max_in_flight: u32,
) -> Result<jetstream::consumer::Consumer<pull::Config>, SetupFailure> {
    let config = pull::Config {
        durable_name: Some(cfg.durable.clone()),
        filter_subject: topic.to_string(),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: cfg.ack_wait,
        max_deliver: cfg.max_deliver,
        // Every replica may have maxInFlight calls running; leave room for a few replicas.
        max_ack_pending: i64::from(max_in_flight).saturating_mul(16).max(64),
        deliver_policy: jetstream::consumer::DeliverPolicy::All,
        ..Default::default()
    };
    match stream.create_consumer(config.clone()).await {
        Ok(c) => Ok(c),
        // An existing durable with other settings (e.g. a changed ackWait): update it.
        Err(create_err) => match stream.update_consumer(config).await {
            Ok(c) => Ok(c),
            Err(update_err) => Err(broker(format!(
                "creating durable consumer {:?}: {create_err}; updating it: {update_err}",
                cfg.durable
            ))),
        },
    }
}
