//! The container images of scripts/images.sh (buildah, no Docker daemon) and a loopback
//! registry to push them to, for the tests that run them with podman.
// Test fixtures: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

pub use kubeless_testkit::output_text as text;

use crate::repo_root;

/// scripts/images.sh.
pub fn script() -> PathBuf {
    repo_root().join("scripts/images.sh")
}

/// Runs `cmd` with no stdin; panics with its output unless it succeeds.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out));
    out
}

/// `scripts/images.sh ARGS...`, which must succeed. `build` packs the binaries a former
/// `scripts/images.sh build` compiled (scripts/test.sh runs it before the tests): a test never
/// runs a nested cargo build, and says so when the binaries are missing.
pub fn images_sh(args: &[&str]) -> Output {
    run(Command::new("bash")
        .arg(script())
        .args(args)
        .env("KUBELESS_IMAGE_SKIP_CARGO", "1"))
}

/// The tag scripts/images.sh gives the image `name` (`images.sh names`: NAME TAG DOCKERFILE).
pub fn image_tag(name: &str) -> String {
    let out = images_sh(&["names"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut fields = l.split_whitespace();
            (fields.next() == Some(name)).then(|| fields.next().map(str::to_string))?
        })
        .unwrap_or_else(|| panic!("{name} not in `scripts/images.sh names`:\n{}", text(&out)))
}

/// Why podman cannot run containers here, or None when it can.
pub fn podman_unusable() -> Option<String> {
    match Command::new("podman")
        .args(["info", "--format", "{{.Host.OCIRuntime.Name}}"])
        .stdin(Stdio::null())
        .output()
    {
        Err(e) => Some(format!("podman is not installed ({e})")),
        Ok(o) if !o.status.success() => Some(format!("`podman info` failed: {}", text(&o))),
        Ok(_) => None,
    }
}

/// Debian's docker-registry on 127.0.0.1 (`images.sh registry-start`), stopped by the PID it
/// wrote when dropped.
pub struct Registry {
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// `USER:PASSWORD` when it asks for basic auth.
    creds: Option<String>,
}

impl Registry {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// A registry that serves only the user `user_password` (`USER:PASSWORD`) names.
    pub fn with_auth(user_password: &str) -> Self {
        Self::start_with(Some(user_password.to_string()))
    }

    fn start_with(creds: Option<String>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["registry-start", dir.path().to_str().unwrap()];
        args.extend(creds.as_deref());
        let out = images_sh(&args);
        let addr = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{}", text(&out));
        Self { dir, addr, creds }
    }

    /// Pushes the images `names` (built by `images.sh build`) here, logged in when it asks.
    pub fn push(&self, names: &[&str]) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(script())
            .args(["push", self.addr.as_str()])
            .args(names);
        if let Some(creds) = &self.creds {
            cmd.env("KUBELESS_REGISTRY_CREDS", creds);
        }
        run(&mut cmd)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // The copies podman pulled from this registry go with it (their layers are shared with
        // the local images, the names would pile up run after run).
        if let Ok(out) = Command::new("podman")
            .args(["images", "--format", "{{.Repository}}:{{.Tag}}"])
            .output()
        {
            let prefix = format!("{}/", self.addr);
            for name in String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.starts_with(&prefix))
            {
                let _ = Command::new("podman")
                    .args(["rmi", "--ignore", name])
                    .output();
            }
        }
        let _ = Command::new("bash")
            .arg(script())
            .args(["registry-stop", self.dir.path().to_str().unwrap()])
            .output();
    }
}
