//! Logging and tracing: a `tracing` subscriber writing text or JSON lines, optional OTLP/HTTP
//! trace export, and the W3C TraceContext propagator installed globally (the invoker uses it to
//! write `traceparent`).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// What [`init`] needs.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// `service.name` of exported spans.
    pub service_name: String,
    /// `EnvFilter` directives, e.g. `info` or `info,kube=debug`.
    pub filter: String,
    pub format: LogFormat,
    /// OTLP/HTTP base endpoint; `None` turns export off.
    pub otlp_endpoint: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter {filter:?}")]
    Filter {
        filter: String,
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    #[error("building the OTLP exporter failed")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    #[error("building the OTLP HTTP client failed")]
    HttpClient(#[source] reqwest::Error),
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled(#[source] tracing_subscriber::util::TryInitError),
}

/// Keeps the tracer provider alive; call [`TelemetryGuard::shutdown`] to flush spans at exit.
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Flushes and stops the exporter. Runs the blocking flush off the async worker.
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let res = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            match res {
                Ok(Ok(())) => {}
                Ok(Err(err)) => eprintln!("flushing traces failed: {err}"),
                Err(err) => eprintln!("flushing traces panicked: {err}"),
            }
        }
    }
}

/// Installs the global subscriber and propagator. Call once, inside a tokio runtime.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let filter = EnvFilter::builder()
        .parse(&config.filter)
        .map_err(|source| TelemetryError::Filter {
            filter: config.filter.clone(),
            source,
        })?;

    let fmt_layer: Box<dyn Layer<Registry> + Send + Sync> = match config.format {
        LogFormat::Text => tracing_subscriber::fmt::layer().boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .boxed(),
    };

    let provider = match &config.otlp_endpoint {
        Some(endpoint) => Some(otlp_provider(&config.service_name, endpoint)?),
        None => None,
    };
    let otel_layer = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(config.service_name.clone())));
    if let Some(p) = &provider {
        opentelemetry::global::set_tracer_provider(p.clone());
    }

    tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .with(filter)
        .try_init()
        .map_err(TelemetryError::AlreadyInstalled)?;
    Ok(TelemetryGuard { provider })
}

/// A tracer provider exporting over OTLP/HTTP to `endpoint` (a base URL), batching on tokio.
/// For binaries that build their own subscriber (the function runtime logs to stderr).
/// Call inside a tokio runtime.
pub fn otlp_provider(
    service_name: &str,
    endpoint: &str,
) -> Result<SdkTracerProvider, TelemetryError> {
    crate::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(TelemetryError::HttpClient)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_endpoint(traces_url(endpoint))
        .build()
        .map_err(TelemetryError::Exporter)?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_string())
                .build(),
        )
        .build())
}

/// OTEL_EXPORTER_OTLP_ENDPOINT is a base URL; the HTTP exporter wants the full traces URL when
/// the endpoint is set explicitly.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_url_appends_path_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
