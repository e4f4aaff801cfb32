use std::process::ExitCode;

use clap::Parser;
use kubeless_runtime::cli::{Cli, Command, ServeArgs};
use kubeless_runtime::{compile, error_chain, install, noop, prepare, server};

#[derive(Parser)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Some(Command::Serve(args)) => serve(args),
        // No subcommand: the function container's default, configured by env only.
        None => match ServeOnly::try_parse_from(["kubeless-runtime"]) {
            Ok(s) => serve(s.serve),
            Err(e) => Err(e.into()),
        },
        Some(Command::Prepare(args)) => prepare::prepare(&args).map_err(Into::into),
        Some(Command::Install(args)) => install::install(&args)
            .map(|done| eprintln!("kubeless-runtime install: {done:?}"))
            .map_err(Into::into),
        Some(Command::Compile(args)) => compile::compile(&args)
            .map(|done| eprintln!("kubeless-runtime compile: {done:?}"))
            .map_err(Into::into),
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
    rt.block_on(async {
        let server = server::Server::bind(args).await?;
        server.run().await;
        Ok(())
    })
}
