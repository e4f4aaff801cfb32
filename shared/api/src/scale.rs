//! Scale to zero: the Function field, the annotation the gateway and triggers write when a
//! function has traffic, and the condition the function-controller keeps.
//!
//! The contract between the services (they never call each other):
//! - The function-controller decides. While scale to zero is on for a Function it keeps a
//!   `ScaledToZero` condition: `False` (reason `Active`) while the function runs, `True`
//!   (reason `Idle`) once it scaled the Deployment to zero. With scale to zero off the
//!   condition is absent.
//! - The gateway and the triggers record traffic for Functions that carry the condition by
//!   patching the [`LAST_ACTIVITY`] annotation with the current time: at most once per
//!   interval while the function runs, and at once when it is at zero and a call or an event
//!   waits for it. That write is the wake-up call.
//! - The controller scales to zero when the last activity (or the last wake, or the creation)
//!   is older than the idle period, and wakes the function when the annotation differs from the
//!   value it saw when it scaled down ([`crate::FunctionStatus::last_activity`]), so writers'
//!   and the controller's clocks need not agree.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Error, Function, conditions::find_condition, delivery::parse_duration};

/// Annotation on a Function: when the gateway or a trigger last had traffic for it (RFC 3339).
pub const LAST_ACTIVITY: &str = "kubeless.io/last-activity";

/// Condition type on Functions with scale to zero on: `True` while scaled to zero.
pub const SCALED_TO_ZERO: &str = "ScaledToZero";

/// Reasons of the [`SCALED_TO_ZERO`] condition (also Event reasons).
pub mod reasons {
    /// The function runs (it had traffic within its idle period, or was just created).
    pub const ACTIVE: &str = "Active";
    /// No traffic for the idle period: the Deployment was scaled to zero.
    pub const IDLE: &str = "Idle";
    /// Event only: traffic arrived for a function at zero and it is being scaled up.
    pub const WOKEN: &str = "Woken";
}

/// Default idle period before a function scales to zero.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(300);
/// Shortest idle period the schema accepts: 3 times the shortest activity interval (1 s). The
/// function-controller further refuses one shorter than 3 times the install's activity
/// interval ([`IDLE_PER_INTERVAL`]).
pub const MIN_IDLE_AFTER: Duration = Duration::from_secs(3);
/// The idle period must span at least this many activity intervals: a function with steady
/// traffic gets a write every interval, so a late write (a slow API server, a restarted
/// trigger) still lands well inside the idle period and a busy function never goes to zero.
pub const IDLE_PER_INTERVAL: u32 = 3;
/// Longest idle period accepted: a week.
pub const MAX_IDLE_AFTER: Duration = Duration::from_secs(7 * 86_400);

/// Pattern of `scaleToZero.idleAfter`: Go-style durations such as `90s`, `5m`, `1h30m`.
pub const IDLE_AFTER_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// `.spec.scaleToZero` of a Function (our addition; Kubeless kept every function running).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleToZero {
    /// Scale this function to zero when idle (`true`) or never (`false`). Unset follows the
    /// install's default (the function-controller's `--scale-to-zero`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long without calls or events before the function scales to zero, e.g. `90s`, `5m`,
    /// `1h`. Default: the install's `--scale-to-zero-idle` (5m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = IDLE_AFTER_PATTERN), length(max = 32))]
    pub idle_after: Option<String>,
    /// Replicas started when traffic returns (at least 1). Default: the Deployment template's
    /// replicas, or the HPA's minReplicas when autoscaling, else 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub min_replicas: Option<i32>,
}

/// The CEL rule (on the Function) that refuses an `idleAfter` below [`MIN_IDLE_AFTER`] at
/// apply time, naming the field.
pub fn idle_after_rule() -> kube::core::Rule {
    kube::core::Rule::new(
        "!has(self.spec.scaleToZero) || !has(self.spec.scaleToZero.idleAfter) || \
         duration(self.spec.scaleToZero.idleAfter) >= duration('3s')",
    )
    .message(
        "scaleToZero.idleAfter must be at least 3s (and at least 3 times the install's activity interval: 30s with the default 10s)",
    )
    .field_path(".spec.scaleToZero.idleAfter")
}

