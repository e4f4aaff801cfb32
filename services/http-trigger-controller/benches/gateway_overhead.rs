//! Gateway overhead: a function called directly and through the built-in gateway, in the same
//! run, with the same load: N keep-alive HTTP/1.1 connections, each sending requests back to
//! back for a bounded time. For each function, connection count and round it loads three paths
//! back to back (their order rotates between rounds): direct, through the gateway, and through a
//! route with scale to zero on (the function running and ready: the per-request activity
//! bookkeeping on top of the gateway path; its activity records cannot write, there is no
//! cluster, so the throttled annotation write, once per interval, is not part of it). It prints
//! every round, then the medians: p50, req/s, the ratios to direct of the same round, and the
//! CPU time the bench process spent per call.
//!
//! Functions:
//! - a Rust echo server in this process: it costs almost nothing, so what is left is the
//!   gateway's own cost, with nothing to hide it;
//! - `kubeless-runtime serve` with the noop worker (the real function proxy and worker hop,
//!   with a function that does nothing), when the release build exists;
//! - `kubeless-runtime serve` with the Python worker and with the Node.js worker, each with a
//!   hello-world function (what a user's function costs at least), when the release build and
//!   `python3` or `node` exist.
//!
//! Where each part runs (`GW_BENCH_LAYOUT`, with `taskset`):
//! - `function-core` (the default on a machine with two or more CPUs): the function runtimes
//!   on CPU 0 alone, the bench process (load generator, echo server, gateway) on CPU 1. The
//!   function has a core of its own, as a function pod has CPU of its own in a cluster, and
//!   both paths send it requests from the other core. The runtime rows then show what going
//!   through the gateway costs the function's throughput. Issue 22's goals are judged in this
//!   layout. The echo server runs in the bench process, so its rows still show the gateway's
//!   own cost on one core.
//! - `shared`: nothing pinned. The load generator, the gateway and the function share the
//!   cores, so a call through the gateway costs them what a direct call costs plus the
//!   gateway's own CPU time: the throughput ratio is about (client + function) / (client +
//!   function + gateway) CPU per call (the CPU ratio column).
//! - `gateway-core`: the load generator, the echo server and the runtimes on CPU 0, the
//!   gateway on a runtime of its own on CPU 1. Direct calls then come from the function's own
//!   core, in bursts it serves together, which no client in a cluster does.
//!
//! Issue 22's goals (scale to zero on: at least 90% of direct throughput at 16 and 64
//! connections, at most +0.1 ms p50 at 1 connection) are checked against the real function
//! runtimes; the echo rows are printed beside them, measured the same way.
//!
//! `cargo bench -p http-trigger-controller --bench gateway_overhead [-- <connections,...>
//! <seconds> <rounds>]` (default `1,16,64 2 3`). `GW_BENCH_ONLY=echo|noop|python|node` loads one
//! function only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use http_trigger_controller::gateway::Gateway;
use http_trigger_controller::gateway::routes::{Route, RouteTable};
use http_trigger_controller::gateway::secrets::SecretStore;
use http_trigger_controller::gateway::wake::Wake;
use http_trigger_controller::metrics::GatewayMetrics;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kubeless_api::scale::{SCALED_TO_ZERO, reasons};
use kubeless_api::{Condition, Function, FunctionStatus};
use kubeless_invoke::{Endpoint, FunctionTarget, StaticResolver};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const BODY: &[u8] = b"{\"hello\":\"world\"}";

async fn echo_server(token: CancellationToken) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                _ = token.cancelled() => return,
                a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(BODY))))
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

struct Stats {
    p50: Duration,
    p99: Duration,
    rps: f64,
    errors: usize,
}

