//! Broker connection settings, from the flags and env variables Kubeless's kafka-trigger read
//! (`KAFKA_BROKERS`, `KAFKA_ENABLE_TLS`, `KAFKA_CACERTS`, `KAFKA_CERT`, `KAFKA_KEY`,
//! `KAFKA_INSECURE`, `KAFKA_ENABLE_SASL`, `KAFKA_USERNAME`, `KAFKA_PASSWORD`), turned into
//! librdkafka client properties.

use std::path::PathBuf;

use clap::{ArgAction, Args};
use rdkafka::ClientConfig;

/// Kubeless's default broker address.
pub const DEFAULT_BROKERS: &str = "kafka.kubeless:9092";

/// Connection flags shared by the consumers and the dead-letter producer.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct BrokerArgs {
    /// Comma-separated bootstrap brokers.
    #[arg(long = "brokers", env = "KAFKA_BROKERS", default_value = DEFAULT_BROKERS)]
    pub brokers: String,
    /// Connect with TLS.
    #[arg(long = "kafka-enable-tls", env = "KAFKA_ENABLE_TLS", action = ArgAction::Set,
          num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub enable_tls: bool,
    /// PEM file with the CA certificates that sign the brokers' certificates.
    #[arg(long = "kafka-cacerts", env = "KAFKA_CACERTS")]
    pub ca_certs: Option<PathBuf>,
    /// PEM client certificate (mutual TLS).
    #[arg(long = "kafka-cert", env = "KAFKA_CERT")]
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long = "kafka-key", env = "KAFKA_KEY")]
    pub key: Option<PathBuf>,
    /// Skip verification of the brokers' certificates (testing only).
    #[arg(long = "kafka-insecure", env = "KAFKA_INSECURE", action = ArgAction::Set,
          num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub insecure: bool,
    /// Authenticate with SASL.
    #[arg(long = "kafka-enable-sasl", env = "KAFKA_ENABLE_SASL", action = ArgAction::Set,
          num_args = 0..=1, default_value_t = false, default_missing_value = "true")]
    pub enable_sasl: bool,
    /// SASL mechanism: PLAIN (Kubeless's only one), SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(
        long = "kafka-sasl-mechanism",
        env = "KAFKA_SASL_MECHANISM",
        default_value = "PLAIN"
    )]
    pub sasl_mechanism: String,
    #[arg(long = "kafka-username", env = "KAFKA_USERNAME")]
    pub username: Option<String>,
    #[arg(
        long = "kafka-password",
        env = "KAFKA_PASSWORD",
        hide_env_values = true
    )]
    pub password: Option<String>,
    /// Consumer group session timeout. Kubeless (Sarama) used 10 s.
    #[arg(
        long = "kafka-session-timeout-ms",
        env = "KAFKA_SESSION_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub session_timeout_ms: u32,
    /// Extra librdkafka properties, `key=value`, comma-separated (e.g. `fetch.wait.max.ms=50`).
    /// Applied last, so they override everything above.
    #[arg(long = "kafka-config", env = "KAFKA_CONFIG", value_delimiter = ',')]
    pub extra: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BrokerConfigError {
    #[error("SASL is enabled but KAFKA_USERNAME or KAFKA_PASSWORD is missing")]
    MissingCredentials,
    #[error("unsupported SASL mechanism {0:?} (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")]
    UnsupportedMechanism(String),
    #[error("KAFKA_CERT and KAFKA_KEY must be given together")]
    HalfClientCertificate,
    #[error("--kafka-config entry {0:?} is not key=value")]
    BadExtra(String),
    #[error("no brokers given")]
    NoBrokers,
}

impl Default for BrokerArgs {
    fn default() -> Self {
        Self {
            brokers: DEFAULT_BROKERS.into(),
            enable_tls: false,
            ca_certs: None,
            cert: None,
            key: None,
            insecure: false,
            enable_sasl: false,
            sasl_mechanism: "PLAIN".into(),
            username: None,
            password: None,
            session_timeout_ms: 10_000,
            extra: Vec::new(),
        }
    }
}

