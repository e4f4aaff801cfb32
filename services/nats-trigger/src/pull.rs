//! The JetStream pull loop: pull requests and the count of messages they may still bring are
//! kept in the one task that reads the messages (issue 20).
//!
//! async-nats's `Consumer::stream()` sends its pull requests from a background task and adds a
//! request's batch to its count only when that task reports the request sent. When messages
//! are waiting on the server they can answer the request before that report is read; each of
//! them then decrements a count already at zero (it saturates), and the report adds the whole
//! batch afterwards. The stream believes a batch is still coming while the server holds no
//! request of ours, and asks again only when its fallback timer fires (the request expiry +
//! 5 s, 35 s): every message waiting in the stream sits there that long. Here the batch is
//! counted before the request is published, in the task that reads the answers, so an
//! answer can never be counted before its request.

use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, AckKind, consumer::pull};
use async_nats::{HeaderMap, StatusCode, Subscriber};
use futures::StreamExt;

/// Header of a 408/409 that ends a pull request: how many messages it would still have brought.
const PENDING_MESSAGES: &str = "Nats-Pending-Messages";

/// After the server refused a request without ending the pull (e.g. too many requests waiting
/// on the consumer), wait this long before asking again, so a refusal is not a busy loop.
const REFUSED_PAUSE: Duration = Duration::from_millis(500);

/// Why the pull stopped.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("subscribing to the pull inbox failed: {0}")]
    Subscribe(#[source] async_nats::SubscribeError),
    #[error("sending a pull request failed: {0}")]
    Request(#[source] pull::BatchRequestError),
    /// The consumer is gone, is not a pull consumer, or our requests exceed its limits: asking
    /// again would get the same answer.
    #[error("the server ended the pull: {0}")]
    Ended(String),
}

/// What one message on the pull inbox means for the pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A stream message: one less to come.
    Message,
    /// The server still holds a request of ours and has nothing to send.
    Heartbeat,
    /// A request ended (expired, or closed by the server) with `pending` messages not sent.
    Closed { pending: usize },
    /// The server dropped every request of ours (leadership change in a cluster).
    Dropped,
    /// One request refused, the pull goes on.
    Refused(String),
    /// The pull cannot go on.
    Fatal(String),
}

/// Reads one message on the pull inbox. Pure.
pub fn answer(
    status: Option<StatusCode>,
    description: Option<&str>,
    headers: Option<&HeaderMap>,
) -> Answer {
    let status = status.unwrap_or(StatusCode::OK);
    if status == StatusCode::OK {
        return Answer::Message;
    }
    if status == StatusCode::IDLE_HEARTBEAT {
        return Answer::Heartbeat;
    }
    if status == StatusCode::NO_RESPONDERS {
        // No JetStream behind the subject: the consumer or its stream is gone.
        return Answer::Fatal(format!("{status} no responders"));
    }
    let description = description.unwrap_or_default();
    let pending = headers
        .and_then(|h| h.get(PENDING_MESSAGES))
        .and_then(|v| v.as_str().trim().parse::<usize>().ok());
    if let Some(pending) = pending {
        return Answer::Closed { pending };
    }
    let lower = description.to_ascii_lowercase();
    if lower.contains("consumer deleted")
        || lower.contains("push based")
        || lower.starts_with("exceeded maxrequest")
        || lower.starts_with("bad request")
    {
        return Answer::Fatal(format!("{status} {description}"));
    }
    if lower.contains("leadership change") {
        return Answer::Dropped;
    }
    Answer::Refused(format!("{status} {description}"))
}

/// How many messages the requests we sent may still bring. Pure bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    batch: usize,
    outstanding: usize,
}

impl Credit {
    /// Requests ask for `batch` messages (at least 1).
    pub fn new(batch: usize) -> Self {
        Self {
            batch: batch.max(1),
            outstanding: 0,
        }
    }

    /// Messages still to come.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// `true` when a new request is due: at most half a batch is still to come, so the next
    /// batch is on its way before the current one is used up.
    pub fn wants_more(&self) -> bool {
        self.outstanding <= self.batch / 2
    }

