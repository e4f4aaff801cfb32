//! Test fixtures, one copy for every test in the tree: devcluster with the CRDs installed
//! ([`TestCluster`]), a recording HTTP function registered the way a function pod shows up in a
//! cluster ([`RecordingFunction`], [`register_function`]), a real Python function pod deployed
//! by hand ([`PythonFunction`]), the real brokers on loopback
//! ([`Tansu`], [`NatsServer`], [`Moto`], [`RedisServer`]), the service binaries as child processes
//! ([`ServiceProcess`]), stock kubectl ([`kubectl`], [`jsonpath`]) and small waiting and
//! signalling helpers.
//!
//! Fixtures panic with a message that says what is missing and how to install it: they run only
//! in tests, where a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod brokers;
mod cluster;
mod function;
mod kubectl;
mod process;
mod python;

#[cfg(feature = "kafka")]
pub use brokers::produce;
pub use brokers::{MOTO_REGION, Moto, NatsServer, RedisServer, Tansu, seq_less};
#[cfg(feature = "kinesis")]
pub use brokers::{create_stream, put_record, read_stream};
pub use cluster::{
    NS, Namespaced, TestCluster, TestDir, client_with_token, create, create_aws_secret,
    invalid_spec_reported, loosened_crd, register_function, wait_ready, wait_ready_in,
};
pub use function::{Received, RecordingFunction, Reply};
pub use kubectl::{jsonpath, kubectl, kubectl_cmd, output_text};
pub use process::{
    ServiceProcess, eventually, free_port, image_map, signal, target_dir, workspace_bin,
};
pub use python::{PYTHON_IMAGE, PythonFunction};

/// Writes a line of a test's results (its numbers, or why it was skipped) straight to stderr,
/// past libtest's capture of `println!`/`eprintln!`, so a passing test shows it in CI's log too.
#[macro_export]
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
