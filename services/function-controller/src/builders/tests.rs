use super::*;
use crate::catalogue::Catalogue;
use serde_json::json;

fn function(spec: Value) -> Function {
    serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1",
        "kind": "Function",
        "metadata": {"name": "hello", "namespace": "team", "uid": "uid-1", "labels": {"app": "demo"}},
        "spec": spec,
    }))
    .unwrap()
}

fn py(extra: Value) -> Function {
    let mut spec = json!({
        "handler": "hello.handler",
        "function": "def handler(event, context):\n    return 'hi'\n",
        "runtime": "python3.12",
    });
    merge_json(&mut spec, &extra, "");
    function(spec)
}

fn cfg() -> ControllerConfig {
    ControllerConfig::default()
}

fn env_of(c: &Container) -> BTreeMap<String, String> {
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn pod_spec(d: &Desired) -> &k8s_openapi::api::core::v1::PodSpec {
    d.deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

fn init_names(d: &Desired) -> Vec<String> {
    pod_spec(d)
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect()
}

#[test]
fn config_map_holds_handler_source_and_deps() {
    let d = build(&py(json!({"deps": "requests==2.32.3\n"})), &cfg()).unwrap();
    let data = d.config_map.data.as_ref().unwrap();
    assert_eq!(data["handler"], "hello.handler");
    assert!(data["hello.py"].contains("def handler"));
    assert_eq!(data["requirements.txt"], "requests==2.32.3\n");
    assert_eq!(d.config_map.metadata.name.as_deref(), Some("hello"));
    let owner = &d.config_map.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Function", "uid-1")
    );
    assert_eq!(owner.controller, Some(true));
    let labels = d.config_map.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["created-by"], "kubeless");
    assert_eq!(labels["function"], "hello");
    assert_eq!(labels["app"], "demo");
}

#[test]
fn archives_get_archive_keys() {
    let d = build(&py(json!({"function-content-type": "base64+zip"})), &cfg()).unwrap();
    assert!(
        d.config_map
            .data
            .as_ref()
            .unwrap()
            .contains_key("hello.zip")
    );
    let d = build(
        &py(json!({"function-content-type": "base64+compressedtar"})),
        &cfg(),
    )
    .unwrap();
    assert!(
        d.config_map
            .data
            .as_ref()
            .unwrap()
            .contains_key("hello.tar.gz")
    );
}

#[test]
fn deployment_has_contract_env_probe_and_security() {
    let d = build(&py(json!({"timeout": "7"})), &cfg()).unwrap();
    let labels = d.deployment.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["created-by"], "kubeless");
    assert_eq!(labels["function"], "hello");
    let spec = d.deployment.spec.as_ref().unwrap();
    assert_eq!(
        spec.selector.match_labels.as_ref().unwrap(),
        &kubeless_api::labels::function_labels("hello")
    );
    assert_eq!(spec.replicas, Some(1));
    let tmeta = spec.template.metadata.as_ref().unwrap();
    let ann = tmeta.annotations.as_ref().unwrap();
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], "8080");
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    assert!(ann.contains_key(CONTENT_HASH));
    assert_eq!(tmeta.labels.as_ref().unwrap()["function"], "hello");
    let pod = pod_spec(&d);
    let c = &pod.containers[0];
    assert_eq!(c.name, "hello");
    assert_eq!(c.image.as_deref(), Some("kubeless-rs/runtime-python:3.12"));
    let env = env_of(c);
    assert_eq!(env["FUNC_HANDLER"], "handler");
    assert_eq!(env["MOD_NAME"], "hello");
    assert_eq!(env["FUNC_TIMEOUT"], "7");
    assert_eq!(env["FUNC_RUNTIME"], "python3.12");
    assert_eq!(env["FUNC_PORT"], "8080");
    assert_eq!(env["FUNC_MEMORY_LIMIT"], "0");
    assert_eq!(env["KUBELESS_INSTALL_VOLUME"], "/kubeless");
    let probe = c.liveness_probe.as_ref().unwrap();
    assert_eq!(
        probe.http_get.as_ref().unwrap().path.as_deref(),
        Some("/healthz")
    );
    assert_eq!(probe.initial_delay_seconds, Some(3));
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    assert_eq!(psc.run_as_group, Some(65532));
    assert_eq!(psc.fs_group, Some(65532));
    // No deps: prepare only.
    assert_eq!(init_names(&d), vec!["prepare"]);
    let prepare = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(prepare.args.as_deref(), Some(&["prepare".to_string()][..]));
    let penv = env_of(prepare);
    assert_eq!(penv["KUBELESS_FUNC_SOURCE"], "/src/hello.py");
    assert_eq!(penv["KUBELESS_FUNC_CONTENT_TYPE"], "text");
    assert!(!penv.contains_key("KUBELESS_DEPS_FILE"));
}