/// The install-wide defaults the function-controller applies to Functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleToZeroDefaults {
    /// Whether Functions without `scaleToZero.enabled` scale to zero.
    pub enabled: bool,
    /// Idle period of Functions without `scaleToZero.idleAfter`.
    pub idle_after: Duration,
    /// How often the gateway and triggers write a running function's activity (their
    /// `--activity-interval`): an idle period must span [`IDLE_PER_INTERVAL`] of them.
    pub activity_interval: Duration,
}

impl Default for ScaleToZeroDefaults {
    fn default() -> Self {
        Self {
            enabled: false,
            idle_after: DEFAULT_IDLE_AFTER,
            activity_interval: DEFAULT_ACTIVITY_INTERVAL,
        }
    }
}

/// Default least time between two activity writes for a running function.
pub const DEFAULT_ACTIVITY_INTERVAL: Duration = Duration::from_secs(10);

impl ScaleToZeroDefaults {
    /// Refuses an idle period shorter than [`IDLE_PER_INTERVAL`] activity intervals.
    pub fn check_idle(&self, field: &'static str, idle_after: Duration) -> Result<(), Error> {
        let least = self.activity_interval * IDLE_PER_INTERVAL;
        if idle_after < least {
            return Err(Error::IdleShorterThanActivity {
                field,
                idle_after,
                activity_interval: self.activity_interval,
                least,
            });
        }
        Ok(())
    }
}

/// Scale to zero as it applies to one Function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    /// Idle period.
    pub idle_after: Duration,
    /// Replicas asked for when woken, if the Function sets them.
    pub min_replicas: Option<i32>,
}

impl ScaleToZero {
    /// Combines the field with the install defaults: `None` when scale to zero is off.
    pub fn effective(
        field: Option<&ScaleToZero>,
        defaults: ScaleToZeroDefaults,
    ) -> Result<Option<Effective>, Error> {
        let enabled = field.and_then(|f| f.enabled).unwrap_or(defaults.enabled);
        if !enabled {
            return Ok(None);
        }
        let idle_after = match field.and_then(|f| f.idle_after.as_deref()) {
            Some(s) => parse_idle_after(s)?,
            None => defaults.idle_after,
        };
        defaults.check_idle("scaleToZero.idleAfter", idle_after)?;
        let min_replicas = field.and_then(|f| f.min_replicas);
        if let Some(n) = min_replicas
            && !(1..=crate::constraints::MAX_REPLICAS as i32).contains(&n)
        {
            return Err(Error::OutOfRange {
                field: "scaleToZero.minReplicas",
                value: n.to_string(),
                range: "1 to 1000",
            });
        }
        Ok(Some(Effective {
            idle_after,
            min_replicas,
        }))
    }
}

/// Parses an idle period and checks its bounds.
pub fn parse_idle_after(s: &str) -> Result<Duration, Error> {
    let d = parse_duration("scaleToZero.idleAfter", s)?;
    if !(MIN_IDLE_AFTER..=MAX_IDLE_AFTER).contains(&d) {
        return Err(Error::OutOfRange {
            field: "scaleToZero.idleAfter",
            value: s.to_string(),
            range: "3s to 168h",
        });
    }
    Ok(d)
}

/// Where a Function stands with scale to zero, as its status tells the gateway and triggers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleState {
    /// Scale to zero is off (no `ScaledToZero` condition): no activity is recorded.
    Off,
    /// On, and the function runs: activity is recorded now and then.
    Active,
    /// On, and the function is at zero: the next call or event wakes it.
    AtZero,
}

impl ScaleState {
    /// Reads the `ScaledToZero` condition of a Function.
    pub fn of(f: &Function) -> Self {
        let condition = f
            .status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, SCALED_TO_ZERO));
        match condition {
            None => Self::Off,
            Some(c) if c.is_true() => Self::AtZero,
            Some(_) => Self::Active,
        }
    }
}

/// The [`LAST_ACTIVITY`] annotation of a Function, if set.
pub fn last_activity(f: &Function) -> Option<&str> {
    f.metadata
        .annotations
        .as_ref()?
        .get(LAST_ACTIVITY)
        .map(String::as_str)
}