    /// A request is about to be sent; returns its batch.
    pub fn request(&mut self) -> usize {
        self.outstanding += self.batch;
        self.batch
    }

    /// Applies what a message on the inbox says.
    pub fn apply(&mut self, answer: &Answer) {
        match answer {
            Answer::Message => self.outstanding = self.outstanding.saturating_sub(1),
            Answer::Closed { pending } => {
                self.outstanding = self.outstanding.saturating_sub(*pending)
            }
            Answer::Refused(_) => self.outstanding = self.outstanding.saturating_sub(self.batch),
            // Nothing holds our requests any more; asking again at worst brings one batch
            // more than asked for.
            Answer::Dropped => self.lost(),
            Answer::Heartbeat | Answer::Fatal(_) => {}
        }
    }

    /// The server holds none of our requests (no heartbeat came).
    pub fn lost(&mut self) {
        self.outstanding = 0;
    }
}

/// A pull consumer's messages, `batch` per request, each request expiring after `expires` and
/// kept alive by heartbeats every `heartbeat`.
pub struct Puller {
    consumer: jetstream::consumer::Consumer<pull::Config>,
    context: jetstream::Context,
    inbox: async_nats::Subject,
    sub: Subscriber,
    credit: Credit,
    expires: Duration,
    heartbeat: Duration,
    refused_until: Option<tokio::time::Instant>,
}

impl Puller {
    pub async fn start(
        context: jetstream::Context,
        consumer: jetstream::consumer::Consumer<pull::Config>,
        batch: usize,
        expires: Duration,
        heartbeat: Duration,
    ) -> Result<Self, PullError> {
        let client = context.client();
        let inbox = async_nats::Subject::from(client.new_inbox());
        let sub = client
            .subscribe(inbox.clone())
            .await
            .map_err(PullError::Subscribe)?;
        Ok(Self {
            consumer,
            context,
            inbox,
            sub,
            credit: Credit::new(batch),
            expires,
            heartbeat,
            refused_until: None,
        })
    }

    /// The next message; `None` when the subscription was closed. A dropped call loses no
    /// message; dropped while sending a request, it may leave that request counted but unsent,
    /// which the heartbeat check below corrects within two heartbeats.
    pub async fn next(&mut self) -> Result<Option<jetstream::Message>, PullError> {
        loop {
            if self.credit.wants_more() {
                self.request().await?;
            }
            // The server heartbeats every request it holds; silence for two heartbeats means
            // it holds none (a server restart, or an expiry it did not report).
            let received = tokio::time::timeout(self.heartbeat * 2, self.sub.next()).await;
            let message = match received {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(None),
                Err(_) => {
                    // While disconnected a request would only queue up in the client and add
                    // a batch on reconnect; the silence is checked again after it.
                    if self.context.client().connection_state() != State::Connected {
                        continue;
                    }
                    tracing::debug!(
                        outstanding = self.credit.outstanding(),
                        "no JetStream heartbeat; pulling again"
                    );
                    self.credit.lost();
                    continue;
                }
            };
            let answer = answer(
                message.status,
                message.description.as_deref(),
                message.headers.as_ref(),
            );
            self.credit.apply(&answer);
            match answer {
                Answer::Message => {
                    return Ok(Some(jetstream::Message {
                        message,
                        context: self.context.clone(),
                    }));
                }
                Answer::Fatal(why) => return Err(PullError::Ended(why)),
                Answer::Refused(why) => {
                    tracing::debug!(reason = %why, "pull request refused");
                    self.refused_until = Some(tokio::time::Instant::now() + REFUSED_PAUSE);
                }
                Answer::Heartbeat | Answer::Closed { .. } | Answer::Dropped => {}
            }
        }
    }

