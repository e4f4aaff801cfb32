//! Talking to the brokers directly: Kafka topics (rdkafka), NATS publish (async-nats), Kinesis
//! publish and create-stream (aws-sdk-kinesis). Each sits behind its own cargo feature.

#[cfg(feature = "kafka")]
use std::time::Duration;

use crate::{
    args::{KinesisCreateStreamArgs, KinesisPublishArgs, NatsPublishArgs, OutFormat, TopicCmd},
    ctx::Ctx,
    error::{Error, Result},
};

// ---------------------------------------------------------------------- kafka

pub async fn topic(cmd: TopicCmd) -> Result<()> {
    #[cfg(feature = "kafka")]
    {
        kafka::run(cmd).await
    }
    #[cfg(not(feature = "kafka"))]
    {
        let _ = cmd;
        Err(Error::FeatureMissing("kafka"))
    }
}

/// Topic names one a line, or as JSON/YAML.
pub fn render_topics(mut topics: Vec<String>, out: Option<OutFormat>) -> Result<String> {
    topics.sort();
    match out {
        Some(format) => crate::output::render(&topics, format),
        None => Ok(topics.iter().map(|t| format!("{t}\n")).collect()),
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    use rdkafka::{
        ClientConfig,
        admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
        client::DefaultClientContext,
        consumer::{BaseConsumer, Consumer},
        producer::{FutureProducer, FutureRecord},
    };

    use super::*;
    use crate::args::{
        KafkaArgs, TopicCreateArgs, TopicDeleteArgs, TopicListArgs, TopicPublishArgs,
    };

    const TIMEOUT: Duration = Duration::from_secs(15);

    fn config(k: &KafkaArgs) -> ClientConfig {
        // --kafka-namespace is accepted for Kubeless compatibility only.
        let KafkaArgs {
            brokers,
            kafka_namespace: _,
        } = k;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", brokers)
            .set("socket.timeout.ms", "10000")
            .set("message.timeout.ms", "15000");
        c
    }

    fn admin(k: &KafkaArgs) -> Result<AdminClient<DefaultClientContext>> {
        config(k)
            .create()
            .map_err(|e| Error::broker("connecting to Kafka", e))
    }

    fn opts() -> AdminOptions {
        AdminOptions::new().operation_timeout(Some(TIMEOUT))
    }

    /// Fails within seconds, naming the addresses tried, when no bootstrap broker accepts a
    /// TCP connection (librdkafka would retry quietly until its timeout).
    pub async fn check_reachable(brokers: &str) -> Result<()> {
        let mut last = String::from("no address given");
        for addr in brokers.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            match tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(addr))
                .await
            {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: no answer within 3s"),
            }
        }
        Err(Error::usage(format!(
            "Cannot reach Kafka at {brokers} ({last}). Start a broker there, or point --brokers \
             (or KAFKA_BROKERS) at yours, e.g. --brokers 127.0.0.1:9092"
        )))
    }

    pub async fn run(cmd: TopicCmd) -> Result<()> {
        let brokers = match &cmd {
            TopicCmd::Create(a) => &a.kafka.brokers,
            TopicCmd::Delete(a) => &a.kafka.brokers,
            TopicCmd::List(a) => &a.kafka.brokers,
            TopicCmd::Publish(a) => &a.kafka.brokers,
        };
        check_reachable(brokers).await?;
        match cmd {
            TopicCmd::Create(a) => create(a).await,
            TopicCmd::Delete(a) => delete(a).await,
            TopicCmd::List(a) => list(a).await,
            TopicCmd::Publish(a) => publish(a).await,
        }
    }

    async fn create(a: TopicCreateArgs) -> Result<()> {
        let TopicCreateArgs {
            topic,
            partitions,
            replication_factor,
            kafka,
        } = a;
        let new = NewTopic::new(
            &topic,
            partitions,
            TopicReplication::Fixed(replication_factor),
        );
        let results = admin(&kafka)?
            .create_topics([&new], &opts())
            .await
            .map_err(|e| Error::broker(format!("creating topic {topic}"), e))?;
        for r in results {
            r.map_err(|(t, code)| Error::broker(format!("creating topic {t}"), code))?;
        }
        eprintln!("Created topic \"{topic}\".");
        Ok(())
    }

    async fn delete(a: TopicDeleteArgs) -> Result<()> {
        let TopicDeleteArgs { topic, kafka } = a;
        let results = admin(&kafka)?
            .delete_topics(&[topic.as_str()], &opts())
            .await
            .map_err(|e| Error::broker(format!("deleting topic {topic}"), e))?;
        for r in results {
            r.map_err(|(t, code)| Error::broker(format!("deleting topic {t}"), code))?;
        }
        eprintln!("Topic {topic} deleted.");
        Ok(())
    }

    async fn list(a: TopicListArgs) -> Result<()> {
        let TopicListArgs { out, kafka } = a;
        let consumer: BaseConsumer = config(&kafka)
            .create()
            .map_err(|e| Error::broker("connecting to Kafka", e))?;
        // fetch_metadata blocks; keep it off the async workers.
        let topics = tokio::task::spawn_blocking(move || {
            consumer.fetch_metadata(None, TIMEOUT).map(|m| {
                m.topics()
                    .iter()
                    .map(|t| t.name().to_string())
                    .filter(|n| !n.starts_with("__"))
                    .collect::<Vec<_>>()
            })
        })
        .await
        .map_err(|e| Error::broker("listing topics", e))?
        .map_err(|e| Error::broker("listing topics", e))?;
        crate::output::print(&render_topics(topics, out)?)
    }

    async fn publish(a: TopicPublishArgs) -> Result<()> {
        let TopicPublishArgs { data, topic, kafka } = a;
        let producer: FutureProducer = config(&kafka)
            .create()
            .map_err(|e| Error::broker("connecting to Kafka", e))?;
        producer
            .send(
                FutureRecord::<(), [u8]>::to(&topic).payload(data.as_bytes()),
                TIMEOUT,
            )
            .await
            .map_err(|(e, _)| Error::broker(format!("publishing to topic {topic}"), e))?;
        Ok(())
    }
}