#[test]
fn deps_add_the_install_step_and_checksum_reaches_prepare() {
    let f = py(json!({"deps": "requests\n", "checksum": "sha256:abc"}));
    let d = build(&f, &cfg()).unwrap();
    assert_eq!(init_names(&d), vec!["prepare", "install"]);
    let inits = pod_spec(&d).init_containers.as_ref().unwrap();
    assert_eq!(env_of(&inits[0])["KUBELESS_FUNC_CHECKSUM"], "sha256:abc");
    assert_eq!(
        env_of(&inits[0])["KUBELESS_DEPS_FILE"],
        "/src/requirements.txt"
    );
    let install = env_of(&inits[1]);
    assert_eq!(install["KUBELESS_DEPS_FILE"], "/kubeless/requirements.txt");
    assert_eq!(install["FUNC_RUNTIME"], "python3.12");
    assert_eq!(inits[1].args.as_deref(), Some(&["install".to_string()][..]));
    // Whitespace-only deps are no deps.
    let d = build(&py(json!({"deps": "  \n"})), &cfg()).unwrap();
    assert_eq!(init_names(&d), vec!["prepare"]);
}

#[test]
fn compile_phase_and_kubeless_commands_are_used() {
    let text = r#"[{"ID":"go","depName":"go.mod","fileNameSuffix":".go","versions":[{"name":"go","version":"1.14",
      "images":[{"phase":"installation","image":"go-init:1","command":"/install.sh"},
                {"phase":"compilation","image":"go-init:1","command":"/compile.sh","env":{"GOPATH":"/kubeless/.go"}},
                {"phase":"runtime","image":"go-rt:1"}],
      "imagePullSecrets":[{"ImageSecret":"regcred"}]}]}]"#;
    let c = ControllerConfig {
        catalogue: Catalogue::parse(text).unwrap(),
        provision_image: Some("my/unzip:1".into()),
        ..ControllerConfig::default()
    };
    let f = function(
        json!({"handler": "main.Hello", "function": "package main", "runtime": "go1.14", "deps": "module x"}),
    );
    let d = build(&f, &c).unwrap();
    assert_eq!(init_names(&d), vec!["prepare", "install", "compile"]);
    let pod = pod_spec(&d);
    let inits = pod.init_containers.as_ref().unwrap();
    assert_eq!(inits[0].image.as_deref(), Some("my/unzip:1"));
    assert_eq!(
        inits[2].command.as_deref(),
        Some(&["sh".to_string(), "-c".into(), "/compile.sh".into()][..])
    );
    assert_eq!(env_of(&inits[2])["GOPATH"], "/kubeless/.go");
    assert_eq!(env_of(&inits[2])["KUBELESS_FUNC_NAME"], "Hello");
    assert_eq!(pod.containers[0].image.as_deref(), Some("go-rt:1"));
    assert_eq!(pod.image_pull_secrets.as_ref().unwrap()[0].name, "regcred");
}

