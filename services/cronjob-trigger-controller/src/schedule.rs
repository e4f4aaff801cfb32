//! Cron schedule validation and firing times (UTC).
//!
//! CronJob mode accepts what a batch/v1 CronJob accepts: five fields and the `@hourly`-style
//! aliases. The in-process scheduler also accepts a leading seconds field (six fields).

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

/// Which schedules are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Five fields (minutes): what a Kubernetes CronJob runs.
    Minutes,
    /// Five fields, or six with a leading seconds field: the in-process scheduler.
    Seconds,
}

/// Why a schedule was rejected. The message ends up in the trigger's `Ready` condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("the schedule is empty")]
    Empty,
    #[error(
        "schedule {schedule:?} has {fields} fields: a CronJob takes 5 (minute hour day-of-month month day-of-week); \
         6 fields with seconds need the controller's --scheduler-mode"
    )]
    SecondsNeedScheduler { schedule: String, fields: usize },
    #[error(
        "schedule {schedule:?} has {fields} fields: expected 5, or 6 with a leading seconds field"
    )]
    FieldCount { schedule: String, fields: usize },
    #[error(
        "schedule {schedule:?} names a time zone: schedules run in UTC here (Kubernetes rejects TZ= in a CronJob schedule too)"
    )]
    TimeZone { schedule: String },
    #[error("schedule {schedule:?} is not a valid cron expression: {message}")]
    Invalid { schedule: String, message: String },
}

/// A validated schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: Cron,
    /// The schedule as written (trimmed).
    text: String,
    /// Whether the schedule has a seconds field.
    seconds: bool,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Schedule {
    /// Validates `schedule` for the given precision.
    pub fn parse(schedule: &str, precision: Precision) -> Result<Self, ScheduleError> {
        let text = schedule.trim();
        if text.is_empty() {
            return Err(ScheduleError::Empty);
        }
        if text.starts_with("TZ=") || text.starts_with("CRON_TZ=") {
            return Err(ScheduleError::TimeZone {
                schedule: text.to_string(),
            });
        }
        // robfig/cron (what Kubernetes validates with) knows @midnight; croner does not.
        let normalized = if text.eq_ignore_ascii_case("@midnight") {
            "@daily"
        } else {
            text
        };
        let fields = normalized.split_whitespace().count();
        let alias = normalized.starts_with('@');
        let seconds = !alias && fields == 6;
        if !alias {
            match (fields, precision) {
                (5, _) | (6, Precision::Seconds) => {}
                (6, Precision::Minutes) => {
                    return Err(ScheduleError::SecondsNeedScheduler {
                        schedule: text.to_string(),
                        fields,
                    });
                }
                _ => {
                    return Err(ScheduleError::FieldCount {
                        schedule: text.to_string(),
                        fields,
                    });
                }
            }
        }
        let parser = CronParser::builder()
            .seconds(match precision {
                Precision::Minutes => Seconds::Disallowed,
                Precision::Seconds => Seconds::Optional,
            })
            .year(Year::Disallowed)
            .build();
        let cron = parser
            .parse(normalized)
            .map_err(|e| ScheduleError::Invalid {
                schedule: text.to_string(),
                message: e.to_string(),
            })?;
        // A pattern that never fires (e.g. 30 February) is as useless as a syntax error.
        let probe = Timestamp::now();
        if next_occurrence(&cron, probe).is_none() {
            return Err(ScheduleError::Invalid {
                schedule: text.to_string(),
                message: "it never fires".to_string(),
            });
        }
        Ok(Self {
            cron,
            text: text.to_string(),
            seconds,
        })
    }

    /// The schedule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the schedule has a seconds field (scheduler mode only).
    pub fn has_seconds(&self) -> bool {
        self.seconds
    }

    /// The first firing time strictly after `after`, in UTC.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        next_occurrence(&self.cron, after)
    }
}

fn next_occurrence(cron: &Cron, after: Timestamp) -> Option<Timestamp> {
    let zoned = after.to_zoned(TimeZone::UTC);
    cron.find_next_occurrence(&zoned, false)
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_fire_on_minutes() {
        let s = Schedule::parse("*/5 * * * *", Precision::Minutes).unwrap();
        assert!(!s.has_seconds());
        assert_eq!(
            s.next_after(ts("2026-03-01T10:02:30Z")),
            Some(ts("2026-03-01T10:05:00Z"))
        );
        assert_eq!(
            s.next_after(ts("2026-03-01T10:05:00Z")),
            Some(ts("2026-03-01T10:10:00Z"))
        );
    }

    #[test]
    fn aliases_are_accepted() {
        for alias in [
            "@hourly",
            "@daily",
            "@midnight",
            "@weekly",
            "@monthly",
            "@yearly",
        ] {
            let s = Schedule::parse(alias, Precision::Minutes).unwrap();
            assert_eq!(s.as_str(), alias);
        }
        let h = Schedule::parse("@hourly", Precision::Minutes).unwrap();
        assert_eq!(
            h.next_after(ts("2026-03-01T10:02:30Z")),
            Some(ts("2026-03-01T11:00:00Z"))
        );
    }

    #[test]
    fn seconds_only_in_scheduler_mode() {
        let err = Schedule::parse("*/2 * * * * *", Precision::Minutes).unwrap_err();
        assert!(matches!(
            err,
            ScheduleError::SecondsNeedScheduler { fields: 6, .. }
        ));
        assert!(err.to_string().contains("--scheduler-mode"));
        let s = Schedule::parse("*/2 * * * * *", Precision::Seconds).unwrap();
        assert!(s.has_seconds());
        assert_eq!(
            s.next_after(ts("2026-03-01T10:00:01Z")),
            Some(ts("2026-03-01T10:00:02Z"))
        );
        // five fields still mean minutes in scheduler mode
        let m = Schedule::parse("* * * * *", Precision::Seconds).unwrap();
        assert_eq!(
            m.next_after(ts("2026-03-01T10:00:01Z")),
            Some(ts("2026-03-01T10:01:00Z"))
        );
    }

    #[test]
    fn invalid_schedules_are_errors() {
        assert_eq!(
            Schedule::parse("  ", Precision::Minutes),
            Err(ScheduleError::Empty)
        );
        assert!(matches!(
            Schedule::parse("* * *", Precision::Seconds),
            Err(ScheduleError::FieldCount { fields: 3, .. })
        ));
        assert!(matches!(
            Schedule::parse("0 0 * * * * 2030", Precision::Seconds),
            Err(ScheduleError::FieldCount { fields: 7, .. })
        ));
        assert!(matches!(
            Schedule::parse("61 * * * *", Precision::Minutes),
            Err(ScheduleError::Invalid { .. })
        ));
        assert!(matches!(
            Schedule::parse("not a cron at all", Precision::Minutes),
            Err(ScheduleError::Invalid { .. })
        ));
        assert!(matches!(
            Schedule::parse("0 0 30 2 *", Precision::Minutes),
            Err(ScheduleError::Invalid { .. })
        ));
        assert!(matches!(
            Schedule::parse("TZ=Europe/Paris 0 * * * *", Precision::Minutes),
            Err(ScheduleError::TimeZone { .. })
        ));
    }

    #[test]
    fn names_and_steps() {
        let s = Schedule::parse("0 9 * * MON-FRI", Precision::Minutes).unwrap();
        // 2026-03-07 is a Saturday: next is Monday 09:00
        assert_eq!(
            s.next_after(ts("2026-03-07T12:00:00Z")),
            Some(ts("2026-03-09T09:00:00Z"))
        );
    }
}
