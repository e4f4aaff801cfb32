//! The fault suite's events and bookkeeping (issue 20): which events the function fails and
//! how, and the counts every case prints and checks: lost, duplicated, out of order within a
//! key, dead-lettered.
//!
//! Every event is a small JSON body `{"id":N,"key":"kK"}`; its fate follows from its id, so a
//! redelivered event gets the same treatment and the counts need no shared state with the
//! trigger.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use std::path::{Path, PathBuf};

use kubeless_testkit::{Received, RecordingFunction, Reply, ServiceProcess, TestCluster, signal};
use nix::sys::signal::Signal;

/// Events per case.
pub const EVENTS: usize = 20_000;
/// Distinct keys; an event's key is `k{id % KEYS}`.
pub const KEYS: usize = 16;
/// `retry.maxAttempts` of every trigger in the suite.
pub const MAX_ATTEMPTS: u32 = 3;
/// The Function's `spec.timeout` in seconds (what the triggers give a call).
pub const FUNCTION_TIMEOUT_SECS: u64 = 1;

/// What the function does with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// 200 at once.
    Ok,
    /// 500 on the first attempt, 200 after.
    FailsOnce,
    /// No answer within the timeout on the first attempt, 200 after.
    HangsOnce,
    /// 500 every time: dead-lettered after `MAX_ATTEMPTS`.
    Poison,
}

pub fn fate(id: usize) -> Fate {
    if id % 997 == 13 {
        Fate::Poison
    } else if id % 1999 == 11 {
        Fate::HangsOnce
    } else if id % 101 == 7 {
        Fate::FailsOnce
    } else {
        Fate::Ok
    }
}

pub fn key(id: usize) -> String {
    format!("k{}", id % KEYS)
}

pub fn body(id: usize) -> String {
    format!("{{\"id\":{id},\"key\":\"{}\"}}", key(id))
}

