//! NATS connection flags (every one also an env variable) and the client they build.

use std::path::PathBuf;
use std::time::Duration;

/// Kubeless's default NATS address.
pub const DEFAULT_NATS_URL: &str = "nats://nats.nats-io.svc.cluster.local:4222";

/// How to reach and authenticate to NATS.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct NatsArgs {
    /// NATS server URL(s), comma separated (Kubeless's NATS_URL). Credentials in the URL
    /// (`nats://user:pass@host:4222`, or `nats://TOKEN@host:4222`) work too; they are taken out
    /// of the URL before connecting, so no log line shows them.
    #[arg(
        long = "nats-url",
        env = "NATS_URL",
        default_value = DEFAULT_NATS_URL,
        hide_env_values = true
    )]
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
    #[error("NATS URL {url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(
        "the NATS URLs carry different credentials; give them once with --nats-user and --nats-password (or --nats-token)"
    )]
    MixedUrlCredentials,
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
        self.options_with(&servers(&self.url)?.credentials).await
    }

    async fn options_with(
        &self,
        url_credentials: &Option<UrlCredentials>,
    ) -> Result<async_nats::ConnectOptions, ConnectError> {
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
            // The flags win over credentials in the URL.
            (true, true) => match url_credentials {
                Some(UrlCredentials::UserPassword(u, p)) => {
                    opts = opts.user_and_password(u.clone(), p.clone());
                }
                Some(UrlCredentials::Token(t)) if token.is_empty() => opts = opts.token(t.clone()),
                _ => {}
            },
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
        let servers = servers(&self.url)?;
        let opts = self.options_with(&servers.credentials).await?;
        let shown = servers.shown();
        opts.connect(servers.addrs)
            .await
            .map_err(|source| ConnectError::Connect { url: shown, source })
    }
}

/// Credentials found in the userinfo of NATS URLs (percent-decoded).
#[derive(Clone, PartialEq, Eq)]
enum UrlCredentials {
    UserPassword(String, String),
    /// `nats://TOKEN@host`: a user name alone is a token, as NATS clients read it.
    Token(String),
}

/// The servers of `--nats-url`, without their credentials (those go into the connect options,
/// so async-nats, which logs server addresses at debug level, never sees them).
struct Servers {
    addrs: Vec<async_nats::ServerAddr>,
    credentials: Option<UrlCredentials>,
}

impl Servers {
    /// The URLs as they may be shown in logs and errors.
    fn shown(&self) -> String {
        let urls: Vec<String> = self
            .addrs
            .iter()
            .map(|a| a.as_url_str().to_string())
            .collect();
        urls.join(",")
    }
}

fn servers(list: &str) -> Result<Servers, ConnectError> {
    let mut addrs = Vec::new();
    let mut credentials: Option<UrlCredentials> = None;
    for raw in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let with_scheme = if raw.contains("://") {
            raw.to_string()
        } else {
            format!("nats://{raw}")
        };
        let mut url = url::Url::parse(&with_scheme).map_err(|e| ConnectError::BadUrl {
            url: redacted(raw),
            reason: e.to_string(),
        })?;
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let found = match (url.username(), url.password()) {
            ("", None) => None,
            (user, Some(pass)) => Some(UrlCredentials::UserPassword(decode(user), decode(pass))),
            (token, None) => Some(UrlCredentials::Token(decode(token))),
        };
        if let Some(found) = found {
            match &credentials {
                Some(c) if *c != found => return Err(ConnectError::MixedUrlCredentials),
                _ => credentials = Some(found),
            }
            // Cannot fail for the URLs that reach here (they have a host: they had userinfo).
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        let addr = async_nats::ServerAddr::from_url(url).map_err(|e| ConnectError::BadUrl {
            url: redacted(raw),
            reason: e.to_string(),
        })?;
        addrs.push(addr);
    }
    Ok(Servers { addrs, credentials })
}

/// `raw` with anything between `://` and `@` replaced, for an error about a URL that did not
/// parse (so its credentials cannot be read back).
fn redacted(raw: &str) -> String {
    let (scheme, rest) = raw.split_once("://").unwrap_or(("", raw));
    let host_part = rest.split('/').next().unwrap_or(rest);
    match host_part.rfind('@') {
        Some(at) => {
            let prefix = if scheme.is_empty() {
                String::new()
            } else {
                format!("{scheme}://")
            };
            format!("{prefix}REDACTED@{}", &rest[at + 1..])
        }
        None => raw.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn credentials_leave_the_urls() {
        let s = servers("nats://alice:s%40cret@a:4222, nats://alice:s%40cret@b:4223").unwrap();
        assert!(
            s.credentials
                == Some(UrlCredentials::UserPassword(
                    "alice".into(),
                    "s@cret".into()
                ))
        );
        assert_eq!(s.shown(), "nats://a:4222,nats://b:4223");
        for a in &s.addrs {
            let debug = format!("{a:?}");
            assert!(
                !debug.contains("cret") && !debug.contains("alice"),
                "{debug}"
            );
        }
        let t = servers("tok3n@c:4222").unwrap();
        assert!(t.credentials == Some(UrlCredentials::Token("tok3n".into())));
        assert_eq!(t.shown(), "nats://c:4222");
        assert!(matches!(
            servers("nats://a:b@x:1,nats://c:d@y:2"),
            Err(ConnectError::MixedUrlCredentials)
        ));
        let Err(e) = servers("nats://u:pw@ho st:1") else {
            panic!("a space in the host is refused")
        };
        assert!(!e.to_string().contains("pw"), "{e}");
        assert_eq!(redacted("nats://u:pw@h:1/x"), "nats://REDACTED@h:1/x");
    }

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
