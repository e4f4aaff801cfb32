//! `kubeless function deploy|update|list|describe|delete` against devcluster.
#![cfg(test)]

mod common;

use std::time::Duration;

use common::{Cluster, assert_snapshot, normalise};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use kubeless_api::{Condition, CronJobTrigger, Function, conditions::reasons};
use sha2::{Digest, Sha256};

const HELLO: &str = "def handler(event, context):\n    return 'hello'\n";

fn write(dir: &std::path::Path, name: &str, data: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_list_describe_update_delete() {
    let c = Cluster::start().await;
    let src = write(c.dir.path(), "hello.py", HELLO.as_bytes());
    let deps = write(c.dir.path(), "requirements.txt", b"requests==2.31.0\n");

    // --dryrun prints the object and creates nothing.
    let dry = c
        .ok(&[
            "function",
            "deploy",
            "hello",
            "-r",
            "python3.11",
            "--handler",
            "hello.handler",
            "-f",
            &src,
            "-d",
            &deps,
            "-e",
            "GREETING=hi",
            "-l",
            "team=core",
            "--memory",
            "128Mi",
            "--cpu",
            "100m",
            "--secrets",
            "creds",
            "--node-selectors",
            "disk=ssd",
            "--service-account",
            "fn-sa",
            "--servicePort",
            "80",
            "--dryrun",
        ])
        .await;
    assert_snapshot("deploy_dryrun", &dry);
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    assert!(fns.get_opt("hello").await.unwrap().is_none());

    // Real deploy (not a terminal: no waiting).
    let out = c
        .kubeless(&[
            "function",
            "deploy",
            "hello",
            "-r",
            "python3.11",
            "--handler",
            "hello.handler",
            "-f",
            &src,
            "-d",
            &deps,
            "-e",
            "GREETING=hi",
            "-l",
            "team=core",
            "--memory",
            "128Mi",
        ])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("submitted for deployment"));
    let f = fns.get("hello").await.unwrap();
    assert_eq!(f.spec.function.as_deref(), Some(HELLO));
    assert_eq!(f.spec.function_content_type.as_deref(), Some("text"));
    assert_eq!(
        f.spec.checksum.clone().unwrap(),
        format!("sha256:{}", hex::encode(Sha256::digest(HELLO.as_bytes())))
    );
    assert_eq!(f.spec.deps.as_deref(), Some("requests==2.31.0\n"));
    assert_eq!(f.spec.timeout.as_deref(), Some("180"));
    assert_eq!(
        f.metadata.labels.as_ref().unwrap()["created-by"],
        "kubeless"
    );

    // A second function whose pods exist (stand-in for the controller's Deployment).
    c.ok(&[
        "function",
        "deploy",
        "ready-fn",
        "--runtime-image",
        "example/fn:1",
        "--port",
        "8080",
    ])
    .await;
    c.fake_function_pods("default", "ready-fn").await;

    let table = c.ok(&["function", "ls"]).await;
    assert_snapshot("function_list", &table);
    assert_eq!(
        c.ok(&["function", "list", "hello"]).await.lines().count(),
        2
    );
    let yaml = c.ok(&["function", "ls", "hello", "-o", "yaml"]).await;
    assert_snapshot("function_list_yaml", &normalise(&yaml));
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["function", "ls", "-o", "json"]).await).unwrap();
    assert_eq!(json["items"].as_array().unwrap().len(), 2);

    assert_snapshot(
        "function_describe",
        &c.ok(&["function", "describe", "hello"]).await,
    );
    let described: Function =
        serde_json::from_str(&c.ok(&["function", "describe", "hello", "-o", "json"]).await)
            .unwrap();
    assert_eq!(described.spec.handler.as_deref(), Some("hello.handler"));

    // Update: only what the flags say changes.
    let v2 = write(
        c.dir.path(),
        "hello2.py",
        b"def handler(e, c):\n    return 2\n",
    );
    c.ok(&[
        "function",
        "update",
        "hello",
        "-f",
        &v2,
        "--memory",
        "256Mi",
        "--timeout",
        "30",
    ])
    .await;
    let f = fns.get("hello").await.unwrap();
    assert_eq!(
        f.spec.function.as_deref(),
        Some("def handler(e, c):\n    return 2\n")
    );
    assert_eq!(f.spec.timeout.as_deref(), Some("30"));
    assert_eq!(f.spec.runtime.as_deref(), Some("python3.11"));
    let d = f.spec.deployment_template().unwrap();
    let container = d.spec.unwrap().template.spec.unwrap().containers[0].clone();
    assert_eq!(
        container.resources.unwrap().limits.unwrap()["memory"].0,
        "256Mi"
    );
    assert_eq!(container.env.unwrap()[0].name, "GREETING");
    let err = c
        .fails(&["function", "update", "nope", "--memory", "1Mi"])
        .await;
    assert!(err.contains("Unable to find function nope"), "{err}");

    c.ok(&["function", "delete", "hello"]).await;
    assert!(fns.get_opt("hello").await.unwrap().is_none());
    assert!(
        c.fails(&["function", "delete", "hello"])
            .await
            .contains("hello")
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_archives_urls_schedule_and_validation() {
    let c = Cluster::start().await;
    let dir = c.dir.path();
    let src = write(dir, "hello.py", HELLO.as_bytes());
    // Real archives made by Python's zipfile and tarfile.
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, zipfile, tarfile, os\n\
             d = sys.argv[1]\n\
             with zipfile.ZipFile(os.path.join(d, 'fn.zip'), 'w') as z: z.write(os.path.join(d, 'hello.py'), 'hello.py')\n\
             with tarfile.open(os.path.join(d, 'fn.tar.gz'), 'w:gz') as t: t.add(os.path.join(d, 'hello.py'), 'hello.py')\n",
        )
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success());
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    for (file, ct) in [
        ("fn.zip", "base64+zip"),
        ("fn.tar.gz", "base64+compressedtar"),
    ] {
        let path = dir.join(file);
        let bytes = std::fs::read(&path).unwrap();
        let name = file.replace('.', "-");
        c.ok(&[
            "function",
            "deploy",
            &name,
            "-r",
            "python3.11",
            "--handler",
            "hello.handler",
            "-f",
            path.to_str().unwrap(),
        ])
        .await;
        let f = fns.get(&name).await.unwrap();
        assert_eq!(f.spec.function_content_type.as_deref(), Some(ct));
        assert_eq!(
            f.spec.checksum.unwrap(),
            format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
        );
        use base64::Engine;
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(f.spec.function.unwrap())
                .unwrap(),
            bytes
        );
    }

    // A URL: the CLI downloads it to compute the checksum.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        for _ in 0..1 {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf).await;
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{HELLO}",
                HELLO.len()
            );
            s.write_all(resp.as_bytes()).await.unwrap();
        }
    });
    let url = format!("http://127.0.0.1:{port}/code/hello.zip");
    let dry = c
        .ok(&[
            "function",
            "deploy",
            "from-url",
            "-r",
            "python3.11",
            "--handler",
            "hello.handler",
            "-f",
            &url,
            "--dryrun",
            "-o",
            "json",
        ])
        .await;
    let f: Function = serde_json::from_str(&dry).unwrap();
    assert_eq!(f.spec.function.as_deref(), Some(url.as_str()));
    assert_eq!(f.spec.function_content_type.as_deref(), Some("url+zip"));
    assert_eq!(
        f.spec.checksum.unwrap(),
        format!("sha256:{}", hex::encode(Sha256::digest(HELLO.as_bytes())))
    );
    server.await.unwrap();

    // --schedule also creates a cronjob trigger named after the function.
    c.ok(&[
        "function",
        "deploy",
        "ticker",
        "-r",
        "python3.11",
        "--handler",
        "hello.handler",
        "-f",
        &src,
        "--schedule",
        "*/5 * * * *",
    ])
    .await;
    let cron: Api<CronJobTrigger> = Api::default_namespaced(c.client.clone());
    let t = cron.get("ticker").await.unwrap();
    assert_eq!(t.spec.schedule, "*/5 * * * *");
    assert_eq!(t.spec.function_name, "ticker");

    // Flag validation, as Kubeless did it.
    let e = c
        .fails(&["function", "deploy", "bad", "--handler", "a.b", "-f", &src])
        .await;
    assert!(e.contains("--runtime"), "{e}");
    let e = c
        .fails(&["function", "deploy", "bad", "-r", "python3.11", "-f", &src])
        .await;
    assert!(e.contains("--handler"), "{e}");
    let e = c
        .fails(&[
            "function",
            "deploy",
            "bad",
            "-r",
            "python3.11",
            "--handler",
            "a.b",
            "-f",
            &src,
            "--image-pull-policy",
            "Sometimes",
        ])
        .await;
    assert!(e.contains("Sometimes"), "{e}");

    // Without a kubeless-config the built-in runtime list applies.
    let e = c
        .fails(&[
            "function",
            "deploy",
            "bad",
            "-r",
            "cobol85",
            "--handler",
            "a.b",
            "-f",
            &src,
        ])
        .await;
    assert!(
        e.contains("not supported") && e.contains("python3.11"),
        "{e}"
    );
    // With one (found through KUBELESS_NAMESPACE / KUBELESS_CONFIG), its runtime-images apply.
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "my-config"},
        "data": {
            "runtime-images": "[{\"ID\":\"cobol\",\"versions\":[{\"name\":\"c\",\"version\":\"85\"}]}]",
            "enable-build-step": "false"
        }
    }))
    .unwrap();
    Api::<ConfigMap>::default_namespaced(c.client.clone())
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let env = [
        ("KUBELESS_NAMESPACE", "default"),
        ("KUBELESS_CONFIG", "my-config"),
    ];
    let out = c
        .kubeless_env(
            &[
                "function",
                "deploy",
                "cob",
                "-r",
                "cobol85",
                "--handler",
                "a.b",
                "-f",
                &src,
            ],
            &env,
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c
        .kubeless_env(
            &[
                "function",
                "deploy",
                "py",
                "-r",
                "python3.11",
                "--handler",
                "a.b",
                "-f",
                &src,
            ],
            &env,
        )
        .await;
    assert!(!out.status.success());
    let out = c.kubeless_env(&["get-server-config"], &env).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("enable-build-step: false"), "{text}");
    assert!(text.contains("Supported Runtimes are: cobol85"), "{text}");
    let default_cfg = c.ok(&["get-server-config"]).await;
    assert!(
        default_cfg.contains(
            "Supported Runtimes are: python3.11, python3.12, nodejs20, nodejs22, ruby3.1, php8.2, go1.19, java17"
        ),
        "{default_cfg}"
    );
    c.shutdown().await;
}

