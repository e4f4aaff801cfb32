//! [`UnitTask`]: a unit that is one tokio task, the usual shape: it reports its state through
//! a [`StateSender`] (which wakes the control loop on every change) and stops when its token
//! is cancelled. [`reconnecting`] is the loop around a broker session that shows
//! `BrokerUnavailable` while the broker cannot be reached.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kubeless_api::conditions::reasons;
use kubeless_api::delivery::exponential_backoff;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::controller::{Unit, UnitContext, UnitState};

/// Sets a unit's state; a change wakes the control loop so the status follows at once.
pub struct StateSender {
    tx: watch::Sender<UnitState>,
    changed: Arc<Notify>,
}

impl StateSender {
    /// Sets the state (nothing happens when it is the same).
    pub fn set(&self, s: UnitState) {
        let modified = self.tx.send_if_modified(|old| {
            if *old == s {
                false
            } else {
                *old = s;
                true
            }
        });
        if modified {
            self.changed.notify_one();
        }
    }

    /// The state last set.
    pub fn get(&self) -> UnitState {
        self.tx.borrow().clone()
    }
}

/// Runs `session` until `stop`, and again after each error with backoff (0.5 s doubling to
/// 30 s, from the start again once a session got the unit running); meanwhile the unit is
/// `Failed { BrokerUnavailable }` with `<what>: <error>`. It never gives up: the broker may
/// come back. A session returns `Ok` only when it stopped on `stop`.
pub async fn reconnecting<F, Fut, E>(
    state: &StateSender,
    stop: &CancellationToken,
    what: &str,
    mut session: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut failures = 0;
    while !stop.is_cancelled() {
        let Err(e) = session().await else { return };
        let ran = matches!(state.get(), UnitState::Running { .. });
        failures = if ran { 1 } else { failures + 1 };
        tracing::warn!(unit = what, error = %e, "broker unavailable; reconnecting");
        state.set(UnitState::Failed {
            reason: reasons::BROKER_UNAVAILABLE,
            message: format!("{what}: {e}"),
        });
        let wait = exponential_backoff(
            Duration::from_millis(500),
            2.0,
            Duration::from_secs(30),
            failures,
        );
        stop.run_until_cancelled(tokio::time::sleep(wait)).await;
    }
}

/// A unit run by one task.
pub struct UnitTask {
    token: CancellationToken,
    // Dropping the unit (the control loop aborted) kills its task.
    task: AbortOnDropHandle<()>,
    state: watch::Receiver<UnitState>,
    /// `Some`: a stop gives up on the body after this (what it had in flight is delivered
    /// again later).
    drain: Option<Duration>,
}

impl UnitTask {
    /// Spawns `body(state, token)`; the unit starts in [`UnitState::Starting`]. `body` must
    /// return once `token` is cancelled, after draining what it has in flight.
    pub fn spawn<F, Fut>(ctx: &UnitContext, body: F) -> Self
    where
        F: FnOnce(StateSender, CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let token = CancellationToken::new();
        let (tx, state) = watch::channel(UnitState::Starting);
        let sender = StateSender {
            tx,
            changed: Arc::clone(&ctx.changed),
        };
        let task = AbortOnDropHandle::new(tokio::spawn(body(sender, token.clone())));
        Self {
            token,
            task,
            state,
            drain: None,
        }
    }

    /// A stop waits at most `drain` for the body to end, then drops it.
    pub fn with_drain(mut self, drain: Duration) -> Self {
        self.drain = Some(drain);
        self
    }
}

impl Unit for UnitTask {
    fn state(&self) -> UnitState {
        self.state.borrow().clone()
    }

    fn stop(self) -> impl Future<Output = ()> + Send + 'static {
        self.token.cancel();
        let (task, drain) = (self.task, self.drain);
        async move {
            let ended = match drain {
                Some(d) => tokio::time::timeout(d, task).await,
                None => Ok(task.await),
            };
            match ended {
                Ok(Err(e)) if e.is_panic() => tracing::warn!("a trigger unit panicked"),
                Err(_) => tracing::warn!(
                    drain = ?drain,
                    "a trigger unit did not drain in time; what it had in flight is delivered again later"
                ),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn state_changes_wake_the_loop_and_stop_waits_for_the_drain() {
        let ctx = UnitContext {
            changed: Arc::new(Notify::new()),
        };
        let (drained_tx, drained_rx) = tokio::sync::oneshot::channel();
        let unit = UnitTask::spawn(&ctx, |state, token| async move {
            state.set(UnitState::running());
            token.cancelled().await;
            let _ = drained_tx.send(());
        });
        ctx.changed.notified().await;
        assert_eq!(unit.state(), UnitState::running());
        unit.stop().await;
        assert!(
            drained_rx.await.is_ok(),
            "stop returns after the body ended"
        );
    }
}
