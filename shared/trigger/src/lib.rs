//! The trigger runtime: everything an event trigger (kafka-trigger, nats-trigger,
//! kinesis-trigger, the Redis Streams example, or a trigger of your own) needs besides its
//! broker code. docs/custom-trigger.md shows how to write one.
//!
//! * [`controller`]: the control loop. A trigger implements [`Source`] (its CRD, a pure plan
//!   from triggers and Functions to units, and how to start a unit); the loop watches both
//!   kinds (guarded), starts, stops and restarts units, writes status conditions with
//!   observedGeneration (on the Lease holder) and InvalidSpec Events, and drains on shutdown.
//! * [`unit`]: [`UnitTask`], a unit that is one task reporting its state.
//! * [`selector`]: which Functions a `functionSelector` selects (kube's own Selector).
//! * [`deliver`]: one event to one function: retry policy, holding while the function is
//!   unavailable, Warning Events, dead letters.
//! * [`metrics`]: the metric families every trigger exports.
//! * [`service`]: the flags every trigger has and [`serve`], what a trigger binary runs.
//! * [`resolution`]: the endpoint-resolution flags and the resolver they build.
//!
//! Function targets, the invoker and traceparent come from `kubeless-invoke`; the service
//! scaffold (flags, admin server, Lease election, shutdown) from `kubeless-service`.

pub mod controller;
pub mod deliver;
pub mod metrics;
pub mod resolution;
pub mod selector;
pub mod service;
pub mod status;
pub mod unit;

pub use controller::{
    Plan, PlannedUnit, Problem, Running, Settings, Source, TriggerPlan, TriggerStatus, Unit,
    UnitContext, UnitState, run,
};
pub use deliver::{
    Delivered, Delivery, Destination, Failure, Finished, PairDelivery, retry_policy,
};
pub use metrics::{Names, PairMetrics, TriggerMetrics};
pub use resolution::{EndpointResolution, Resolution, ResolutionArgs};
pub use selector::{FunctionSelector, SelectorError};
pub use service::{Calls, Parts, TriggerArgs, activity, serve};
pub use unit::{StateSender, UnitTask, reconnecting};
