//! Command line: `serve` (default), `prepare`, `install`. Every flag has an env fallback.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "kubeless-runtime",
    version,
    about = "Kubeless-compatible function runtime. Without a subcommand it runs `serve` configured from the environment."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the function over HTTP on FUNC_PORT with a pool of language workers.
    Serve(Box<ServeArgs>),
    /// Init step 1: decode/download the function, verify its checksum, unpack it and copy the deps file.
    Prepare(PrepareArgs),
    /// Init step 2: install the function's dependencies into the install volume.
    Install(InstallArgs),
    /// Init step 3 of compiled runtimes (Go, Java): build the function with its worker.
    Compile(CompileArgs),
    /// Built-in worker that answers every call with "hello world" (for benchmarks).
    #[command(hide = true)]
    NoopWorker,
}

/// Which worker implementation `serve` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkerKind {
    /// Chosen from FUNC_RUNTIME (`python*`, `nodejs*`, `ruby*` or `php*`).
    Auto,
    Python,
    Nodejs,
    Ruby,
    Php,
    /// The compiled Go worker that `compile` wrote into the install volume.
    Go,
    /// The Java worker, from the classes `compile` wrote into the install volume.
    Java,
    /// The built-in no-op worker (this binary), for measuring the proxy itself.
    Noop,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Port to listen on.
    #[arg(long, env = "FUNC_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, env = "KUBELESS_LISTEN_ADDRESS", default_value = "0.0.0.0")]
    pub listen_address: std::net::IpAddr,
    /// Function name inside the module.
    #[arg(long, env = "FUNC_HANDLER")]
    pub handler: Option<String>,
    /// Module (file name without suffix) that holds the function.
    #[arg(long = "module", env = "MOD_NAME")]
    pub module: Option<String>,
    /// Seconds a call may run before it is answered with 408 and its worker replaced.
    #[arg(long, env = "FUNC_TIMEOUT", default_value = "180")]
    pub timeout: String,
    /// Runtime id and version, e.g. `python3.11` or `nodejs20`.
    #[arg(long, env = "FUNC_RUNTIME", default_value = "")]
    pub runtime: String,
    /// Memory limit string passed to the function's context.
    #[arg(long, env = "FUNC_MEMORY_LIMIT", default_value = "")]
    pub memory_limit: String,
    /// Folder holding the function code and its installed dependencies.
    #[arg(long, env = "KUBELESS_INSTALL_VOLUME")]
    pub install_volume: Option<PathBuf>,
    /// A fixed number of worker processes (default: sized from the CPU limit, or grown on demand).
    #[arg(long, env = "KUBELESS_WORKERS")]
    pub workers: Option<usize>,
    /// Workers started up front and always kept (default: 1, or the CPU limit when there is one).
    #[arg(long, env = "KUBELESS_MIN_WORKERS")]
    pub min_workers: Option<usize>,
    /// Most workers at once (default: the CPU limit, else the CPUs the process may use).
    #[arg(long, env = "KUBELESS_MAX_WORKERS")]
    pub max_workers: Option<usize>,
    /// Seconds an idle worker above the minimum lives before it exits.
    #[arg(long, env = "KUBELESS_WORKER_IDLE_TIMEOUT", default_value_t = 60.0)]
    pub worker_idle_timeout: f64,
    /// cgroup file system root, where the CPU limit is read from.
    #[arg(long, env = "KUBELESS_CGROUP_ROOT", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// Largest reply body a worker may send, in bytes (default: the request body limit).
    #[arg(long, env = "KUBELESS_MAX_REPLY_BYTES")]
    pub max_reply_bytes: Option<usize>,
    /// Worker implementation.
    #[arg(long, env = "KUBELESS_WORKER", value_enum, default_value_t = WorkerKind::Auto)]
    pub worker: WorkerKind,
    /// Python interpreter for the Python worker.
    #[arg(long, env = "KUBELESS_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// Path of the Python worker script.
    #[arg(
        long,
        env = "KUBELESS_PYTHON_WORKER",
        default_value = "/opt/kubeless/python/kubeless_worker.py"
    )]
    pub python_worker: PathBuf,
    /// Node.js executable for the Node worker.
    #[arg(long, env = "KUBELESS_NODE", default_value = "node")]
    pub node: PathBuf,
    /// Path of the Node.js worker script.
    #[arg(
        long,
        env = "KUBELESS_NODEJS_WORKER",
        default_value = "/opt/kubeless/nodejs/kubeless_worker.js"
    )]
    pub nodejs_worker: PathBuf,
    /// Ruby interpreter for the Ruby worker.
    #[arg(long, env = "KUBELESS_RUBY", default_value = "ruby")]
    pub ruby: PathBuf,
    /// Path of the Ruby worker script.
    #[arg(
        long,
        env = "KUBELESS_RUBY_WORKER",
        default_value = "/opt/kubeless/ruby/kubeless_worker.rb"
    )]
    pub ruby_worker: PathBuf,
    /// PHP CLI executable for the PHP worker.
    #[arg(long, env = "KUBELESS_PHP", default_value = "php")]
    pub php: PathBuf,
    /// Path of the PHP worker script.
    #[arg(
        long,
        env = "KUBELESS_PHP_WORKER",
        default_value = "/opt/kubeless/php/kubeless_worker.php"
    )]
    pub php_worker: PathBuf,
    /// Java executable for the Java worker.
    #[arg(long, env = "KUBELESS_JAVA", default_value = "java")]
    pub java: PathBuf,
    /// Extra JVM options for the Java worker (split on whitespace).
    #[arg(
        long,
        env = "KUBELESS_JAVA_OPTS",
        default_value = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto -Xss512k"
    )]
    pub java_opts: String,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "KUBELESS_MAX_BODY_BYTES", default_value_t = 100 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds a worker may take to load the function.
    #[arg(long, env = "KUBELESS_WORKER_START_TIMEOUT", default_value_t = 60.0)]
    pub worker_start_timeout: f64,
    /// Folder for the worker sockets (default: a fresh temporary folder).
    #[arg(long, env = "KUBELESS_SOCKET_DIR")]
    pub socket_dir: Option<PathBuf>,
    /// Threads for the proxy's own event loop (default: available CPUs).
    #[arg(long, env = "KUBELESS_PROXY_THREADS")]
    pub proxy_threads: Option<usize>,
    /// Write one access-log line per request to stdout.
    #[arg(long, env = "KUBELESS_ACCESS_LOG", default_value_t = true, action = clap::ArgAction::Set)]
    pub access_log: bool,
    /// OTLP/HTTP base endpoint for the per-call server spans (e.g. `http://otel-collector:4318`).
    /// Empty: no spans, and the incoming trace context is passed to the function unchanged.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", default_value = "")]
    pub otlp_endpoint: String,
    /// `service.name` of the exported spans.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "kubeless-function")]
    pub otel_service_name: String,
    /// Access-log line format: `combined` (Apache/morgan combined, what Kubeless's runtimes
    /// printed) or `timed` (RFC 3339 time first and the call's duration last).
    #[arg(long, env = "KUBELESS_ACCESS_LOG_FORMAT", value_enum, default_value_t = AccessLogFormat::Combined)]
    pub access_log_format: AccessLogFormat,
    /// Warm pool mode: with this token and no handler, the runtime starts without a function
    /// and waits for the function-controller's specialize call (docs/scale-to-zero.md).
    #[arg(long, env = "KUBELESS_POOL_TOKEN", hide_env_values = true)]
    pub pool_token: Option<String>,
    /// Extra environment for the workers (the function's own variables), for callers that embed
    /// the server (`kubeless function run`); the function container sets them in its env instead.
    #[arg(skip)]
    pub worker_env: Vec<(String, String)>,
}

