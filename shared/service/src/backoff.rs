//! Per-object exponential backoff for a controller's failed reconciles: 1 s doubling up to
//! 5 min, reset by the next success. A write the API server keeps refusing (invalid object,
//! quota, admission webhook) then costs a few requests an hour instead of one every few seconds.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// First retry delay after a failure.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// Failure counts per object, keyed by namespace and name.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<(String, String), u32>>,
}

impl Backoff {
    /// Counts a failure of `namespace/name` and returns how long to wait before the next try.
    pub fn next(&self, namespace: &str, name: &str) -> Duration {
        let mut m = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let n = m
            .entry((namespace.to_string(), name.to_string()))
            .or_insert(0);
        let delay = backoff_delay(*n);
        *n = n.saturating_add(1);
        delay
    }

    /// Forgets the failures of `namespace/name` (it reconciled fine).
    pub fn reset(&self, namespace: &str, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

/// The delay after `previous_failures` earlier failures: 1 s, 2 s, 4 s, ... capped at 5 min.
pub fn backoff_delay(previous_failures: u32) -> Duration {
    kubeless_api::delivery::exponential_backoff(
        BACKOFF_INITIAL,
        2.0,
        BACKOFF_MAX,
        previous_failures.saturating_add(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_one_second_up_to_five_minutes_and_resets() {
        let delays: Vec<u64> = (0..12).map(|n| backoff_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(backoff_delay(u32::MAX), BACKOFF_MAX);
        let b = Backoff::default();
        assert_eq!(b.next("ns", "f"), Duration::from_secs(1));
        assert_eq!(b.next("ns", "f"), Duration::from_secs(2));
        assert_eq!(b.next("ns", "f"), Duration::from_secs(4));
        assert_eq!(b.next("ns", "g"), Duration::from_secs(1), "per object");
        b.reset("ns", "f");
        assert_eq!(b.next("ns", "f"), Duration::from_secs(1));
    }
}
