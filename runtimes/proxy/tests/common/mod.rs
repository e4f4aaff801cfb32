//! Shared helpers: start the real `kubeless-runtime` binary on a free loopback port.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_kubeless-runtime");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Python,
    Nodejs,
    Ruby,
    Php,
    Go,
    Java,
}

impl Lang {
    pub fn runtime(self) -> &'static str {
        match self {
            Lang::Python => "python3.11",
            Lang::Nodejs => "nodejs20",
            Lang::Ruby => "ruby3.1",
            Lang::Php => "php8.2",
            Lang::Go => "go1.19",
            Lang::Java => "java17",
        }
    }
    /// MOD_NAME of the fixture: the file name without suffix, or Java's class name.
    pub fn module(self) -> &'static str {
        match self {
            Lang::Java => "Funcs",
            _ => "funcs",
        }
    }
    /// The fixture's name for a contract case: Go functions must be exported, and `echo` is a
    /// PHP keyword.
    pub fn handler(self, case: &str) -> String {
        match self {
            Lang::Php if case == "echo" => "echo_body".to_owned(),
            Lang::Go => {
                let mut c = case.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            }
            _ => case.to_owned(),
        }
    }
    /// The install volume to serve `handler` from: the fixture folder, or for compiled
    /// runtimes a copy of it that `compile` has built (cached per handler for this test run).
    pub fn volume(self, handler: &str) -> PathBuf {
        match self {
            Lang::Python | Lang::Nodejs | Lang::Ruby | Lang::Php => self.fixtures(),
            Lang::Go | Lang::Java => compiled_fixture(self, handler),
        }
    }
    pub fn fixtures(self) -> PathBuf {
        let dir = match self {
            Lang::Python => "python",
            Lang::Nodejs => "nodejs",
            Lang::Ruby => "ruby",
            Lang::Php => "php",
            Lang::Go => "go",
            Lang::Java => "java",
        };
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(dir)
    }
    pub fn fixture_file(self) -> &'static str {
        match self {
            Lang::Python => "funcs.py",
            Lang::Nodejs => "funcs.js",
            Lang::Ruby => "funcs.rb",
            Lang::Php => "funcs.php",
            Lang::Go => "funcs.go",
            Lang::Java => "Funcs.java",
        }
    }
}

/// Shared tool caches for compile steps in tests, kept across runs so builds stay fast.
pub fn compile_env(cmd: &mut Command) {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    cmd.env("GOCACHE", tmp.join("kubeless-gocache"))
        .env(
            "KUBELESS_GO_RUNTIME_DIR",
            runtimes_dir().join("go/kubeless"),
        )
        .env("KUBELESS_JAVA_RUNTIME_DIR", runtimes_dir().join("java/src"));
}

/// `kubeless-runtime compile` for `lang` in `vol`.
pub fn compile(lang: Lang, vol: &Path, handler: &str) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("compile")
        .env("FUNC_RUNTIME", lang.runtime())
        .env("KUBELESS_INSTALL_VOLUME", vol)
        .env("MOD_NAME", lang.module())
        .env("FUNC_HANDLER", handler);
    compile_env(&mut cmd);
    cmd.output().unwrap()
}

/// Copy the fixture folder of `lang` into a fresh folder.
pub fn fixture_copy(lang: Lang, dest: &Path) {
    std::fs::create_dir_all(dest).unwrap();
    for entry in std::fs::read_dir(lang.fixtures()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dest.join(entry.file_name())).unwrap();
        }
    }
}

