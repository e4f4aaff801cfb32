//! NATS connection flags (every one also an env variable) and the client they build.

use std::path::PathBuf;
use std::time::Duration;

/// Kubeless's default NATS address.
pub const DEFAULT_NATS_URL: &str = "nats://nats.nats-io.svc.cluster.local:4222";

/// How to reach and authenticate to NATS.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct NatsArgs {
    /// NATS server URL(s), comma separated (Kubeless's NATS_URL). Credentials in the URL
    /// (`nats://user:pass@host:4222`) work too.
    #[arg(long = "nats-url", env = "NATS_URL", default_value = DEFAULT_NATS_URL)]
    pub url: String,
    /// User name (with --nats-password).
    #[arg(long = "nats-user", env = "NATS_USER", default_value = "")]
    pub user: String,
    /// Password (with --nats-user).
    #[arg(
        long = "nats-password",
        env = "NATS_PASSWORD",
        default_value = "",
        hide_env_values = true
    )]
    pub password: String,
    /// Authentication token.
    #[arg(
        long = "nats-token",
        env = "NATS_TOKEN",
        default_value = "",
        hide_env_values = true
    )]
    pub token: String,
    /// A `.creds` file (JWT + NKey seed), as written by `nsc`.
    #[arg(long = "nats-creds-file", env = "NATS_CREDS_FILE")]
    pub creds_file: Option<PathBuf>,
    /// PEM file of CA certificates to trust for the server's TLS certificate (turns TLS on).
    #[arg(long = "nats-tls-ca", env = "NATS_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS, with --nats-tls-key.
    #[arg(long = "nats-tls-cert", env = "NATS_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS, with --nats-tls-cert.
    #[arg(long = "nats-tls-key", env = "NATS_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Require TLS even without a CA file (system roots are used).
    #[arg(
        long = "nats-tls-required",
        env = "NATS_TLS_REQUIRED",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub tls_required: bool,
    /// Name this client reports to the server (shows in `nats server report connections`).
    #[arg(
        long = "nats-client-name",
        env = "NATS_CLIENT_NAME",
        default_value = "kubeless-nats-trigger"
    )]
    pub client_name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("--nats-user and --nats-password must be given together")]
    PartialUserPassword,
    #[error("--nats-tls-cert and --nats-tls-key must be given together")]
    PartialClientCert,
    #[error("reading the NATS credentials file {path}")]
    CredsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting to NATS at {url}")]
    Connect {
        url: String,
        #[source]
        source: async_nats::ConnectError,
    },
}

impl NatsArgs {
    /// Args for a test or local server: only the URL.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            client_name: "kubeless-nats-trigger".into(),
            ..Self::default()
        }
    }

    /// The connect options these flags describe.
    pub async fn options(&self) -> Result<async_nats::ConnectOptions, ConnectError> {
        let Self {
            url: _,
            user,
            password,
            token,
            creds_file,
            tls_ca,
            tls_cert,
            tls_key,
            tls_required,
            client_name,
        } = self;
        let mut opts = match creds_file {
            Some(path) => async_nats::ConnectOptions::with_credentials_file(path.clone())
                .await
                .map_err(|source| ConnectError::CredsFile {
                    path: path.clone(),
                    source,
                })?,
            None => async_nats::ConnectOptions::new(),
        };
        match (user.is_empty(), password.is_empty()) {
            (true, true) => {}
            (false, false) => opts = opts.user_and_password(user.clone(), password.clone()),
            _ => return Err(ConnectError::PartialUserPassword),
        }
        if !token.is_empty() {
            opts = opts.token(token.clone());
        }
        if let Some(ca) = tls_ca {
            opts = opts.add_root_certificates(ca.clone()).require_tls(true);
        }
        match (tls_cert, tls_key) {
            (Some(c), Some(k)) => opts = opts.add_client_certificate(c.clone(), k.clone()),
            (None, None) => {}
            _ => return Err(ConnectError::PartialClientCert),
        }
        if *tls_required {
            opts = opts.require_tls(true);
        }
        Ok(opts
            .name(client_name)
            // Start even when NATS is down; subscriptions report BrokerUnavailable until it is up.
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(5))
            // Unlimited reconnects: a trigger outlives broker restarts.
            .max_reconnects(None))
    }

    /// Connects (returns at once when `retry_on_initial_connect` applies; the client reconnects
    /// in the background).
    pub async fn connect(&self) -> Result<async_nats::Client, ConnectError> {
        let opts = self.options().await?;
        let urls: Vec<String> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let servers: Vec<async_nats::ServerAddr> =
            urls.iter().filter_map(|u| u.parse().ok()).collect();
        opts.connect(servers)
            .await
            .map_err(|source| ConnectError::Connect {
                url: self.url.clone(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        nats: NatsArgs,
    }

    #[tokio::test]
    async fn flags_and_validation() {
        let cli = Cli::try_parse_from([
            "x",
            "--nats-url",
            "nats://a:4222,nats://b:4222",
            "--nats-user",
            "u",
            "--nats-password",
            "p",
        ])
        .unwrap();
        assert_eq!(cli.nats.url, "nats://a:4222,nats://b:4222");
        assert!(cli.nats.options().await.is_ok());

        let cli = Cli::try_parse_from(["x", "--nats-user", "u", "--nats-password", ""]).unwrap();
        assert!(matches!(
            cli.nats.options().await,
            Err(ConnectError::PartialUserPassword)
        ));
        let cli = Cli::try_parse_from(["x", "--nats-tls-cert", "/c.pem"]).unwrap();
        assert!(matches!(
            cli.nats.options().await,
            Err(ConnectError::PartialClientCert)
        ));
        let cli = Cli::try_parse_from(["x", "--nats-creds-file", "/does/not/exist.creds"]).unwrap();
        assert!(matches!(
            cli.nats.options().await,
            Err(ConnectError::CredsFile { .. })
        ));
    }
}
