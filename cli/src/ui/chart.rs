//! Charts of a function's calls, errors and p50/p99 latency, from its runtime's /metrics scraped
//! over time: each scrape is a [`Sample`] of the counters; charts show the change between
//! consecutive samples, drawn as inline SVG (no script needed to display them).

use std::fmt::Write;

use super::html::esc;
use crate::metrics;

/// Samples kept per function (at one scrape every 2 s: the last 4 minutes).
pub const MAX_SAMPLES: usize = 120;

/// The counters of one scrape, summed over HTTP methods.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds since the dashboard started.
    pub at: f64,
    pub calls: f64,
    pub failures: f64,
    /// Cumulative `function_duration_seconds` buckets: `(le, count)`, `+Inf` last.
    pub buckets: Vec<(f64, f64)>,
}

impl Sample {
    pub fn from_metrics(at: f64, text: &str) -> Self {
        let stats = metrics::parse(text);
        Self {
            at,
            calls: stats.values().map(|s| s.calls).sum(),
            failures: stats.values().map(|s| s.failures).sum(),
            buckets: metrics::duration_buckets(text),
        }
    }
}

/// What happened between two samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub at: f64,
    pub calls: f64,
    pub errors: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A counter's increase; a smaller value means the pod restarted and counts from zero again.
fn increase(before: f64, now: f64) -> f64 {
    if now >= before { now - before } else { now }
}

/// The points between consecutive samples.
pub fn points(samples: &[Sample]) -> Vec<Point> {
    samples
        .windows(2)
        .map(|w| {
            let (a, b) = (&w[0], &w[1]);
            let reset = b.calls < a.calls;
            let buckets: Vec<(f64, f64)> = if reset || a.buckets.len() != b.buckets.len() {
                b.buckets.clone()
            } else {
                a.buckets
                    .iter()
                    .zip(&b.buckets)
                    .map(|(x, y)| (y.0, increase(x.1, y.1)))
                    .collect()
            };
            Point {
                at: b.at,
                calls: increase(a.calls, b.calls),
                errors: if reset {
                    b.failures
                } else {
                    increase(a.failures, b.failures)
                },
                p50_ms: quantile(0.5, &buckets).map(|s| s * 1000.0),
                p99_ms: quantile(0.99, &buckets).map(|s| s * 1000.0),
            }
        })
        .collect()
}

/// The `q` quantile of cumulative buckets, interpolated linearly inside the bucket it falls in
/// (as Prometheus's `histogram_quantile` does). None without observations.
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = count - below;
            if inside <= 0.0 {
                return Some(le);
            }
            return Some(lower + (le - lower) * (rank - below) / inside);
        }
        lower = le;
        below = count;
    }
    Some(lower)
}

const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 120.0;
const PAD: f64 = 24.0;

fn fmt_ms(v: Option<f64>) -> String {
    match v {
        Some(ms) if ms < 10.0 => format!("{ms:.2} ms"),
        Some(ms) => format!("{ms:.0} ms"),
        None => "n/a".into(),
    }
}

/// One bar chart (`values` per point) as an SVG with a title and a text alternative.
fn bars(id: &str, title: &str, values: &[f64], class: &str) -> String {
    let max = values.iter().copied().fold(0.0_f64, f64::max).max(1.0);
    let n = values.len().max(1) as f64;
    let step = (WIDTH - PAD) / n;
    let mut svg = String::new();
    // `+ 0.0`: an empty f64 sum is -0.0, shown as "-0".
    let total: f64 = values.iter().sum::<f64>() + 0.0;
    let _ = write!(
        svg,
        r#"<svg id="{id}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="{id}-title"><title id="{id}-title">{} ({} in the window, at most {} per interval)</title>"#,
        esc(title),
        total,
        max
    );
    axes(&mut svg, &format!("{max}"));
    for (i, v) in values.iter().enumerate() {
        let h = (HEIGHT - PAD) * v / max;
        let _ = write!(
            svg,
            r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{v}</title></rect>"#,
            PAD + i as f64 * step + 1.0,
            HEIGHT - PAD - h,
            (step - 2.0).max(1.0),
            h
        );
    }
    svg.push_str("</svg>");
    svg
}

