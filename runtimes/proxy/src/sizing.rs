//! How many workers `serve` runs: from the container's CPU limit when it has one, otherwise a
//! small pool that grows with concurrent calls up to a cap and shrinks when idle.

use std::path::Path;
use std::time::Duration;

use crate::pool::PoolSize;

/// The CPU limit of the cgroup this process runs in, in CPUs (e.g. `1.5`), or `None` when
/// unlimited or unknown. Reads cgroup v2 `cpu.max` (the process's own cgroup under `root`, then
/// `root` itself, which is the container's cgroup under a cgroup namespace), then cgroup v1
/// `cpu.cfs_quota_us` / `cpu.cfs_period_us`.
pub fn cgroup_cpu_limit(root: &Path) -> Option<f64> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_owned()))
        })
        .unwrap_or_default();
    let mut v2 = Vec::new();
    let own = own.trim_start_matches('/');
    if !own.is_empty() {
        v2.push(root.join(own).join("cpu.max"));
    }
    v2.push(root.join("cpu.max"));
    for file in v2 {
        if let Ok(text) = std::fs::read_to_string(&file) {
            return parse_cpu_max(&text);
        }
    }
    for dir in ["cpu", "cpu,cpuacct"] {
        let quota = std::fs::read_to_string(root.join(dir).join("cpu.cfs_quota_us"));
        let period = std::fs::read_to_string(root.join(dir).join("cpu.cfs_period_us"));
        if let (Ok(q), Ok(p)) = (quota, period) {
            return parse_v1(&q, &p);
        }
    }
    None
}

/// `cpu.max` is `<quota> <period>` or `max <period>`.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut it = text.split_whitespace();
    let quota = it.next()?;
    let period: f64 = it.next().unwrap_or("100000").parse().ok()?;
    if quota == "max" || period <= 0.0 {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0).then_some(quota / period)
}

fn parse_v1(quota: &str, period: &str) -> Option<f64> {
    let quota: f64 = quota.trim().parse().ok()?;
    let period: f64 = period.trim().parse().ok()?;
    (quota > 0.0 && period > 0.0).then_some(quota / period)
}

/// The inputs of the sizing rule, from `serve`'s flags.
#[derive(Debug, Clone, Copy)]
pub struct SizingInput {
    /// `KUBELESS_WORKERS`: a fixed pool of this many.
    pub workers: Option<usize>,
    /// `KUBELESS_MIN_WORKERS`.
    pub min_workers: Option<usize>,
    /// `KUBELESS_MAX_WORKERS`.
    pub max_workers: Option<usize>,
    /// `KUBELESS_WORKER_IDLE_TIMEOUT`.
    pub idle_timeout: Duration,
    /// The cgroup CPU limit, if any.
    pub cpu_limit: Option<f64>,
    /// CPUs the process may run on.
    pub cpus: usize,
}

/// The rule, in order:
/// 1. `KUBELESS_WORKERS` set: exactly that many.
/// 2. A CPU limit: up to `ceil(limit)` workers, all started up front unless
///    `KUBELESS_MIN_WORKERS` says fewer.
/// 3. Otherwise start `KUBELESS_MIN_WORKERS` (default 1) and grow with concurrent calls up to
///    `KUBELESS_MAX_WORKERS` (default: the CPUs the process may use).
pub fn pool_size(i: SizingInput) -> PoolSize {
    if let Some(n) = i.workers {
        return PoolSize::fixed(n);
    }
    let (min, max) = match i.cpu_limit {
        Some(limit) => {
            // Float to int: limits are small positive numbers, clamped before the cast.
            let cap = i
                .max_workers
                .unwrap_or(limit.ceil().clamp(1.0, 4096.0) as usize);
            (i.min_workers.unwrap_or(cap), cap)
        }
        None => (i.min_workers.unwrap_or(1), i.max_workers.unwrap_or(i.cpus)),
    };
    let max = max.max(1);
    PoolSize {
        min: min.clamp(1, max),
        max,
        idle_timeout: i.idle_timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> SizingInput {
        SizingInput {
            workers: None,
            min_workers: None,
            max_workers: None,
            idle_timeout: Duration::from_secs(60),
            cpu_limit: None,
            cpus: 64,
        }
    }

    #[test]
    fn cpu_max_parsing() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("50000 100000"), Some(0.5));
        assert_eq!(parse_cpu_max("garbage"), None);
        assert_eq!(parse_v1("-1\n", "100000\n"), None);
        assert_eq!(parse_v1("200000\n", "100000\n"), Some(2.0));
    }

    #[test]
    fn limit_files_are_found_under_the_root() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_cpu_limit(root.path()), None);
        std::fs::create_dir(root.path().join("cpu")).unwrap();
        std::fs::write(root.path().join("cpu/cpu.cfs_quota_us"), "300000\n").unwrap();
        std::fs::write(root.path().join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(cgroup_cpu_limit(root.path()), Some(3.0));
        // v2 wins over v1.
        std::fs::write(root.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(cgroup_cpu_limit(root.path()), None);
    }

    #[test]
    fn no_limit_starts_small_and_caps_at_the_cpus() {
        let s = pool_size(input());
        assert_eq!((s.min, s.max), (1, 64));
        let s = pool_size(SizingInput {
            min_workers: Some(2),
            max_workers: Some(8),
            ..input()
        });
        assert_eq!((s.min, s.max), (2, 8));
    }

    #[test]
    fn a_cpu_limit_sizes_the_pool() {
        let s = pool_size(SizingInput {
            cpu_limit: Some(2.5),
            ..input()
        });
        assert_eq!((s.min, s.max), (3, 3));
        let s = pool_size(SizingInput {
            cpu_limit: Some(0.2),
            ..input()
        });
        assert_eq!((s.min, s.max), (1, 1));
        let s = pool_size(SizingInput {
            cpu_limit: Some(4.0),
            min_workers: Some(1),
            ..input()
        });
        assert_eq!((s.min, s.max), (1, 4));
    }

    #[test]
    fn fixed_workers_win() {
        let s = pool_size(SizingInput {
            workers: Some(5),
            cpu_limit: Some(1.0),
            ..input()
        });
        assert_eq!((s.min, s.max), (5, 5));
    }
}