fn compiled_fixture(lang: Lang, handler: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    // Java picks the method at run time, so one build serves every handler.
    let key = match lang {
        Lang::Java => "java".to_owned(),
        _ => format!("{lang:?}-{handler}"),
    };
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&key) {
        return p.clone();
    }
    // One folder per test binary, rebuilt on each run, so runs do not pile up builds.
    let exe = std::env::current_exe().unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("compiled-fixtures")
        .join(exe.file_stem().unwrap())
        .join(&key);
    let _ = std::fs::remove_dir_all(&dir);
    fixture_copy(lang, &dir);
    let out = compile(lang, &dir, handler);
    if !out.status.success() {
        panic!(
            "compile {lang:?} {handler} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    built.insert(key, dir.clone());
    dir
}

/// Fails with how to get the language when its interpreter is not on PATH.
pub fn require_interpreter(lang: Lang) {
    let (cmd, how) = match lang {
        Lang::Python => ("python3", "apt-get install python3"),
        Lang::Nodejs => ("node", "apt-get install nodejs npm"),
        Lang::Ruby => ("ruby", "apt-get install ruby ruby-bundler"),
        Lang::Php => ("php", "apt-get install php-cli composer"),
        Lang::Go => ("go", "apt-get install golang"),
        Lang::Java => ("javac", "apt-get install openjdk-17-jdk-headless maven"),
    };
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{cmd}` is not on PATH: {how} (scripts/lib.sh ensure_tools installs it)"
    );
}

pub fn runtimes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `kubeless-runtime serve`; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Runtime {
    child: Child,
    pub base: String,
    pub logs: tempfile::TempDir,
}

pub struct Opts<'a> {
    pub handler: &'a str,
    pub workers: usize,
    pub timeout: &'a str,
    pub volume: Option<PathBuf>,
    pub env: Vec<(&'a str, String)>,
}

impl Default for Opts<'_> {
    fn default() -> Self {
        Opts {
            handler: "hello",
            workers: 2,
            timeout: "30",
            volume: None,
            env: vec![],
        }
    }
}

pub fn serve_command(lang: Lang, opts: &Opts, port: u16) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .env("FUNC_PORT", port.to_string())
        .env("KUBELESS_LISTEN_ADDRESS", "127.0.0.1")
        .env("FUNC_HANDLER", lang.handler(opts.handler))
        .env("MOD_NAME", lang.module())
        .env("FUNC_TIMEOUT", opts.timeout)
        .env("FUNC_RUNTIME", lang.runtime())
        .env("FUNC_MEMORY_LIMIT", "128Mi")
        .env(
            "KUBELESS_INSTALL_VOLUME",
            opts.volume
                .clone()
                .unwrap_or_else(|| lang.volume(&lang.handler(opts.handler))),
        )
        .env(
            "KUBELESS_PYTHON_WORKER",
            runtimes_dir().join("python/kubeless_worker.py"),
        )
        .env(
            "KUBELESS_NODEJS_WORKER",
            runtimes_dir().join("nodejs/kubeless_worker.js"),
        )
        .env(
            "KUBELESS_RUBY_WORKER",
            runtimes_dir().join("ruby/kubeless_worker.rb"),
        )
        .env(
            "KUBELESS_PHP_WORKER",
            runtimes_dir().join("php/kubeless_worker.php"),
        );
    // 0: leave the pool size to the runtime's own sizing rule.
    if opts.workers > 0 {
        cmd.env("KUBELESS_WORKERS", opts.workers.to_string());
    }
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    cmd
}

impl Runtime {
    /// [`Runtime::start`] with the default options and `handler`.
    pub async fn serving(lang: Lang, handler: &str) -> Runtime {
        Runtime::start(
            lang,
            Opts {
                handler,
                ..Opts::default()
            },
        )
        .await
    }

    pub async fn start(lang: Lang, opts: Opts<'_>) -> Runtime {
        require_interpreter(lang);
        let port = free_port();
        let logs = tempfile::tempdir().unwrap();
        let mut cmd = serve_command(lang, &opts, port);
        cmd.stdout(std::fs::File::create(logs.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(logs.path().join("stderr")).unwrap());
        let child = cmd.spawn().unwrap();
        let mut rt = Runtime {
            child,
            base: format!("http://127.0.0.1:{port}"),
            logs,
        };
        rt.wait_ready().await;
        rt
    }

    async fn wait_ready(&mut self) {
        let client = client();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("runtime exited early ({status}): {}", self.stderr());
            }
            if let Ok(r) = client.get(format!("{}/healthz", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("runtime not ready after 30 s: {}", self.stderr());
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("stderr")).unwrap_or_default()
    }
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("stdout")).unwrap_or_default()
    }
    /// PIDs of the runtime's direct children (its workers).
    pub fn worker_pids(&self) -> Vec<u32> {
        child_pids(self.child.id())
    }
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POSTs `body` to `url` and returns the answer's text (the fixtures' `pid` handler answers
/// with the worker's process id, which is how tests tell whether a worker was replaced).
pub async fn post_text(c: &reqwest::Client, url: &str, body: &'static str) -> String {
    c.post(url)
        .body(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Value of one sample line in a Prometheus text exposition.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

/// An in-process OTLP/HTTP receiver: collects the ExportTraceServiceRequest bodies posted to it.
pub async fn otlp_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<bytes::Bytes>>>) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let sink = sink.clone();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let sink = sink.clone();
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            if path == "/v1/traces" {
                                sink.lock().unwrap().push(body);
                            }
                            let mut r =
                                http::Response::new(http_body_util::Full::new(bytes::Bytes::new()));
                            r.headers_mut()
                                .insert("content-type", "application/x-protobuf".parse().unwrap());
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, got)
}

/// Every span in the bodies `otlp_receiver` got so far, with its resource's `service.name`.
pub fn exported_spans(
    got: &std::sync::Mutex<Vec<bytes::Bytes>>,
) -> Vec<(String, opentelemetry_proto::tonic::trace::v1::Span)> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    use prost::Message;
    let bodies: Vec<bytes::Bytes> = got.lock().unwrap().clone();
    let mut out = Vec::new();
    for body in bodies {
        let req = ExportTraceServiceRequest::decode(body).unwrap();
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    out.push((service.clone(), span));
                }
            }
        }
    }
    out
}

/// PIDs of `parent`'s live direct children.
pub fn child_pids(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        if f.next().and_then(|p| p.parse::<u32>().ok()) == Some(parent) && state != "Z" {
            out.push(pid);
        }
    }
    out
}