#[test]
fn function_template_wins_over_config_default() {
    let c = ControllerConfig {
        default_deployment: Some(json!({
            "metadata": {"annotations": {"team": "platform"}},
            "spec": {"replicas": 2, "template": {"spec": {
                "nodeSelector": {"disk": "ssd"},
                "containers": [{"env": [{"name": "A", "value": "config"}, {"name": "B", "value": "config"}]}]}}}
        })),
        template_policy: crate::policy::TemplatePolicy {
            allowed_service_accounts: vec!["fn-sa".into()],
            ..Default::default()
        },
        ..ControllerConfig::default()
    };
    let f = py(
        json!({"deployment": {"spec": {"replicas": 3, "template": {"spec": {
        "serviceAccountName": "fn-sa",
        "containers": [{"env": [{"name": "B", "value": "function"}],
                        "resources": {"limits": {"memory": "128Mi"}}}],
        "initContainers": [{"resources": {"limits": {"cpu": "500m"}}}]}}}}}),
    );
    let d = build(&f, &c).unwrap();
    let spec = d.deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        d.deployment.metadata.annotations.as_ref().unwrap()["team"],
        "platform"
    );
    let pod = pod_spec(&d);
    assert_eq!(pod.node_selector.as_ref().unwrap()["disk"], "ssd");
    assert_eq!(pod.service_account_name.as_deref(), Some("fn-sa"));
    let env = env_of(&pod.containers[0]);
    assert_eq!(env["A"], "config");
    assert_eq!(env["B"], "function");
    assert_eq!(env["FUNC_MEMORY_LIMIT"], "128Mi");
    let inits = pod.init_containers.as_ref().unwrap();
    assert_eq!(
        inits.len(),
        1,
        "the template's init container only carries resources"
    );
    assert_eq!(
        inits[0]
            .resources
            .as_ref()
            .unwrap()
            .limits
            .as_ref()
            .unwrap()["cpu"]
            .0,
        "500m"
    );
}

#[test]
fn custom_image_skips_build_and_catalogue() {
    let f = function(json!({
        "deployment": {"spec": {"template": {"spec": {"containers": [{"image": "me/fn:1"}]}}}}
    }));
    let d = build(&f, &cfg()).unwrap();
    assert!(pod_spec(&d).init_containers.is_none());
    assert_eq!(d.image, "me/fn:1");
    // Even an unknown runtime is fine with a custom image.
    let f = function(json!({"runtime": "cobol85", "handler": "a.b",
        "deployment": {"spec": {"template": {"spec": {"containers": [{"image": "me/fn:1"}]}}}}}));
    assert_eq!(build(&f, &cfg()).unwrap().image, "me/fn:1");
}

#[test]
fn unknown_runtime_and_bad_fields_are_reported_by_reason() {
    let e = build(&py(json!({"runtime": "python2.7"})), &cfg()).unwrap_err();
    assert_eq!(e.reason(), "UnknownRuntime");
    assert!(e.to_string().contains("python3.11"), "{e}");
    for bad in [
        json!({"timeout": "soon"}),
        json!({"handler": "nodot"}),
        json!({"function-content-type": "rar"}),
        json!({"runtime": ""}),
        json!({"deployment": {"spec": {"replicas": "many"}}}),
    ] {
        let e = build(&py(bad.clone()), &cfg()).unwrap_err();
        assert_eq!(e.reason(), "InvalidSpec", "{bad}: {e}");
    }
}

#[test]
fn service_defaults_and_custom_ports() {
    let d = build(&py(json!({})), &cfg()).unwrap();
    let spec = d.service.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let p = &spec.ports.as_ref().unwrap()[0];
    assert_eq!(p.name.as_deref(), Some("http-function-port"));
    assert_eq!(
        (p.port, p.target_port.clone()),
        (8080, Some(IntOrString::Int(8080)))
    );
    assert_eq!(
        spec.selector.as_ref().unwrap(),
        &kubeless_api::labels::function_labels("hello")
    );
    assert_eq!(d.url, "http://hello.team.svc.cluster.local:8080");

    let d = build(
        &py(json!({"service": {"type": "NodePort", "ports": [{"name": "web", "port": 80, "targetPort": 9090}]}})),
        &cfg(),
    )
    .unwrap();
    let spec = d.service.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    let env = env_of(&pod_spec(&d).containers[0]);
    assert_eq!(env["FUNC_PORT"], "9090");
    assert_eq!(
        pod_spec(&d).containers[0].ports.as_ref().unwrap()[0].container_port,
        9090
    );
    assert_eq!(d.url, "http://hello.team.svc.cluster.local:80");

    // --cluster-domain: clusters whose DNS domain is not cluster.local.
    let c = ControllerConfig {
        cluster_domain: "corp.internal".into(),
        ..cfg()
    };
    let d = build(&py(json!({})), &c).unwrap();
    assert_eq!(d.url, "http://hello.team.svc.corp.internal:8080");
}

