//! Writes deploy/crds/<plural>.kubeless.io.yaml from the CRD types, and the same files into the
//! umbrella Helm chart's crds/ folder (Helm installs CRDs from there before anything else).
//! Usage: `cargo run -p kubeless-api --bin crdgen [OUT_DIR]` (default: both of the workspace's folders).

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dirs = match std::env::args_os().nth(1) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => vec![
            root.join("deploy/crds"),
            root.join("deploy/helm/kubeless/crds"),
        ],
    };
    let files = match kubeless_api::crd_yaml_files() {
        Ok(files) => files,
        Err(err) => {
            eprintln!("crdgen: rendering CRDs failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    for dir in dirs {
        if let Err(err) = std::fs::create_dir_all(&dir) {
            eprintln!("crdgen: creating {}: {err}", dir.display());
            return ExitCode::FAILURE;
        }
        for (name, yaml) in &files {
            let path = dir.join(name);
            if let Err(err) = std::fs::write(&path, yaml) {
                eprintln!("crdgen: writing {}: {err}", path.display());
                return ExitCode::FAILURE;
            }
            println!("wrote {}", path.display());
        }
    }
    ExitCode::SUCCESS
}
