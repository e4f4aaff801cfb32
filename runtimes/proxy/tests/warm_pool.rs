//! Warm pool mode: a runtime started without a function takes one through the authenticated
//! specialize call, then serves it like a function container.
#![cfg(test)]

mod common;

use std::process::Child;
use std::time::{Duration, Instant};

use common::{Lang, Opts, child_pids, client, free_port, require_interpreter, serve_command};
use kubeless_api::warm::{EnvPair, SPECIALIZE_PATH, Source, SpecializeRequest};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

struct PoolRuntime {
    child: Child,
    base: String,
    logs: tempfile::TempDir,
    _volume: tempfile::TempDir,
}

impl Drop for PoolRuntime {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PoolRuntime {
    async fn start(lang: Lang) -> Self {
        require_interpreter(lang);
        let port = free_port();
        let volume = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let mut cmd = serve_command(
            lang,
            &Opts {
                volume: Some(volume.path().to_path_buf()),
                workers: 1,
                ..Opts::default()
            },
            port,
        );
        cmd.env_remove("FUNC_HANDLER")
            .env_remove("MOD_NAME")
            .env("KUBELESS_POOL_TOKEN", TOKEN)
            .stdout(std::fs::File::create(logs.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(logs.path().join("stderr")).unwrap());
        let mut child = cmd.spawn().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let c = client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "pool runtime exited ({status}): {}",
                    std::fs::read_to_string(logs.path().join("stderr")).unwrap_or_default()
                );
            }
            if let Ok(r) = c.get(format!("{base}/healthz")).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(Instant::now() < deadline, "pool runtime not ready in 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            child,
            base,
            logs,
            _volume: volume,
        }
    }

    async fn specialize(&self, token: &str, req: &SpecializeRequest) -> (u16, String) {
        let r = client()
            .post(format!("{}{SPECIALIZE_PATH}", self.base))
            .bearer_auth(token)
            .json(req)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("stderr")).unwrap_or_default()
    }
}

fn request(lang: Lang, code: &str) -> SpecializeRequest {
    let (file, module) = match lang {
        Lang::Python => ("greet.py", "greet"),
        _ => ("greet.js", "greet"),
    };
    let env = |name: &str, value: &str| EnvPair {
        name: name.into(),
        value: value.into(),
    };
    SpecializeRequest {
        env: vec![
            env("FUNC_HANDLER", "greet"),
            env("MOD_NAME", module),
            env("FUNC_TIMEOUT", "7"),
            env("FUNC_RUNTIME", lang.runtime()),
            env("GREETING", "hi from the pool"),
        ],
        source: Source {
            file: file.into(),
            content: code.into(),
            content_type: "text".into(),
            checksum: String::new(),
        },
    }
}

const PYTHON: &str = "import os\ndef greet(event, context):\n    return os.environ['GREETING'] + ' ' + context['timeout'] + ' ' + event['data'].decode()\n";
const NODE: &str = "module.exports = { greet: (event, context) => process.env.GREETING + ' ' + context.timeout + ' ' + event.data };\n";

async fn specialize_then_serve(lang: Lang, code: &str) {
    let rt = PoolRuntime::start(lang).await;
    let c = client();
    // No function yet: calls are refused, health is fine (the pod is a ready pool member).
    let r = c
        .post(format!("{}/", rt.base))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    // The token is required.
    let req = request(lang, code);
    let (status, _) = rt
        .specialize("wrong-token-of-the-same-length!!", &req)
        .await;
    assert_eq!(status, 401);
    let started = Instant::now();
    let (status, body) = rt.specialize(TOKEN, &req).await;
    assert_eq!(status, 200, "{body}: {}", rt.stderr());
    println!(
        "{lang:?}: specialized in {:.1} ms ({body})",
        started.elapsed().as_secs_f64() * 1000.0
    );
    let text = c
        .post(format!("{}/", rt.base))
        .header("content-type", "text/plain")
        .body("world")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "hi from the pool 7 world", "{}", rt.stderr());
    // A pool pod takes one function only.
    let (status, _) = rt.specialize(TOKEN, &req).await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn python_pool_runtime_takes_a_function() {
    specialize_then_serve(Lang::Python, PYTHON).await;
}

#[tokio::test]
async fn node_pool_runtime_takes_a_function() {
    specialize_then_serve(Lang::Nodejs, NODE).await;
}

#[tokio::test]
async fn broken_code_or_source_is_refused_and_the_pod_stays_free() {
    let rt = PoolRuntime::start(Lang::Python).await;
    let mut bad = request(Lang::Python, "def greet(:\n");
    let (status, body) = rt.specialize(TOKEN, &bad).await;
    assert_eq!(status, 422, "{body}");
    bad.source.file = "../escape.py".into();
    let (status, body) = rt.specialize(TOKEN, &bad).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("not a plain file name"), "{body}");
    let (status, body) = rt
        .specialize(
            TOKEN,
            &SpecializeRequest {
                source: Source {
                    checksum: "sha256:00".into(),
                    ..request(Lang::Python, PYTHON).source
                },
                ..request(Lang::Python, PYTHON)
            },
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("checksum"), "{body}");
    // Still free: a good function is taken afterwards.
    let (status, body) = rt.specialize(TOKEN, &request(Lang::Python, PYTHON)).await;
    assert_eq!(status, 200, "{body}: {}", rt.stderr());
}

#[tokio::test]
async fn the_first_worker_was_started_ahead_and_never_sees_the_token() {
    for (lang, code) in [
        (
            Lang::Python,
            "import os\ndef greet(event, context):\n    return repr(os.environ.get('KUBELESS_POOL_TOKEN')) + ' ' + os.environ['GREETING'] + ' ' + str(os.getpid())\n",
        ),
        (
            Lang::Nodejs,
            "module.exports = { greet: () => String(process.env.KUBELESS_POOL_TOKEN) + ' ' + process.env.GREETING + ' ' + process.pid };\n",
        ),
    ] {
        let rt = PoolRuntime::start(lang).await;
        // The standby worker is already running before any function arrives.
        let standby: Vec<u32> = child_pids(rt.child.id());
        assert_eq!(
            standby.len(),
            1,
            "{lang:?}: one standby worker, not {standby:?}"
        );
        let req = request(lang, code);
        let (status, body) = rt.specialize(TOKEN, &req).await;
        assert_eq!(status, 200, "{body}: {}", rt.stderr());
        let text = client()
            .get(format!("{}/", rt.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let none = if lang == Lang::Python {
            "None"
        } else {
            "undefined"
        };
        assert_eq!(
            text,
            format!("{none} hi from the pool {}", standby[0]),
            "{lang:?}: the standby worker serves, without the token"
        );
    }
}