/// `conns` keep-alive HTTP/1.1 connections, each sending requests back to back for `secs`.
/// A connection whose call fails stops there (counted in `errors`).
async fn load(
    addr: SocketAddr,
    host: &str,
    path: &str,
    conns: usize,
    secs: f64,
    expect: Option<&'static [u8]>,
) -> Stats {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (host, path) = (host.to_string(), path.to_string());
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut lat = Vec::with_capacity(65536);
            let mut errors = 0usize;
            while Instant::now() < deadline {
                let req = hyper::Request::get(&path)
                    .header("host", &host)
                    .body(Empty::<Bytes>::new())
                    .unwrap();
                let t = Instant::now();
                match sender.send_request(req).await {
                    Ok(resp) if resp.status().is_success() => {
                        let body = resp.into_body().collect().await.unwrap().to_bytes();
                        if let Some(e) = expect {
                            assert_eq!(&body[..], e);
                        }
                        lat.push(t.elapsed());
                    }
                    _ => {
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.unwrap();
        all.extend(lat);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Stats {
        p50: pct(0.50),
        p99: pct(0.99),
        rps: all.len() as f64 / elapsed,
        errors,
    }
}

/// CPU time (user + system) process `pid` has used so far, all its threads. `/proc/<pid>/stat`
/// counts in USER_HZ, which Linux fixes at 100 per second.
fn cpu_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    // After the command: state is field 3, utime and stime are fields 14 and 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU time of process `root` and its direct children (a runtime and its workers).
fn cpu_of_tree(root: u32) -> Option<Duration> {
    let mut total = cpu_of(&root.to_string())?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name();
        let Some(pid) = pid
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(root) {
            total += cpu_of(pid).unwrap_or_default();
        }
    }
    Some(total)
}

/// One load run, and the CPU time spent per call meanwhile by this process (load generator,
/// gateway, echo server) and by the function's processes when it has its own.
struct Run {
    stats: Stats,
    cpu_per_call: Option<Duration>,
    fn_cpu_per_call: Option<Duration>,
}

async fn measured(
    (addr, host, path): (SocketAddr, &str, &str),
    conns: usize,
    secs: f64,
    f: &Upstream,
) -> Run {
    let fn_cpu = || f.pid.and_then(cpu_of_tree);
    let before = (cpu_of("self"), fn_cpu());
    let started = Instant::now();
    let stats = load(addr, host, path, conns, secs, f.expect).await;
    let calls = stats.rps * started.elapsed().as_secs_f64();
    let per_call = |b: Option<Duration>, a: Option<Duration>| match (b, a) {
        (Some(b), Some(a)) if calls >= 1.0 => Some(a.saturating_sub(b).div_f64(calls)),
        _ => None,
    };
    Run {
        cpu_per_call: per_call(before.0, cpu_of("self")),
        fn_cpu_per_call: per_call(before.1, fn_cpu()),
        stats,
    }
}

/// The three ways a function is called.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Direct,
    Gateway,
    GatewayStz,
}

const PATHS: [Via; 3] = [Via::Direct, Via::Gateway, Via::GatewayStz];

impl Via {
    fn label(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Gateway => "gateway",
            Via::GatewayStz => "gw+stz",
        }
    }
}

/// A function to call: its own address and its route's name on the gateway.
struct Upstream {
    title: &'static str,
    addr: SocketAddr,
    name: &'static str,
    expect: Option<&'static [u8]>,
    /// The function's own process (a runtime), for its CPU time; `None` in this process.
    pid: Option<u32>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What one function gave at one connection count: per path, the runs of every round.
struct Summary {
    conns: usize,
    runs: Vec<[Run; 3]>,
}

impl Summary {
    fn med(&self, path: usize, f: impl Fn(&Run) -> Option<f64>) -> f64 {
        median(self.runs.iter().filter_map(|r| f(&r[path])).collect())
    }

    /// Median over rounds of the per-round ratio of `path`'s req/s to direct's.
    fn throughput_ratio(&self, path: usize) -> f64 {
        median(
            self.runs
                .iter()
                .map(|r| r[path].stats.rps / r[0].stats.rps)
                .collect(),
        )
    }

    /// CPU time per call of the client, the function and, on `path`, the gateway (µs).
    fn cpu_total(&self, path: usize) -> f64 {
        let bench = self.med(path, |r| r.cpu_per_call.map(us));
        let function = self.med(path, |r| r.fn_cpu_per_call.map(us));
        bench + if function.is_nan() { 0.0 } else { function }
    }

    /// The gateway's own CPU time per call: what this process spent beyond direct calls.
    fn gateway_cpu(&self, path: usize) -> f64 {
        self.med(path, |r| r.cpu_per_call.map(us)) - self.med(0, |r| r.cpu_per_call.map(us))
    }

