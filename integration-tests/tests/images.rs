//! The container images, built by scripts/images.sh with buildah (no Docker daemon) from the
//! Dockerfiles in the repo: a rebuild with unchanged inputs is cached, the Rust service images are
//! a minimal root filesystem of at most 30 MB with no shell or build tool, every image runs as the
//! numeric user 65532 and carries the OCI labels, and the images pushed to Debian's
//! docker-registry on loopback run with podman from there.
//!
//! Needs buildah, podman, runc, docker-registry and debootstrap (scripts/lib.sh ensure_tools
//! installs them) and root. scripts/test.sh runs `scripts/images.sh build` before `cargo test`
//! (the cold build, whose times it prints); this test rebuilds (cached) and checks the result.
#![cfg(test)]

use std::{collections::BTreeMap, process::Command, time::Instant};

use integration_tests::images::{Registry, run, script};
use integration_tests::{repo_root, target_debug_dir};
use kubeless_testkit::free_port;

const MAX_SERVICE_IMAGE_BYTES: u64 = 30 * 1000 * 1000;

fn require_tools() {
    for tool in [
        "buildah",
        "podman",
        "runc",
        "docker-registry",
        "debootstrap",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            found,
            "{tool} is missing: `source scripts/lib.sh && ensure_containers` (or apt-get install buildah podman runc docker-registry debootstrap); scripts/test.sh does it"
        );
    }
}

/// `NAME TAG DOCKERFILE` of every image.
fn names() -> Vec<(String, String)> {
    let out = run(Command::new("bash").arg(script()).arg("names"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            (f.next().unwrap().to_string(), f.next().unwrap().to_string())
        })
        .collect()
}

fn inspect(reference: &str) -> serde_json::Value {
    let out = run(Command::new("podman").args(["image", "inspect", reference]));
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0].take()
}

