//! Scale to zero, the deciding side (the contract is in [`kubeless_api::scale`]): from a
//! Function, its effective settings and the time, whether it runs or sits at zero, and what
//! changes. Pure, so every case is a unit test.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kubeless_api::{
    Condition, Function,
    conditions::find_condition,
    scale::{Effective, SCALED_TO_ZERO, ScaleState, last_activity, parse_activity, reasons},
};

/// A change of state this reconcile makes (each gets an Event and a metric).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Idle for the whole period: the Deployment goes to zero.
    ScaledDown {
        /// The idle period, for the Event text.
        idle_after: Duration,
    },
    /// Traffic arrived while at zero: the Deployment comes back.
    Woken,
    /// Scale to zero was switched off while at zero: the Deployment comes back.
    Disabled,
}

/// What the reconcile does about scale to zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The Deployment should have zero replicas.
    pub at_zero: bool,
    /// The `ScaledToZero` condition to write; `None` removes it (scale to zero off).
    pub condition: Option<Condition>,
    /// `status.lastActivity` to write.
    pub last_activity: Option<String>,
    /// The change made now, if any.
    pub transition: Option<Transition>,
    /// When to look again if nothing else happens (the end of the idle period).
    pub recheck: Option<Duration>,
}

/// Decides for `f` at `now`, with `effective` the settings that apply to it (`None`: off).
pub fn decide(f: &Function, effective: Option<Effective>, now: Timestamp) -> Decision {
    let status = f.status.as_ref();
    let state = ScaleState::of(f);
    let seen = status.and_then(|s| s.last_activity.clone());
    let annotation = last_activity(f).map(str::to_string);
    let Some(eff) = effective else {
        return Decision {
            at_zero: false,
            condition: None,
            last_activity: None,
            transition: (state == ScaleState::AtZero).then_some(Transition::Disabled),
            recheck: None,
        };
    };
    if state == ScaleState::AtZero {
        if annotation.is_some() && annotation != seen {
            return Decision {
                at_zero: false,
                condition: Some(active("woken by a call or an event")),
                last_activity: annotation,
                transition: Some(Transition::Woken),
                recheck: Some(eff.idle_after),
            };
        }
        return Decision {
            at_zero: true,
            condition: Some(idle(eff.idle_after)),
            last_activity: seen,
            transition: None,
            recheck: None,
        };
    }
    // Running (or just switched on): idle since the latest of the last traffic, the last wake
    // and the creation.
    let woke = status
        .and_then(|s| find_condition(&s.conditions, SCALED_TO_ZERO))
        .filter(|c| !c.is_true())
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let created = f.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let traffic = annotation.as_deref().and_then(parse_activity);
    let since = [woke, created, traffic].into_iter().flatten().max();
    let idle_for = since.map_or(Duration::MAX, |t| {
        now.duration_since(t).try_into().unwrap_or(Duration::ZERO)
    });
    if idle_for >= eff.idle_after {
        return Decision {
            at_zero: true,
            condition: Some(idle(eff.idle_after)),
            last_activity: annotation,
            transition: Some(Transition::ScaledDown {
                idle_after: eff.idle_after,
            }),
            recheck: None,
        };
    }
    let keep = find_condition(
        status.map(|s| s.conditions.as_slice()).unwrap_or(&[]),
        SCALED_TO_ZERO,
    )
    .filter(|c| !c.is_true())
    .cloned();
    Decision {
        at_zero: false,
        condition: Some(keep.unwrap_or_else(|| active("had traffic within its idle period"))),
        last_activity: seen,
        transition: None,
        // A little past the end, so the next look finds it idle rather than just short of it.
        recheck: Some(eff.idle_after - idle_for + Duration::from_millis(100)),
    }
}

fn active(message: &str) -> Condition {
    Condition::new(SCALED_TO_ZERO, false, reasons::ACTIVE, message)
}

fn idle(idle_after: Duration) -> Condition {
    Condition::new(
        SCALED_TO_ZERO,
        true,
        reasons::IDLE,
        format!(
            "no calls or events for {}; the next one wakes it",
            humanize(idle_after)
        ),
    )
}

