#![cfg(test)]
//! `kubectl exec` (WebSocket, v5.channel.k8s.io) against the server, with a test
//! backend standing in for the pod runner.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use devcluster_apiserver::exec::{ContainerProcess, ExecBackend};
use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use kubeless_testkit::kubectl;

struct Fixed(PathBuf);

impl ExecBackend for Fixed {
    fn container(&self, ns: &str, pod: &str, container: &str) -> Option<ContainerProcess> {
        (ns == "default" && pod == "box" && container == "main").then(|| ContainerProcess {
            env: BTreeMap::from([
                ("PATH".to_string(), "/usr/bin:/bin".to_string()),
                ("GREETING".to_string(), "from-the-container".to_string()),
            ]),
            cwd: self.0.clone(),
            stdin: None,
            stdin_once: false,
            argv_prefix: Vec::new(),
        })
    }
}

#[tokio::test]
async fn kubectl_exec_runs_in_the_container_env_and_returns_the_exit_code() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("marker"), "here").unwrap();
    assert!(server.set_exec_backend(Arc::new(Fixed(dir.path().to_path_buf()))));
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "box"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client, "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    let kc = server.kubeconfig_path().to_path_buf();

    let out = tokio::task::spawn_blocking(move || {
        let exit = kubectl(
            &kc,
            &[
                "exec",
                "box",
                "--",
                "sh",
                "-c",
                "echo hi; echo oops >&2; exit 3",
            ],
            None,
        );
        let env = kubectl(
            &kc,
            &[
                "exec",
                "box",
                "--",
                "sh",
                "-c",
                "echo $GREETING; cat marker",
            ],
            None,
        );
        let stdin = kubectl(
            &kc,
            &["exec", "-i", "box", "--", "tr", "a-z", "A-Z"],
            Some("shout\n"),
        );
        let missing = kubectl(&kc, &["exec", "box", "-c", "nope", "--", "true"], None);
        // RBAC: `get` on pods/exec is not enough for a WebSocket exec; `create` is needed.
        for args in [
            &["create", "serviceaccount", "runner"][..],
            &[
                "create",
                "role",
                "exec-get",
                "--verb=get",
                "--resource=pods,pods/exec",
            ],
            &[
                "create",
                "rolebinding",
                "exec-get",
                "--role=exec-get",
                "--serviceaccount=default:runner",
            ],
        ] {
            let o = kubectl(&kc, args, None);
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let token = kubectl(&kc, &["create", "token", "runner"], None);
        let token = String::from_utf8_lossy(&token.stdout).trim().to_string();
        let token_arg = format!("--token={token}");
        let get_only = kubectl(&kc, &[&token_arg, "exec", "box", "--", "true"], None);
        let o = kubectl(
            &kc,
            &[
                "create",
                "role",
                "exec-create",
                "--verb=create",
                "--resource=pods/exec",
            ],
            None,
        );
        assert!(o.status.success());
        let o = kubectl(
            &kc,
            &[
                "create",
                "rolebinding",
                "exec-create",
                "--role=exec-create",
                "--serviceaccount=default:runner",
            ],
            None,
        );
        assert!(o.status.success());
        let with_create = kubectl(&kc, &[&token_arg, "exec", "box", "--", "true"], None);
        (exit, env, stdin, missing, get_only, with_create)
    })
    .await
    .unwrap();
    let (exit, env, stdin, missing, get_only, with_create) = out;
    let text = |o: &std::process::Output| {
        format!(
            "{}|{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert_eq!(exit.status.code(), Some(3), "{}", text(&exit));
    assert_eq!(
        String::from_utf8_lossy(&exit.stdout),
        "hi\n",
        "{}",
        text(&exit)
    );
    assert!(
        String::from_utf8_lossy(&exit.stderr).contains("oops"),
        "{}",
        text(&exit)
    );
    assert!(env.status.success(), "{}", text(&env));
    assert_eq!(
        String::from_utf8_lossy(&env.stdout),
        "from-the-container\nhere",
        "{}",
        text(&env)
    );
    assert!(stdin.status.success(), "{}", text(&stdin));
    assert_eq!(
        String::from_utf8_lossy(&stdin.stdout),
        "SHOUT\n",
        "{}",
        text(&stdin)
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("not valid for pod"),
        "{}",
        text(&missing)
    );
    assert!(!get_only.status.success(), "{}", text(&get_only));
    assert!(
        String::from_utf8_lossy(&get_only.stderr).contains("cannot create resource \"pods/exec\""),
        "{}",
        text(&get_only)
    );
    assert!(with_create.status.success(), "{}", text(&with_create));
}

/// kubectl falls back to SPDY when its WebSocket request fails; devcluster has no SPDY for
/// exec and attach, and says so, where a request with no upgrade at all gets the real
/// server's plain answer.
#[tokio::test]
async fn an_spdy_exec_or_attach_is_told_devcluster_speaks_websocket_only() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    assert!(server.set_exec_backend(Arc::new(Fixed(dir.path().to_path_buf()))));
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "box"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    for sub in ["exec?command=true&stdout=true", "attach?stdout=true"] {
        let uri = format!("/api/v1/namespaces/default/pods/box/{sub}");
        let refused = |req: http::Request<Vec<u8>>| {
            let client = client.clone();
            async move {
                match client.request_text(req).await {
                    Err(kube::Error::Api(status)) => status,
                    other => panic!("{sub}: expected a 400 Status, got {other:?}"),
                }
            }
        };
        let spdy = refused(
            http::Request::post(&uri)
                .header("connection", "Upgrade")
                .header("upgrade", "SPDY/3.1")
                .header("x-stream-protocol-version", "v4.channel.k8s.io")
                .body(Vec::new())
                .unwrap(),
        )
        .await;
        assert_eq!(spdy.code, 400, "{sub}: {spdy:?}");
        let what = sub.split('?').next().unwrap();
        assert!(
            spdy.message
                .contains(&format!("pods/{what} over WebSocket"))
                && spdy.message.contains("not SPDY"),
            "{sub}: {}",
            spdy.message
        );
        let plain = refused(http::Request::get(&uri).body(Vec::new()).unwrap()).await;
        assert_eq!(plain.code, 400, "{sub}: {plain:?}");
        assert_eq!(plain.message, "Upgrade request required", "{sub}");
    }
}
