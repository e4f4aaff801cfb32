//! What metrics-server and a Prometheus adapter tell the HPA controller on a real cluster,
//! measured here directly: a pod's CPU from `/proc` (utime + stime of every process of its
//! containers: the container's process, its descendants and its process group), and a
//! counter read from the pod's Prometheus `/metrics` endpoint. Rates come from two samples.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Clock ticks per second of `/proc/*/stat` times (USER_HZ, 100 on every Linux the
/// runner supports).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process: its parent, its process group and its CPU ticks.
struct ProcStat {
    ppid: i32,
    pgrp: i32,
    ticks: u64,
}

fn read_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): ppid 4, pgrp 5, utime 14, stime 15.
    Some(ProcStat {
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        ticks: f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?,
    })
}

/// Every process of the containers whose main process ids are `roots`: each root, its
/// descendants and the members of its process group (None when no root is alive).
fn members(all: &HashMap<i32, ProcStat>, roots: &[i32]) -> Option<BTreeSet<i32>> {
    let groups: BTreeSet<i32> = roots
        .iter()
        .filter_map(|r| all.get(r).map(|s| s.pgrp))
        .collect();
    if groups.is_empty() {
        return None;
    }
    let mut members: BTreeSet<i32> = roots
        .iter()
        .copied()
        .filter(|r| all.contains_key(r))
        .collect();
    members.extend(
        all.iter()
            .filter(|(_, s)| groups.contains(&s.pgrp))
            .map(|(p, _)| *p),
    );
    // Descendants that left the group (setsid, setpgid).
    loop {
        let more: Vec<i32> = all
            .iter()
            .filter(|(p, s)| !members.contains(p) && members.contains(&s.ppid))
            .map(|(p, _)| *p)
            .collect();
        if more.is_empty() {
            break;
        }
        members.extend(more);
    }
    Some(members)
}

/// One reading of every process in `/proc`, so that measuring many containers costs
/// one scan.
pub struct ProcTable(HashMap<i32, ProcStat>);

impl ProcTable {
    pub fn read() -> Option<Self> {
        let dir = std::fs::read_dir("/proc").ok()?;
        Some(Self(
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter_map(|pid| Some((pid, read_stat(pid)?)))
                .collect(),
        ))
    }

    /// CPU seconds and resident memory of the processes of containers whose main
    /// process ids are `roots` (see [`cpu_seconds`] for which processes count).
    pub fn usage(&self, roots: &[i32]) -> Option<ProcessUsage> {
        if roots.is_empty() {
            return None;
        }
        let members = members(&self.0, roots)?;
        let ticks: u64 = members
            .iter()
            .filter_map(|p| self.0.get(p))
            .map(|s| s.ticks)
            .sum();
        Some(ProcessUsage {
            cpu_seconds: ticks as f64 / TICKS_PER_SECOND,
            memory_bytes: members.iter().filter_map(|p| rss_bytes(*p)).sum(),
        })
    }
}

/// Resident memory of a process in bytes (`VmRSS` of `/proc/PID/status`).
fn rss_bytes(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU seconds used so far by the processes of containers whose main process ids are
/// `roots`: each root, its descendants and the members of its process group.
pub fn cpu_seconds(roots: &[i32]) -> Option<f64> {
    if roots.is_empty() {
        return None;
    }
    let table = ProcTable::read()?;
    let members = members(&table.0, roots)?;
    let ticks: u64 = members
        .iter()
        .filter_map(|p| table.0.get(p))
        .map(|s| s.ticks)
        .sum();
    Some(ticks as f64 / TICKS_PER_SECOND)
}

/// What the processes of some containers use: CPU seconds so far and resident memory now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessUsage {
    pub cpu_seconds: f64,
    pub memory_bytes: u64,
}

/// A quantity in base units ("250m" -> 0.25, "2" -> 2, "1k" -> 1000).
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(s.len());
    // An exponent 'e' followed by nothing numeric is not a suffix we know; keep it simple.
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(n * mult)
}