#[test]
fn hpa_is_built_and_takes_replicas_away() {
    let f = py(json!({"horizontalPodAutoscaler": {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hello"},
        "minReplicas": 1, "maxReplicas": 3,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 70}}]}}}));
    let d = build(&f, &cfg()).unwrap();
    let hpa = d.hpa.as_ref().unwrap();
    assert_eq!(hpa.metadata.name.as_deref(), Some("hello"));
    assert_eq!(hpa.metadata.namespace.as_deref(), Some("team"));
    assert!(applied_hash(hpa).is_some());
    assert_eq!(d.deployment.spec.as_ref().unwrap().replicas, None);
    assert!(build(&py(json!({})), &cfg()).unwrap().hpa.is_none());
}

#[test]
fn hashes_change_with_code_deps_runtime_and_timeout_only() {
    let base = build(&py(json!({})), &cfg()).unwrap();
    let again = build(&py(json!({})), &cfg()).unwrap();
    assert_eq!(
        applied_hash(&base.deployment),
        applied_hash(&again.deployment)
    );
    assert_eq!(
        applied_hash(&base.config_map),
        applied_hash(&again.config_map)
    );
    assert_eq!(applied_hash(&base.service), applied_hash(&again.service));
    let template =
        |d: &Desired| serde_json::to_value(&d.deployment.spec.as_ref().unwrap().template).unwrap();
    for change in [
        json!({"function": "def handler(e, c):\n    return 'new'\n"}),
        json!({"deps": "requests\n"}),
        json!({"runtime": "python3.11"}),
        json!({"timeout": "30"}),
    ] {
        let d = build(&py(change.clone()), &cfg()).unwrap();
        assert_ne!(template(&d), template(&base), "{change} must roll the pods");
        assert_ne!(
            applied_hash(&d.deployment),
            applied_hash(&base.deployment),
            "{change}"
        );
    }
}