/// The file paths in an image's root filesystem.
fn files(reference: &str) -> Vec<String> {
    let id =
        String::from_utf8_lossy(&run(Command::new("podman").args(["create", reference])).stdout)
            .trim()
            .to_string();
    let out = run(Command::new("sh").args([
        "-c",
        &format!("podman export {id} | tar -t; podman rm -f {id} >/dev/null"),
    ]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect()
}

fn is_rust_service(name: &str) -> bool {
    !name.starts_with("runtime-")
}

/// Compilers, linkers and package managers no image may ship unless it needs them.
const BUILD_TOOLS: &[&str] = &[
    "cargo", "rustc", "gcc", "cc", "ld", "go", "javac", "mvn", "composer", "bundle", "npm", "pip3",
];

/// The build tools a runtime image must ship: its init steps run in the image itself (the
/// function-controller uses the runtime image for `install` and `compile`), so pip, npm, bundler
/// and composer install a function's dependencies, and the Go toolchain, javac and Maven build
/// the function. None of them links C: there is still no C compiler or linker in any image.
fn init_tools(name: &str) -> &'static [&'static str] {
    match name {
        "runtime-python" => &["pip3"],
        "runtime-nodejs" => &["npm"],
        "runtime-ruby" => &["bundle"],
        "runtime-php" => &["composer"],
        "runtime-go" => &["go"],
        "runtime-java" => &["javac", "mvn"],
        _ => &[],
    }
}

/// The interpreter or toolchain a runtime image runs, as `(entrypoint, args, expected)`: the
/// command's output (stdout and stderr) must contain `expected`.
fn version_check(name: &str) -> Option<(&'static str, &'static [&'static str], &'static str)> {
    Some(match name {
        "runtime-ruby" => (
            "ruby",
            &["-e", "require 'bundler'; puts \"ruby #{RUBY_VERSION}\""],
            "ruby 3.1.",
        ),
        "runtime-php" => (
            "php",
            &[
                "-r",
                "echo 'php ', PHP_MAJOR_VERSION, '.', PHP_MINOR_VERSION, PHP_EOL;",
            ],
            "php 8.2",
        ),
        "runtime-go" => ("go", &["version"], "go version go1.19"),
        "runtime-java" => ("javac", &["-version"], "javac 17."),
        _ => return None,
    })
}

#[test]
fn images_build_cached_small_labelled_non_root_and_run_from_the_registry() {
    require_tools();
    // The images were built cold by scripts/test.sh; this rebuild must reuse every layer.
    let start = Instant::now();
    let out = run(Command::new("bash")
        .arg(script())
        .arg("build")
        .env("KUBELESS_IMAGE_SKIP_CARGO", "1"));
    let cached = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    kubeless_testkit::report!("{stdout}");
    kubeless_testkit::report!(
        "cached rebuild of every image: {:.1} s",
        cached.as_secs_f64()
    );
    assert!(
        cached.as_secs() < 120,
        "a rebuild with unchanged inputs took {cached:?}: layers are not cached"
    );

    let mut built = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.starts_with("IMAGE ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        built.insert(
            f[1].to_string(),
            (f[2].to_string(), f[3].parse::<u64>().unwrap()),
        );
    }
    let expected = names();
    assert_eq!(built.len(), expected.len(), "every image built: {stdout}");

    let revision = String::from_utf8_lossy(
        &run(Command::new("git")
            .arg("-C")
            .arg(repo_root())
            .args(["rev-parse", "HEAD"]))
        .stdout,
    )
    .trim()
    .to_string();
    for (name, (reference, size)) in &built {
        kubeless_testkit::report!("image {name}: {:.1} MB", *size as f64 / 1e6);
        let info = inspect(reference);
        let config = &info["Config"];
        assert_eq!(config["User"], "65532:65532", "{name} runs as user 65532");
        let labels = &config["Labels"];
        for label in ["source", "version", "revision", "title"] {
            let key = format!("org.opencontainers.image.{label}");
            assert!(
                labels[&key].as_str().is_some_and(|v| !v.is_empty()),
                "{name}: label {key}"
            );
        }
        assert_eq!(
            labels["org.opencontainers.image.revision"],
            revision.as_str()
        );
        let paths = files(reference);
        let has_tool = |tool: &str| paths.iter().any(|p| p.ends_with(&format!("bin/{tool}")));
        let needed = init_tools(name);
        for tool in BUILD_TOOLS {
            if needed.contains(tool) {
                assert!(
                    has_tool(tool),
                    "{name} lacks {tool}, which its init step runs"
                );
            } else {
                assert!(!has_tool(tool), "{name} ships the build tool {tool}");
            }
        }
        if is_rust_service(name) {
            assert!(
                *size <= MAX_SERVICE_IMAGE_BYTES,
                "{name} is {size} bytes, over 30 MB"
            );
            for absent in ["bin/sh", "usr/bin/apt", "usr/bin/dpkg", "bin/bash"] {
                assert!(
                    !paths.iter().any(|p| p == absent),
                    "{name} has {absent}: not a minimal root filesystem"
                );
            }
            for present in ["etc/ssl/certs/ca-certificates.crt", "etc/passwd"] {
                assert!(paths.iter().any(|p| p == present), "{name} lacks {present}");
            }
        }
    }

    // Push to Debian's docker-registry on loopback and run each image from there.
    let registry = Registry::start();
    {
        let out = registry.push(&[]);
        let pushed = String::from_utf8_lossy(&out.stdout).to_string();
        kubeless_testkit::report!("{pushed}");
        assert_eq!(
            pushed.lines().filter(|l| l.starts_with("PUSHED ")).count(),
            built.len()
        );
        for (name, tag) in &expected {
            let remote = format!("{}/kubeless-rs/{name}:{tag}", registry.addr);
            // Remove any local copy so podman really pulls from the registry.
            let _ = Command::new("podman").args(["rmi", "-f", &remote]).output();
            run(Command::new("podman").args(["pull", "--quiet", "--tls-verify=false", &remote]));
            let out = run(Command::new("podman").args([
                "run",
                "--rm",
                "--network",
                "host",
                "--read-only",
                "--cap-drop",
                "ALL",
                &remote,
                "--help",
            ]));
            let help = String::from_utf8_lossy(&out.stdout);
            assert!(help.contains("Usage"), "{name} --help: {help}");
            if name == "runtime-python" {
                let out = run(Command::new("podman").args([
                    "run",
                    "--rm",
                    "--network",
                    "host",
                    "--entrypoint",
                    "python3",
                    &remote,
                    "-c",
                    "import sys, pip; print(sys.version_info[:2])",
                ]));
                assert!(String::from_utf8_lossy(&out.stdout).contains("(3, 11)"));
            }
            if name == "runtime-nodejs" {
                let out = run(Command::new("podman").args([
                    "run",
                    "--rm",
                    "--network",
                    "host",
                    "--entrypoint",
                    "node",
                    &remote,
                    "-e",
                    "console.log(process.versions.node)",
                ]));
                let version = String::from_utf8_lossy(&out.stdout);
                assert!(version.starts_with(&format!("{tag}.")), "node {version}");
            }
            if let Some((entrypoint, args, expected)) = version_check(name) {
                let out = run(Command::new("podman")
                    .args([
                        "run",
                        "--rm",
                        "--network",
                        "none",
                        "--entrypoint",
                        entrypoint,
                        &remote,
                    ])
                    .args(args));
                let version = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                kubeless_testkit::report!("{name}: {}", version.trim());
                assert!(version.contains(expected), "{name}: {version}");
            }
        }
    }
}

/// Resident memory of a process, from /proc (KiB).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    if s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200")
}

