//! Kubernetes label queries (`a=b,c!=d,e in (x,y),f notin (z),g,!h`) -> LabelSelector, for
//! `--function-selector`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::error::{Error, Result};

/// Splits at commas that are not inside parentheses.
fn terms(query: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in query.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&query[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&query[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn set_values(raw: &str, term: &str) -> Result<Vec<String>> {
    let inner = raw
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| Error::usage(format!("invalid selector term {term:?}: expected (a,b)")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn requirement(key: &str, op: &str, values: Option<Vec<String>>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.trim().to_string(),
        operator: op.to_string(),
        values,
    }
}

pub fn parse(query: &str) -> Result<LabelSelector> {
    let mut labels = BTreeMap::new();
    let mut exprs = Vec::new();
    for term in terms(query) {
        if let Some((k, rest)) = term.split_once(" notin ") {
            exprs.push(requirement(k, "NotIn", Some(set_values(rest, term)?)));
        } else if let Some((k, rest)) = term.split_once(" in ") {
            exprs.push(requirement(k, "In", Some(set_values(rest, term)?)));
        } else if let Some((k, v)) = term.split_once("!=") {
            exprs.push(requirement(k, "NotIn", Some(vec![v.trim().to_string()])));
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            if k.trim().is_empty() {
                return Err(Error::usage(format!("invalid selector term {term:?}")));
            }
            labels.insert(k.trim().to_string(), v.trim().to_string());
        } else if let Some(k) = term.strip_prefix('!') {
            exprs.push(requirement(k, "DoesNotExist", None));
        } else if term.contains(char::is_whitespace) || term.contains('(') {
            return Err(Error::usage(format!("invalid selector term {term:?}")));
        } else {
            exprs.push(requirement(term, "Exists", None));
        }
    }
    if labels.is_empty() && exprs.is_empty() {
        return Err(Error::usage("the function selector is empty"));
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// The selector written back as a label query, for tables.
pub fn to_query(sel: &LabelSelector) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let vals = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({vals})", e.key),
            "NotIn" => format!("{} notin ({vals})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({vals})", e.key),
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_label_queries() {
        let s = parse("function=hello, tier in (a, b),env!=prod,x,!y").unwrap();
        assert_eq!(s.match_labels.as_ref().unwrap()["function"], "hello");
        let e = s.match_expressions.as_ref().unwrap();
        assert_eq!(e[0].operator, "In");
        assert_eq!(e[0].values.as_deref().unwrap(), ["a", "b"]);
        assert_eq!(e[1].operator, "NotIn");
        assert_eq!(e[2].operator, "Exists");
        assert_eq!(e[3].operator, "DoesNotExist");
        assert_eq!(
            to_query(&s),
            "function=hello,tier in (a,b),env notin (prod),x,!y"
        );
        assert!(parse("").is_err());
        assert!(parse("a in b").is_err());
    }
}
