//! The parts every event trigger (kafka-trigger, nats-trigger, kinesis-trigger, and a trigger of
//! your own) needs besides its broker code. Today: choosing the Functions a trigger's
//! `functionSelector` selects ([`selector`]). The invoker, function targets and retry policy
//! live in `kubeless-invoke`; status and Events in `kubeless-service`.

pub mod selector;

pub use selector::{FunctionSelector, SelectorError};
