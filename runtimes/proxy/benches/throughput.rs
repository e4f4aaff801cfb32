//! Throughput and latency of the runtime against a bare Rust HTTP server.
//!
//! `cargo bench -p kubeless-runtime --bench throughput` prints req/s, p50 and
//! p99 at 1, 16 and 64 keep-alive connections for: a bare hyper server
//! (the baseline, measured in the same run), `serve` with the built-in no-op
//! worker, and Python, Node.js, Ruby, PHP, Go and Java hello functions (Go and Java are
//! built first by the `compile` step, as their init container would). Every server is its own
//! process on a loopback port; the load generator is one thread.
//! KUBELESS_BENCH_SECONDS sets the time per point (default 3).
//!
//! Python has a second baseline: a bare uvicorn ASGI "hello world" (`benches/uvicorn_hello.py`),
//! with one uvicorn worker process and with as many as the runtime's pool grows to (the CPUs),
//! each process a single-threaded asyncio loop with uvicorn's default (pure-Python h11) parser.
//! uvicorn must be installed (`python3 -m pip install uvicorn`; `scripts/lib.sh` does it).
//!
//! Before the load, it also prints each runtime's idle memory: the proxy plus its workers
//! (one worker: the pool starts small and grows under load), as the sum of RSS and of PSS
//! (PSS splits shared pages between the processes, as a container's memory accounting counts
//! them once). After the load it prints the same with the pool grown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

const BIN: &str = env!("CARGO_BIN_EXE_kubeless-runtime");
const CONNS: [usize; 3] = [1, 16, 64];

/// Builds the command that starts a server on the given port.
type Launcher<'a> = Box<dyn Fn(u16) -> Command + 'a>;

fn main() {
    if let Ok(port) = std::env::var("KUBELESS_BENCH_ECHO_PORT") {
        echo_server(port.parse().unwrap());
        return;
    }
    require_uvicorn();
    let secs: f64 = std::env::var("KUBELESS_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let dur = Duration::from_secs_f64(secs);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");

    let build = tempfile::tempdir().unwrap();
    let go_vol = compiled(
        &fixtures.join("go"),
        &build.path().join("go"),
        "go1.19",
        "funcs",
        "Hello",
    );
    let java_vol = compiled(
        &fixtures.join("java"),
        &build.path().join("java"),
        "java17",
        "Funcs",
        "hello",
    );

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let uvicorn_n = format!("uvicorn, {cpus} workers");
    let mut targets: Vec<(&str, Launcher)> = vec![
        (
            "baseline (bare hyper)",
            Box::new(|port| {
                let mut c = Command::new(std::env::current_exe().unwrap());
                c.env("KUBELESS_BENCH_ECHO_PORT", port.to_string());
                c
            }),
        ),
        ("uvicorn, 1 worker", Box::new(|port| uvicorn(port, 1))),
        (
            uvicorn_n.as_str(),
            Box::new(move |port| uvicorn(port, cpus)),
        ),
        (
            "proxy + no-op worker",
            Box::new(|port| serve(port, "noop", "", &fixtures.join("python"))),
        ),
        (
            "python hello",
            Box::new(|port| serve(port, "auto", "python3.11", &fixtures.join("python"))),
        ),
        (
            "node hello",
            Box::new(|port| serve(port, "auto", "nodejs20", &fixtures.join("nodejs"))),
        ),
        (
            "ruby hello",
            Box::new(|port| serve(port, "auto", "ruby3.1", &fixtures.join("ruby"))),
        ),
        (
            "php hello",
            Box::new(|port| serve(port, "auto", "php8.2", &fixtures.join("php"))),
        ),
    ];
    if let Some(vol) = &go_vol {
        targets.push((
            "go hello",
            Box::new(move |port| {
                let mut c = serve(port, "auto", "go1.19", vol);
                c.env("FUNC_HANDLER", "Hello");
                c
            }),
        ));
    }
    if let Some(vol) = &java_vol {
        targets.push((
            "java hello",
            Box::new(move |port| {
                let mut c = serve(port, "auto", "java17", vol);
                c.env("MOD_NAME", "Funcs");
                c
            }),
        ));
    }
    let mut memory: Vec<(&str, Memory, Memory)> = Vec::new();
    let mut results: Vec<(&str, Vec<Point>)> = Vec::new();
    for (name, make) in &targets {
        let port = free_port();
        let mut child = make(port)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let spawned = Instant::now();
        let (points, idle, busy) = rt.block_on(async {
            wait_ready(port).await;
            // Process start to first answer: for Java this is the JVM start-up of every worker.
            println!(
                "{name:<24} ready {:.0} ms after start",
                spawned.elapsed().as_secs_f64() * 1000.0
            );
            // Let start-up garbage settle before measuring the idle pod.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let idle = Memory::of_tree(child.id());
            let _ = load(port, 16, Duration::from_millis(500)).await; // warm-up
            let mut v = Vec::new();
            for c in CONNS {
                v.push(load(port, c, dur).await);
            }
            (v, idle, Memory::of_tree(child.id()))
        });
        stop(&mut child);
        memory.push((name, idle, busy));
        for (c, p) in CONNS.iter().zip(&points) {
            println!(
                "{name:<24} conns={c:<3} {:>9.0} req/s  p50 {:>8.1} us  p99 {:>8.1} us  ({} requests, {} errors)",
                p.rps, p.p50_us, p.p99_us, p.count, p.errors
            );
        }
        results.push((name, points));
    }
    println!(
        "\nmemory (proxy + workers; idle = before any load, loaded = after the 64-connection run):"
    );
    for (name, idle, busy) in &memory {
        println!(
            "{name:<24} idle: {} procs, RSS {:>6.1} MB, PSS {:>6.1} MB | loaded: {} procs, RSS {:>6.1} MB, PSS {:>6.1} MB",
            idle.procs, idle.rss_mb, idle.pss_mb, busy.procs, busy.rss_mb, busy.pss_mb
        );
    }
    let base = &results[0].1;
    println!("\nratios vs baseline (req/s share; p50 multiple):");
    for (name, points) in &results[1..] {
        println!("{name:<24} {}", ratios(points, base));
    }
    let row = |want: &str| results.iter().find(|(n, _)| *n == want).map(|(_, p)| p);
    if let Some(py) = row("python hello") {
        println!("\npython hello vs bare uvicorn (req/s share; p50 multiple):");
        for base in ["uvicorn, 1 worker", uvicorn_n.as_str()] {
            let Some(b) = row(base) else { continue };
            println!("vs {base:<21} {}", ratios(py, b));
        }
    }
}

