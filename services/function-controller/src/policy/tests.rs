use super::*;
use serde_json::{Value, json};

fn template(pod: Value) -> Deployment {
    serde_json::from_value(json!({"spec": {"template": {"spec": pod}}})).unwrap()
}

fn paths(policy: &TemplatePolicy, pod: Value) -> Vec<String> {
    policy
        .check(&template(pod))
        .into_iter()
        .map(|r| r.path)
        .collect()
}

const P: &str = "spec.deployment.spec.template.spec";

#[test]
fn each_host_access_field_is_refused_with_its_path() {
    let restricted = TemplatePolicy::default();
    let cases: Vec<(Value, String)> = vec![
        (
            json!({"containers": [], "hostNetwork": true}),
            format!("{P}.hostNetwork"),
        ),
        (
            json!({"containers": [], "hostPID": true}),
            format!("{P}.hostPID"),
        ),
        (
            json!({"containers": [], "hostIPC": true}),
            format!("{P}.hostIPC"),
        ),
        (
            json!({"containers": [], "volumes": [{"name": "cm", "configMap": {"name": "x"}},
                {"name": "etc", "hostPath": {"path": "/etc"}}]}),
            format!("{P}.volumes[1].hostPath"),
        ),
        (
            json!({"containers": [], "serviceAccountName": "admin"}),
            format!("{P}.serviceAccountName"),
        ),
        (
            json!({"containers": [], "serviceAccount": "admin"}),
            format!("{P}.serviceAccount"),
        ),
        (
            json!({"containers": [], "securityContext": {"runAsUser": 0}}),
            format!("{P}.securityContext.runAsUser"),
        ),
        (
            json!({"containers": [], "securityContext": {"runAsNonRoot": false}}),
            format!("{P}.securityContext.runAsNonRoot"),
        ),
        (
            json!({"containers": [{"name": "f", "securityContext": {"privileged": true}}]}),
            format!("{P}.containers[0].securityContext.privileged"),
        ),
        (
            json!({"containers": [{"name": "f"}, {"name": "side",
                "securityContext": {"allowPrivilegeEscalation": true}}]}),
            format!("{P}.containers[1].securityContext.allowPrivilegeEscalation"),
        ),
        (
            json!({"containers": [{"name": "f", "securityContext":
                {"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}}}]}),
            format!("{P}.containers[0].securityContext.capabilities.add[1]"),
        ),
        (
            json!({"containers": [{"name": "f", "securityContext": {"runAsUser": 0}}]}),
            format!("{P}.containers[0].securityContext.runAsUser"),
        ),
        (
            json!({"containers": [{"name": "f", "securityContext": {"runAsNonRoot": false}}]}),
            format!("{P}.containers[0].securityContext.runAsNonRoot"),
        ),
        (
            json!({"containers": [{"name": "f", "ports": [{"containerPort": 8080, "hostPort": 80}]}]}),
            format!("{P}.containers[0].ports[0].hostPort"),
        ),
        (
            json!({"containers": [], "initContainers": [{"name": "i",
                "securityContext": {"privileged": true}}]}),
            format!("{P}.initContainers[0].securityContext.privileged"),
        ),
    ];
    for (pod, path) in cases {
        assert_eq!(paths(&restricted, pod.clone()), vec![path], "{pod}");
        // Kubeless mode copies everything through.
        let kubeless = TemplatePolicy {
            mode: PolicyMode::Kubeless,
            ..TemplatePolicy::default()
        };
        assert!(paths(&kubeless, pod).is_empty());
    }
}

#[test]
fn harmless_templates_pass() {
    let restricted = TemplatePolicy::default();
    for pod in [
        json!({"containers": [{"name": "f", "securityContext": {"runAsUser": 1000,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
            "ports": [{"containerPort": 8080}]}]}),
        json!({"containers": [], "serviceAccountName": "default", "hostNetwork": false,
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": true}}),
        json!({"containers": [], "volumes": [{"name": "tmp", "emptyDir": {}}]}),
    ] {
        assert!(paths(&restricted, pod.clone()).is_empty(), "{pod}");
    }
    assert!(restricted.check(&Deployment::default()).is_empty());
}

#[test]
fn allow_settings_loosen_one_field_each() {
    let pod = json!({"hostNetwork": true, "serviceAccountName": "builder",
        "containers": [{"name": "f", "securityContext": {"capabilities": {"add": ["CAP_NET_ADMIN"]}}}]});
    let policy = TemplatePolicy {
        allow_host_network: true,
        ..TemplatePolicy::default()
    };
    assert_eq!(
        paths(&policy, pod.clone()),
        vec![
            format!("{P}.serviceAccountName"),
            format!("{P}.containers[0].securityContext.capabilities.add[0]")
        ]
    );
    let policy = TemplatePolicy {
        allow_host_network: true,
        allowed_service_accounts: vec!["builder".into()],
        allowed_capabilities: vec!["NET_ADMIN".into()],
        ..TemplatePolicy::default()
    };
    assert!(paths(&policy, pod).is_empty());
    let all = TemplatePolicy {
        allowed_capabilities: vec!["ALL".into()],
        ..TemplatePolicy::default()
    };
    assert!(
        paths(
            &all,
            json!({"containers": [{"name": "f", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]})
        )
        .is_empty()
    );
}

#[test]
fn the_message_names_the_field_and_the_chart_value() {
    let r =
        TemplatePolicy::default().check(&template(json!({"containers": [], "hostNetwork": true})));
    let m = message(&r);
    assert!(
        m.contains("spec.deployment.spec.template.spec.hostNetwork"),
        "{m}"
    );
    assert!(
        m.contains("function-controller.templatePolicy.allowHostNetwork"),
        "{m}"
    );
}

#[test]
fn flags_and_env_build_the_policy() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        p: PolicyArgs,
    }
    let p: TemplatePolicy = Cli::parse_from(["x"]).p.into();
    assert_eq!(p, TemplatePolicy::default());
    let p: TemplatePolicy = Cli::parse_from([
        "x",
        "--template-policy=kubeless",
        "--template-allow-host-path",
        "--template-allowed-service-accounts=a, b",
        "--template-allowed-capabilities=",
    ])
    .p
    .into();
    assert_eq!(p.mode, PolicyMode::Kubeless);
    assert!(p.allow_host_path && !p.allow_host_network);
    assert_eq!(p.allowed_service_accounts, vec!["a", "b"]);
    assert!(p.allowed_capabilities.is_empty());
}