async fn set_ready(fns: &Api<Function>, name: &str, cond: Condition) {
    let generation = fns.get(name).await.unwrap().metadata.generation;
    let patch = serde_json::json!({
        "status": {"observedGeneration": generation, "conditions": [cond]}
    });
    fns.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_waits_for_ready_or_failure() {
    let c = Cluster::start().await;
    let src = write(c.dir.path(), "hello.py", HELLO.as_bytes());
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    let kubeconfig = c.kubeconfig.clone();
    let run = |name: &'static str| {
        let src = src.clone();
        let kubeconfig = kubeconfig.clone();
        tokio::spawn(async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args([
                    "function",
                    "deploy",
                    name,
                    "-r",
                    "python3.11",
                    "--handler",
                    "h.f",
                    "-f",
                ])
                .arg(&src)
                .args(["--wait", "--wait-timeout", "60"])
                .output()
                .await
                .unwrap()
        })
    };
    // Plays the controller: first Progressing, then Ready.
    let ok = run("good");
    while fns.get_opt("good").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    set_ready(
        &fns,
        "good",
        Condition::not_ready(reasons::PROGRESSING, "0/1 ready"),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!ok.is_finished(), "returned before the function was ready");
    set_ready(
        &fns,
        "good",
        Condition::ready(reasons::RECONCILED, "1/1 ready"),
    )
    .await;
    let out = ok.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Function good is ready\n"
    );

    let bad = run("bad");
    while fns.get_opt("bad").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    set_ready(
        &fns,
        "bad",
        Condition::not_ready(reasons::CHECKSUM_MISMATCH, "checksum of hello.py differs"),
    )
    .await;
    let out = bad.await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ChecksumMismatch") && err.contains("checksum of hello.py differs"),
        "{err}"
    );

    // --wait with a short --wait-timeout gives up.
    let out = c
        .kubeless(&[
            "function",
            "deploy",
            "quick",
            "-r",
            "python3.11",
            "--handler",
            "h.f",
            "-f",
            &src,
            "--wait",
            "--wait-timeout",
            "1",
        ])
        .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out after 1s"));
    c.shutdown().await;
}

/// A controller writing status while `function update` runs moves the resourceVersion between
/// the CLI's read and its replace: the update reads again and succeeds instead of failing 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_retries_when_the_status_changes_underneath() {
    let c = Cluster::start().await;
    let src = write(c.dir.path(), "hello.py", HELLO.as_bytes());
    c.ok(&[
        "function",
        "deploy",
        "busy",
        "-r",
        "python3.11",
        "--handler",
        "hello.handler",
        "-f",
        &src,
        "--no-wait",
    ])
    .await;
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (fns, stop) = (fns.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let patch = serde_json::json!({"status": {"replicas": n % 7}});
                let _ = fns
                    .patch_status("busy", &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                // A busy controller: 50 status writes a second.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        })
    };
    for i in 0..10 {
        c.ok(&[
            "function",
            "update",
            "busy",
            "--timeout",
            &(30 + i).to_string(),
            "--no-wait",
        ])
        .await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let writes = writer.await.unwrap();
    assert!(
        writes > 10,
        "the status moved while updating ({writes} writes)"
    );
    let f = fns.get("busy").await.unwrap();
    assert_eq!(f.spec.timeout.as_deref(), Some("39"));
    c.shutdown().await;
}
