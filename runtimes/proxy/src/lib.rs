//! Kubeless-compatible function runtime.
//!
//! One binary, three jobs: `serve` (an HTTP proxy in front of a pool of
//! language worker processes), and the init steps `prepare` and `install`.
//! See docs/runtimes.md for the contract and the worker protocol.

pub mod cli;
pub mod compile;
pub mod compile_java;
pub mod install;
pub mod metrics;
pub mod noop;
pub mod pool;
pub mod prepare;
pub mod protocol;
pub mod server;
pub mod sizing;
pub mod trace;

/// An error and its sources on one line, for logs and stderr.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}
