//! The Prometheus text a runtime serves on /metrics, reduced to what `function top` shows.

use std::collections::BTreeMap;

use serde::Serialize;

/// Totals of one function and HTTP method.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MethodStats {
    pub calls: f64,
    pub failures: f64,
    pub duration_sum: f64,
    pub duration_count: f64,
}

/// Per-method totals from `function_calls_total`, `function_failures_total` and
/// `function_duration_seconds_sum` / `_count`.
pub fn parse(text: &str) -> BTreeMap<String, MethodStats> {
    let mut out: BTreeMap<String, MethodStats> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, labels, value)) = split_sample(line) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let method = label(labels, "method").unwrap_or_default();
        let field: fn(&mut MethodStats) -> &mut f64 = match name {
            "function_calls_total" | "function_calls" => |s: &mut MethodStats| &mut s.calls,
            "function_failures_total" | "function_failures" => {
                |s: &mut MethodStats| &mut s.failures
            }
            "function_duration_seconds_sum" => |s: &mut MethodStats| &mut s.duration_sum,
            "function_duration_seconds_count" => |s: &mut MethodStats| &mut s.duration_count,
            _ => continue,
        };
        *field(out.entry(method).or_default()) += value;
    }
    out
}

/// `name{labels} value [timestamp]` -> (name, labels, value).
fn split_sample(line: &str) -> Option<(&str, &str, &str)> {
    let (name, rest) = match line.find('{') {
        Some(open) => {
            let close = line[open..].rfind('}')? + open;
            (&line[..open], (&line[open + 1..close], &line[close + 1..]))
        }
        None => {
            let sp = line.find(char::is_whitespace)?;
            (&line[..sp], ("", &line[sp..]))
        }
    };
    let (labels, tail) = rest;
    let value = tail.split_whitespace().next()?;
    Some((name.trim(), labels, value))
}

/// Value of `key="..."` in a label set (escapes `\"` and `\\` handled).
fn label(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let k = rest[..eq].trim().trim_start_matches(',').trim();
        let after = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        if k == key {
            return Some(value);
        }
        rest = after[end..].trim_start().trim_start_matches(',');
    }
    None
}

/// The cumulative buckets of `function_duration_seconds`, summed over methods: `(le, count)`
/// sorted by `le` (`+Inf` last). The dashboard turns two scrapes of them into p50/p99.
pub fn duration_buckets(text: &str) -> Vec<(f64, f64)> {
    let mut by_le: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        let Some(("function_duration_seconds_bucket", labels, value)) = split_sample(line) else {
            continue;
        };
        let (Some(le_text), Ok(value)) = (label(labels, "le"), value.parse::<f64>()) else {
            continue;
        };
        let le = match le_text.as_str() {
            "+Inf" | "Inf" => f64::INFINITY,
            t => match t.parse::<f64>() {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        by_le.entry(le_text).or_insert((le, 0.0)).1 += value;
    }
    let mut out: Vec<(f64, f64)> = by_le.into_values().collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_runtime_metrics() {
        let text = r#"# HELP function_calls Number of calls.
# TYPE function_calls counter
function_calls_total{method="GET"} 3
function_calls_total{method="POST"} 2
function_failures_total{method="POST"} 1
function_duration_seconds_bucket{le="0.005",method="GET"} 3
function_duration_seconds_sum{method="GET"} 0.0300
function_duration_seconds_count{method="GET"} 3
function_duration_seconds_sum{path="/x",method="POST"} 1.5 1700000000
function_duration_seconds_count{method="POST"} 2
other_metric 7
"#;
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m["GET"].calls, 3.0);
        assert_eq!(m["GET"].failures, 0.0);
        assert!((m["GET"].duration_sum - 0.03).abs() < 1e-9);
        assert_eq!(m["POST"].failures, 1.0);
        assert_eq!(m["POST"].duration_sum, 1.5);
        assert_eq!(m["POST"].duration_count, 2.0);
    }

    #[test]
    fn duration_buckets_summed_over_methods() {
        let text = r#"function_duration_seconds_bucket{le="0.005",method="GET"} 1
function_duration_seconds_bucket{le="0.1",method="GET"} 3
function_duration_seconds_bucket{le="+Inf",method="GET"} 4
function_duration_seconds_bucket{method="POST",le="0.005"} 2
function_duration_seconds_bucket{method="POST",le="0.1"} 2
function_duration_seconds_bucket{method="POST",le="+Inf"} 2
function_calls_total{method="GET"} 4
"#;
        assert_eq!(
            duration_buckets(text),
            vec![(0.005, 3.0), (0.1, 5.0), (f64::INFINITY, 6.0)]
        );
        assert!(duration_buckets("").is_empty());
    }

    #[test]
    fn labels_with_escapes() {
        assert_eq!(
            label(r#"a="x\"y",method="GET""#, "method").as_deref(),
            Some("GET")
        );
        assert_eq!(
            label(r#"a="x\"y",method="GET""#, "a").as_deref(),
            Some("x\"y")
        );
        assert_eq!(label("", "method"), None);
    }
}
