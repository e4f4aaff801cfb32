//! Graceful shutdown: the first SIGTERM/SIGINT cancels a token every task drains on; a second
//! signal ends the process at once.

use tokio_util::sync::CancellationToken;

/// Cloneable shutdown handle.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// The token to select on (or to hand to child tasks with `child_token`).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Starts shutdown (as the first signal would).
    pub fn trigger(&self) {
        self.token.cancel();
    }

    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once shutdown has started.
    pub async fn cancelled(&self) {
        self.token.cancelled().await
    }

    /// Spawns the signal watcher: the first SIGTERM or SIGINT triggers shutdown, the second
    /// exits the process with status 130.
    pub fn spawn_signal_handler(&self) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let token = self.token.clone();
        Ok(tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down; send again to abort"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down; send again to abort"),
            }
            token.cancel();
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("second signal: aborting without draining");
            // The operator asked twice: draining is stuck or too slow, and no task can be relied
            // on to return, so leave now instead of waiting for them.
            std::process::exit(130);
        }))
    }
}
