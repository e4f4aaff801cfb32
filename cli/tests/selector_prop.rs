//! Property tests of `--function-selector` label queries (issue 20): no input panics the
//! parser, and every selector written back by `to_query` (the tables' form) parses to itself.
#![cfg(test)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kubeless_cli::selector::{parse, to_query};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9.-]{0,6}[a-z0-9]|[a-z]"
}

fn value() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9_.-]{0,5}[a-z0-9])?"
}

fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    prop_oneof![
        (key(), vec(value(), 1..4)).prop_map(|(k, v)| LabelSelectorRequirement {
            key: k,
            operator: "In".into(),
            values: Some(v)
        }),
        (key(), vec(value(), 1..4)).prop_map(|(k, v)| LabelSelectorRequirement {
            key: k,
            operator: "NotIn".into(),
            values: Some(v)
        }),
        key().prop_map(|k| LabelSelectorRequirement {
            key: k,
            operator: "Exists".into(),
            values: None
        }),
        key().prop_map(|k| LabelSelectorRequirement {
            key: k,
            operator: "DoesNotExist".into(),
            values: None
        }),
    ]
}

/// A selector with at least one term (an empty `--function-selector` is refused on purpose).
fn selector() -> impl Strategy<Value = LabelSelector> {
    (btree_map(key(), value(), 0..4), vec(requirement(), 0..4))
        .prop_filter("at least one term", |(l, e)| !l.is_empty() || !e.is_empty())
        .prop_map(
            |(labels, exprs): (BTreeMap<String, String>, Vec<LabelSelectorRequirement>)| {
                LabelSelector {
                    match_labels: (!labels.is_empty()).then_some(labels),
                    match_expressions: (!exprs.is_empty()).then_some(exprs),
                }
            },
        )
}

proptest! {
    // Failures print their minimal input; nothing is written into the source tree.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_empty_selector_is_refused(blank in "[ ,]{0,5}") {
        prop_assert!(parse(&blank).is_err());
    }

    #[test]
    fn any_text_is_parsed_or_refused_without_panic(text in "\\PC{0,60}") {
        let _ = parse(&text);
    }

    #[test]
    fn written_selectors_parse_back_to_themselves(sel in selector()) {
        let query = to_query(&sel);
        let back = parse(&query).map_err(|e| TestCaseError::fail(format!("{query}: {}", e.human())))?;
        prop_assert_eq!(back, sel, "{}", query);
    }
}
