//! A unit that is one task reporting its state through a watch channel. Stand-in until
//! `kubeless_trigger::UnitTask` (same shape) is in the runtime; then this file goes.

use std::future::Future;
use std::sync::Arc;

use kubeless_trigger::{Unit, UnitContext, UnitState};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// Sets a unit's state; a change wakes the control loop so the status follows at once.
pub struct StateSender(watch::Sender<UnitState>, Arc<Notify>);

impl StateSender {
    pub fn set(&self, s: UnitState) {
        if self
            .0
            .send_if_modified(|old| std::mem::replace(old, s.clone()) != s)
        {
            self.1.notify_one();
        }
    }
}

/// A unit run by one task, which must return soon after its token is cancelled.
pub struct UnitTask(
    CancellationToken,
    AbortOnDropHandle<()>,
    watch::Receiver<UnitState>,
);

impl UnitTask {
    pub fn spawn<F, Fut>(ctx: &UnitContext, body: F) -> Self
    where
        F: FnOnce(StateSender, CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = watch::channel(UnitState::Starting);
        let token = CancellationToken::new();
        let body = body(StateSender(tx, Arc::clone(&ctx.changed)), token.clone());
        Self(token, AbortOnDropHandle::new(tokio::spawn(body)), rx)
    }
}

impl Unit for UnitTask {
    fn state(&self) -> UnitState {
        self.2.borrow().clone()
    }

    fn stop(self) -> impl Future<Output = ()> + Send + 'static {
        self.0.cancel();
        let task = self.1;
        async move {
            let _ = task.await;
        }
    }
}
