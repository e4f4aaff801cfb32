//! Delivery policy of event triggers (new, not in Kubeless): how often and how fast a failed
//! delivery is retried before the event goes to the dead-letter destination.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;

/// Default number of delivery attempts (first try included).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default backoff before the second attempt.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Default upper bound of the backoff.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Default backoff growth factor.
pub const DEFAULT_MULTIPLIER: f64 = 2.0;

/// Retry policy as written in a trigger spec. Every field is optional; see
/// [`RetryPolicy::resolve`] for the defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Total delivery attempts including the first one (default 5). 1 disables retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::constraints::INT32_MAX), extend("format" = "int32"))]
    pub max_attempts: Option<u32>,
    /// Backoff before the second attempt, as a duration string such as `500ms`, `1s`, `1m30s`
    /// (default `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::DURATION_PATTERN), length(max = crate::constraints::MAX_DURATION_LENGTH))]
    pub initial_backoff: Option<String>,
    /// Upper bound of the backoff between attempts (default `60s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = crate::constraints::DURATION_PATTERN), length(max = crate::constraints::MAX_DURATION_LENGTH))]
    pub max_backoff: Option<String>,
    /// Factor the backoff grows by after each failed attempt (default 2.0, at least 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0))]
    pub multiplier: Option<f64>,
}

/// A retry policy with defaults applied and durations parsed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeliveryPolicy {
    /// Total attempts including the first one; at least 1.
    pub max_attempts: u32,
    /// Backoff before the second attempt.
    pub initial_backoff: Duration,
    /// Upper bound of the backoff.
    pub max_backoff: Duration,
    /// Growth factor, at least 1.0.
    pub multiplier: f64,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            multiplier: DEFAULT_MULTIPLIER,
        }
    }
}

impl DeliveryPolicy {
    /// Backoff to wait after failed attempt number `failed_attempt` (1-based):
    /// `initial * multiplier^(n-1)`, capped at `max_backoff`.
    pub fn backoff(&self, failed_attempt: u32) -> Duration {
        exponential_backoff(
            self.initial_backoff,
            self.multiplier,
            self.max_backoff,
            failed_attempt,
        )
    }
}

/// The one backoff formula of the project (trigger retries, the invoker, controllers' requeues,
/// broker reconnects): before retry `n` (1-based; 0 counts as 1) wait
/// `min(max, initial * multiplier^(n-1))`. A multiplier below 1 or not finite counts as 1.
pub fn exponential_backoff(initial: Duration, multiplier: f64, max: Duration, n: u32) -> Duration {
    let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
    let multiplier = if multiplier.is_finite() && multiplier >= 1.0 {
        multiplier
    } else {
        1.0
    };
    let secs = initial.as_secs_f64() * multiplier.powi(exp);
    if !secs.is_finite() || secs >= max.as_secs_f64() {
        max
    } else {
        Duration::from_secs_f64(secs.max(0.0))
    }
}

impl RetryPolicy {
    /// Applies defaults and validates. `None` (no `retry` field) gives the defaults.
    pub fn resolve(policy: Option<&RetryPolicy>) -> Result<DeliveryPolicy, Error> {
        let mut out = DeliveryPolicy::default();
        let Some(p) = policy else { return Ok(out) };
        if let Some(n) = p.max_attempts {
            if n == 0 {
                return Err(Error::InvalidRetry("maxAttempts must be at least 1"));
            }
            out.max_attempts = n;
        }
        if let Some(s) = &p.initial_backoff {
            out.initial_backoff = parse_duration("retry.initialBackoff", s)?;
        }
        if let Some(s) = &p.max_backoff {
            out.max_backoff = parse_duration("retry.maxBackoff", s)?;
        }
        if let Some(m) = p.multiplier {
            if !m.is_finite() || m < 1.0 {
                return Err(Error::InvalidRetry("multiplier must be a number >= 1.0"));
            }
            out.multiplier = m;
        }
        if out.max_backoff < out.initial_backoff {
            return Err(Error::InvalidRetry(
                "maxBackoff must not be smaller than initialBackoff",
            ));
        }
        Ok(out)
    }
}

/// Parses a Go-style duration: one or more `<number><unit>` with units `ms`, `s`, `m`, `h`
/// (e.g. `500ms`, `1.5s`, `1m30s`). A bare `0` is zero. Negative values are rejected.
pub fn parse_duration(field: &'static str, input: &str) -> Result<Duration, Error> {
    let err = || Error::InvalidDuration {
        field,
        value: input.to_string(),
    };
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let number: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let p = |s| parse_duration("f", s);
        assert_eq!(p("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(p("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(p("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(p("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(p("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(p("0").unwrap(), Duration::ZERO);
        for bad in ["", "10", "s", "-1s", "1x", "1.2.3s", "1d"] {
            assert!(p(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let d = RetryPolicy::resolve(None).unwrap();
        assert_eq!(d.max_attempts, 5);
        assert_eq!(d.initial_backoff, Duration::from_secs(1));
        assert_eq!(d.max_backoff, Duration::from_secs(60));
        let custom = RetryPolicy {
            max_attempts: Some(3),
            initial_backoff: Some("200ms".into()),
            max_backoff: Some("1s".into()),
            multiplier: Some(3.0),
        };
        let r = RetryPolicy::resolve(Some(&custom)).unwrap();
        assert_eq!(r.max_attempts, 3);
        assert_eq!(r.backoff(1), Duration::from_millis(200));
        assert_eq!(r.backoff(2), Duration::from_millis(600));
        assert_eq!(r.backoff(3), Duration::from_secs(1));
        assert_eq!(r.backoff(60), Duration::from_secs(1));
    }

    #[test]
    fn invalid_policies() {
        let bad = [
            RetryPolicy {
                max_attempts: Some(0),
                ..Default::default()
            },
            RetryPolicy {
                multiplier: Some(0.5),
                ..Default::default()
            },
            RetryPolicy {
                initial_backoff: Some("10s".into()),
                max_backoff: Some("1s".into()),
                ..Default::default()
            },
            RetryPolicy {
                max_backoff: Some("soon".into()),
                ..Default::default()
            },
        ];
        for p in &bad {
            assert!(RetryPolicy::resolve(Some(p)).is_err(), "{p:?}");
        }
    }

    #[test]
    fn default_backoff_is_exponential_and_capped() {
        let d = DeliveryPolicy::default();
        let got: Vec<u64> = (1..=8).map(|n| d.backoff(n).as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 8, 16, 32, 60, 60]);
    }
}