/// A fresh [`LAST_ACTIVITY`] value: the current time in RFC 3339 with nanoseconds, so two
/// writes never carry the same value.
pub fn activity_now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Parses an RFC 3339 activity value; `None` for anything else (a hand-edited annotation).
pub fn parse_activity(s: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Condition, FunctionStatus};

    #[test]
    fn effective_follows_field_then_defaults() {
        let on = ScaleToZeroDefaults {
            enabled: true,
            idle_after: Duration::from_secs(60),
            ..Default::default()
        };
        let off = ScaleToZeroDefaults::default();
        assert_eq!(ScaleToZero::effective(None, off).unwrap(), None);
        assert_eq!(
            ScaleToZero::effective(None, on)
                .unwrap()
                .unwrap()
                .idle_after,
            Duration::from_secs(60)
        );
        let field = ScaleToZero {
            enabled: Some(true),
            idle_after: Some("90s".into()),
            min_replicas: Some(2),
        };
        let e = ScaleToZero::effective(Some(&field), off).unwrap().unwrap();
        assert_eq!(e.idle_after, Duration::from_secs(90));
        assert_eq!(e.min_replicas, Some(2));
        let opt_out = ScaleToZero {
            enabled: Some(false),
            ..Default::default()
        };
        assert_eq!(ScaleToZero::effective(Some(&opt_out), on).unwrap(), None);
    }

    #[test]
    fn bad_values_are_errors() {
        let on = ScaleToZeroDefaults {
            enabled: true,
            ..Default::default()
        };
        for idle in ["0", "500ms", "200h", "soon", "-1s"] {
            let f = ScaleToZero {
                idle_after: Some(idle.into()),
                ..Default::default()
            };
            assert!(ScaleToZero::effective(Some(&f), on).is_err(), "{idle}");
        }
        for n in [0, -1, 1001] {
            let f = ScaleToZero {
                min_replicas: Some(n),
                ..Default::default()
            };
            assert!(ScaleToZero::effective(Some(&f), on).is_err(), "{n}");
        }
    }

    #[test]
    fn idle_periods_span_three_activity_intervals() {
        let on = ScaleToZeroDefaults {
            enabled: true,
            ..Default::default()
        };
        let with = |idle: &str| {
            let f = ScaleToZero {
                idle_after: Some(idle.into()),
                ..Default::default()
            };
            ScaleToZero::effective(Some(&f), on)
        };
        // The default interval is 10 s: 30 s is the least.
        assert!(with("30s").is_ok());
        let e = with("29s").unwrap_err().to_string();
        assert!(
            e.contains("scaleToZero.idleAfter") && e.contains("(10s)") && e.contains("use 30s"),
            "{e}"
        );
        // A faster install accepts shorter periods.
        let fast = ScaleToZeroDefaults {
            activity_interval: Duration::from_secs(1),
            ..on
        };
        assert!(fast.check_idle("x", Duration::from_secs(3)).is_ok());
        assert!(fast.check_idle("x", Duration::from_millis(2999)).is_err());
        // The install's own default is checked the same way.
        let bad_default = ScaleToZeroDefaults {
            idle_after: Duration::from_secs(10),
            ..on
        };
        assert!(ScaleToZero::effective(None, bad_default).is_err());
    }

    #[test]
    fn state_comes_from_the_condition() {
        let mut f = Function::new("f", Default::default());
        assert_eq!(ScaleState::of(&f), ScaleState::Off);
        let mut status = FunctionStatus::default();
        status
            .conditions
            .push(Condition::new(SCALED_TO_ZERO, false, reasons::ACTIVE, ""));
        f.status = Some(status.clone());
        assert_eq!(ScaleState::of(&f), ScaleState::Active);
        status.conditions[0] = Condition::new(SCALED_TO_ZERO, true, reasons::IDLE, "");
        f.status = Some(status);
        assert_eq!(ScaleState::of(&f), ScaleState::AtZero);
    }

    #[test]
    fn activity_values_differ_and_parse() {
        let a = activity_now();
        let b = activity_now();
        assert_ne!(a, b);
        assert!(parse_activity(&a).is_some());
        assert!(parse_activity("yesterday").is_none());
    }
}