/// The id in an event body written by [`body`] (`None` for anything else). Read by hand: the
/// suite looks at every call many times.
pub fn id_of(body: &[u8]) -> Option<usize> {
    let rest = body.strip_prefix(b"{\"id\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b',') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The recording function's answer to an event.
pub fn reply(body: &[u8], attempt: u32) -> Reply {
    let Some(id) = id_of(body) else {
        return Reply::status(400);
    };
    match (fate(id), attempt) {
        (Fate::Ok, _) => Reply::OK,
        (Fate::Poison, _) => Reply::status(500),
        (Fate::FailsOnce, 1) => Reply::status(500),
        (Fate::HangsOnce, 1) => Reply::Hang(Duration::from_secs(FUNCTION_TIMEOUT_SECS * 3)),
        (_, _) => Reply::OK,
    }
}

/// Ids that must reach the function with a 200 in the end.
pub fn deliverable() -> usize {
    (0..EVENTS).filter(|&i| fate(i) != Fate::Poison).count()
}

/// Ids that must end in the dead letters.
pub fn poison() -> BTreeSet<usize> {
    (0..EVENTS).filter(|&i| fate(i) == Fate::Poison).collect()
}

/// Distinct ids answered 200 so far, read incrementally from the recording function.
pub struct Progress<'a> {
    function: &'a RecordingFunction,
    seen: usize,
    ok: BTreeSet<usize>,
}

impl<'a> Progress<'a> {
    pub fn new(function: &'a RecordingFunction) -> Self {
        Self {
            function,
            seen: 0,
            ok: BTreeSet::new(),
        }
    }

    pub fn delivered(&mut self) -> usize {
        let (seen, ok) = (&mut self.seen, &mut self.ok);
        self.function.with_received(|all| {
            for r in &all[*seen..] {
                if r.status == 200
                    && let Some(id) = id_of(&r.body)
                {
                    ok.insert(id);
                }
            }
            *seen = all.len();
        });
        self.ok.len()
    }
}

/// The broker fault of a case.
pub trait BrokerFault {
    /// Freezes or restarts the broker, and returns once it serves again.
    fn hit(&mut self) -> impl Future<Output = ()>;
}

/// A broker that keeps its data in memory (tansu, moto): frozen with SIGSTOP for `for_`, then
/// resumed, which stands in for a restart that would wipe it.
pub struct Freeze {
    pub pid: u32,
    pub for_: Duration,
}

impl BrokerFault for Freeze {
    async fn hit(&mut self) {
        signal(self.pid, Signal::SIGSTOP);
        tokio::time::sleep(self.for_).await;
        signal(self.pid, Signal::SIGCONT);
    }
}

/// The trigger binary under test: started, SIGKILLed and started again, each run logging to
/// `<dir>/<bin>-<run>.log`.
pub struct Trigger {
    bin: &'static str,
    dir: PathBuf,
    env: Vec<(&'static str, String)>,
    process: Option<ServiceProcess>,
    runs: usize,
}

impl Trigger {
    /// Starts `bin` against `cluster` (its kubeconfig, a free admin port, info logs) with the
    /// case's own `env` besides.
    pub fn start(
        bin: &'static str,
        cluster: &TestCluster,
        env: Vec<(&'static str, String)>,
    ) -> Self {
        let mut all = vec![
            ("KUBECONFIG", cluster.kubeconfig()),
            ("KUBELESS_ADMIN_ADDR", "127.0.0.1:0".to_string()),
            ("KUBELESS_LOG_LEVEL", "info".to_string()),
        ];
        all.extend(env);
        let mut t = Self {
            bin,
            dir: cluster.dir.path().to_path_buf(),
            env: all,
            process: None,
            runs: 0,
        };
        t.start_next();
        t
    }

    fn start_next(&mut self) {
        self.runs += 1;
        let name = format!("{}-{}", self.bin, self.runs);
        self.process = Some(ServiceProcess::start(self.bin, &self.dir, &name, &self.env));
    }

    /// SIGKILL (no drain, no commit, no goodbye to the broker), then a new process.
    pub fn kill_and_restart(&mut self) {
        if let Some(p) = self.process.take() {
            p.kill();
        }
        self.start_next();
    }

    /// Whether the current process is still running.
    pub fn running(&mut self) -> bool {
        self.process.as_mut().is_some_and(ServiceProcess::running)
    }
}

/// Runs the fault schedule for `seed` while the events flow, then waits (up to `timeout` after
/// the last fault) until every deliverable event got a 200. Prints a line per fault.
pub async fn run_schedule(
    case: &str,
    function: &RecordingFunction,
    trigger: &mut Trigger,
    broker: &mut impl BrokerFault,
    seed: u64,
    timeout: Duration,
) -> Result<Duration, String> {
    let start = Instant::now();
    let want = deliverable();
    let mut progress = Progress::new(function);
    kubeless_testkit::report!("{case}: seed {seed} (FAULT_SEED={seed} repeats this schedule)");
    for (at, fault) in schedule(seed) {
        let threshold = (want as f64 * at) as usize;
        let deadline = Instant::now() + timeout;
        while progress.delivered() < threshold {
            if Instant::now() > deadline {
                return Err(format!(
                    "{case}: stuck at {} of {want} delivered before the {fault:?} fault at {:.0}%",
                    progress.delivered(),
                    at * 100.0
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let now = progress.delivered();
        kubeless_testkit::report!(
            "{case}: {:>6.1} s {now:>6} of {want} delivered: {fault:?}",
            start.elapsed().as_secs_f64()
        );
        match fault {
            Fault::KillTrigger => trigger.kill_and_restart(),
            Fault::Broker => broker.hit().await,
        }
    }
    let deadline = Instant::now() + timeout;
    while progress.delivered() < want {
        if Instant::now() > deadline {
            return Err(format!(
                "{case}: {} of {want} delivered {} s after the last fault",
                progress.delivered(),
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = start.elapsed();
    kubeless_testkit::report!(
        "{case}: all {want} deliverable events answered 200 after {:.1} s",
        took.as_secs_f64()
    );
    Ok(took)
}

/// What a case ends with.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Function calls, all attempts.
    pub calls: usize,
    /// Distinct events answered 200.
    pub delivered: usize,
    /// Events neither answered 200 nor dead-lettered.
    pub lost: usize,
    /// 200 answers beyond the first for an event (redeliveries after a crash or a freeze).
    pub duplicated: usize,
    /// Events whose first 200 came before the first 200 of an earlier event of the same key.
    pub out_of_order: usize,
    /// Distinct events in the dead-letter destination.
    pub dead_lettered: usize,
    /// Dead-letter entries beyond the first for an event.
    pub dead_letter_duplicates: usize,
    /// Dead-lettered events that were not poison, or poison events that were not dead-lettered.
    pub dead_letter_mismatch: usize,
    /// Poison events that reached a 200 (cannot happen unless the function is wrong).
    pub poison_delivered: usize,
}

impl Counts {
    /// Counts from everything the function received and the ids read back from the dead-letter
    /// destination (one per entry, duplicates included).
    pub fn from(received: &[Received], dead_letters: &[usize]) -> Self {
        let poison = poison();
        let mut first_ok: BTreeMap<usize, usize> = BTreeMap::new();
        let mut oks = 0;
        for (n, r) in received.iter().enumerate() {
            if r.status != 200 {
                continue;
            }
            let Some(id) = id_of(&r.body) else { continue };
            oks += 1;
            first_ok.entry(id).or_insert(n);
        }
        let dl: BTreeSet<usize> = dead_letters.iter().copied().collect();
        let lost = (0..EVENTS)
            .filter(|id| !first_ok.contains_key(id) && !dl.contains(id))
            .count();
        // Per key, the ids in the order of their first 200 must be increasing.
        let mut by_key: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
        for (&id, &n) in &first_ok {
            by_key.entry(id % KEYS).or_default().push((n, id));
        }
        let mut out_of_order = 0;
        for seq in by_key.values_mut() {
            seq.sort_unstable();
            let mut highest = None;
            for &(_, id) in seq.iter() {
                match highest {
                    Some(h) if id < h => out_of_order += 1,
                    _ => highest = Some(id),
                }
            }
        }
        Self {
            calls: received.len(),
            delivered: first_ok.len(),
            lost,
            duplicated: oks - first_ok.len(),
            out_of_order,
            dead_lettered: dl.len(),
            dead_letter_duplicates: dead_letters.len() - dl.len(),
            dead_letter_mismatch: dl.symmetric_difference(&poison).count(),
            poison_delivered: poison.iter().filter(|id| first_ok.contains_key(id)).count(),
        }
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "events {EVENTS} | calls {} | delivered {} | lost {} | duplicated {} | out of order {} | \
             dead-lettered {} (expected {}, mismatched {}, duplicate entries {})",
            self.calls,
            self.delivered,
            self.lost,
            self.duplicated,
            self.out_of_order,
            self.dead_lettered,
            poison().len(),
            self.dead_letter_mismatch,
            self.dead_letter_duplicates,
        )
    }
}

/// Reads the dead letters with `read` (one id per entry) until all poison events are there, or
/// 30 s have passed: a dead letter is written before its event is acknowledged, so the last
/// ones may still be on their way when the last 200 came.
pub async fn dead_letters<F, Fut>(mut read: F) -> Vec<usize>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<usize>>,
{
    let want = poison();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ids = read().await;
        let complete = want.iter().all(|id| ids.contains(id));
        if complete || Instant::now() > deadline {
            return ids;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A whole case once the events wait and the trigger runs: the fault schedule, the dead letters
/// read back with `read_dead_letters`, the counts printed and checked (see [`check`]).
#[allow(clippy::too_many_arguments)]
pub async fn run_case<F, Fut>(
    case: &str,
    function: &RecordingFunction,
    trigger: &mut Trigger,
    broker: &mut impl BrokerFault,
    timeout: Duration,
    ordered: bool,
    cluster: &TestCluster,
    read_dead_letters: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<usize>>,
{
    let run = run_schedule(case, function, trigger, broker, seed(), timeout).await;
    let dead_letters = dead_letters(read_dead_letters).await;
    let counts = function.with_received(|all| Counts::from(all, &dead_letters));
    check(
        case,
        run,
        &counts,
        trigger.running(),
        ordered,
        cluster.dir.path(),
    );
}

/// Prints the counts and checks them: nothing lost, exactly the poison events dead-lettered,
/// the trigger still running and, where the trigger promises it (`ordered`), order kept
/// within each key.
pub fn check(
    case: &str,
    run: Result<Duration, String>,
    counts: &Counts,
    trigger_running: bool,
    ordered: bool,
    logs: &Path,
) {
    kubeless_testkit::report!("{case}: {counts}");
    let logs = logs.display();
    if let Err(e) = run {
        panic!("{e}; logs in {logs}");
    }
    assert!(
        trigger_running,
        "{case}: the last trigger process exited; logs in {logs}"
    );
    assert_eq!(counts.lost, 0, "{case}: events lost: {counts}");
    if ordered {
        assert_eq!(
            counts.out_of_order, 0,
            "{case}: order within a key broken: {counts}"
        );
    }
    assert_eq!(
        counts.dead_letter_mismatch, 0,
        "{case}: dead letters: {counts}"
    );
    assert_eq!(counts.poison_delivered, 0, "{case}: {counts}");
}

/// When the faults come, as fractions of the deliverable events delivered: three SIGKILLs of
/// the trigger and one broker fault, in a random order drawn from `seed` (printed by the cases
/// so a failing run can be repeated with `FAULT_SEED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    KillTrigger,
    Broker,
}

pub fn schedule(seed: u64) -> Vec<(f64, Fault)> {
    // A small xorshift keeps the schedule reproducible without a dependency.
    let mut s = seed.max(1);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % 10_000) as f64 / 10_000.0
    };
    let broker_slot = (next() * 4.0) as usize % 4;
    (0..4)
        .map(|slot| {
            // Four windows across 10%..85% of the stream, one fault in each.
            let at = 0.10 + slot as f64 * 0.19 + next() * 0.12;
            let fault = if slot == broker_slot {
                Fault::Broker
            } else {
                Fault::KillTrigger
            };
            (at, fault)
        })
        .collect()
}

/// The seed: `FAULT_SEED` if set, else the clock.
pub fn seed() -> u64 {
    std::env::var("FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fates_are_mixed_and_poison_is_rare() {
        let poison = poison().len();
        assert!((10..=30).contains(&poison), "{poison}");
        assert!((0..EVENTS).any(|i| fate(i) == Fate::HangsOnce));
        assert!((0..EVENTS).any(|i| fate(i) == Fate::FailsOnce));
        assert_eq!(id_of(body(42).as_bytes()), Some(42));
    }

    #[test]
    fn schedule_has_three_kills_and_one_broker_fault_in_order() {
        for seed in [1, 7, 12345, u64::MAX] {
            let s = schedule(seed);
            assert_eq!(s.len(), 4);
            assert_eq!(s.iter().filter(|f| f.1 == Fault::Broker).count(), 1);
            assert!(s.windows(2).all(|w| w[0].0 < w[1].0), "{s:?}");
            assert!(s.iter().all(|f| f.0 > 0.05 && f.0 < 0.9), "{s:?}");
        }
    }

    fn rec(id: usize, status: u16) -> Received {
        Received {
            headers: Default::default(),
            body: body(id).into(),
            at: std::time::Instant::now(),
            status,
            attempt: 1,
        }
    }

    #[test]
    fn counts_find_loss_duplicates_and_disorder() {
        // Key 0: ids 0, 16, 32; 32 first then 16 → one out of order; 0 twice → one duplicate.
        let got = vec![
            rec(0, 200),
            rec(32, 200),
            rec(16, 200),
            rec(0, 200),
            rec(48, 500),
        ];
        let c = Counts::from(&got, &[13, 13]);
        assert_eq!(c.delivered, 4 - 1);
        assert_eq!(c.duplicated, 1);
        assert_eq!(c.out_of_order, 1);
        assert_eq!(c.dead_lettered, 1);
        assert_eq!(c.dead_letter_duplicates, 1);
        assert_eq!(c.lost, EVENTS - 3 - 1);
        assert_eq!(c.dead_letter_mismatch, poison().len() - 1);
    }
}