fn wait_healthy(port: u16) -> bool {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while Instant::now() < deadline {
        if healthy(port) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    false
}

/// Each service idle in its container (podman, the image's user, read-only root), against
/// devcluster's API with the CRDs: it must answer /healthz; its resident memory is printed next
/// to the same binary run as a plain process (the baseline of the same run).
#[test]
fn idle_memory_of_each_service_in_its_container() {
    require_tools();
    let devcluster = target_debug_dir().join("devcluster");
    assert!(
        devcluster.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        devcluster.display()
    );
    let bins = target_debug_dir().parent().unwrap().join("image");
    assert!(
        bins.join("function-controller").exists(),
        "{} has no binaries: run `scripts/images.sh build` first (scripts/test.sh does)",
        bins.display()
    );
    let dir = std::env::temp_dir().join(format!("kubeless-idle-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut cluster = Command::new(&devcluster)
        .args(["up", "--no-runner", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let result = std::panic::catch_unwind(|| {
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        while !kubeconfig.exists() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
        run(Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["apply", "-f"])
            .arg(repo_root().join("deploy/crds")));
        // The image's user must be able to read it.
        let shared = dir.join("kubeconfig.shared");
        std::fs::copy(&kubeconfig, &shared).unwrap();
        run(Command::new("chmod").arg("0644").arg(&shared));

        // (image, binary, the binary's arguments as a plain process: the image's CMD).
        let services: [(&str, &str, &[&str]); 8] = [
            ("function-controller", "function-controller", &[]),
            ("http-trigger-controller", "http-trigger-controller", &[]),
            (
                "cronjob-trigger-controller",
                "cronjob-trigger-controller",
                &[],
            ),
            ("nats-trigger", "nats-trigger", &[]),
            ("kafka-trigger", "kafka-trigger", &[]),
            ("kinesis-trigger", "kinesis-trigger", &[]),
            ("redis-trigger", "redis-trigger", &[]),
            ("dashboard", "kubeless", &["ui"]),
        ];
        let mut report = Vec::new();
        for (image, binary, plain_args) in services {
            let ui_port = free_port();
            let tag = names()
                .into_iter()
                .find(|(n, _)| n == image)
                .map(|(_, t)| t)
                .unwrap();
            let reference = format!("localhost/kubeless-rs/{image}:{tag}");
            let env = |port: u16| {
                vec![
                    (
                        "KUBELESS_ADMIN_ADDR".to_string(),
                        format!("127.0.0.1:{port}"),
                    ),
                    ("KUBELESS_LOG_FORMAT".to_string(), "json".to_string()),
                    // Unreachable brokers: the services stay up and retry in the background.
                    (
                        "NATS_URL".to_string(),
                        format!("nats://127.0.0.1:{}", free_port()),
                    ),
                    (
                        "KAFKA_BROKERS".to_string(),
                        format!("127.0.0.1:{}", free_port()),
                    ),
                    // The dashboard's page (`kubeless ui`); the services ignore it.
                    ("KUBELESS_UI_PORT".to_string(), ui_port.to_string()),
                ]
            };

            // Baseline: the same binary as a plain process.
            let port = free_port();
            let mut plain = Command::new(bins.join(binary))
                .args(plain_args)
                .env("KUBECONFIG", &shared)
                .envs(env(port))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let plain_ok = wait_healthy(port);
            std::thread::sleep(std::time::Duration::from_secs(3));
            let plain_rss = rss_kib(plain.id());
            let _ = plain.kill();
            let _ = plain.wait();

            let port = free_port();
            let name = format!("kubeless-idle-{image}-{}", std::process::id());
            let mut args: Vec<String> = [
                "run",
                "-d",
                "--name",
                &name,
                "--network",
                "host",
                "--read-only",
                "--cap-drop",
                "ALL",
                "--security-opt",
                "no-new-privileges",
                "-v",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.push(format!("{}:/etc/kubeless/kubeconfig:ro", shared.display()));
            args.push("-e".into());
            args.push("KUBECONFIG=/etc/kubeless/kubeconfig".into());
            // The dashboard's access token, from a file as a mounted Secret would give it.
            let ui_token = format!("image-test-token-{}", std::process::id());
            if image == "dashboard" {
                let file = dir.join("ui-token");
                std::fs::write(&file, &ui_token).unwrap();
                args.push("-v".into());
                args.push(format!("{}:/etc/kubeless/ui-token:ro", file.display()));
                args.push("-e".into());
                args.push("KUBELESS_UI_TOKEN_FILE=/etc/kubeless/ui-token".into());
            }
            for (k, v) in env(port) {
                args.push("-e".into());
                args.push(format!("{k}={v}"));
            }
            args.push(reference.clone());
            run(Command::new("podman").args(&args));
            let ok = wait_healthy(port);
            // The dashboard in its image serves its functions page from the cluster's API.
            let page = if image == "dashboard" {
                get(ui_port, "/functions", &ui_token).unwrap_or_default()
            } else {
                String::new()
            };
            std::thread::sleep(std::time::Duration::from_secs(3));
            let pid: Option<u32> = Command::new("podman")
                .args(["inspect", "--format", "{{.State.Pid}}", &name])
                .output()
                .ok()
                .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
            let rss = pid.and_then(rss_kib);
            let logs = Command::new("podman")
                .args(["logs", "--tail", "5", &name])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stderr).to_string())
                .unwrap_or_default();
            let _ = Command::new("podman")
                .args(["rm", "-f", "-t", "2", &name])
                .output();
            let mib = |k: Option<u64>| {
                k.map_or("-".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
            };
            report.push(format!(
                "{image}: idle in its container {} (plain process {}){}",
                mib(rss),
                mib(plain_rss),
                if rss.is_some_and(|k| k > 10 * 1024) {
                    "  [over the 10 MiB goal]"
                } else {
                    ""
                }
            ));
            assert!(
                plain_ok,
                "{image} as a plain process never answered /healthz"
            );
            assert!(
                ok,
                "{image} in its container never answered /healthz:\n{logs}"
            );
            assert!(rss.is_some(), "{image}: no resident memory read");
            if image == "dashboard" {
                assert!(
                    page.starts_with("HTTP/1.1 200") && page.contains("Functions"),
                    "the dashboard image did not serve its page: {page:.400}\n{logs}"
                );
            }
        }
        kubeless_testkit::report!("{}", report.join("\n"));
    });
    let _ = cluster.kill();
    let _ = cluster.wait();
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// GET `path` on 127.0.0.1:`port`; the whole response, or None if the connection failed.
fn get(port: u16, path: &str, bearer: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {bearer}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

/// POST `body` to / on 127.0.0.1:`port`; the whole response, or None if the connection failed.
fn post(port: u16, body: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    // The first call starts a worker (a JVM for Java) on a loaded machine.
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(120)));
    s.write_all(format!(
        "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ).as_bytes())
        .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

/// Each Ruby, PHP, Go and Java image runs a function the way the function-controller's pod does:
/// the runtime's fixture in a volume owned by user 65532, the `compile` init step in the image for
/// Go and Java (its time is printed: Go's is short because the image ships a warm build cache;
/// Java's fixture has a pom.xml, so Maven resolves commons-io offline from the image's Debian
/// repository), then the image's default command serving it; a call must return the function's
/// answer.
#[test]
fn ruby_php_go_java_images_serve_a_function() {
    require_tools();
    let fixtures = repo_root().join("runtimes/proxy/tests/fixtures");
    // (image, fixture folder, FUNC_RUNTIME, MOD_NAME, FUNC_HANDLER, compile step, body, answer)
    let cases = [
        (
            "runtime-ruby",
            "ruby",
            "ruby3.1",
            "funcs",
            "hello",
            false,
            "x",
            "hello world",
        ),
        (
            "runtime-php",
            "php",
            "php8.2",
            "funcs",
            "hello",
            false,
            "x",
            "hello world",
        ),
        (
            "runtime-go",
            "go",
            "go1.19",
            "funcs",
            "Echo",
            true,
            "from go",
            "from go",
        ),
        (
            "runtime-java",
            "java-deps",
            "java17",
            "Ext",
            "ext",
            true,
            "report.tar.gz",
            "gz",
        ),
    ];
    let tags: BTreeMap<String, String> = names().into_iter().collect();
    let mut report = Vec::new();
    for (image, fixture, runtime, module, handler, compiled, body, expected) in cases {
        let reference = format!("localhost/kubeless-rs/{image}:{}", tags[image]);
        let present = Command::new("podman")
            .args(["image", "exists", &reference])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            present,
            "{reference} is not built: `KUBELESS_IMAGE_SKIP_CARGO=1 scripts/images.sh build {image}` (scripts/test.sh builds every image)"
        );
        let vol = std::env::temp_dir().join(format!("kubeless-{image}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&vol);
        std::fs::create_dir_all(&vol).unwrap();
        for entry in std::fs::read_dir(fixtures.join(fixture)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), vol.join(entry.file_name())).unwrap();
        }
        // The pod's emptyDir belongs to the function's group (fsGroup 65532).
        run(Command::new("chown").arg("-R").arg("65532:65532").arg(&vol));
        let mount = format!("{}:/kubeless", vol.display());
        let env = [
            format!("FUNC_RUNTIME={runtime}"),
            format!("MOD_NAME={module}"),
            format!("FUNC_HANDLER={handler}"),
            "KUBELESS_INSTALL_VOLUME=/kubeless".to_string(),
        ];
        let env_args: Vec<String> = env
            .iter()
            .flat_map(|e| ["-e".to_string(), e.clone()])
            .collect();
        let result = std::panic::catch_unwind(|| {
            let mut line = format!("{image}:");
            if compiled {
                let start = Instant::now();
                run(Command::new("podman")
                    .args([
                        "run",
                        "--rm",
                        "--network",
                        "none",
                        "--cap-drop",
                        "ALL",
                        "-v",
                        &mount,
                    ])
                    .args(&env_args)
                    .args([&reference, "compile"]));
                line.push_str(&format!(
                    " compile step {:.1} s,",
                    start.elapsed().as_secs_f64()
                ));
            }
            let port = free_port();
            let name = format!("kubeless-serve-{image}-{}", std::process::id());
            let start = Instant::now();
            run(Command::new("podman")
                .args([
                    "run",
                    "-d",
                    "--name",
                    &name,
                    "--network",
                    "host",
                    "--cap-drop",
                    "ALL",
                ])
                .args(["--security-opt", "no-new-privileges", "-v", &mount])
                .args(&env_args)
                .args([
                    "-e".to_string(),
                    format!("FUNC_PORT={port}"),
                    "-e".to_string(),
                    "KUBELESS_LISTEN_ADDRESS=127.0.0.1".to_string(),
                    reference.clone(),
                ]));
            let ok = wait_healthy(port);
            let answer = if ok { post(port, body) } else { None };
            line.push_str(&format!(
                " healthy and first call answered in {:.1} s",
                start.elapsed().as_secs_f64()
            ));
            let logs = Command::new("podman")
                .args(["logs", "--tail", "20", &name])
                .output()
                .map(|o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .unwrap_or_default();
            let _ = Command::new("podman")
                .args(["rm", "-f", "-t", "2", &name])
                .output();
            assert!(ok, "{image} never answered /healthz:\n{logs}");
            let answer = answer.unwrap_or_default();
            assert!(
                answer.starts_with("HTTP/1.1 200")
                    && answer.ends_with(&format!("\r\n\r\n{expected}")),
                "{image}: POST {body:?} answered {answer:?}, not {expected:?}\n{logs}"
            );
            line
        });
        let _ = std::fs::remove_dir_all(&vol);
        match result {
            Ok(line) => report.push(line),
            Err(e) => std::panic::resume_unwind(e),
        }
    }
    kubeless_testkit::report!("{}", report.join("\n"));
}
