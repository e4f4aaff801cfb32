use std::process::ExitCode;

use clap::Parser;
use kubeless_runtime::cli::{Cli, Command, ServeArgs};
use kubeless_runtime::{compile, error_chain, install, noop, prepare, server};
use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeArgs,
}

type OtelLayer = tracing_opentelemetry::OpenTelemetryLayer<
    tracing_subscriber::Registry,
    opentelemetry_sdk::trace::SdkTracer,
>;

/// Runtime messages go to stderr: stdout carries the access log and the function's own output.
fn init_logs(otel: Option<OtelLayer>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // The OTel layer goes first: it is typed for the bare registry.
    tracing_subscriber::registry()
        .with(otel)
        .with(fmt)
        .with(filter)
        .init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Some(Command::Serve(args)) => serve(*args),
        // No subcommand: the function container's default, configured by env only.
        None => match ServeOnly::try_parse_from(["kubeless-runtime"]) {
            Ok(s) => serve(s.serve),
            Err(e) => Err(e.into()),
        },
        Some(Command::Prepare(args)) => {
            init_logs(None);
            prepare::prepare(&args).map_err(Into::into)
        }
        Some(Command::Install(args)) => {
            init_logs(None);
            install::install(&args)
                .map(|done| eprintln!("kubeless-runtime install: {done:?}"))
                .map_err(Into::into)
        }
        Some(Command::Compile(args)) => {
            init_logs(None);
            compile::compile(&args)
                .map(|done| eprintln!("kubeless-runtime compile: {done:?}"))
                .map_err(Into::into)
        }
        Some(Command::NoopWorker) => noop::run().map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubeless-runtime: error: {}", error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let rt = match args.proxy_threads {
        // One thread avoids cross-thread wake-ups per call, which dominate latency at low load.
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n.max(1))
            .enable_all()
            .build()?,
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
    };
    let endpoint = args.otlp_endpoint.trim().to_owned();
    let provider = if endpoint.is_empty() {
        None
    } else {
        // The batch exporter runs on this runtime.
        let _enter = rt.enter();
        Some(kubeless_service::telemetry::otlp_provider(
            &args.otel_service_name,
            &endpoint,
        )?)
    };
    init_logs(
        provider
            .as_ref()
            .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("kubeless-runtime"))),
    );
    rt.block_on(async {
        let server = server::Server::bind(args).await?;
        server.run().await;
        if let Some(p) = provider {
            // Flush the spans of the last calls before the pod goes away.
            match tokio::task::spawn_blocking(move || p.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "flushing spans failed"),
                Err(e) => tracing::warn!(error = %e, "flushing spans failed"),
            }
        }
        Ok(())
    })
}