/// A quantity as the API writes it: whole numbers plain, others in milli-units.
pub fn format_quantity(v: f64) -> String {
    let milli = (v * 1000.0).round() as i64;
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

/// The sum of the pod's containers' cpu requests, in cores (None if one has none).
pub fn cpu_request(pod: &Pod) -> Option<f64> {
    let containers = &pod.spec.as_ref()?.containers;
    let mut total = 0.0;
    for c in containers {
        let q = c.resources.as_ref()?.requests.as_ref()?.get("cpu")?;
        total += parse_quantity(&q.0)?;
    }
    Some(total)
}

/// The first declared container port of a pod: where the runtimes serve `/metrics`.
pub fn metrics_port(pod: &Pod) -> Option<u16> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.protocol.as_deref().is_none_or(|p| p == "TCP"))
        .and_then(|p| u16::try_from(p.container_port).ok())
}

/// The sum over every series of `metric` (or `metric_total`, the name a counter is exported
/// under) in a Prometheus text exposition.
pub fn counter_value(text: &str, metric: &str) -> Option<f64> {
    let total = format!("{metric}_total");
    let mut sum = None;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let name = &line[..name_end];
        if name != metric && name != total {
            continue;
        }
        let after = match line[name_end..].find('}') {
            Some(i) if line[name_end..].starts_with('{') => &line[name_end + i + 1..],
            _ => &line[name_end..],
        };
        if let Some(v) = after
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// GETs `http://{ip}:{port}/metrics` (HTTP/1.0, so the body ends with the connection).
pub async fn scrape(ip: Ipv4Addr, port: u16, timeout: Duration) -> Option<String> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
        s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {ip}:{port}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        head.split_whitespace()
            .nth(1)
            .is_some_and(|c| c == "200")
            .then(|| body.to_string())
    };
    tokio::time::timeout(timeout, fut).await.ok().flatten()
}

/// One sample of a counter (CPU seconds or calls) and when it was taken.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub at: Instant,
    pub value: f64,
}

/// Rates per key from the previous sample to the current one.
#[derive(Default)]
pub struct Rates {
    last: HashMap<String, Sample>,
}

impl Rates {
    /// Records `value` for `key` and returns its rate per second since the previous sample
    /// (None for the first one, or when the counter went back: a restarted process).
    pub fn observe(&mut self, key: &str, value: f64, at: Instant) -> Option<f64> {
        let prev = self.last.insert(key.to_string(), Sample { at, value })?;
        let dt = at.checked_duration_since(prev.at)?.as_secs_f64();
        (dt > 0.0 && value >= prev.value).then(|| (value - prev.value) / dt)
    }

    /// Forgets keys not in `keep` (deleted pods).
    pub fn retain(&mut self, keep: &BTreeSet<String>) {
        self.last.retain(|k, _| keep.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_every_series_and_accept_the_total_suffix() {
        let text = "# TYPE function_calls counter\nfunction_calls_total{method=\"GET\"} 3\nfunction_calls_total{method=\"POST\"} 2\nfunction_failures_total{method=\"POST\"} 1\n";
        assert_eq!(counter_value(text, "function_calls"), Some(5.0));
        assert_eq!(counter_value(text, "other"), None);
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("250m"), Some(0.25));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1.5"), Some(1.5));
        assert_eq!(parse_quantity("bogus"), None);
        assert_eq!(format_quantity(0.25), "250m");
        assert_eq!(format_quantity(3.0), "3");
    }

    #[test]
    fn a_busy_process_shows_cpu_time() {
        let me = i32::try_from(std::process::id()).unwrap();
        let before = cpu_seconds(&[me]).unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let after = cpu_seconds(&[me]).unwrap();
        assert!(after - before >= 0.1, "{before} -> {after}");
    }

    #[test]
    fn rates_need_two_samples_and_ignore_resets() {
        let mut r = Rates::default();
        let t0 = Instant::now();
        assert_eq!(r.observe("a", 10.0, t0), None);
        assert_eq!(
            r.observe("a", 30.0, t0 + Duration::from_secs(2)),
            Some(10.0)
        );
        assert_eq!(r.observe("a", 1.0, t0 + Duration::from_secs(3)), None);
    }
}
