//! Writes `deploy/kubeless-config.yaml` (or the path given): the `kubeless-config` ConfigMap
//! describing the built-in runtimes, for the local setup and for tools built for Kubeless; and
//! the chart's copy of the catalogue (`files/runtime-images.json` of the function-controller
//! subchart), which its ConfigMap uses when no runtime-images value is given.

use std::{path::PathBuf, process::ExitCode};

use function_controller::config::{
    CHART_RUNTIME_IMAGES, builtin_config_map_yaml, builtin_runtime_images_json,
};

fn write(path: &PathBuf, text: Result<String, String>) -> Result<(), String> {
    let text = text.map_err(|e| format!("rendering {} failed: {e}", path.display()))?;
    std::fs::write(path, text).map_err(|e| format!("writing {} failed: {e}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}

fn main() -> ExitCode {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir.join("../../deploy/kubeless-config.yaml"));
    let chart = manifest_dir.join(CHART_RUNTIME_IMAGES);
    let result = write(&path, builtin_config_map_yaml())
        .and_then(|()| write(&chart, builtin_runtime_images_json()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubeless-config: {e}");
            ExitCode::FAILURE
        }
    }
}
