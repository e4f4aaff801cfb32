//! Result classification and the retry policy with exponential backoff and jitter.

use std::time::Duration;

use http::StatusCode;
use rand::Rng;

/// How a single attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// 2xx.
    Success,
    /// Worth another attempt: 408, 429, 5xx, timeouts, connection and transport errors.
    Retryable,
    /// Retrying will not help: other statuses (3xx, other 4xx) and unusable requests.
    Permanent,
}

/// Classifies an HTTP status.
pub fn classify_status(status: StatusCode) -> Class {
    if status.is_success() {
        Class::Success
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
    {
        Class::Retryable
    } else {
        Class::Permanent
    }
}

/// How the backoff is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Exactly the exponential value.
    None,
    /// Uniform in `[0, b]`: spreads retries the most.
    Full,
    /// Uniform in `[b/2, b]`: spreads retries but never retries at once.
    #[default]
    Equal,
}

/// Attempts and backoff between them.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts including the first; 1 means no retry. 0 is treated as 1.
    pub max_attempts: u32,
    /// Backoff before the second attempt (before jitter).
    pub initial_backoff: Duration,
    /// Upper bound of the backoff (before jitter).
    pub max_backoff: Duration,
    /// Growth factor per attempt.
    pub multiplier: f64,
    pub jitter: Jitter,
}

impl Default for RetryPolicy {
    /// 5 attempts, 200 ms doubling up to 10 s, equal jitter.
    fn default() -> Self {
        Self {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: Jitter::Equal,
        }
    }
}

impl RetryPolicy {
    /// A single attempt, no retry.
    pub fn no_retry() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The backoff ceiling before retry number `retry` (1 = before the second attempt), without
    /// jitter: `min(max_backoff, initial_backoff * multiplier^(retry-1))`.
    pub fn base_backoff(&self, retry: u32) -> Duration {
        kubeless_api::delivery::exponential_backoff(
            self.initial_backoff,
            self.multiplier,
            self.max_backoff,
            retry,
        )
    }

    /// The backoff before retry number `retry`, with jitter drawn from `rng`.
    pub fn backoff<R: Rng + ?Sized>(&self, retry: u32, rng: &mut R) -> Duration {
        let base = self.base_backoff(retry);
        let nanos = u64::try_from(base.as_nanos()).unwrap_or(u64::MAX);
        match self.jitter {
            Jitter::None => base,
            Jitter::Full => Duration::from_nanos(rng.random_range(0..=nanos)),
            Jitter::Equal => {
                let half = nanos / 2;
                Duration::from_nanos(half + rng.random_range(0..=nanos - half))
            }
        }
    }

    /// Effective attempt limit (at least 1).
    pub fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn status_classes() {
        assert_eq!(classify_status(StatusCode::OK), Class::Success);
        assert_eq!(classify_status(StatusCode::NO_CONTENT), Class::Success);
        assert_eq!(
            classify_status(StatusCode::REQUEST_TIMEOUT),
            Class::Retryable
        );
        assert_eq!(
            classify_status(StatusCode::TOO_MANY_REQUESTS),
            Class::Retryable
        );
        assert_eq!(
            classify_status(StatusCode::INTERNAL_SERVER_ERROR),
            Class::Retryable
        );
        assert_eq!(classify_status(StatusCode::BAD_GATEWAY), Class::Retryable);
        assert_eq!(
            classify_status(StatusCode::SERVICE_UNAVAILABLE),
            Class::Retryable
        );
        assert_eq!(classify_status(StatusCode::BAD_REQUEST), Class::Permanent);
        assert_eq!(classify_status(StatusCode::NOT_FOUND), Class::Permanent);
        assert_eq!(
            classify_status(StatusCode::UNPROCESSABLE_ENTITY),
            Class::Permanent
        );
        assert_eq!(
            classify_status(StatusCode::MOVED_PERMANENTLY),
            Class::Permanent
        );
    }

    fn policy(jitter: Jitter) -> RetryPolicy {
        RetryPolicy {
            max_attempts: 6,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            multiplier: 2.0,
            jitter,
        }
    }

    #[test]
    fn base_backoff_grows_and_caps() {
        let p = policy(Jitter::None);
        let got: Vec<u128> = (1..=6).map(|r| p.base_backoff(r).as_millis()).collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1000, 1000]);
        // huge retry numbers saturate instead of overflowing
        assert_eq!(p.base_backoff(u32::MAX), Duration::from_secs(1));
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(p.backoff(3, &mut rng), Duration::from_millis(400));
    }

    #[test]
    fn odd_multipliers_do_not_shrink_or_explode() {
        let mut p = policy(Jitter::None);
        p.multiplier = 0.5;
        assert_eq!(p.base_backoff(4), Duration::from_millis(100));
        p.multiplier = f64::NAN;
        assert_eq!(p.base_backoff(4), Duration::from_millis(100));
        p.multiplier = f64::INFINITY;
        assert_eq!(p.base_backoff(2), Duration::from_millis(100));
    }

    #[test]
    fn full_jitter_stays_within_zero_and_base() {
        let p = policy(Jitter::Full);
        let mut rng = StdRng::seed_from_u64(7);
        let samples: Vec<Duration> = (0..200).map(|_| p.backoff(3, &mut rng)).collect();
        assert!(samples.iter().all(|d| *d <= Duration::from_millis(400)));
        // spread over the range, not one value
        assert!(samples.iter().any(|d| *d < Duration::from_millis(100)));
        assert!(samples.iter().any(|d| *d > Duration::from_millis(300)));
    }

    #[test]
    fn equal_jitter_stays_within_half_and_base() {
        let p = policy(Jitter::Equal);
        let mut rng = StdRng::seed_from_u64(7);
        let samples: Vec<Duration> = (0..200).map(|_| p.backoff(3, &mut rng)).collect();
        assert!(
            samples
                .iter()
                .all(|d| *d >= Duration::from_millis(200) && *d <= Duration::from_millis(400))
        );
        assert!(samples.iter().any(|d| *d < Duration::from_millis(250)));
        assert!(samples.iter().any(|d| *d > Duration::from_millis(350)));
    }

    #[test]
    fn seeded_backoff_is_deterministic() {
        let p = policy(Jitter::Full);
        let a: Vec<Duration> = {
            let mut rng = StdRng::seed_from_u64(42);
            (1..=5).map(|r| p.backoff(r, &mut rng)).collect()
        };
        let b: Vec<Duration> = {
            let mut rng = StdRng::seed_from_u64(42);
            (1..=5).map(|r| p.backoff(r, &mut rng)).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn zero_attempts_means_one() {
        let mut p = RetryPolicy::no_retry();
        assert_eq!(p.attempts(), 1);
        p.max_attempts = 0;
        assert_eq!(p.attempts(), 1);
    }
}