fn axes(svg: &mut String, top_label: &str) {
    let _ = write!(
        svg,
        r#"<line class="axis" x1="{PAD}" y1="0" x2="{PAD}" y2="{y}"/><line class="axis" x1="{PAD}" y1="{y}" x2="{WIDTH}" y2="{y}"/><text class="tick" x="2" y="12">{}</text><text class="tick" x="2" y="{y}">0</text>"#,
        esc(top_label),
        y = HEIGHT - PAD
    );
}

/// Lines for p50 and p99 latency.
fn latency(points: &[Point]) -> String {
    let max = points
        .iter()
        .filter_map(|p| p.p99_ms.or(p.p50_ms))
        .fold(0.0_f64, f64::max)
        .max(1.0)
        // Headroom, so the highest line is not drawn on the top edge.
        * 1.2;
    let n = points.len().max(1) as f64;
    let step = (WIDTH - PAD) / n;
    let line = |pick: fn(&Point) -> Option<f64>| -> String {
        points
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                pick(p).map(|v| {
                    format!(
                        "{:.1},{:.1}",
                        PAD + i as f64 * step + step / 2.0,
                        HEIGHT - PAD - (HEIGHT - PAD) * v / max
                    )
                })
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let last = points.iter().rev().find(|p| p.p50_ms.is_some());
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg id="chart-latency" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="chart-latency-title"><title id="chart-latency-title">Latency: latest p50 {}, p99 {}</title>"#,
        fmt_ms(last.and_then(|p| p.p50_ms)),
        fmt_ms(last.and_then(|p| p.p99_ms)),
    );
    axes(&mut svg, &fmt_ms(Some(max)));
    for (class, pick) in [
        ("p50", (|p: &Point| p.p50_ms) as fn(&Point) -> Option<f64>),
        ("p99", |p: &Point| p.p99_ms),
    ] {
        let pts = line(pick);
        if !pts.is_empty() {
            let _ = write!(
                svg,
                r#"<polyline class="{class}" fill="none" points="{pts}"/>"#
            );
            // A dot per point: a single interval with calls has no line to draw.
            for xy in pts.split(' ') {
                if let Some((x, y)) = xy.split_once(',') {
                    let _ = write!(svg, r#"<circle class="{class}" cx="{x}" cy="{y}" r="3"/>"#);
                }
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The charts section: calls, errors and latency, with a one-line summary a reader (and a test)
/// can check: the totals of the window and the latest percentiles.
pub fn render(samples: &[Sample], scrape_error: Option<&str>) -> String {
    let pts = points(samples);
    let calls: Vec<f64> = pts.iter().map(|p| p.calls).collect();
    let errors: Vec<f64> = pts.iter().map(|p| p.errors).collect();
    let total_calls: f64 = calls.iter().sum::<f64>() + 0.0;
    let total_errors: f64 = errors.iter().sum::<f64>() + 0.0;
    let window = match (samples.first(), samples.last()) {
        (Some(a), Some(b)) => b.at - a.at,
        _ => 0.0,
    };
    let last = pts.iter().rev().find(|p| p.p50_ms.is_some());
    let mut out = String::new();
    if let Some(e) = scrape_error {
        let _ = write!(
            out,
            r#"<p class="notice" role="status">Metrics not available yet: {}</p>"#,
            esc(e)
        );
    }
    let _ = write!(
        out,
        r#"<p id="chart-summary" data-samples="{}" data-calls="{total_calls}" data-errors="{total_errors}" data-p50="{}" data-p99="{}">{total_calls} calls, {total_errors} errors in the last {window:.0} s; latest p50 {}, p99 {}.</p>"#,
        samples.len(),
        last.and_then(|p| p.p50_ms)
            .map(|v| format!("{v:.3}"))
            .unwrap_or_default(),
        last.and_then(|p| p.p99_ms)
            .map(|v| format!("{v:.3}"))
            .unwrap_or_default(),
        fmt_ms(last.and_then(|p| p.p50_ms)),
        fmt_ms(last.and_then(|p| p.p99_ms)),
    );
    out.push_str(r#"<div class="charts">"#);
    let _ = write!(
        out,
        r#"<figure><figcaption>Calls per interval</figcaption>{}</figure>"#,
        bars("chart-calls", "Calls", &calls, "calls")
    );
    let _ = write!(
        out,
        r#"<figure><figcaption>Errors per interval</figcaption>{}</figure>"#,
        bars("chart-errors", "Errors", &errors, "errors")
    );
    let _ = write!(
        out,
        r#"<figure><figcaption>Latency: <span class="key-p50">p50</span> and <span class="key-p99">p99</span></figcaption>{}</figure>"#,
        latency(&pts)
    );
    out.push_str("</div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: f64, calls: f64, failures: f64, buckets: &[(f64, f64)]) -> Sample {
        Sample {
            at,
            calls,
            failures,
            buckets: buckets.to_vec(),
        }
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        // 10 observations: 4 under 10 ms, 6 between 10 and 100 ms.
        let b = [(0.01, 4.0), (0.1, 10.0), (f64::INFINITY, 10.0)];
        let p50 = quantile(0.5, &b).unwrap();
        assert!((p50 - 0.025).abs() < 1e-9, "{p50}");
        let p99 = quantile(0.99, &b).unwrap();
        assert!((p99 - 0.0985).abs() < 1e-9, "{p99}");
        assert_eq!(quantile(0.5, &[(0.01, 0.0), (f64::INFINITY, 0.0)]), None);
        // Everything above the last finite bucket: its bound is the best answer.
        assert_eq!(
            quantile(0.5, &[(0.01, 0.0), (f64::INFINITY, 3.0)]),
            Some(0.01)
        );
    }

    #[test]
    fn points_are_increases_and_survive_restarts() {
        let s = [
            sample(0.0, 5.0, 1.0, &[(0.01, 5.0), (f64::INFINITY, 5.0)]),
            sample(2.0, 8.0, 2.0, &[(0.01, 6.0), (f64::INFINITY, 8.0)]),
            // The pod restarted: counters start again from zero.
            sample(4.0, 2.0, 0.0, &[(0.01, 2.0), (f64::INFINITY, 2.0)]),
        ];
        let p = points(&s);
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].calls, p[0].errors), (3.0, 1.0));
        // 1 of 3 under 10 ms, 2 above: p50 is the last finite bound.
        assert_eq!(p[0].p50_ms, Some(10.0));
        assert_eq!((p[1].calls, p[1].errors), (2.0, 0.0));
        assert!(p[1].p99_ms.unwrap() <= 10.0);
    }

    #[test]
    fn sample_from_runtime_metrics() {
        let text = "function_calls_total{method=\"GET\"} 2\nfunction_calls_total{method=\"POST\"} 1\nfunction_failures_total{method=\"POST\"} 1\nfunction_duration_seconds_bucket{le=\"0.005\",method=\"GET\"} 2\nfunction_duration_seconds_bucket{le=\"+Inf\",method=\"GET\"} 2\n";
        let s = Sample::from_metrics(1.0, text);
        assert_eq!((s.calls, s.failures), (3.0, 1.0));
        assert_eq!(s.buckets, vec![(0.005, 2.0), (f64::INFINITY, 2.0)]);
    }

    #[test]
    fn rendered_summary_and_accessible_svgs() {
        let s = [
            sample(0.0, 0.0, 0.0, &[(0.01, 0.0), (f64::INFINITY, 0.0)]),
            sample(2.0, 3.0, 1.0, &[(0.01, 3.0), (f64::INFINITY, 3.0)]),
        ];
        let html = render(&s, None);
        assert!(html.contains(r#"data-calls="3""#), "{html}");
        assert!(html.contains(r#"data-errors="1""#), "{html}");
        assert!(html.contains("3 calls, 1 errors in the last 2 s"), "{html}");
        assert_eq!(html.matches("role=\"img\"").count(), 3);
        assert_eq!(html.matches("<rect class=\"calls\"").count(), 1);
        assert!(html.contains("<polyline class=\"p50\""));
        let empty = render(&[], Some("no pod <yet>"));
        assert!(empty.contains("no pod &lt;yet&gt;"));
        assert!(empty.contains(r#"data-calls="0""#));
    }
}
