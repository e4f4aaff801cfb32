//! Helpers shared by the end-to-end tests in `tests/`.

use std::path::{Path, PathBuf};

/// The repository root (the workspace this crate lives in).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Splits a multi-document YAML text into JSON values, skipping empty documents.
pub fn yaml_documents(text: &str) -> Result<Vec<serde_json::Value>, serde_yaml::Error> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}
