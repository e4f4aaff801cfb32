//! `kubeless trigger ...`, `autoscale ...`, `version`, `completion` against devcluster.
#![cfg(test)]

mod common;

use common::{Cluster, assert_snapshot, normalise};
use kube::Api;
use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger, KafkaTrigger, KinesisTrigger, NatsTrigger,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_cronjob_triggers() {
    let c = Cluster::start().await;
    c.ok(&[
        "function",
        "deploy",
        "hello",
        "--runtime-image",
        "example/fn:1",
    ])
    .await;
    let http: Api<HttpTrigger> = Api::default_namespaced(c.client.clone());

    let err = c
        .fails(&["trigger", "http", "create", "h", "--function-name", "nope"])
        .await;
    assert!(err.contains("Unable to find Function nope"), "{err}");
    let err = c
        .fails(&[
            "trigger",
            "http",
            "create",
            "h",
            "--function-name",
            "hello",
            "--enableTLSAcme",
            "--tls-secret",
            "s",
        ])
        .await;
    assert!(err.contains("cannot be used with"), "{err}");

    let dry = c
        .ok(&[
            "trigger",
            "http",
            "create",
            "web",
            "--function-name",
            "hello",
            "--path",
            "greet",
            "--cors-enable",
            "--dryrun",
        ])
        .await;
    assert_snapshot("http_create_dryrun", &dry);
    c.ok(&[
        "trigger",
        "http",
        "create",
        "web",
        "--function-name",
        "hello",
        "--path",
        "greet",
        "--cors-enable",
    ])
    .await;
    // nginx without --hostname: <function>.<API server host>.nip.io.
    let t = http.get("web").await.unwrap();
    assert_eq!(t.spec.host_name.as_deref(), Some("hello.127.0.0.1.nip.io"));
    assert_eq!(t.spec.cors_enable, Some(true));
    c.ok(&[
        "trigger",
        "http",
        "create",
        "api",
        "--function-name",
        "hello",
        "--gateway",
        "traefik",
        "--hostname",
        "api.example.com",
        "--tls-secret",
        "api-tls",
        "--basic-auth-secret",
        "users",
    ])
    .await;
    c.ok(&[
        "trigger",
        "http",
        "update",
        "web",
        "--enableTLSAcme",
        "--path",
        "hi",
    ])
    .await;
    let t = http.get("web").await.unwrap();
    assert_eq!(t.spec.tls, Some(true));
    assert_eq!(t.spec.path.as_deref(), Some("hi"));
    assert_eq!(t.spec.gateway.as_deref(), Some("nginx"));
    assert_snapshot("http_list", &c.ok(&["trigger", "http", "list"]).await);
    assert_snapshot(
        "http_list_yaml",
        &normalise(&c.ok(&["trigger", "http", "ls", "-o", "yaml"]).await),
    );
    c.ok(&["trigger", "http", "delete", "api"]).await;
    assert!(http.get_opt("api").await.unwrap().is_none());

    // Cronjob triggers.
    let cron: Api<CronJobTrigger> = Api::default_namespaced(c.client.clone());
    let payload = c.dir.path().join("payload.json");
    std::fs::write(&payload, r#"{"from": "file"}"#).unwrap();
    c.ok(&[
        "trigger",
        "cronjob",
        "create",
        "tick",
        "--function",
        "hello",
        "--schedule",
        "*/10 * * * *",
        "-p",
        r#"{"n": 1}"#,
    ])
    .await;
    let t = cron.get("tick").await.unwrap();
    assert_eq!(t.spec.payload, Some(serde_json::json!({"n": 1})));
    c.ok(&[
        "trigger",
        "cronjob",
        "update",
        "tick",
        "--schedule",
        "0 * * * *",
        "-f",
        payload.to_str().unwrap(),
    ])
    .await;
    let t = cron.get("tick").await.unwrap();
    assert_eq!(t.spec.schedule, "0 * * * *");
    assert_eq!(t.spec.payload, Some(serde_json::json!({"from": "file"})));
    let err = c
        .fails(&[
            "trigger",
            "cronjob",
            "create",
            "bad",
            "--function",
            "hello",
            "--schedule",
            "often",
        ])
        .await;
    assert!(
        err.contains("Invalid cron schedule \"often\" in --schedule"),
        "{err}"
    );
    let err = c
        .fails(&[
            "trigger",
            "cronjob",
            "create",
            "bad",
            "--function",
            "hello",
            "--schedule",
            "* * * * *",
            "-p",
            "{not json",
        ])
        .await;
    assert!(err.contains("payload JSON"), "{err}");
    assert_snapshot("cronjob_list", &c.ok(&["trigger", "cronjob", "list"]).await);
    let json: serde_json::Value =
        serde_json::from_str(&c.ok(&["trigger", "cronjob", "list", "-o", "json"]).await).unwrap();
    assert_eq!(json["items"][0]["spec"]["function-name"], "hello");
    c.ok(&["trigger", "cronjob", "delete", "tick"]).await;
    assert!(cron.get_opt("tick").await.unwrap().is_none());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_nats_kinesis_triggers_in_a_namespace() {
    let c = Cluster::start().await;
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.client.clone());
    ns.create(
        &Default::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    c.ok(&[
        "function",
        "deploy",
        "hello",
        "-n",
        "team",
        "--runtime-image",
        "example/fn:1",
    ])
    .await;

    for kind in ["kafka", "nats"] {
        c.ok(&[
            "trigger",
            kind,
            "create",
            "orders",
            "-n",
            "team",
            "--trigger-topic",
            "orders",
            "--function-selector",
            "function=hello",
        ])
        .await;
        c.ok(&[
            "trigger",
            kind,
            "create",
            "audit",
            "-n",
            "team",
            "--trigger-topic",
            "audit",
            "--function-selector",
            "tier in (a,b),!legacy",
        ])
        .await;
        c.ok(&[
            "trigger",
            kind,
            "update",
            "orders",
            "-n",
            "team",
            "--trigger-topic",
            "orders-v2",
        ])
        .await;
        let err = c
            .fails(&[
                "trigger",
                kind,
                "create",
                "x",
                "-n",
                "team",
                "--trigger-topic",
                "t",
            ])
            .await;
        assert!(err.contains("--function-selector is required"), "{err}");
        assert_snapshot(
            &format!("{kind}_list"),
            &c.ok(&["trigger", kind, "list", "-n", "team"]).await,
        );
    }
    let kafka: Api<KafkaTrigger> = Api::namespaced(c.client.clone(), "team");
    let k = kafka.get("orders").await.unwrap();
    assert_eq!(k.spec.topic, "orders-v2");
    assert_eq!(
        k.spec.function_selector.match_labels.unwrap()["function"],
        "hello"
    );
    let nats: Api<NatsTrigger> = Api::namespaced(c.client.clone(), "team");
    let n = nats.get("audit").await.unwrap();
    assert_eq!(n.spec.function_selector.match_expressions.unwrap().len(), 2);
    assert_snapshot(
        "nats_list_yaml",
        &normalise(
            &c.ok(&["trigger", "nats", "ls", "-n", "team", "-o", "yaml"])
                .await,
        ),
    );
    c.ok(&["trigger", "kafka", "delete", "orders", "-n", "team"])
        .await;
    c.ok(&["trigger", "nats", "delete", "orders", "-n", "team"])
        .await;
    assert!(kafka.get_opt("orders").await.unwrap().is_none());
    assert!(nats.get_opt("orders").await.unwrap().is_none());

    // Kinesis; update takes -n (Kubeless's did not).
    c.ok(&[
        "trigger",
        "kinesis",
        "create",
        "clicks",
        "-n",
        "team",
        "--function-name",
        "hello",
        "--stream",
        "clicks",
        "--aws-region",
        "us-east-1",
        "--secret",
        "aws-creds",
        "--endpoint",
        "http://127.0.0.1:4567",
    ])
    .await;
    c.ok(&[
        "trigger",
        "kinesis",
        "update",
        "clicks",
        "-n",
        "team",
        "--shard-id",
        "shardId-000000000001",
        "--stream",
        "clicks2",
    ])
    .await;
    let kin: Api<KinesisTrigger> = Api::namespaced(c.client.clone(), "team");
    let k = kin.get("clicks").await.unwrap();
    assert_eq!(k.spec.stream, "clicks2");
    assert_eq!(k.spec.shard.as_deref(), Some("shardId-000000000001"));
    assert_eq!(k.spec.secret.as_deref(), Some("aws-creds"));
    assert_snapshot(
        "kinesis_list",
        &c.ok(&["trigger", "kinesis", "list", "-n", "team"]).await,
    );
    let dry = c
        .ok(&[
            "trigger",
            "kinesis",
            "create",
            "x",
            "-n",
            "team",
            "--function-name",
            "hello",
            "--stream",
            "s",
            "--aws-region",
            "eu-west-1",
            "--dryrun",
            "-o",
            "json",
        ])
        .await;
    let obj: KinesisTrigger = serde_json::from_str(&dry).unwrap();
    assert_eq!(obj.spec.aws_region.as_deref(), Some("eu-west-1"));
    assert!(kin.get_opt("x").await.unwrap().is_none());
    c.ok(&["trigger", "kinesis", "delete", "clicks", "-n", "team"])
        .await;
    assert!(kin.get_opt("clicks").await.unwrap().is_none());
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscale_version_completion() {
    let c = Cluster::start().await;
    for f in ["alpha", "beta", "gamma"] {
        c.ok(&["function", "deploy", f, "--runtime-image", "example/fn:1"])
            .await;
    }
    c.ok(&[
        "autoscale",
        "create",
        "alpha",
        "--min",
        "1",
        "--max",
        "5",
        "--value",
        "70",
    ])
    .await;
    c.ok(&[
        "autoscale",
        "create",
        "beta",
        "--metric",
        "qps",
        "--min",
        "2",
        "--max",
        "10",
        "--value",
        "100",
    ])
    .await;
    let err = c
        .fails(&["autoscale", "create", "missing", "--value", "50"])
        .await;
    assert!(err.contains("Unable to find function missing"), "{err}");
    let err = c
        .fails(&[
            "autoscale",
            "create",
            "gamma",
            "--min",
            "3",
            "--max",
            "2",
            "--value",
            "50",
        ])
        .await;
    assert!(err.contains("--min"), "{err}");
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    let hpa = fns.get("beta").await.unwrap().hpa_v2().unwrap().unwrap();
    let spec = hpa.spec.unwrap();
    assert_eq!(spec.max_replicas, 10);
    let metric = &spec.metrics.unwrap()[0];
    assert_eq!(metric.type_, "Object");
    assert_eq!(
        metric.object.as_ref().unwrap().metric.name,
        "function_calls"
    );
    assert_snapshot("autoscale_list", &c.ok(&["autoscale", "list"]).await);
    assert_snapshot(
        "autoscale_list_yaml",
        &c.ok(&["autoscale", "ls", "-o", "yaml"]).await,
    );
    c.ok(&["autoscale", "delete", "alpha"]).await;
    assert!(fns.get("alpha").await.unwrap().hpa_v2().unwrap().is_none());
    assert_eq!(c.ok(&["autoscale", "list"]).await.lines().count(), 2);

    assert!(c.ok(&["version"]).await.starts_with(&format!(
        "Kubeless version: {}\n",
        env!("CARGO_PKG_VERSION")
    )));
    for (shell, marker) in [
        ("bash", "complete -o nospace"),
        ("zsh", "#compdef kubeless"),
        ("fish", "complete --keep-order"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let script = c.ok(&["completion", shell]).await;
        assert!(script.contains(marker), "{shell}: {script:.300}");
        assert!(script.contains("COMPLETE"), "{shell}: {script:.300}");
    }

    // The bash script, loaded in a real bash, completes names read from the cluster.
    c.ok(&[
        "trigger",
        "http",
        "create",
        "web",
        "--function-name",
        "alpha",
    ])
    .await;
    let script = c.dir.path().join("kubeless.bash");
    std::fs::write(&script, c.ok(&["completion", "bash"]).await).unwrap();
    let kubeconfig = c.kubeconfig.to_string_lossy().into_owned();
    let complete = |words: Vec<&str>| {
        let cword = words.len() - 1;
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let program = format!(
            "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={cword}\nCOMP_TYPE=9\n\
             _clap_complete_kubeless kubeless '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
            script.display(),
            quoted.join(" "),
            words[cword],
            words[cword.saturating_sub(1)],
        );
        async move {
            let out = tokio::process::Command::new("bash")
                .arg("-c")
                .arg(program)
                .output()
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut names: Vec<String> = text
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty() && !l.starts_with('-'))
                .collect();
            names.sort();
            names
        }
    };
    let k = kubeconfig.as_str();
    assert_eq!(
        complete(vec![
            "kubeless",
            "--kubeconfig",
            k,
            "function",
            "delete",
            ""
        ])
        .await,
        ["alpha", "beta", "gamma"]
    );
    assert_eq!(
        complete(vec!["kubeless", "--kubeconfig", k, "function", "logs", "g"]).await,
        ["gamma"]
    );
    assert_eq!(
        complete(vec![
            "kubeless",
            "--kubeconfig",
            k,
            "trigger",
            "http",
            "describe",
            ""
        ])
        .await,
        ["web"]
    );
    assert_eq!(
        complete(vec![
            "kubeless",
            "--kubeconfig",
            k,
            "trigger",
            "http",
            "create",
            "x",
            "--function-name",
            "b"
        ])
        .await,
        ["beta"]
    );
    // Another namespace has none of them.
    assert!(
        complete(vec![
            "kubeless",
            "--kubeconfig",
            k,
            "-n",
            "other",
            "function",
            "delete",
            ""
        ])
        .await
        .is_empty()
    );
    c.shutdown().await;
}