    /// The throughput ratio that CPU time alone gives, when the cores are the limit and only
    /// this bench runs on them: direct calls' CPU per call over the gateway path's.
    fn cpu_ratio(&self, path: usize) -> f64 {
        self.cpu_total(0) / self.cpu_total(path)
    }

    /// Median over rounds of the per-round p50 difference to direct, in µs.
    fn p50_added(&self, path: usize) -> f64 {
        median(
            self.runs
                .iter()
                .map(|r| us(r[path].stats.p50) - us(r[0].stats.p50))
                .collect(),
        )
    }
}

/// Loads `f` directly and through the gateway at `gw_addr`, `rounds` times at `conns`.
async fn compare(
    gw_addr: SocketAddr,
    f: &Upstream,
    conns: usize,
    secs: f64,
    rounds: usize,
) -> Summary {
    let routes = [format!("/{}", f.name), format!("/{}-stz", f.name)];
    let target = |p: Via| match p {
        Via::Direct => (f.addr, "fn", "/"),
        Via::Gateway => (gw_addr, "fn.example.com", routes[0].as_str()),
        Via::GatewayStz => (gw_addr, "fn.example.com", routes[1].as_str()),
    };
    // Warm every path (connection pools, allocator, the workers) before measuring.
    for p in PATHS {
        let (addr, host, path) = target(p);
        load(addr, host, path, conns, 0.3, f.expect).await;
    }
    let mut runs = Vec::new();
    for round in 0..rounds {
        let mut got: [Option<Run>; 3] = [None, None, None];
        // Rotate the order so that no path always runs first (or last) after a pause.
        for k in 0..3 {
            let i = (round + k) % 3;
            got[i] = Some(measured(target(PATHS[i]), conns, secs, f).await);
        }
        let [Some(d), Some(g), Some(z)] = got else {
            unreachable!("every path ran")
        };
        let cell = |r: &Run| {
            format!(
                "{:>7.1} µs {:>7.0}/s{}",
                us(r.stats.p50),
                r.stats.rps,
                if r.stats.errors > 0 { " ERR" } else { "" }
            )
        };
        println!(
            "  {conns:>3} conns, round {}: direct {} | gateway {} ({:>3.0}%) | gw+stz {} ({:>3.0}%)",
            round + 1,
            cell(&d),
            cell(&g),
            100.0 * g.stats.rps / d.stats.rps,
            cell(&z),
            100.0 * z.stats.rps / d.stats.rps,
        );
        runs.push([d, g, z]);
    }
    Summary { conns, runs }
}

fn print_summaries(f: &Upstream, sums: &[Summary], goal: bool, layout: Layout) {
    println!("  medians of the rounds ({}):", f.title);
    println!(
        "  conns | path    |   p50 µs | p50 vs direct |   p99 µs |    req/s | of direct \
         | CPU/call: bench | function | gateway | CPU ratio"
    );
    for s in sums {
        for (i, p) in PATHS.iter().enumerate() {
            let bench = s.med(i, |r| r.cpu_per_call.map(us));
            let function = s.med(i, |r| r.fn_cpu_per_call.map(us));
            let (added, ratio, gateway, cpu_ratio) = match p {
                Via::Direct => Default::default(),
                _ => (
                    format!("{:+.1} µs", s.p50_added(i)),
                    format!("{:.0}%", 100.0 * s.throughput_ratio(i)),
                    format!("{:.1} µs", s.gateway_cpu(i)),
                    format!("{:.0}%", 100.0 * s.cpu_ratio(i)),
                ),
            };
            println!(
                "  {:>5} | {:<7} | {:>8.1} | {:>13} | {:>8.1} | {:>8} | {:>9} \
                 | {:>12.1} µs | {:>8} | {:>7} | {:>9}",
                s.conns,
                p.label(),
                s.med(i, |r| Some(us(r.stats.p50))),
                added,
                s.med(i, |r| Some(us(r.stats.p99))),
                format!("{:.0}", s.med(i, |r| Some(r.stats.rps))),
                ratio,
                bench,
                if function.is_nan() {
                    "-".to_string()
                } else {
                    format!("{function:.1} µs")
                },
                gateway,
                cpu_ratio,
            );
        }
    }
    let errors: usize = sums
        .iter()
        .flat_map(|s| s.runs.iter().flatten())
        .map(|r| r.stats.errors)
        .sum();
    if errors > 0 {
        println!("  ERRORS: {errors} failed calls (their connections stopped early)");
    }
    let stz = 2;
    let at = |c: usize| sums.iter().find(|s| s.conns == c);
    let mut verdicts = Vec::new();
    for c in [16, 64] {
        if let Some(s) = at(c) {
            let r = 100.0 * s.throughput_ratio(stz);
            // In the function-core layout the bench process has CPU 1 to itself: how busy the
            // load generator and the gateway kept it tells which core limited the path.
            let busy = s.med(stz, |r| {
                r.cpu_per_call.map(|c| c.as_secs_f64() * r.stats.rps)
            });
            let limit = if layout == Layout::FunctionCore && busy >= 0.9 {
                format!(
                    "; CPU 1 {:.0}% busy: the load generator and the gateway's core was the \
                     limit, not the function's",
                    100.0 * busy
                )
            } else {
                String::new()
            };
            verdicts.push(format!(
                "{c} conns {r:.0}% of direct ({}; by CPU time {:.0}%{limit})",
                if r >= 90.0 { "met" } else { "not met" },
                100.0 * s.cpu_ratio(stz)
            ));
        }
    }
    if let Some(s) = at(1) {
        let a = s.p50_added(stz);
        verdicts.push(format!(
            "1 conn p50 {a:+.1} µs ({})",
            if a <= 100.0 { "met" } else { "not met" }
        ));
    }
    if !verdicts.is_empty() {
        let whose = if goal {
            "issue 22 goal"
        } else {
            "issue 22 goal, for comparison only (not what it is judged on)"
        };
        println!(
            "  {whose}, layout {}, scale to zero on (>= 90% at 16 and 64 conns, <= +100 µs p50 \
             at 1): {}",
            layout.name(),
            verdicts.join("; ")
        );
    }
}

/// A Function with scale to zero on, running with a ready replica, as its status says.
fn running_function(name: &str) -> Function {
    let mut f = Function::new(name, Default::default());
    f.metadata.namespace = Some("default".into());
    f.status = Some(FunctionStatus {
        ready_replicas: Some(1),
        conditions: vec![Condition::new(SCALED_TO_ZERO, false, reasons::ACTIVE, "")],
        ..Default::default()
    });
    f
}

fn route(name: &str) -> Route {
    Route {
        namespace: "default".into(),
        trigger: name.into(),
        host: Some("fn.example.com".into()),
        prefix: format!("/{name}"),
        cors: false,
        basic_auth_secret: None,
        target: Some(FunctionTarget::new("default", name).with_timeout(Duration::from_secs(30))),
        scale_to_zero: false,
        runtime_paths: false,
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Which worker a `kubeless-runtime serve` runs.
#[derive(Clone, Copy)]
enum Worker {
    Noop,
    /// A hello-world Python function in the given install volume.
    Python,
    /// A hello-world Node.js function in the given install volume.
    Nodejs,
}

const WORKERS: [Worker; 3] = [Worker::Noop, Worker::Python, Worker::Nodejs];

impl Worker {
    /// Its route's name, and what `GW_BENCH_ONLY` picks it by.
    fn name(self) -> &'static str {
        match self {
            Worker::Noop => "noop",
            Worker::Python => "python",
            Worker::Nodejs => "node",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Worker::Noop => {
                "kubeless-runtime, noop worker: the function proxy, a function that does nothing"
            }
            Worker::Python => "kubeless-runtime, Python worker: a hello-world Python function",
            Worker::Nodejs => "kubeless-runtime, Node.js worker: a hello-world Node.js function",
        }
    }
}

/// The release kubeless-runtime serving `worker` with two workers, when it has been built
/// (and, for Python and Node.js, when `python3` or `node` runs); ready once it answered a call.
async fn start_runtime(
    worker: Worker,
    dir: &std::path::Path,
    cpu: Option<usize>,
) -> Option<(tokio::process::Child, SocketAddr)> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("kubeless-runtime");
    if !bin.exists() {
        return None;
    }
    let port = free_port();
    let mut cmd = match cpu {
        // taskset runs the runtime in its own process: the pid is the runtime's.
        Some(cpu) => {
            let mut c = tokio::process::Command::new("taskset");
            c.args(["-c", &cpu.to_string()]).arg(bin);
            c
        }
        None => tokio::process::Command::new(bin),
    };
    cmd.arg("serve")
        .env("KUBELESS_WORKERS", "2")
        .env("FUNC_PORT", port.to_string())
        .env("KUBELESS_LISTEN_ADDRESS", "127.0.0.1")
        .env("KUBELESS_INSTALL_VOLUME", dir)
        .env("KUBELESS_ACCESS_LOG", "false")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    match worker {
        Worker::Noop => {
            cmd.env("KUBELESS_WORKER", "noop");
        }
        Worker::Python | Worker::Nodejs => {
            let (kind, exe, file, source, script, env, runtime) = match worker {
                Worker::Python => (
                    "python",
                    "python3",
                    "funcs.py",
                    "def hello(event, context):\n    return \"hello world\"\n",
                    "python/kubeless_worker.py",
                    "KUBELESS_PYTHON_WORKER",
                    "python3",
                ),
                _ => (
                    "nodejs",
                    "node",
                    "funcs.js",
                    "module.exports = { hello: (event, context) => 'hello world' };\n",
                    "nodejs/kubeless_worker.js",
                    "KUBELESS_NODEJS_WORKER",
                    "nodejs20",
                ),
            };
            let ok = std::process::Command::new(exe)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            if !ok {
                return None;
            }
            std::fs::write(dir.join(file), source).ok()?;
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../runtimes")
                .join(script);
            cmd.env("KUBELESS_WORKER", kind)
                .env(env, script)
                .env("FUNC_RUNTIME", runtime)
                .env("FUNC_HANDLER", "hello")
                .env("MOD_NAME", "funcs")
                .env("FUNC_TIMEOUT", "30");
        }
    }
    let child = cmd.spawn().ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    for _ in 0..200 {
        if let Ok(stream) = TcpStream::connect(addr).await
            && let Ok((mut sender, conn)) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        {
            tokio::spawn(conn);
            let req = hyper::Request::get("/")
                .header("host", "fn")
                .body(Empty::<Bytes>::new())
                .unwrap();
            if sender
                .send_request(req)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Some((child, addr));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let conn_counts: Vec<usize> = args
        .first()
        .map(|a| a.split(',').filter_map(|c| c.parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![1, 16, 64]);
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    let layout = Layout::from_env();
    match layout {
        // Threads started from now on inherit the CPU; the runtimes are pinned when started.
        Layout::FunctionCore => pin_thread(1),
        Layout::GatewayCore => pin_thread(0),
        Layout::Shared => {}
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // The gateway's own runtime: on CPU 1 in the gateway-core layout, else the bench's.
    let gw_rt = (layout == Layout::GatewayCore).then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("gateway")
            .on_thread_start(|| pin_thread(1))
            .enable_all()
            .build()
            .unwrap()
    });
    let gw_handle = gw_rt.as_ref().map(|r| r.handle().clone());
    rt.block_on(async move {
        let token = CancellationToken::new();
        let echo = echo_server(token.clone()).await;
        let fn_cpu = (layout == Layout::FunctionCore).then_some(0);
        // Each runtime with its install volume, or the worker it could not start.
        let mut runtimes = Vec::new();
        let mut skipped = Vec::new();
        for worker in WORKERS {
            let dir = tempfile::tempdir().unwrap();
            match start_runtime(worker, dir.path(), fn_cpu).await {
                Some((child, addr)) => runtimes.push((worker, child, addr, dir)),
                None => skipped.push(worker.name()),
            }
        }

        let only = std::env::var("GW_BENCH_ONLY").ok();
        let mut functions = vec![Upstream {
            title: "Rust echo server, in this process: the gateway's own cost",
            addr: echo,
            name: "echo",
            expect: Some(BODY),
            pid: None,
        }];
        functions.extend(runtimes.iter().map(|(worker, child, addr, _)| Upstream {
            pid: child.id(),
            title: worker.title(),
            addr: *addr,
            name: worker.name(),
            expect: None,
        }));

        let mut resolver = StaticResolver::default();
        let mut routes = Vec::new();
        let wake = Wake::default();
        for f in &functions {
            let stz = format!("{}-stz", f.name);
            let ep = || vec![Endpoint::parse(&format!("http://{}/", f.addr)).unwrap()];
            resolver = resolver
                .with_function("default", f.name, ep())
                .with_function("default", &stz, ep());
            routes.push(route(f.name));
            routes.push(Route {
                scale_to_zero: true,
                runtime_paths: false,
                ..route(&stz)
            });
            wake.activity.observe(&running_function(&stz));
            assert!(wake.activity.is_ready("default", &stz));
        }
        let gw = Gateway::with_wake(
            Arc::new(resolver),
            SecretStore::fixed([]),
            GatewayMetrics::default(),
            wake,
        );
        gw.set_routes(RouteTable::from_routes(routes));
        let bind = {
            let token = token.clone();
            async move { gw.bind("127.0.0.1:0".parse().unwrap(), token).await }
        };
        let (gw_addr, server) = match &gw_handle {
            // Bound inside its runtime, so its connection tasks run there.
            Some(h) => h.spawn(bind).await.unwrap().unwrap(),
            None => bind.await.unwrap(),
        };

        println!(
            "gateway overhead: {conn_counts:?} connections, {secs} s per run, {rounds} rounds, \
             HTTP/1.1 keep-alive; layout {}: {}",
            layout.name(),
            layout.describe()
        );
        if !skipped.is_empty() {
            println!(
                "-- the kubeless-runtime rows need `cargo build --release -p kubeless-runtime` \
                 (and python3 or node for those functions); skipped: {}",
                skipped.join(", ")
            );
        }
        functions.retain(|f| only.as_deref().is_none_or(|o| o == f.name));
        let mut all = Vec::new();
        for f in &functions {
            println!("-- function: {}", f.title);
            let mut sums = Vec::new();
            for &c in &conn_counts {
                sums.push(compare(gw_addr, f, c, secs, rounds).await);
            }
            all.push(sums);
        }
        println!();
        println!("== summary (medians over rounds; ratios and differences are to direct calls of the same round)");
        for (f, sums) in functions.iter().zip(&all) {
            print_summaries(f, sums, f.name != "echo", layout);
        }
        println!(
            "  CPU/call: bench = this process (the load generator, the gateway on its rows, the \
             echo server); function = the runtime and its workers; gateway = bench beyond direct \
             calls; CPU ratio = direct calls' CPU per call over this path's, the throughput ratio \
             if the cores were the only limit and nothing else ran on them"
        );
        for (_, mut child, _, _) in runtimes {
            let _ = child.kill().await;
        }
        token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    });
    if let Some(r) = gw_rt {
        r.shutdown_timeout(Duration::from_secs(1));
    }
}

/// Where the bench's parts run (`GW_BENCH_LAYOUT`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    FunctionCore,
    Shared,
    GatewayCore,
}

impl Layout {
    fn from_env() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        match std::env::var("GW_BENCH_LAYOUT").as_deref() {
            Ok("shared") => Self::Shared,
            Ok("gateway-core") => Self::GatewayCore,
            Ok("function-core") => Self::FunctionCore,
            Ok(other) => {
                panic!("GW_BENCH_LAYOUT={other}: expected function-core, shared or gateway-core")
            }
            Err(_) if cpus >= 2 && has_taskset() => Self::FunctionCore,
            Err(_) => Self::Shared,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::FunctionCore => "function-core",
            Self::Shared => "shared",
            Self::GatewayCore => "gateway-core",
        }
    }

    fn describe(self) -> String {
        match self {
            Self::FunctionCore => "the function runtimes alone on CPU 0; load generator, echo \
                                   server and gateway on CPU 1"
                .into(),
            Self::Shared => format!(
                "load generator, gateway and functions share {} cores",
                std::thread::available_parallelism().map_or(0, |n| n.get())
            ),
            Self::GatewayCore => "load generator, echo server and function runtimes on CPU 0, \
                                  the gateway alone on CPU 1"
                .into(),
        }
    }
}

fn has_taskset() -> bool {
    std::process::Command::new("taskset")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Pins the calling thread to `cpu` with `taskset` (threads it starts inherit it).
fn pin_thread(cpu: usize) {
    let me = std::fs::read_link("/proc/thread-self").unwrap();
    let tid = me.file_name().unwrap().to_string_lossy().into_owned();
    let ok = std::process::Command::new("taskset")
        .args(["-p", "-c", &cpu.to_string(), &tid])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "taskset -p -c {cpu} {tid} failed");
}
