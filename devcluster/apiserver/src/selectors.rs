//! Label and field selectors as the list and watch query parameters spell them.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_set(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{s}', expected: '(' ... ')'"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let req = if let Some(key) = term.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                LabelReq::NotEq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = term.split_once("==") {
                LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = term.split_once('=') {
                LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some(idx) = term.find(" notin ") {
                LabelReq::NotIn(term[..idx].trim().to_string(), parse_set(&term[idx + 7..])?)
            } else if let Some(idx) = term.find(" in ") {
                LabelReq::In(term[..idx].trim().to_string(), parse_set(&term[idx + 4..])?)
            } else if term.contains(' ') || term.contains('(') {
                return Err(format!("unable to parse requirement: {term}"));
            } else {
                LabelReq::Exists(term.to_string())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Parses a structured metav1.LabelSelector (matchLabels, matchExpressions).
    pub fn from_label_selector(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::Eq(
                    k.clone(),
                    v.as_str().unwrap_or_default().to_string(),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str) {
                    Some("In") => reqs.push(LabelReq::In(key, values)),
                    Some("NotIn") => reqs.push(LabelReq::NotIn(key, values)),
                    Some("Exists") => reqs.push(LabelReq::Exists(key)),
                    Some("DoesNotExist") => reqs.push(LabelReq::NotExists(key)),
                    _ => {}
                }
            }
        }
        Self(reqs)
    }

    /// The string form, as a Scale's status.selector carries it.
    pub fn to_query(&self) -> String {
        self.0
            .iter()
            .map(|r| match r {
                LabelReq::Eq(k, v) => format!("{k}={v}"),
                LabelReq::NotEq(k, v) => format!("{k}!={v}"),
                LabelReq::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                LabelReq::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                LabelReq::Exists(k) => k.clone(),
                LabelReq::NotExists(k) => format!("!{k}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Field selector: `path=value`, `path==value`, `path!=value`, comma separated.
/// Any dotted path into the object works (the real server allows a fixed set
/// per kind; metadata.name and metadata.namespace work everywhere).
/// Each term: the label as written, the paths it reads (the first non-empty value counts),
/// the value, and whether it must equal (`=`) or differ (`!=`).
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, Vec<Vec<String>>, String, bool)>);

fn dotted(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for term in split_terms(s) {
            let (k, v, eq) = if let Some((k, v)) = term.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, v, true)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, v, true)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            let label = k.trim().to_string();
            out.push((
                label.clone(),
                vec![dotted(&label)],
                v.trim().to_string(),
                eq,
            ));
        }
        Ok(Self(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Rewrites each label to the paths it reads in the stored object, or refuses it (the real
    /// server's `field label not supported: X`) when `map` gives None.
    pub fn map_labels(
        self,
        map: impl Fn(&str) -> Option<Vec<&'static str>>,
    ) -> Result<Self, String> {
        self.0
            .into_iter()
            .map(|(label, _, want, eq)| match map(&label) {
                Some(paths) => {
                    let paths = paths.into_iter().map(dotted).collect();
                    Ok((label, paths, want, eq))
                }
                None => Err(format!("field label not supported: {label}")),
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(_, paths, want, eq)| {
            let actual = paths
                .iter()
                .map(|path| {
                    let mut cur = Some(obj);
                    for p in path {
                        cur = cur.and_then(|c| c.get(p));
                    }
                    match cur {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Null) | None => String::new(),
                        Some(other) => other.to_string(),
                    }
                })
                .find(|v| !v.is_empty())
                .unwrap_or_default();
            (actual == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_operators() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let yes = [
            "app=web",
            "app==web",
            "app!=db",
            "app in (web, db)",
            "app notin (db)",
            "app",
            "!missing",
            "app=web,tier in (front)",
            "missing notin (x)",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web,x)",
            "missing",
            "!app",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_selectors() {
        let obj =
            json!({"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("metadata.name=a,metadata.namespace==ns")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.name!=b")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("status.phase=Pending")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("name").is_err());
    }

    #[test]
    fn mapped_field_labels_read_the_first_non_empty_path() {
        let map = |l: &str| match l {
            "source" => Some(vec!["source.component", "reportingComponent"]),
            "regarding.name" => Some(vec!["involvedObject.name"]),
            _ => None,
        };
        let reported = json!({"source": {}, "reportingComponent": "ctl",
            "involvedObject": {"name": "p"}});
        let sel = FieldSelector::parse("source=ctl,regarding.name=p")
            .unwrap()
            .map_labels(map)
            .unwrap();
        assert!(sel.matches(&reported));
        let kubelet = json!({"source": {"component": "kubelet"}, "reportingComponent": "ctl"});
        let sel = FieldSelector::parse("source=kubelet")
            .unwrap()
            .map_labels(map)
            .unwrap();
        assert!(sel.matches(&kubelet));
        assert_eq!(
            FieldSelector::parse("message=x")
                .unwrap()
                .map_labels(map)
                .unwrap_err(),
            "field label not supported: message"
        );
    }

    #[test]
    fn structured_selector_round_trip() {
        let sel = LabelSelector::from_label_selector(&json!({"matchLabels": {"app": "x"},
            "matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]}));
        assert_eq!(sel.to_query(), "app=x,t in (a,b)");
        let again = LabelSelector::parse(&sel.to_query()).unwrap();
        assert!(again.matches(&json!({"metadata": {"labels": {"app": "x", "t": "b"}}})));
    }
}