    /// Ends the pull: unsubscribes and gives back (naks) the messages that already reached this
    /// process but were not taken, so the server redelivers them at once rather than after the
    /// ack wait. Returns how many were given back. With the server unreachable this waits for
    /// it: bound it with a timeout (what is not given back is redelivered after the ack wait).
    pub async fn release(mut self) -> usize {
        if let Err(e) = self.sub.drain().await {
            tracing::debug!(error = %e, "draining the pull inbox failed");
            return 0;
        }
        let mut released = 0;
        // Ends when the unsubscribe went through and what was on its way arrived.
        while let Some(message) = self.sub.next().await {
            let kind = answer(
                message.status,
                message.description.as_deref(),
                message.headers.as_ref(),
            );
            if kind != Answer::Message {
                continue;
            }
            let message = jetstream::Message {
                message,
                context: self.context.clone(),
            };
            match message.ack_with(AckKind::Nak(None)).await {
                Ok(()) => released += 1,
                Err(e) => tracing::debug!(error = %e, "giving back a message failed"),
            }
        }
        released
    }

    async fn request(&mut self) -> Result<(), PullError> {
        if let Some(until) = self.refused_until.take() {
            tokio::time::sleep_until(until).await;
        }
        // Counted before it is sent: its answers can only come after.
        let batch = self.credit.request();
        let request = pull::BatchConfig {
            batch,
            expires: Some(self.expires),
            idle_heartbeat: self.heartbeat,
            ..Default::default()
        };
        self.consumer
            .request_batch(request, self.inbox.clone())
            .await
            .map_err(PullError::Request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(pending: &str) -> Answer {
        let mut h = HeaderMap::new();
        h.insert(PENDING_MESSAGES, pending);
        h.insert("Nats-Pending-Bytes", "0");
        answer(Some(StatusCode::TIMEOUT), Some("Request Timeout"), Some(&h))
    }

    #[test]
    fn answers_are_read_from_status_description_and_headers() {
        assert_eq!(answer(None, None, None), Answer::Message);
        assert_eq!(
            answer(
                Some(StatusCode::IDLE_HEARTBEAT),
                Some("Idle Heartbeat"),
                None
            ),
            Answer::Heartbeat
        );
        assert_eq!(closed("2"), Answer::Closed { pending: 2 });
        assert!(matches!(
            answer(
                Some(StatusCode::REQUEST_TERMINATED),
                Some("Consumer Deleted"),
                None
            ),
            Answer::Fatal(_)
        ));
        assert!(matches!(
            answer(
                Some(StatusCode::REQUEST_TERMINATED),
                Some("Exceeded MaxRequestBatch of 1"),
                None
            ),
            Answer::Fatal(_)
        ));
        assert_eq!(
            answer(
                Some(StatusCode::REQUEST_TERMINATED),
                Some("Leadership Change"),
                None
            ),
            Answer::Dropped
        );
        assert!(matches!(
            answer(
                Some(StatusCode::REQUEST_TERMINATED),
                Some("Exceeded MaxWaiting"),
                None
            ),
            Answer::Refused(_)
        ));
    }

    /// Issue 20: both messages of a request arrive while the previous batch is used up. Counted
    /// before the request went out, they leave nothing outstanding and a new request is due.
    #[test]
    fn answers_to_a_request_never_leave_a_phantom_batch() {
        let mut c = Credit::new(2);
        assert!(c.wants_more());
        c.request();
        c.apply(&Answer::Message);
        assert!(c.wants_more(), "one of two left: ask for the next batch");
        c.request();
        c.apply(&Answer::Message);
        c.apply(&Answer::Message);
        c.apply(&Answer::Message);
        assert_eq!(c.outstanding(), 0);
        assert!(c.wants_more());
    }

    #[test]
    fn expiries_refusals_and_silence_give_the_batch_back() {
        let mut c = Credit::new(4);
        c.request();
        c.apply(&Answer::Message);
        assert!(!c.wants_more());
        c.apply(&closed("3"));
        assert_eq!(c.outstanding(), 0);

        c.request();
        c.request();
        c.apply(&Answer::Refused("409 Exceeded MaxWaiting".into()));
        assert_eq!(c.outstanding(), 4);
        c.apply(&Answer::Heartbeat);
        assert_eq!(c.outstanding(), 4);
        c.apply(&Answer::Dropped);
        assert_eq!(c.outstanding(), 0);

        c.request();
        c.lost();
        assert!(c.wants_more());
    }
}