// ----------------------------------------------------------------------- nats

pub async fn nats_publish(a: NatsPublishArgs) -> Result<()> {
    #[cfg(feature = "nats")]
    {
        let NatsPublishArgs {
            message,
            topic,
            url,
        } = a;
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(std::time::Duration::from_secs(10))
            .connect(url.as_str())
            .await
            .map_err(|e| Error::broker(format!("connecting to NATS at {url}"), e))?;
        client
            .publish(topic.clone(), message.into_bytes().into())
            .await
            .map_err(|e| Error::broker(format!("publishing to {topic}"), e))?;
        client
            .flush()
            .await
            .map_err(|e| Error::broker(format!("publishing to {topic}"), e))?;
        eprintln!("Message published to topic {topic}");
        Ok(())
    }
    #[cfg(not(feature = "nats"))]
    {
        let _ = a;
        Err(Error::FeatureMissing("nats"))
    }
}

// -------------------------------------------------------------------- kinesis

pub async fn kinesis_publish(ctx: &Ctx, a: KinesisPublishArgs) -> Result<()> {
    #[cfg(feature = "kinesis")]
    {
        kinesis::publish(ctx, a).await
    }
    #[cfg(not(feature = "kinesis"))]
    {
        let _ = (ctx, a);
        Err(Error::FeatureMissing("kinesis"))
    }
}

pub async fn kinesis_create_stream(ctx: &Ctx, a: KinesisCreateStreamArgs) -> Result<()> {
    #[cfg(feature = "kinesis")]
    {
        kinesis::create_stream(ctx, a).await
    }
    #[cfg(not(feature = "kinesis"))]
    {
        let _ = (ctx, a);
        Err(Error::FeatureMissing("kinesis"))
    }
}

#[cfg(feature = "kinesis")]
mod kinesis {
    use std::time::{Duration, Instant};

    use aws_sdk_kinesis::{
        Client,
        config::{BehaviorVersion, Credentials, Region},
        primitives::Blob,
        types::StreamStatus,
    };
    use aws_smithy_http_client::tls;
    use k8s_openapi::api::core::v1::Secret;