impl BrokerArgs {
    /// Properties every client (consumer and producer) gets.
    pub fn client_properties(&self) -> Result<Vec<(String, String)>, BrokerConfigError> {
        let Self {
            brokers,
            enable_tls,
            ca_certs,
            cert,
            key,
            insecure,
            enable_sasl,
            sasl_mechanism,
            username,
            password,
            session_timeout_ms: _,
            extra,
        } = self;
        let brokers = brokers.trim();
        if brokers.is_empty() {
            return Err(BrokerConfigError::NoBrokers);
        }
        let mut props = vec![("bootstrap.servers".to_string(), brokers.to_string())];
        let protocol = match (enable_tls, enable_sasl) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        props.push(("security.protocol".into(), protocol.into()));
        if *enable_tls {
            if let Some(ca) = ca_certs {
                props.push(("ssl.ca.location".into(), ca.display().to_string()));
            }
            match (cert, key) {
                (Some(c), Some(k)) => {
                    props.push(("ssl.certificate.location".into(), c.display().to_string()));
                    props.push(("ssl.key.location".into(), k.display().to_string()));
                }
                (None, None) => {}
                _ => return Err(BrokerConfigError::HalfClientCertificate),
            }
            if *insecure {
                props.push(("enable.ssl.certificate.verification".into(), "false".into()));
                props.push((
                    "ssl.endpoint.identification.algorithm".into(),
                    "none".into(),
                ));
            }
        }
        if *enable_sasl {
            let mechanism = sasl_mechanism.trim().to_ascii_uppercase();
            if !matches!(
                mechanism.as_str(),
                "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
            ) {
                return Err(BrokerConfigError::UnsupportedMechanism(
                    sasl_mechanism.clone(),
                ));
            }
            let (Some(u), Some(p)) = (username, password) else {
                return Err(BrokerConfigError::MissingCredentials);
            };
            props.push(("sasl.mechanism".into(), mechanism));
            props.push(("sasl.username".into(), u.clone()));
            props.push(("sasl.password".into(), p.clone()));
        }
        for e in extra.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let Some((k, v)) = e.split_once('=') else {
                return Err(BrokerConfigError::BadExtra(e.to_string()));
            };
            props.push((k.trim().to_string(), v.trim().to_string()));
        }
        Ok(props)
    }

    /// Consumer configuration for one group. Offsets are committed by us (see `consumer`), never
    /// automatically; a group without a committed offset starts at the earliest record.
    pub fn consumer_config(&self, group: &str) -> Result<ClientConfig, BrokerConfigError> {
        let mut c = ClientConfig::new();
        c.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", self.session_timeout_ms.to_string())
            .set("enable.partition.eof", "false");
        // Broker settings (and --kafka-config overrides) last.
        for (k, v) in self.client_properties()? {
            c.set(k, v);
        }
        Ok(c)
    }

    /// Producer configuration for dead letters: every record acknowledged by all in-sync
    /// replicas, idempotent so a retried send does not duplicate.
    pub fn producer_config(&self) -> Result<ClientConfig, BrokerConfigError> {
        let mut c = ClientConfig::new();
        c.set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5");
        for (k, v) in self.client_properties()? {
            if !is_consumer_only(&k) {
                c.set(k, v);
            }
        }
        Ok(c)
    }
}