#[test]
fn merge_json_rules() {
    let mut base = json!({"a": {"b": 1, "c": [1, 2]}, "containers": [{"name": "x", "env": [{"name": "A", "value": "1"}]}]});
    merge_json(
        &mut base,
        &json!({"a": {"c": [3], "d": null}, "containers": [{"env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]}, {"name": "side"}]}),
        "",
    );
    assert_eq!(
        base,
        json!({"a": {"b": 1, "c": [3]}, "containers": [
            {"name": "x", "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}]},
            {"name": "side"}]})
    );
}

use kubeless_service::pod_security::restricted_violations;

#[test]
fn function_pods_pass_pod_security_restricted() {
    // Init containers included: deps add the install step.
    let d = build(&py(json!({"deps": "requests==2.31.0"})), &cfg()).unwrap();
    let pod = pod_spec(&d);
    assert_eq!(init_names(&d), vec!["prepare", "install"]);
    assert_eq!(restricted_violations(pod), Vec::<String>::new());
    let prepare = &pod.init_containers.as_ref().unwrap()[0];
    assert_eq!(
        prepare
            .security_context
            .as_ref()
            .unwrap()
            .read_only_root_filesystem,
        Some(true)
    );
    // A template's own pod securityContext without seccomp still passes: each container
    // carries its own profile.
    let d = build(
        &py(json!({"deployment": {"spec": {"template": {"spec": {
            "securityContext": {"runAsUser": 2000, "runAsNonRoot": true}}}}}})),
        &cfg(),
    )
    .unwrap();
    let pod = pod_spec(&d);
    assert_eq!(restricted_violations(pod), Vec::<String>::new());
    assert_eq!(
        pod.security_context.as_ref().unwrap().run_as_user,
        Some(2000),
        "the template's user is kept"
    );
    // An install in Kubeless mode lets a template run as root (the restricted policy refuses
    // it); the checker sees what that costs.
    let mut kubeless = cfg();
    kubeless.template_policy.mode = crate::policy::PolicyMode::Kubeless;
    let d = build(
        &py(
            json!({"deployment": {"spec": {"template": {"spec": {"containers": [{
            "name": "hello", "securityContext": {"runAsUser": 0}}]}}}}}),
        ),
        &kubeless,
    )
    .unwrap();
    let v = restricted_violations(pod_spec(&d));
    assert!(v.contains(&"hello: runAsUser 0".to_string()), "{v:?}");
}

#[test]
fn out_of_range_timeout_and_replicas_are_invalid_spec() {
    for bad in [
        json!({"timeout": "18446744073709551615"}),
        json!({"timeout": "86401"}),
        json!({"timeout": "-5"}),
        json!({"timeout": "1.5"}),
        json!({"deployment": {"spec": {"replicas": -3}}}),
        json!({"deployment": {"spec": {"replicas": 2147483647}}}),
        json!({"deployment": {"spec": {"replicas": 1001}}}),
    ] {
        let e = build(&py(bad.clone()), &cfg()).unwrap_err();
        assert_eq!(e.reason(), "InvalidSpec", "{bad}: {e}");
    }
    let e = build(&py(json!({"timeout": "86401"})), &cfg()).unwrap_err();
    assert!(e.to_string().contains("86400"), "{e}");
    let e = build(
        &py(json!({"deployment": {"spec": {"replicas": -3}}})),
        &cfg(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("replicas"), "{e}");
    // The bounds themselves are accepted.
    for ok in [
        json!({"timeout": "86400"}),
        json!({"deployment": {"spec": {"replicas": 0}}}),
        json!({"deployment": {"spec": {"replicas": 1000}}}),
    ] {
        build(&py(ok.clone()), &cfg()).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

fn build_cfg(enabled: bool) -> ControllerConfig {
    ControllerConfig {
        build: crate::config::BuildSettings {
            enabled,
            registry: Some("127.0.0.1:5000/fns".into()),
            insecure: true,
            ..Default::default()
        },
        ..ControllerConfig::default()
    }
}

#[test]
fn build_step_follows_the_install_default_and_the_function() {
    let f = py(json!({"deps": "requests==2.31.0"}));
    assert!(build(&f, &cfg()).unwrap().build.is_none(), "off by default");
    assert!(build(&f, &build_cfg(true)).unwrap().build.is_some());
    let off = py(json!({"deps": "requests==2.31.0", "build": {"enabled": false}}));
    assert!(build(&off, &build_cfg(true)).unwrap().build.is_none());
    let on = py(json!({"build": {"enabled": true}}));
    assert!(build(&on, &build_cfg(false)).unwrap().build.is_some());
    // A custom image is prebuilt: nothing to build (as in Kubeless).
    let custom = function(json!({"deployment": {"spec": {"template": {"spec": {
        "containers": [{"image": "my/prebuilt:1"}]}}}}, "build": {"enabled": true}}));
    assert!(build(&custom, &build_cfg(true)).unwrap().build.is_none());
    // On without a registry: a clear BuildFailed, not a Job that cannot push.
    let err = build(&on, &cfg()).unwrap_err();
    assert_eq!(err.reason(), "BuildFailed");
    assert!(err.to_string().contains("--build-registry"), "{err}");
}

#[test]
fn build_tag_is_content_addressed() {
    let c = build_cfg(true);
    let plan = |extra: Value| build(&py(extra), &c).unwrap().build.unwrap();
    let a = plan(json!({"deps": "requests==2.31.0"}));
    assert_eq!(
        a.image,
        format!("127.0.0.1:5000/fns/team/hello:{}", a.tag())
    );
    assert_eq!(a.tag().len(), 24);
    assert!(a.job_name.starts_with("hello-build-") && a.job_name.len() <= 63);
    // Same inputs, same image: nothing to rebuild, and a rollback finds its old image.
    assert_eq!(plan(json!({"deps": "requests==2.31.0"})).image, a.image);
    // What goes into the layer changes the tag.
    for extra in [
        json!({"deps": "requests==2.32.0"}),
        json!({"deps": "requests==2.31.0", "function": "def handler(e, c):\n    return 1\n"}),
        json!({"deps": "requests==2.31.0", "runtime": "python3.11"}),
        json!({"deps": "requests==2.31.0", "handler": "hello.other"}),
    ] {
        assert_ne!(plan(extra.clone()).image, a.image, "{extra}");
    }
    // What does not (timeout, env, replicas) keeps it.
    let same = plan(json!({"deps": "requests==2.31.0", "timeout": "30",
        "deployment": {"spec": {"replicas": 2, "template": {"spec": {"containers": [{"env": [{"name": "A", "value": "1"}]}]}}}}}));
    assert_eq!(same.image, a.image);
    // Long names still give a valid Job name.
    let long = "f".repeat(63);
    assert_eq!(crate::build_step::job_name(&long, &a.hash).len(), 63);
}

#[test]
fn build_job_runs_the_install_steps_then_pushes_and_passes_restricted() {
    let c = build_cfg(true);
    let d = build(&py(json!({"deps": "requests==2.31.0"})), &c).unwrap();
    let plan = d.build.clone().unwrap();
    let access = crate::build_step::RegistryAccess {
        secret: Some("kubeless-registry-credentials".into()),
        docker_config: true,
        ca: true,
    };
    let job = plan.job(&access);
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let steps: Vec<_> = pod
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(steps, vec!["prepare", "install"]);
    let push = &pod.containers[0];
    assert_eq!(
        push.image.as_deref(),
        Some(crate::config::DEFAULT_BUILDER_IMAGE)
    );
    let env = env_of(push);
    assert_eq!(env["KUBELESS_BUILD_TARGET"], plan.image);
    assert_eq!(
        env["KUBELESS_BUILD_BASE"],
        "kubeless-rs/runtime-python:3.12"
    );
    assert_eq!(env["KUBELESS_REGISTRY_INSECURE"], "true");
    assert_eq!(
        env["KUBELESS_DOCKER_CONFIG"],
        "/var/run/kubeless/registry/.dockerconfigjson"
    );
    assert_eq!(
        env["KUBELESS_REGISTRY_CA_FILE"],
        "/var/run/kubeless/registry/ca.crt"
    );
    assert_eq!(restricted_violations(pod), Vec::<String>::new());
    // Build pods are not the function's pods: the Service must not select them.
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert!(!labels.contains_key("function"), "{labels:?}");
    assert_eq!(
        job.metadata.owner_references.as_ref().unwrap()[0].uid,
        "uid-1"
    );
    // No Secret: no registry volume, anonymous push.
    let anon = plan.job(&Default::default());
    let pod = anon.spec.unwrap().template.spec.unwrap();
    assert!(pod.volumes.iter().flatten().all(|v| v.secret.is_none()));
    assert!(!env_of(&pod.containers[0]).contains_key("KUBELESS_DOCKER_CONFIG"));
}

#[test]
fn the_built_image_runs_without_install_steps_or_code_volume() {
    let d = build(&py(json!({"deps": "requests==2.31.0"})), &build_cfg(true)).unwrap();
    let before = applied_hash(&d.deployment).map(str::to_string);
    let image = d.build.clone().unwrap().image;
    let d = with_built_image(d, &image, Some("kubeless-registry-credentials"));
    let pod = pod_spec(&d);
    assert_eq!(
        pod.image_pull_secrets.as_ref().unwrap()[0].name,
        "kubeless-registry-credentials"
    );
    assert!(pod.init_containers.is_none());
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .all(|v| v.name != SRC_VOLUME && v.name != INSTALL_VOLUME)
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(image.as_str()));
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != INSTALL_VOLUME)
    );
    assert_eq!(env_of(c)["KUBELESS_INSTALL_VOLUME"], INSTALL_DIR);
    assert_eq!(d.image, image);
    assert_ne!(applied_hash(&d.deployment).map(str::to_string), before);
    assert_eq!(restricted_violations(pod), Vec::<String>::new());
}

fn runtime_sc(d: &Desired) -> SecurityContext {
    pod_spec(d).containers[0].security_context.clone().unwrap()
}

#[test]
fn a_template_security_context_is_merged_with_the_restricted_defaults() {
    let tmpl = |sc: Value| {
        py(
            json!({"deployment": {"spec": {"template": {"spec": {"containers": [{
            "name": "hello", "securityContext": sc}]}}}}}),
        )
    };
    // Only a user: every other field keeps its restricted default, and the pod passes.
    let d = build(&tmpl(json!({"runAsUser": 1000})), &cfg()).unwrap();
    let sc = runtime_sc(&d);
    assert_eq!(sc.run_as_user, Some(1000));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".to_string()])
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    assert_eq!(restricted_violations(pod_spec(&d)), Vec::<String>::new());
    // An added capability keeps the default drop list beside it.
    let d = build(
        &tmpl(
            json!({"capabilities": {"add": ["NET_BIND_SERVICE"]}, "readOnlyRootFilesystem": true}),
        ),
        &cfg(),
    )
    .unwrap();
    let sc = runtime_sc(&d);
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.add, Some(vec!["NET_BIND_SERVICE".to_string()]));
    assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(restricted_violations(pod_spec(&d)), Vec::<String>::new());
    // What the template set wins, even where it is weaker (the policy judges that, not the
    // merge): its own seccomp profile and drop list are kept.
    let d = build(
        &tmpl(
            json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
            "capabilities": {"drop": ["NET_RAW"]}}),
        ),
        &cfg(),
    )
    .unwrap();
    let sc = runtime_sc(&d);
    assert_eq!(sc.seccomp_profile.unwrap().type_, "Localhost");
    assert_eq!(
        sc.capabilities.unwrap().drop,
        Some(vec!["NET_RAW".to_string()])
    );
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    // Defaults that would contradict the template (an install that allows it) stay out:
    // the API server refuses privileged with allowPrivilegeEscalation false, and the kubelet
    // refuses runAsNonRoot with user 0.
    let kubeless = ControllerConfig {
        template_policy: crate::policy::TemplatePolicy {
            mode: crate::policy::PolicyMode::Kubeless,
            ..Default::default()
        },
        ..cfg()
    };
    let d = build(
        &tmpl(json!({"privileged": true, "runAsUser": 0})),
        &kubeless,
    )
    .unwrap();
    let sc = runtime_sc(&d);
    assert_eq!(sc.privileged, Some(true));
    assert_eq!(sc.allow_privilege_escalation, None);
    assert_eq!(sc.run_as_non_root, None);
    // A sidecar of the template gets the same defaults.
    let d = build(
        &py(json!({"deployment": {"spec": {"template": {"spec": {"containers": [
            {"name": "hello"}, {"name": "side", "image": "s", "securityContext": {"runAsUser": 7}}]}}}}})),
        &cfg(),
    )
    .unwrap();
    let side = pod_spec(&d).containers[1].security_context.clone().unwrap();
    assert_eq!(side.run_as_user, Some(7));
    assert_eq!(side.allow_privilege_escalation, Some(false));
    assert_eq!(restricted_violations(pod_spec(&d)), Vec::<String>::new());
}

#[test]
fn a_template_pod_security_context_is_merged_with_the_restricted_defaults() {
    let d = build(
        &py(json!({"deployment": {"spec": {"template": {"spec": {
            "securityContext": {"runAsUser": 1000}}}}}})),
        &cfg(),
    )
    .unwrap();
    let psc = pod_spec(&d).security_context.clone().unwrap();
    assert_eq!(psc.run_as_user, Some(1000));
    assert_eq!(psc.run_as_group, Some(FUNCTION_UID));
    assert_eq!(psc.fs_group, Some(FUNCTION_UID));
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    assert_eq!(restricted_violations(pod_spec(&d)), Vec::<String>::new());
    // The fsGroup the template chose is kept.
    let d = build(
        &py(json!({"deployment": {"spec": {"template": {"spec": {
            "securityContext": {"fsGroup": 3000}}}}}})),
        &cfg(),
    )
    .unwrap();
    let psc = pod_spec(&d).security_context.clone().unwrap();
    assert_eq!(
        (psc.fs_group, psc.run_as_user),
        (Some(3000), Some(FUNCTION_UID))
    );
}

#[test]
fn the_template_policy_refuses_host_access_as_invalid_spec() {
    let e = build(
        &py(json!({"deployment": {"spec": {"template": {"spec": {"hostNetwork": true}}}}})),
        &cfg(),
    )
    .unwrap_err();
    assert_eq!(e.reason(), "InvalidSpec");
    assert!(
        e.to_string()
            .contains("spec.deployment.spec.template.spec.hostNetwork"),
        "{e}"
    );
    // The install's default Deployment is the install's choice, not checked.
    let mut c = cfg();
    c.default_deployment = Some(json!({"spec": {"template": {"spec": {"hostNetwork": true}}}}));
    assert!(build(&py(json!({})), &c).is_ok());
    // Allowed by the install: built, and the field is copied through.
    c.default_deployment = None;
    c.template_policy.allow_host_network = true;
    let d = build(
        &py(json!({"deployment": {"spec": {"template": {"spec": {"hostNetwork": true}}}}})),
        &c,
    )
    .unwrap();
    assert_eq!(pod_spec(&d).host_network, Some(true));
}