/// See [`ServeArgs::access_log_format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccessLogFormat {
    /// `<ip> - - [<dd/Mon/yyyy:HH:MM:SS +0000>] "<METHOD> <url> HTTP/<v>" <status> <bytes> "<referer>" "<user agent>"`
    Combined,
    /// `<RFC 3339 time> <ip> "<METHOD> <url> HTTP/<v>" <status> <bytes> <ms>ms`
    Timed,
}

#[derive(Debug, Clone, Args)]
pub struct PrepareArgs {
    /// File holding the function: its text, its base64 encoding or its URL (e.g. `<src>/handler.py`).
    #[arg(long, env = "KUBELESS_FUNC_SOURCE")]
    pub source: PathBuf,
    /// `text`, `base64` or `url`, optionally with `+zip` or `+compressedtar`, and `+deps`.
    #[arg(long, env = "KUBELESS_FUNC_CONTENT_TYPE", default_value = "text")]
    pub content_type: String,
    /// `sha256:<hex>` of the decoded or downloaded content; empty skips the check.
    #[arg(long, env = "KUBELESS_FUNC_CHECKSUM", default_value = "")]
    pub checksum: String,
    /// Destination folder (the install volume).
    #[arg(long, env = "KUBELESS_INSTALL_VOLUME")]
    pub dest: PathBuf,
    /// Dependency file to copy into the destination (skipped if absent or with `+deps`).
    #[arg(long, env = "KUBELESS_DEPS_FILE")]
    pub deps: Option<PathBuf>,
    /// File name for single-file content (default: the source's file name).
    #[arg(long, env = "KUBELESS_FUNC_FILE_NAME")]
    pub file_name: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    /// Runtime id and version, e.g. `python3.11` or `nodejs20`.
    #[arg(long, env = "FUNC_RUNTIME")]
    pub runtime: String,
    /// Dependency file (`requirements.txt`, `package.json`, `Gemfile` or `composer.json`); absent or empty means nothing to do.
    #[arg(long, env = "KUBELESS_DEPS_FILE")]
    pub deps: PathBuf,
    /// Install volume to install into.
    #[arg(long, env = "KUBELESS_INSTALL_VOLUME")]
    pub dir: PathBuf,
    /// Python interpreter (default: `python<version>` when on PATH, else `python3`).
    #[arg(long, env = "KUBELESS_PYTHON")]
    pub python: Option<PathBuf>,
    /// npm executable.
    #[arg(long, env = "KUBELESS_NPM", default_value = "npm")]
    pub npm: PathBuf,
    /// Bundler executable (Ruby).
    #[arg(long, env = "KUBELESS_BUNDLE", default_value = "bundle")]
    pub bundle: PathBuf,
    /// Composer executable (PHP).
    #[arg(long, env = "KUBELESS_COMPOSER", default_value = "composer")]
    pub composer: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct CompileArgs {
    /// Runtime id and version, e.g. `go1.19` or `java17`.
    #[arg(long, env = "FUNC_RUNTIME")]
    pub runtime: String,
    /// Install volume holding the prepared function; the build output goes there too.
    #[arg(long, env = "KUBELESS_INSTALL_VOLUME")]
    pub dir: PathBuf,
    /// Module: the source file name without suffix (Go) or the class name (Java).
    #[arg(long = "module", env = "MOD_NAME")]
    pub module: String,
    /// Function (Go) or method (Java) name.
    #[arg(long, env = "FUNC_HANDLER")]
    pub handler: String,
    /// Go tool.
    #[arg(long, env = "KUBELESS_GO", default_value = "go")]
    pub go: PathBuf,
    /// Folder of our Go module `github.com/kubeless/kubeless` (functions package and worker).
    #[arg(
        long,
        env = "KUBELESS_GO_RUNTIME_DIR",
        default_value = "/opt/kubeless/go/kubeless"
    )]
    pub go_runtime_dir: PathBuf,
    /// Java compiler.
    #[arg(long, env = "KUBELESS_JAVAC", default_value = "javac")]
    pub javac: PathBuf,
    /// Folder of the Java worker sources (`io/kubeless/...`).
    #[arg(
        long,
        env = "KUBELESS_JAVA_RUNTIME_DIR",
        default_value = "/opt/kubeless/java/src"
    )]
    pub java_runtime_dir: PathBuf,
    /// Maven executable, for pom.xml dependencies.
    #[arg(long, env = "KUBELESS_MVN", default_value = "mvn")]
    pub mvn: PathBuf,
    /// Local Maven repository pom.xml dependencies are resolved from (offline unless
    /// KUBELESS_MAVEN_ONLINE is true).
    #[arg(
        long,
        env = "KUBELESS_MAVEN_REPO",
        default_value = "/usr/share/maven-repo"
    )]
    pub maven_repo: PathBuf,
    /// Let Maven download missing dependencies from the repositories pom.xml names (needs network).
    #[arg(long, env = "KUBELESS_MAVEN_ONLINE", default_value_t = false, action = clap::ArgAction::Set)]
    pub maven_online: bool,
}
