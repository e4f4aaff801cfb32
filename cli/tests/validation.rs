//! The CLI refuses bad Functions and triggers before it sends them, with the API server's own
//! message and field path (kubeless_api::validate runs the CRD's schema and CEL rules), and
//! exits 1. The same inputs are refused by the API server itself (devcluster-apiserver's
//! `fidelity` tests).
#![cfg(test)]

mod common;

use common::Cluster;
use kube::Api;
use kubeless_api::{CronJobTrigger, Function};

const HELLO: &str = "def handler(event, context):\n    return 'hello'\n";

#[tokio::test]
async fn bad_inputs_fail_at_once_with_the_field_path() {
    let c = Cluster::start().await;
    let src = c.dir.path().join("hello.py");
    std::fs::write(&src, HELLO).unwrap();
    let src = src.to_str().unwrap().to_string();
    let long = "f".repeat(69);
    let deploy = |name: &str, extra: &[&str]| {
        let mut args: Vec<String> = ["function", "deploy", name, "-r", "python3.11", "-f", &src]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if !extra.contains(&"--handler") {
            args.extend(["--handler".into(), "hello.handler".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (
            deploy("mem", &["--memory", "lots"]),
            "spec.deployment.spec.template.spec.containers[0].resources.limits.memory: Invalid value: \"lots\"",
            "mem",
        ),
        (
            deploy("cpu", &["--cpu", "two"]),
            "spec.deployment.spec.template.spec.containers[0].resources.limits.cpu: Invalid value: \"two\"",
            "cpu",
        ),
        (
            deploy("nodot", &["--handler", "handler"]),
            "spec.handler: Invalid value: \"handler\"",
            "nodot",
        ),
        (deploy("1func", &[]), "DNS-1035 label", "1func"),
        (deploy("my.func", &[]), "DNS-1035 label", "my.func"),
        (deploy(&long, &[]), "no more than 63 characters", &long),
        (
            deploy("sched", &["--schedule", "every minute"]),
            "spec.schedule: Invalid value: \"every minute\"",
            "sched",
        ),
    ];
    let fns: Api<Function> = Api::default_namespaced(c.client.clone());
    for (args, text, name) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = c.kubeless(&args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(text), "{args:?}: {text:?} not in {stderr}");
        assert!(stderr.contains("is invalid"), "{args:?}: {stderr}");
        // Refused before anything was sent: no Function was created.
        assert!(
            fns.get_opt(name).await.unwrap().is_none(),
            "{name} was created"
        );
    }

    // The check runs before any request: with --dryrun against a server that is not there, the
    // message is the same.
    let dead = c.dir.path().join("dead-kubeconfig");
    let cfg = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let server_line = cfg
        .lines()
        .find(|l| l.trim_start().starts_with("server:"))
        .unwrap()
        .to_string();
    std::fs::write(
        &dead,
        cfg.replace(&server_line, "    server: https://127.0.0.1:1"),
    )
    .unwrap();
    let mut args = deploy("mem", &["--memory", "lots", "--dryrun"]);
    args.splice(
        0..0,
        [
            "--kubeconfig".to_string(),
            dead.to_str().unwrap().to_string(),
        ],
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubeless"))
        .args(&args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("resources.limits.memory: Invalid value: \"lots\""),
        "{stderr}"
    );

    // Triggers too.
    let stderr = c
        .fails(&[
            "trigger",
            "cronjob",
            "create",
            "tick",
            "--function",
            "mem",
            "--schedule",
            "never",
        ])
        .await;
    // (the CLI's own cron parser answers first here)
    assert!(stderr.contains("\"never\""), "{stderr}");
    let crons: Api<CronJobTrigger> = Api::default_namespaced(c.client.clone());
    assert!(crons.get_opt("tick").await.unwrap().is_none());
    // A good Function still deploys.
    c.ok(
        &deploy("good", &["--memory", "128Mi", "--cpu", "100m", "--no-wait"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    assert!(fns.get_opt("good").await.unwrap().is_some());
    let stderr = c
        .fails(&[
            "trigger",
            "http",
            "create",
            "web",
            "--function-name",
            "good",
            "--hostname",
            "Bad_Host",
        ])
        .await;
    assert!(
        stderr.contains("spec.host-name: Invalid value: \"Bad_Host\""),
        "{stderr}"
    );
    c.shutdown().await;
}
