//! Writes `deploy/kubeless-config.yaml` (or the path given): the `kubeless-config` ConfigMap
//! describing the built-in runtimes, for the local setup and for tools built for Kubeless.

use std::{path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubeless-config.yaml")
        });
    let yaml = match function_controller::config::builtin_config_map_yaml() {
        Ok(y) => y,
        Err(e) => {
            eprintln!("kubeless-config: rendering the ConfigMap failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&path, yaml) {
        eprintln!("kubeless-config: writing {} failed: {e}", path.display());
        return ExitCode::FAILURE;
    }
    println!("{}", path.display());
    ExitCode::SUCCESS
}
