//! Scale to zero in the gateway: requests for a function at zero are held (a bounded number per
//! function) while [`Activity`] wakes it, then forwarded once it has a ready replica.
//!
//! The gateway records traffic for every function with scale to zero on ([`Activity::record`]
//! throttles the writes), and holds a request only when the function is not ready. Functions
//! without scale to zero never get here: their routes say so (`Route::scale_to_zero`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubeless_invoke::Activity;
use kubeless_invoke::activity::DEFAULT_INTERVAL;

/// Default of `--wake-timeout`: how long a request waits for a function at zero.
pub const DEFAULT_WAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of `--wake-queue`: most requests held for one function at once.
pub const DEFAULT_WAKE_QUEUE: usize = 1000;
/// `Retry-After` (seconds) of the 503s a held request may get: queue full, or no ready
/// replica within the wait.
pub const RETRY_AFTER_SECONDS: u64 = 5;
/// Pause between two tries to resolve or connect while a woken function's pod comes up.
pub const CONNECT_RETRY_STEP: Duration = Duration::from_millis(100);

/// Scale-to-zero settings of the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeSettings {
    /// Least time between two activity writes for a running function.
    pub activity_interval: Duration,
    /// How long a request waits for a function at zero before a 503.
    pub timeout: Duration,
    /// Most requests held per function at once; more get a 503 at once.
    pub queue: usize,
}

impl Default for WakeSettings {
    fn default() -> Self {
        Self {
            activity_interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_WAKE_TIMEOUT,
            queue: DEFAULT_WAKE_QUEUE,
        }
    }
}

/// What the gateway needs to hold requests: the activity records and the per-function queue.
#[derive(Debug, Clone)]
pub struct Wake {
    /// Fed by the Function watch; records traffic and wakes functions.
    pub activity: Arc<Activity>,
    /// How long a request is held at most.
    pub timeout: Duration,
    /// Held requests per function.
    pub queue: Arc<WakeQueue>,
}

impl Wake {
    pub fn new(activity: Arc<Activity>, timeout: Duration, queue: usize) -> Self {
        Self {
            activity,
            timeout,
            queue: Arc::new(WakeQueue::new(queue)),
        }
    }
}

impl Default for Wake {
    /// Tracks state but never writes: for gateways without a cluster (tests, benches).
    fn default() -> Self {
        let s = WakeSettings::default();
        Self::new(Arc::new(Activity::read_only()), s.timeout, s.queue)
    }
}

type Key = (String, String);

/// Counts the requests held per function, up to a bound. A slot is a [`Ticket`]: dropping it
/// (the request was forwarded, refused or cancelled by its client) frees the slot.
#[derive(Debug)]
pub struct WakeQueue {
    limit: usize,
    held: Mutex<HashMap<Key, usize>>,
}

impl WakeQueue {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            held: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, usize>> {
        // Each update is one counter change: consistent even after a panic elsewhere.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one more request held for `namespace/name`, or `None` when the function
    /// already has `limit` held.
    pub fn enter(self: &Arc<Self>, namespace: &str, name: &str) -> Option<Ticket> {
        let key = (namespace.to_string(), name.to_string());
        let mut held = self.lock();
        let n = held.entry(key.clone()).or_insert(0);
        if *n >= self.limit {
            if *n == 0 {
                held.remove(&key);
            }
            return None;
        }
        *n += 1;
        Some(Ticket {
            queue: Arc::clone(self),
            key,
        })
    }

    /// Requests held for `namespace/name` now.
    pub fn held(&self, namespace: &str, name: &str) -> usize {
        self.lock()
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Functions with held requests (entries are removed when their last request leaves).
    pub fn functions(&self) -> usize {
        self.lock().len()
    }
}

/// One held request's place in a [`WakeQueue`]; freed on drop.
#[derive(Debug)]
pub struct Ticket {
    queue: Arc<WakeQueue>,
    key: Key,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut held = self.queue.lock();
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_per_function() {
        let q = Arc::new(WakeQueue::new(2));
        let a = q.enter("ns", "f").unwrap();
        let b = q.enter("ns", "f").unwrap();
        assert!(q.enter("ns", "f").is_none(), "a third request is refused");
        // Another function has its own bound; another namespace is another function.
        let other = q.enter("ns", "g").unwrap();
        let elsewhere = q.enter("other", "f").unwrap();
        assert_eq!(q.held("ns", "f"), 2);
        drop(a);
        assert_eq!(q.held("ns", "f"), 1);
        let c = q.enter("ns", "f").expect("a freed slot is reused");
        drop((b, c, other, elsewhere));
        assert_eq!(q.held("ns", "f"), 0);
        assert_eq!(q.functions(), 0, "no entry outlives its last request");
    }

    #[test]
    fn a_zero_bound_refuses_everything_and_keeps_nothing() {
        let q = Arc::new(WakeQueue::new(0));
        assert!(q.enter("ns", "f").is_none());
        assert_eq!(q.functions(), 0);
    }

    #[test]
    fn the_bound_holds_under_concurrent_entries() {
        let q = Arc::new(WakeQueue::new(500));
        let all_in = Arc::new(std::sync::Barrier::new(8));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (q, all_in) = (Arc::clone(&q), Arc::clone(&all_in));
                std::thread::spawn(move || {
                    let tickets: Vec<_> = (0..100).filter_map(|_| q.enter("ns", "f")).collect();
                    // Every thread still holds its tickets here.
                    all_in.wait();
                    tickets.len()
                })
            })
            .collect();
        let entered: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(entered, 500);
        assert_eq!(q.functions(), 0);
    }
}
