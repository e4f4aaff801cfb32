use super::*;
use crate::builders;

fn settings() -> WarmSettings {
    WarmSettings {
        runtimes: [("python3.11".to_string(), 1)].into(),
        namespace: "kubeless".into(),
        token_secret: "kubeless-warm-pool".into(),
    }
}

fn function(spec: serde_json::Value) -> Function {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeless.io/v1beta1",
        "kind": "Function",
        "metadata": {"name": "hello", "namespace": "team", "uid": "u-1"},
        "spec": spec,
    }))
    .unwrap()
}

fn python(extra: serde_json::Value) -> Function {
    let mut spec = serde_json::json!({
        "runtime": "python3.11",
        "handler": "hello.greet",
        "function": "def greet(event, context):\n    return 'hi'\n",
        "function-content-type": "text",
        "timeout": "12",
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    function(spec)
}

fn pool_spec(cfg: &ControllerConfig) -> PodSpec {
    pool_pod("python3.11", cfg, &settings())
        .unwrap()
        .spec
        .unwrap()
}

#[test]
fn pool_flag_parses() {
    assert_eq!(
        parse_pool("python3.11=2, nodejs20").unwrap(),
        [("nodejs20".to_string(), 1), ("python3.11".to_string(), 2)].into()
    );
    assert_eq!(parse_pool("").unwrap(), BTreeMap::new());
    assert!(parse_pool("python3.11=-1").is_err());
    assert!(parse_pool("python3.11=1000").is_err());
    assert!(parse_pool("=2").is_err());
}

#[test]
fn pool_pod_is_the_runtime_without_a_function() {
    let cfg = ControllerConfig::default();
    let pod = pool_pod("python3.11", &cfg, &settings()).unwrap();
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels[POOL_LABEL], "python3-11");
    assert_eq!(labels[STATE_LABEL], STATE_IDLE);
    assert_eq!(
        pod.metadata.generate_name.as_deref(),
        Some("kubeless-pool-python3-11-")
    );
    let spec = pod.spec.unwrap();
    assert!(spec.init_containers.is_none());
    assert_eq!(spec.automount_service_account_token, Some(false));
    let c = &spec.containers[0];
    let env: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert!(!env.contains(&"FUNC_HANDLER") && !env.contains(&"MOD_NAME"));
    assert!(env.contains(&"FUNC_RUNTIME"));
    let token = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == TOKEN_ENV)
        .unwrap();
    let key = token
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (key.name.as_str(), key.key.as_str()),
        ("kubeless-warm-pool", TOKEN_KEY)
    );
    assert!(c.readiness_probe.is_some());
    // Same image as a Function of that runtime.
    let f = builders::build(&python(serde_json::json!({})), &cfg).unwrap();
    let fc = &f.deployment.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(c.image, fc.image);
    // A compiled runtime has no pool.
    assert!(pool_pod("go1.19", &cfg, &settings()).is_err());
}

#[test]
fn a_plain_function_is_specialized_with_its_code_and_env() {
    let cfg = ControllerConfig::default();
    let f = python(serde_json::json!({
        "deployment": {"spec": {"template": {"spec": {"containers": [
            {"env": [{"name": "GREETING", "value": "hi"}]}
        ]}}}}
    }));
    let desired = builders::build(&f, &cfg).unwrap();
    let req = specialize_request(&desired, &pool_spec(&cfg)).unwrap();
    assert_eq!(req.source.file, "hello.py");
    assert_eq!(req.source.content_type, "text");
    assert!(req.source.content.contains("def greet"));
    let env: BTreeMap<&str, &str> = req
        .env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(env["FUNC_HANDLER"], "greet");
    assert_eq!(env["MOD_NAME"], "hello");
    assert_eq!(env["FUNC_TIMEOUT"], "12");
    assert_eq!(env["GREETING"], "hi");
}

#[test]
fn functions_that_need_more_than_code_are_not_eligible() {
    let mut cfg = ControllerConfig::default();
    // The install allows the ServiceAccount of the last case.
    cfg.template_policy.allowed_service_accounts = vec!["robot".into()];
    let pool = pool_spec(&cfg);
    let cases = [
        serde_json::json!({"deps": "requests==2.31.0"}),
        serde_json::json!({"deployment": {"spec": {"template": {"spec": {"containers": [
            {"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
        ]}}}}}),
        serde_json::json!({"deployment": {"spec": {"template": {"spec": {"containers": [
            {"env": [{"name": "KUBELESS_WORKERS", "value": "9"}]}
        ]}}}}}),
        serde_json::json!({"deployment": {"spec": {"template": {"spec": {"serviceAccountName": "robot"}}}}}),
    ];
    for extra in cases {
        let desired = builders::build(&python(extra.clone()), &cfg).unwrap();
        assert!(
            specialize_request(&desired, &pool).is_err(),
            "{extra} should not be eligible"
        );
    }
    // Another runtime's pool does not fit.
    let node = builders::build(
        &function(serde_json::json!({
            "runtime": "nodejs20", "handler": "hello.greet", "function": "module.exports={}"
        })),
        &cfg,
    )
    .unwrap();
    assert_eq!(
        specialize_request(&node, &pool),
        Err(Ineligible("its image is not the pool's"))
    );
}

#[test]
fn warm_slice_joins_the_function_service() {
    let cfg = ControllerConfig::default();
    let f = python(serde_json::json!({}));
    let desired = builders::build(&f, &cfg).unwrap();
    let slice = warm_slice(
        &f,
        &desired,
        ("kubeless", "kubeless-pool-python3-11-x"),
        "10.0.0.7",
        8080,
    );
    let labels = slice.metadata.labels.clone().unwrap();
    assert_eq!(labels[SERVICE_NAME_LABEL], "hello");
    assert_eq!(labels[SLICE_MANAGED_BY_LABEL], SLICE_MANAGER);
    assert_eq!(slice.metadata.name.as_deref(), Some("hello-warm"));
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.endpoints[0].addresses, vec!["10.0.0.7".to_string()]);
    let port = &slice.ports.as_ref().unwrap()[0];
    assert_eq!(port.port, Some(8080));
    assert_eq!(port.name.as_deref(), Some(builders::SERVICE_PORT_NAME));
    assert_eq!(
        slice.metadata.owner_references.unwrap()[0].uid,
        "u-1".to_string()
    );
}
