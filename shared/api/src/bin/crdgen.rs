//! Writes deploy/crds/<plural>.kubeless.io.yaml from the CRD types.
//! Usage: `cargo run -p kubeless-api --bin crdgen [OUT_DIR]` (default: the workspace's deploy/crds).

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds"));
    let files = match kubeless_api::crd_yaml_files() {
        Ok(files) => files,
        Err(err) => {
            eprintln!("crdgen: rendering CRDs failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: creating {}: {err}", dir.display());
        return ExitCode::FAILURE;
    }
    for (name, yaml) in files {
        let path = dir.join(&name);
        if let Err(err) = std::fs::write(&path, yaml) {
            eprintln!("crdgen: writing {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
