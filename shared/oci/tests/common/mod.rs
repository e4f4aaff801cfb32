//! A loopback Debian docker-registry for the tests (`scripts/images.sh registry-start`), stopped
//! when dropped. Shared with builder/tests through `#[path]`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;

/// The repository root (where scripts/images.sh is), from this crate's manifest dir.
pub fn repo_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    while !dir.join("scripts/images.sh").exists() {
        assert!(
            dir.pop(),
            "scripts/images.sh not found above {}",
            env!("CARGO_MANIFEST_DIR")
        );
    }
    dir
}

pub struct TestRegistry {
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl TestRegistry {
    /// None (and a SKIP line) when Debian's docker-registry is not installed.
    pub fn start(creds: Option<&str>) -> Option<Self> {
        let installed = Command::new("sh")
            .args(["-c", "command -v docker-registry"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            eprintln!(
                "SKIP: docker-registry is not installed (apt-get install -y docker-registry, or scripts/lib.sh ensure_containers)"
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("scripts/images.sh"))
            .arg("registry-start")
            .arg(dir.path())
            .args(creds)
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        let addr = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && addr.starts_with("127.0.0.1:"),
            "registry-start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Self { dir, addr })
    }

    /// `ADDR/NAME`.
    pub fn image(&self, name: &str) -> String {
        format!("{}/{name}", self.addr)
    }

    /// dockerconfigjson content with `user:password` for this registry, as an `auth` field.
    pub fn docker_config(&self, user: &str, password: &str) -> Vec<u8> {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.addr).into_bytes()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/images.sh"))
            .arg("registry-stop")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .output();
    }
}

/// Writes `files` (path, content, mode) under `dir`.
pub fn write_tree(dir: &Path, files: &[(&str, &str, u32)]) {
    use std::os::unix::fs::PermissionsExt;
    for (path, content, mode) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode)).unwrap();
    }
}
