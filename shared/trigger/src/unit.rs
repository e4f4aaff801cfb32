//! [`UnitTask`]: a unit that is one tokio task, the usual shape: it reports its state through
//! a [`StateSender`] (which wakes the control loop on every change) and stops when its token
//! is cancelled.

use std::future::Future;
use std::sync::Arc;

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
}

/// A unit run by one task.
pub struct UnitTask {
    token: CancellationToken,
    // Dropping the unit (the control loop aborted) kills its task.
    task: AbortOnDropHandle<()>,
    state: watch::Receiver<UnitState>,
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
        Self { token, task, state }
    }

    /// A receiver of the unit's state (tests wait on it).
    pub fn watch_state(&self) -> watch::Receiver<UnitState> {
        self.state.clone()
    }

    /// Kills the task without draining (what a crash does); for tests.
    pub fn abort(&self) {
        self.task.abort();
    }
}

impl Unit for UnitTask {
    fn state(&self) -> UnitState {
        self.state.borrow().clone()
    }

    fn stop(self) -> impl Future<Output = ()> + Send + 'static {
        self.token.cancel();
        let task = self.task;
        async move {
            if let Err(e) = task.await
                && e.is_panic()
            {
                tracing::warn!("a trigger unit panicked");
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
