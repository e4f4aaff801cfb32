//! Helpers shared by the end-to-end tests in `tests/`.

use std::path::{Path, PathBuf};

/// The repository root (the workspace this crate lives in).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// `<target>/debug` of the running test binary (`<target>/debug/deps/<test>-<hash>`): where
/// `cargo build --workspace --bins` left the binaries the tests start.
pub fn target_debug_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target/debug"))
}

/// Fails the test unless every binary in `bins` was built ([`kubeless_testkit::workspace_bin`]
/// checks each).
pub fn require_bins(bins: &[&str]) {
    for bin in bins {
        kubeless_testkit::workspace_bin(bin);
    }
}

/// Splits a multi-document YAML text into JSON values, skipping empty documents.
pub fn yaml_documents(text: &str) -> Result<Vec<serde_json::Value>, serde_yaml_ng::Error> {
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}
pub mod build;
pub mod faults;
pub mod images;
pub mod scale;