/// Per connection count: the req/s share of `base` and the p50 multiple of it.
fn ratios(points: &[Point], base: &[Point]) -> String {
    let cells: Vec<String> = CONNS
        .iter()
        .zip(points.iter().zip(base))
        .map(|(c, (p, b))| {
            format!(
                "c{c}: {:.1}% req/s, p50 x{:.2}",
                100.0 * p.rps / b.rps,
                p.p50_us / b.p50_us
            )
        })
        .collect();
    cells.join(" | ")
}

/// Fails the bench with how to get uvicorn when it is missing.
fn require_uvicorn() {
    let ok = Command::new("python3")
        .args(["-c", "import uvicorn"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the uvicorn baseline needs uvicorn: `python3 -m pip install uvicorn` \
         (scripts/lib.sh ensure_tools installs it)"
    );
}

/// A bare uvicorn serving `benches/uvicorn_hello.py`: the uvicorn command line for one worker
/// process; for more, the script's own launcher (one SO_REUSEPORT socket per process, as
/// `uvicorn --workers` loses TCP_NODELAY; see the script).
fn uvicorn(port: u16, workers: usize) -> Command {
    let benches = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    let mut c = Command::new("python3");
    if workers == 1 {
        c.args(["-m", "uvicorn", "--app-dir"])
            .arg(&benches)
            .args(["uvicorn_hello:app", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .args(["--log-level", "warning", "--no-access-log"]);
    } else {
        c.arg(benches.join("uvicorn_hello.py"))
            .arg(port.to_string())
            .arg(workers.to_string());
    }
    c
}

/// Copies a fixture folder and runs `compile` in it; None (with a note) if the toolchain is missing.
fn compiled(
    from: &Path,
    vol: &Path,
    runtime: &str,
    module: &str,
    handler: &str,
) -> Option<std::path::PathBuf> {
    std::fs::create_dir_all(vol).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), vol.join(entry.file_name())).unwrap();
    }
    let runtimes = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let start = Instant::now();
    let out = Command::new(BIN)
        .arg("compile")
        .env("FUNC_RUNTIME", runtime)
        .env("KUBELESS_INSTALL_VOLUME", vol)
        .env("MOD_NAME", module)
        .env("FUNC_HANDLER", handler)
        .env(
            "GOCACHE",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubeless-gocache"),
        )
        .env("KUBELESS_GO_RUNTIME_DIR", runtimes.join("go/kubeless"))
        .env("KUBELESS_JAVA_RUNTIME_DIR", runtimes.join("java/src"))
        .output()
        .unwrap();
    if !out.status.success() {
        println!(
            "{runtime}: skipped, compile failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    println!(
        "{runtime}: compile step took {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Some(vol.to_path_buf())
}

fn serve(port: u16, worker: &str, runtime: &str, dir: &Path) -> Command {
    let runtimes = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut c = Command::new(BIN);
    c.arg("serve")
        .env("FUNC_PORT", port.to_string())
        .env("KUBELESS_LISTEN_ADDRESS", "127.0.0.1")
        .env("FUNC_HANDLER", "hello")
        .env("MOD_NAME", "funcs")
        .env("FUNC_TIMEOUT", "30")
        .env("FUNC_RUNTIME", runtime)
        .env("KUBELESS_WORKER", worker)
        .env("KUBELESS_INSTALL_VOLUME", dir)
        .env(
            "KUBELESS_PYTHON_WORKER",
            runtimes.join("python/kubeless_worker.py"),
        )
        .env(
            "KUBELESS_NODEJS_WORKER",
            runtimes.join("nodejs/kubeless_worker.js"),
        )
        .env(
            "KUBELESS_RUBY_WORKER",
            runtimes.join("ruby/kubeless_worker.rb"),
        )
        .env(
            "KUBELESS_PHP_WORKER",
            runtimes.join("php/kubeless_worker.php"),
        )
        .env("RUST_LOG", "warn");
    c
}

/// Memory of a process and its direct children.
struct Memory {
    procs: usize,
    rss_mb: f64,
    pss_mb: f64,
}

impl Memory {
    fn of_tree(root: u32) -> Memory {
        let mut pids = vec![root];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(root) {
                pids.push(pid);
            }
        }
        let kb = |pid: u32, file: &str, key: &str| -> f64 {
            std::fs::read_to_string(format!("/proc/{pid}/{file}"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix(key))
                        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
                })
                .unwrap_or(0.0)
        };
        Memory {
            procs: pids.len(),
            rss_mb: pids.iter().map(|p| kb(*p, "status", "VmRSS:")).sum::<f64>() / 1024.0,
            pss_mb: pids
                .iter()
                .map(|p| kb(*p, "smaps_rollup", "Pss:"))
                .sum::<f64>()
                / 1024.0,
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn stop(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

async fn wait_ready(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut s) = connect(port).await
            && let Ok(r) = s.send_request(get(port)).await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server on port {port} not ready");
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(port: u16) -> std::io::Result<Sender> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(sender)
}

fn get(port: u16) -> Request<Empty<Bytes>> {
    Request::get("/")
        .header("host", format!("127.0.0.1:{port}"))
        .body(Empty::new())
        .unwrap()
}

struct Point {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    count: usize,
    errors: usize,
}

async fn load(port: u16, conns: usize, dur: Duration) -> Point {
    let start = Instant::now();
    let deadline = start + dur;
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(100_000);
                let mut errors = 0usize;
                let Ok(mut s) = connect(port).await else {
                    return (lat, 1);
                };
                // Bounded by time and by a request cap.
                while Instant::now() < deadline && lat.len() < 5_000_000 {
                    let t = Instant::now();
                    match s.send_request(get(port)).await {
                        Ok(r) if r.status() == 200 => {
                            let _ = r.into_body().collect().await;
                            lat.push(t.elapsed().as_nanos() as u64);
                        }
                        _ => {
                            errors += 1;
                            match connect(port).await {
                                Ok(n) => s = n,
                                Err(_) => return (lat, errors),
                            }
                        }
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        all.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |q: f64| -> f64 {
        if all.is_empty() {
            return f64::NAN;
        }
        let i = ((all.len() as f64 - 1.0) * q).round() as usize;
        all[i] as f64 / 1000.0
    };
    Point {
        rps: all.len() as f64 / elapsed,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        count: all.len(),
        errors,
    }
}

/// The baseline: a bare hyper HTTP/1 server answering "hello world", with the same runtime shape as the proxy.
fn echo_server(port: u16) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let body = if body.is_empty() {
                            Bytes::from_static(b"hello world")
                        } else {
                            body
                        };
                        Ok::<_, Infallible>(Response::new(Full::new(body)))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
}
