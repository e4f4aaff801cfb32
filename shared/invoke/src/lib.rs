//! The function invoker every trigger uses: resolve a function's endpoint, send an event with
//! the Kubeless headers (`event-id`, `event-time`, `event-type`, `event-namespace`) and a W3C
//! `traceparent`, apply the function's timeout, classify the answer and retry with backoff.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use kubeless_invoke::{ClusterDnsResolver, Event, FunctionTarget, Invoker, RetryPolicy};
//! let invoker = Invoker::new(Arc::new(ClusterDnsResolver::default()));
//! let target = FunctionTarget::new("default", "hello").with_timeout(kubeless_api::parse::parse_timeout(Some("30"))?);
//! let event = Event::new("kafkatriggers.kubeless.io").with_body(r#"{"a":1}"#);
//! let outcome = invoker.invoke_with_retry(&target, &event, &RetryPolicy::default()).await;
//! if !outcome.is_success() { /* dead-letter it */ }
//! # Ok(()) }
//! ```

pub mod activity;
pub mod event;
pub mod invoker;
pub mod lane;
pub mod resolve;
pub mod retry;
pub mod target;

pub use activity::Activity;
pub use event::Event;
pub use invoker::{CallBody, ClientOptions, InvokeError, Invoker, Outcome};
pub use lane::{Lane, LaneError, Sent};
pub use resolve::{
    ClusterDnsResolver, Endpoint, EndpointAddr, EndpointSliceResolver, Resolve, ResolveError,
    StaticResolver, ready_endpoints,
};
pub use retry::{Class, Jitter, RetryPolicy, classify_status};
pub use target::FunctionTarget;