/// librdkafka warns about consumer properties on a producer; `--kafka-config` may hold them.
fn is_consumer_only(key: &str) -> bool {
    key.starts_with("fetch.")
        || key.starts_with("group.")
        || key.starts_with("session.")
        || key.starts_with("heartbeat.")
        || key.starts_with("auto.")
        || key.starts_with("enable.auto")
        || key.starts_with("max.poll")
        || key.starts_with("queued.")
        || key == "partition.assignment.strategy"
        || key == "isolation.level"
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        b: BrokerArgs,
    }

    fn get<'a>(props: &'a [(String, String)], k: &str) -> Option<&'a str> {
        props
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn defaults_are_kubeless_ones() {
        let t = T::try_parse_from(["x"]).unwrap();
        assert_eq!(t.b, BrokerArgs::default());
        let p = t.b.client_properties().unwrap();
        assert_eq!(get(&p, "bootstrap.servers"), Some("kafka.kubeless:9092"));
        assert_eq!(get(&p, "security.protocol"), Some("plaintext"));
        let c = t.b.consumer_config("g").unwrap();
        assert_eq!(c.get("group.id"), Some("g"));
        assert_eq!(c.get("enable.auto.commit"), Some("false"));
        assert_eq!(c.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(c.get("session.timeout.ms"), Some("10000"));
    }

    #[test]
    fn tls_and_sasl() {
        let t = T::try_parse_from([
            "x",
            "--brokers",
            "b1:9093,b2:9093",
            "--kafka-enable-tls",
            "--kafka-cacerts",
            "/ca.pem",
            "--kafka-cert",
            "/c.pem",
            "--kafka-key",
            "/k.pem",
            "--kafka-insecure",
            "true",
            "--kafka-enable-sasl",
            "--kafka-sasl-mechanism",
            "scram-sha-512",
            "--kafka-username",
            "u",
            "--kafka-password",
            "p",
        ])
        .unwrap();
        let p = t.b.client_properties().unwrap();
        assert_eq!(get(&p, "bootstrap.servers"), Some("b1:9093,b2:9093"));
        assert_eq!(get(&p, "security.protocol"), Some("sasl_ssl"));
        assert_eq!(get(&p, "ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(get(&p, "ssl.certificate.location"), Some("/c.pem"));
        assert_eq!(get(&p, "ssl.key.location"), Some("/k.pem"));
        assert_eq!(
            get(&p, "enable.ssl.certificate.verification"),
            Some("false")
        );
        assert_eq!(get(&p, "sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get(&p, "sasl.username"), Some("u"));
        assert_eq!(get(&p, "sasl.password"), Some("p"));
    }

    #[test]
    fn sasl_without_tls_and_errors() {
        let mut b = BrokerArgs {
            enable_sasl: true,
            ..BrokerArgs::default()
        };
        assert_eq!(
            b.client_properties(),
            Err(BrokerConfigError::MissingCredentials)
        );
        b.username = Some("u".into());
        b.password = Some("p".into());
        let p = b.client_properties().unwrap();
        assert_eq!(get(&p, "security.protocol"), Some("sasl_plaintext"));
        assert_eq!(get(&p, "sasl.mechanism"), Some("PLAIN"));
        b.sasl_mechanism = "GSSAPI".into();
        assert!(matches!(
            b.client_properties(),
            Err(BrokerConfigError::UnsupportedMechanism(_))
        ));
        let half = BrokerArgs {
            enable_tls: true,
            cert: Some("/c".into()),
            ..BrokerArgs::default()
        };
        assert_eq!(
            half.client_properties(),
            Err(BrokerConfigError::HalfClientCertificate)
        );
        let empty = BrokerArgs {
            brokers: " ".into(),
            ..BrokerArgs::default()
        };
        assert_eq!(empty.client_properties(), Err(BrokerConfigError::NoBrokers));
    }

    #[test]
    fn extra_properties_override_and_stay_off_the_producer() {
        let t = T::try_parse_from([
            "x",
            "--kafka-config",
            "fetch.wait.max.ms=20,session.timeout.ms=6000,client.id=kt",
        ])
        .unwrap();
        let c = t.b.consumer_config("g").unwrap();
        assert_eq!(c.get("session.timeout.ms"), Some("6000"));
        assert_eq!(c.get("fetch.wait.max.ms"), Some("20"));
        let p = t.b.producer_config().unwrap();
        assert_eq!(p.get("fetch.wait.max.ms"), None);
        assert_eq!(p.get("session.timeout.ms"), None);
        assert_eq!(p.get("client.id"), Some("kt"));
        assert_eq!(p.get("acks"), Some("all"));
        let bad = T::try_parse_from(["x", "--kafka-config", "novalue"]).unwrap();
        assert!(matches!(
            bad.b.client_properties(),
            Err(BrokerConfigError::BadExtra(_))
        ));
    }

    #[test]
    fn env_vars_as_kubeless() {
        // clap reads env at parse time; use a child-free check of the attribute names instead
        // of mutating the process env (tests run in parallel).
        let cmd = <T as clap::CommandFactory>::command();
        let envs: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
            .collect();
        for e in [
            "KAFKA_BROKERS",
            "KAFKA_ENABLE_TLS",
            "KAFKA_CACERTS",
            "KAFKA_CERT",
            "KAFKA_KEY",
            "KAFKA_INSECURE",
            "KAFKA_ENABLE_SASL",
            "KAFKA_USERNAME",
            "KAFKA_PASSWORD",
        ] {
            assert!(envs.iter().any(|x| x == e), "{e} missing: {envs:?}");
        }
    }
}
