//! One trace from a trigger to the function: the trigger's span, the invoker's client span, the
//! runtime's server span and the context the function sees, all exported over OTLP/HTTP to an
//! in-process receiver and linked parent to child.
//!
//! This test binary installs the global subscriber the way every trigger does
//! (`kubeless_service::telemetry::init` with an OTLP endpoint), so it holds one test.
#![cfg(test)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Lang, Opts, Runtime, exported_spans, otlp_receiver};
use kubeless_invoke::{Endpoint, Event, FunctionTarget, Invoker, StaticResolver};
use kubeless_service::telemetry::{LogFormat, TelemetryConfig};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_proto::tonic::trace::v1::Span;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

const SPAN_KIND_SERVER: i32 = 2;
const SPAN_KIND_CLIENT: i32 = 3;
const SPAN_KIND_CONSUMER: i32 = 5;

/// The function's answer: the traceparent it got as a header and in its context.
async fn deliver(invoker: &Invoker, target: &FunctionTarget, event: &Event) -> (String, String) {
    let outcome = invoker.invoke(target, event).await;
    assert!(outcome.is_success(), "{:?}", outcome.error);
    let v: serde_json::Value = serde_json::from_slice(&outcome.body).unwrap();
    let header = v["header"].as_str().expect("traceparent header").to_owned();
    let context = v["context"]
        .as_str()
        .expect("traceparent in context")
        .to_owned();
    (header, context)
}

/// `00-<trace>-<span>-<flags>` -> (trace, span).
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    (parts[1].to_owned(), parts[2].to_owned())
}

/// Waits until a span with this id was exported.
async fn span_with_id(got: &std::sync::Mutex<Vec<bytes::Bytes>>, span_id: &str) -> (String, Span) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(found) = exported_spans(got)
            .into_iter()
            .find(|(_, s)| hex::encode(&s.span_id) == span_id)
        {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "span {span_id} not exported within 60 s; got {:?}",
            exported_spans(got)
                .iter()
                .map(|(svc, s)| (svc.clone(), s.name.clone(), hex::encode(&s.span_id)))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_span_is_the_grandparent_of_the_functions_context() {
    let (endpoint, got) = otlp_receiver().await;
    // The function pod exports its server spans to the same collector as the trigger.
    let rt = Runtime::start(
        Lang::Python,
        Opts {
            handler: "trace",
            workers: 1,
            env: vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
                ("OTEL_SERVICE_NAME", "fixture-fn".into()),
                ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
            ],
            ..Opts::default()
        },
    )
    .await;
    // The trigger's process: telemetry as every trigger's main sets it up.
    let telemetry = kubeless_service::telemetry::init(&TelemetryConfig {
        service_name: "fixture-trigger".into(),
        filter: "info".into(),
        format: LogFormat::Text,
        otlp_endpoint: Some(endpoint),
    })
    .unwrap();
    assert!(telemetry.exporting());
    let resolver = StaticResolver::single(Endpoint::parse(&rt.url("/")).unwrap());
    let invoker = Invoker::new(Arc::new(resolver));
    let target = FunctionTarget::new("default", "trace").with_timeout(Duration::from_secs(60));

    // 1. The trigger handles a message inside its own span; the invoker continues it.
    let trigger = tracing::info_span!("deliver", otel.kind = "consumer");
    let trigger_cx = trigger.context();
    let trigger_trace = trigger_cx.span().span_context().trace_id().to_string();
    let trigger_span = trigger_cx.span().span_context().span_id().to_string();
    let event = Event::new("kafkatriggers.kubeless.io").with_body(r#"{"n":1}"#);
    let (header, context) = deliver(&invoker, &target, &event)
        .instrument(trigger.clone())
        .await;
    drop(trigger);
    assert_eq!(header, context, "the function's context carries its header");
    let (fn_trace, fn_parent) = ids(&header);
    assert_eq!(
        fn_trace, trigger_trace,
        "one trace from trigger to function"
    );

    // 2. A producer traced its message (a `traceparent` record header): the call continues it.
    const PRODUCER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PRODUCER_SPAN: &str = "00f067aa0ba902b7";
    let mut carrier = std::collections::HashMap::new();
    carrier.insert(
        "traceparent".to_owned(),
        format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01"),
    );
    let producer = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    let event = Event::new("kafkatriggers.kubeless.io")
        .with_body("x")
        .with_parent(producer);
    let (header2, context2) = deliver(&invoker, &target, &event).await;
    assert_eq!(header2, context2);
    let (fn_trace2, fn_parent2) = ids(&header2);
    assert_eq!(fn_trace2, PRODUCER_TRACE);

    // Flush the trigger's spans (the runtime flushes on its own schedule).
    telemetry.shutdown().await;

    // Chain 1: function context -> runtime server span -> invoker client span -> trigger span.
    let (svc, server) = span_with_id(&got, &fn_parent).await;
    assert_eq!(svc, "fixture-fn");
    assert_eq!(server.kind, SPAN_KIND_SERVER);
    assert_eq!(hex::encode(&server.trace_id), trigger_trace);
    let client_id = hex::encode(&server.parent_span_id);
    let (svc, client) = span_with_id(&got, &client_id).await;
    assert_eq!(svc, "fixture-trigger");
    assert_eq!(client.kind, SPAN_KIND_CLIENT);
    assert_eq!(client.name, "POST");
    assert_eq!(hex::encode(&client.trace_id), trigger_trace);
    assert_eq!(hex::encode(&client.parent_span_id), trigger_span);
    let (svc, deliver_span) = span_with_id(&got, &trigger_span).await;
    assert_eq!(svc, "fixture-trigger");
    assert_eq!(deliver_span.kind, SPAN_KIND_CONSUMER);
    assert_eq!(deliver_span.name, "deliver");

    // Chain 2: function context -> server span -> client span -> the producer's span.
    let (_, server2) = span_with_id(&got, &fn_parent2).await;
    assert_eq!(server2.kind, SPAN_KIND_SERVER);
    assert_eq!(hex::encode(&server2.trace_id), PRODUCER_TRACE);
    let (_, client2) = span_with_id(&got, &hex::encode(&server2.parent_span_id)).await;
    assert_eq!(client2.kind, SPAN_KIND_CLIENT);
    assert_eq!(hex::encode(&client2.parent_span_id), PRODUCER_SPAN);
    assert_eq!(hex::encode(&client2.trace_id), PRODUCER_TRACE);
}
