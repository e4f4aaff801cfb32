//! Property tests of schedule parsing (issue 20): no input string makes it panic, and every
//! schedule built from in-range fields parses and has a next run after now.
#![cfg(test)]

use cronjob_trigger_controller::schedule::{Precision, Schedule};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

/// One field: `*`, a value, a range, a step or a list, all inside `lo..=hi`.
fn field(lo: u32, hi: u32) -> impl Strategy<Value = String> {
    let value = lo..=hi;
    prop_oneof![
        Just("*".to_string()),
        value.clone().prop_map(|v| v.to_string()),
        (value.clone(), value.clone()).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=hi.max(1)).prop_map(|s| format!("*/{s}")),
        proptest::collection::vec(value, 1..4)
            .prop_map(|v| { v.iter().map(u32::to_string).collect::<Vec<_>>().join(",") }),
    ]
}

proptest! {
    // Failures print their minimal input; nothing is written into the source tree.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_string_is_parsed_or_refused_without_panic(text in "\\PC{0,40}") {
        let _ = Schedule::parse(&text, Precision::Minutes);
        let _ = Schedule::parse(&text, Precision::Seconds);
    }

    #[test]
    fn any_string_of_cron_characters_is_parsed_or_refused(text in "[0-9*/,\\- ]{0,30}") {
        let _ = Schedule::parse(&text, Precision::Minutes);
        let _ = Schedule::parse(&text, Precision::Seconds);
    }

    #[test]
    fn in_range_schedules_parse_and_run_after_now(
        minute in field(0, 59),
        hour in field(0, 23),
        // Days 1-28 exist in every month, so every such schedule runs.
        day in field(1, 28),
        month in field(1, 12),
        weekday in prop_oneof![Just("*".to_string())],
        second in field(0, 59),
    ) {
        let five = format!("{minute} {hour} {day} {month} {weekday}");
        let now = Timestamp::now();
        let s = Schedule::parse(&five, Precision::Minutes)
            .map_err(|e| TestCaseError::fail(format!("{five}: {e}")))?;
        let next = s.next_after(now);
        prop_assert!(next.is_some_and(|t| t > now), "{five}: {next:?}");
        let six = format!("{second} {five}");
        let s = Schedule::parse(&six, Precision::Seconds)
            .map_err(|e| TestCaseError::fail(format!("{six}: {e}")))?;
        prop_assert!(s.has_seconds());
        prop_assert!(s.next_after(now).is_some_and(|t| t > now), "{six}");
        // Six fields are refused where Kubernetes runs the schedule.
        prop_assert!(Schedule::parse(&six, Precision::Minutes).is_err(), "{six}");
    }
}
