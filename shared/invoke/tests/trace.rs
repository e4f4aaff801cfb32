//! `traceparent` continues the caller's `tracing` span when OpenTelemetry is set up.

#![cfg(test)]

mod support;

use std::sync::Arc;

use kubeless_invoke::{Endpoint, Event, FunctionTarget, Invoker, StaticResolver};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use support::TestServer;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

// current_thread runtime: the thread-local default subscriber covers the whole test.
#[tokio::test(flavor = "current_thread")]
async fn traceparent_follows_the_current_span() {
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = TestServer::ok().await;
    let invoker = Invoker::new(Arc::new(StaticResolver::single(
        Endpoint::parse(&server.url()).unwrap(),
    )));
    let span = tracing::info_span!("deliver");
    let trace_id = span.context().span().span_context().trace_id();
    assert_ne!(trace_id, opentelemetry::trace::TraceId::INVALID);

    let out = {
        use tracing::Instrument;
        invoker
            .invoke(
                &FunctionTarget::new("default", "f"),
                &Event::new("x").with_body("{}"),
            )
            .instrument(span)
            .await
    };
    assert!(out.is_success());
    let seen = server.seen();
    let tp = seen[0].headers["traceparent"].to_str().unwrap().to_string();
    assert_eq!(
        tp.split('-').nth(1).unwrap(),
        format!("{trace_id:032x}"),
        "{tp}"
    );

    // Outside any span a fresh trace is started for each event.
    invoker
        .invoke(&FunctionTarget::new("default", "f"), &Event::new("x"))
        .await;
    let tp2 = server.seen()[1].headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(tp2.split('-').nth(1), tp.split('-').nth(1));
}