    use super::*;
    use crate::args::AwsArgs;

    fn env(name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    /// Keys from the Secret (`aws_access_key_id`, `aws_secret_access_key`), else the AWS env.
    async fn credentials(ctx: &Ctx, secret: Option<&str>) -> Result<Credentials> {
        if let Some(name) = secret {
            let s = ctx
                .api::<Secret>()
                .get(name)
                .await
                .map_err(|e| Error::kube(format!("reading secret {name}"), e))?;
            let data = s.data.unwrap_or_default();
            let field = |k: &str| {
                data.get(k)
                    .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
                    .ok_or_else(|| Error::usage(format!("secret {name} has no key {k}")))
            };
            return Ok(Credentials::new(
                field("aws_access_key_id")?,
                field("aws_secret_access_key")?,
                None,
                None,
                "kubernetes-secret",
            ));
        }
        match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(key)) => Ok(Credentials::new(
                id,
                key,
                env("AWS_SESSION_TOKEN"),
                None,
                "environment",
            )),
            _ => Err(Error::usage(
                "no AWS credentials: pass --secret or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            )),
        }
    }

    async fn client(ctx: &Ctx, aws: &AwsArgs) -> Result<Client> {
        let AwsArgs {
            aws_region,
            endpoint,
            secret,
        } = aws;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut b = aws_sdk_kinesis::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(aws_region.clone()))
            .credentials_provider(credentials(ctx, secret.as_deref()).await?)
            .http_client(http);
        if let Some(ep) = endpoint {
            b = b.endpoint_url(ep);
        }
        Ok(Client::from_conf(b.build()))
    }

    fn sdk_err<E: std::error::Error + 'static>(
        what: String,
    ) -> impl FnOnce(aws_sdk_kinesis::error::SdkError<E>) -> Error {
        move |e| Error::broker(what, aws_sdk_kinesis::error::DisplayErrorContext(e))
    }

    pub async fn publish(ctx: &Ctx, a: KinesisPublishArgs) -> Result<()> {
        let KinesisPublishArgs {
            stream,
            partition_key,
            records,
            aws,
        } = a;
        let client = client(ctx, &aws).await?;
        for record in records {
            client
                .put_record()
                .stream_name(&stream)
                .partition_key(&partition_key)
                .data(Blob::new(record.into_bytes()))
                .send()
                .await
                .map_err(sdk_err(format!("putting a record into stream {stream}")))?;
        }
        eprintln!("Records published to stream {stream}");
        Ok(())
    }

    pub async fn create_stream(ctx: &Ctx, a: KinesisCreateStreamArgs) -> Result<()> {
        let KinesisCreateStreamArgs {
            name,
            stream_name,
            shard_count,
            aws,
        } = a;
        let stream = stream_name
            .or(name)
            .ok_or_else(|| Error::usage("give the stream name (--stream-name)"))?;
        let client = client(ctx, &aws).await?;
        client
            .create_stream()
            .stream_name(&stream)
            .shard_count(shard_count)
            .send()
            .await
            .map_err(sdk_err(format!("creating stream {stream}")))?;
        // Publishing right away fails until the stream is ACTIVE: wait for it (bounded).
        let started = Instant::now();
        loop {
            let summary = client
                .describe_stream_summary()
                .stream_name(&stream)
                .send()
                .await
                .map_err(sdk_err(format!("describing stream {stream}")))?;
            let active = summary
                .stream_description_summary()
                .is_some_and(|s| s.stream_status() == &StreamStatus::Active);
            if active {
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                eprintln!("Stream {stream} created but not ACTIVE yet");
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!("Stream {stream} created");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rendering() {
        let t = vec!["b".to_string(), "a".to_string()];
        assert_eq!(render_topics(t.clone(), None).unwrap(), "a\nb\n");
        assert_eq!(
            render_topics(t, Some(OutFormat::Json)).unwrap(),
            "[\n  \"a\",\n  \"b\"\n]\n"
        );
    }
}