/// `90s` as `1m30s`, `300s` as `5m`.
pub fn humanize(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        if s == 0 {
            out.push_str(&format!("{}ms", d.as_millis()));
        } else {
            out.push_str(&format!("{sec}s"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kubeless_api::{FunctionStatus, scale::LAST_ACTIVITY};

    const IDLE: Duration = Duration::from_secs(60);

    fn eff() -> Option<Effective> {
        Some(Effective {
            idle_after: IDLE,
            min_replicas: None,
        })
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn function(created: i64) -> Function {
        let mut f = Function::new("f", Default::default());
        f.metadata.creation_timestamp = Some(Time(at(created)));
        f
    }

    fn with_activity(mut f: Function, value: &str) -> Function {
        f.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(LAST_ACTIVITY.into(), value.into());
        f
    }

    fn with_state(mut f: Function, at_zero: bool, since: i64, seen: Option<&str>) -> Function {
        let mut c = if at_zero { idle(IDLE) } else { active("") };
        c.last_transition_time = Some(Time(at(since)));
        f.status = Some(FunctionStatus {
            conditions: vec![c],
            last_activity: seen.map(str::to_string),
            ..Default::default()
        });
        f
    }

    #[test]
    fn off_removes_the_condition_and_wakes_a_function_at_zero() {
        let d = decide(&function(0), None, at(1000));
        assert_eq!(d.condition, None);
        assert!(!d.at_zero);
        assert_eq!(d.transition, None);
        let f = with_state(function(0), true, 100, None);
        let d = decide(&f, None, at(1000));
        assert_eq!(d.transition, Some(Transition::Disabled));
        assert!(!d.at_zero);
    }

    #[test]
    fn a_new_function_runs_until_idle_from_its_creation() {
        let d = decide(&function(0), eff(), at(30));
        assert!(!d.at_zero);
        assert_eq!(d.transition, None);
        assert!(d.recheck.unwrap() > Duration::from_secs(29));
        assert!(d.recheck.unwrap() < Duration::from_secs(31));
        let d = decide(&function(0), eff(), at(61));
        assert!(d.at_zero);
        assert_eq!(
            d.transition,
            Some(Transition::ScaledDown { idle_after: IDLE })
        );
        assert!(d.condition.unwrap().is_true());
    }

    #[test]
    fn traffic_and_wakes_restart_the_idle_period() {
        let traffic = at(50).to_string();
        let f = with_activity(function(0), &traffic);
        assert!(!decide(&f, eff(), at(100)).at_zero);
        assert!(decide(&f, eff(), at(111)).at_zero);
        // Woken at 200 with older traffic: idle counts from the wake.
        let f = with_state(with_activity(function(0), &traffic), false, 200, None);
        assert!(!decide(&f, eff(), at(250)).at_zero);
        assert!(decide(&f, eff(), at(261)).at_zero);
    }

    #[test]
    fn scaling_down_remembers_the_activity_it_saw() {
        let f = with_activity(function(0), "a");
        let d = decide(&f, eff(), at(100));
        assert!(d.at_zero);
        assert_eq!(d.last_activity.as_deref(), Some("a"));
    }

    #[test]
    fn a_new_activity_value_wakes_a_function_at_zero() {
        // Same value as when it scaled down: stays at zero.
        let f = with_state(with_activity(function(0), "a"), true, 100, Some("a"));
        let d = decide(&f, eff(), at(5000));
        assert!(d.at_zero);
        assert_eq!(d.transition, None);
        assert_eq!(d.recheck, None);
        // No annotation at all: stays at zero.
        let f = with_state(function(0), true, 100, None);
        assert!(decide(&f, eff(), at(5000)).at_zero);
        // A different value, even one that reads as older (writer clocks differ): wakes.
        let f = with_state(
            with_activity(function(0), &at(10).to_string()),
            true,
            100,
            Some("a"),
        );
        let d = decide(&f, eff(), at(5000));
        assert!(!d.at_zero);
        assert_eq!(d.transition, Some(Transition::Woken));
        assert_eq!(d.last_activity, Some(at(10).to_string()));
        assert!(!d.condition.unwrap().is_true());
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(humanize(Duration::from_secs(90)), "1m30s");
        assert_eq!(humanize(Duration::from_secs(300)), "5m");
        assert_eq!(humanize(Duration::from_secs(3600)), "1h");
        assert_eq!(humanize(Duration::from_secs(5)), "5s");
        assert_eq!(humanize(Duration::from_millis(0)), "0ms");
    }
}
