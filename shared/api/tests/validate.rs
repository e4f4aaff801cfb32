#![cfg(test)]
//! The CRD schema constraints and CEL rules refuse the inputs a real API server refuses, with
//! the field path, through `kubeless_api::validate` (the same code devcluster runs).

use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger,
    validate::{self, ErrorType, Invalid},
};
use serde_json::{Value, json};

fn function(name: &str, spec: Value) -> Function {
    serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1",
        "kind": "Function",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

fn base_spec() -> Value {
    json!({
        "runtime": "python3.11",
        "handler": "hello.handler",
        "function": "def handler(event, context):\n    return 'hi'\n",
        "function-content-type": "text",
        "timeout": "180",
        "deployment": {"spec": {"template": {"spec": {"containers": [{
            "name": "f",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"cpu": "1", "memory": "128Mi"}},
            "ports": [{"containerPort": 8080, "protocol": "TCP"}]
        }]}}}},
        "service": {"type": "ClusterIP", "ports": [{"name": "http-function-port", "port": 8080, "targetPort": 8080}]},
        "horizontalPodAutoscaler": {"spec": {"minReplicas": 1, "maxReplicas": 3}}
    })
}

/// Sets `value` at a JSON pointer inside the base spec.
fn with(pointer: &str, value: Value) -> Value {
    let mut spec = base_spec();
    *spec.pointer_mut(pointer).unwrap() = value;
    spec
}

fn refused(f: &Function) -> Invalid {
    validate::function(f).expect_err("the Function should be refused")
}

fn assert_field(err: &Invalid, field: &str, contains: &str) {
    assert!(
        err.errors
            .iter()
            .any(|e| e.field == field && e.detail.contains(contains)),
        "expected an error on {field} containing {contains:?}, got: {err}"
    );
}

#[test]
fn a_good_function_passes() {
    validate::function(&function("hello", base_spec())).unwrap();
    // Minimal, as `kubeless function deploy` writes it.
    validate::function(&function(
        "f1",
        json!({"runtime": "nodejs20", "handler": "mod.fn", "function": "x"}),
    ))
    .unwrap();
}

#[test]
fn memory_that_is_not_a_quantity() {
    let spec = with(
        "/deployment/spec/template/spec/containers/0/resources/limits/memory",
        json!("lots"),
    );
    let err = refused(&function("hello", spec));
    assert_field(
        &err,
        "spec.deployment.spec.template.spec.containers[0].resources.limits.memory",
        "Invalid value: \"lots\"",
    );
    assert!(
        err.to_string()
            .starts_with("Function.kubeless.io \"hello\" is invalid: ")
    );
}

#[test]
fn port_out_of_range() {
    let err = refused(&function(
        "hello",
        with("/service/ports/0/port", json!(70000)),
    ));
    assert_field(
        &err,
        "spec.service.ports[0].port",
        "should be less than or equal to 65535",
    );
    let err = refused(&function(
        "hello",
        with(
            "/deployment/spec/template/spec/containers/0/ports/0/containerPort",
            json!(0),
        ),
    ));
    assert_field(
        &err,
        "spec.deployment.spec.template.spec.containers[0].ports[0].containerPort",
        "greater than or equal to 1",
    );
}

#[test]
fn service_type_outside_the_enum() {
    let err = refused(&function("hello", with("/service/type", json!("Bogus"))));
    assert_field(&err, "spec.service.type", "Unsupported value: \"Bogus\"");
    assert_eq!(err.errors[0].kind, ErrorType::NotSupported);
}

#[test]
fn hpa_min_above_max_is_refused_by_cel() {
    let err = refused(&function(
        "hello",
        with(
            "/horizontalPodAutoscaler/spec",
            json!({"minReplicas": 5, "maxReplicas": 2}),
        ),
    ));
    assert_field(
        &err,
        "spec.horizontalPodAutoscaler.spec",
        "minReplicas must be less than or equal to maxReplicas",
    );
    let err = refused(&function(
        "hello",
        with(
            "/horizontalPodAutoscaler/spec",
            json!({"scaleTargetRef": {"kind": "Deployment", "name": "hello"}, "maxReplicas": 0}),
        ),
    ));
    assert_field(
        &err,
        "spec.horizontalPodAutoscaler.spec",
        "needs maxReplicas >= 1",
    );
}

#[test]
fn function_names_that_cannot_be_a_service_or_label_value() {
    // The rules sit on the root but report at metadata.name, without the object (a root rule
    // would be reported at `<nil>`). Static messages: one reading the name costs more than a real
    // API server's CEL budget allows.
    for name in ["1func", "my.func", "hello_world"] {
        let err = refused(&function(name, base_spec()));
        assert_field(&err, "metadata.name", "must be a DNS-1035 label");
        assert!(err.to_string().len() < 400, "{name}: {err}");
        assert!(!err.to_string().contains("<nil>"), "{name}: {err}");
    }
    let long = "f".repeat(69);
    let err = refused(&function(&long, base_spec()));
    assert_field(
        &err,
        "metadata.name",
        "a Function name must be no more than 63 characters",
    );
    validate::function(&function(&"f".repeat(63), base_spec())).unwrap();
}

#[test]
fn handler_timeout_runtime_and_content_type() {
    for (field, value, path) in [
        ("/handler", "nodot", "spec.handler"),
        ("/timeout", "abc", "spec.timeout"),
        ("/timeout", "0", "spec.timeout"),
        ("/runtime", "python", "spec.runtime"),
        (
            "/function-content-type",
            "base64+rar",
            "spec.function-content-type",
        ),
    ] {
        let err = refused(&function("hello", with(field, json!(value))));
        assert_field(&err, path, "should match");
    }
}

#[test]
fn triggers() {
    let cron: CronJobTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "CronJobTrigger",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"schedule": "every minute", "function-name": "hello"}
    }))
    .unwrap();
    let err = validate::cronjob_trigger(&cron).unwrap_err();
    assert_field(&err, "spec.schedule", "should match");
    let mut ok = cron.clone();
    ok.spec.schedule = "*/5 * * * *".into();
    validate::cronjob_trigger(&ok).unwrap();
    ok.spec.schedule = "@hourly".into();
    validate::cronjob_trigger(&ok).unwrap();

    let http: HttpTrigger = serde_json::from_value(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "HTTPTrigger",
        "metadata": {"name": "h", "namespace": "default"},
        "spec": {"function-name": "1func", "gateway": "haproxy"}
    }))
    .unwrap();
    let err = validate::http_trigger(&http).unwrap_err();
    assert_field(&err, "spec.function-name", "should match");
    assert_field(&err, "spec.gateway", "should match");
}

#[test]
fn transition_rules_see_the_old_object() {
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object",
            "properties": {"size": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.size >= oldSelf.size", "message": "size may not shrink"}]}}
    });
    let old = json!({"spec": {"size": 5}});
    let mut new = json!({"spec": {"size": 3}});
    let errors = validate::validate_object(&schema, &mut new, Some(&old));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].to_string(),
        "spec: Invalid value: \"object\": size may not shrink"
    );
    let mut grown = json!({"spec": {"size": 6}});
    assert!(validate::validate_object(&schema, &mut grown, Some(&old)).is_empty());
    // messageExpression builds the message from the value.
    let schema2 = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"size": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.size < 10",
            "messageExpression": "'size ' + string(self.size) + ' is too big'"}]}}});
    let mut big = json!({"spec": {"size": 12}});
    let errors = validate::validate_object(&schema2, &mut big, None);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].detail.ends_with("size 12 is too big"),
        "{errors:?}"
    );
    // On create the transition rule does not run.
    assert!(validate::validate_object(&schema, &mut new, None).is_empty());
}

/// Every Kubeless manifest the round-trip tests use (real Kubeless 1.0 output included) still
/// passes the stricter schema.
#[test]
fn every_fixture_manifest_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = serde_yaml_ng::from_str(&text).unwrap();
        let result = match value["kind"].as_str().unwrap() {
            "Function" => validate::function(&serde_json::from_value(value).unwrap()),
            "HTTPTrigger" => validate::http_trigger(&serde_json::from_value(value).unwrap()),
            "CronJobTrigger" => validate::cronjob_trigger(&serde_json::from_value(value).unwrap()),
            "KafkaTrigger" => validate::kafka_trigger(&serde_json::from_value(value).unwrap()),
            "NATSTrigger" => validate::nats_trigger(&serde_json::from_value(value).unwrap()),
            "KinesisTrigger" => validate::kinesis_trigger(&serde_json::from_value(value).unwrap()),
            "RedisTrigger" => validate::redis_trigger(&serde_json::from_value(value).unwrap()),
            other => panic!("{}: unknown kind {other}", path.display()),
        };
        if let Err(e) = result {
            panic!("{}: {e}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} fixtures found");
}

/// Every CEL rule in our CRDs stays in the scope a CRD rule may use and under kube-cel's
/// estimate of the Kubernetes cost budget (a coarse check: the real server computes its own).
#[test]
fn cel_rules_are_in_scope_and_cheap() {
    fn walk(node: &Value, found: &mut Vec<(String, Value)>) {
        let Some(map) = node.as_object() else { return };
        if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
            for r in rules {
                found.push((r["rule"].as_str().unwrap().to_string(), node.clone()));
            }
        }
        for key in ["properties", "additionalProperties", "items"] {
            match map.get(key) {
                Some(Value::Object(m)) if key == "properties" => {
                    m.values().for_each(|c| walk(c, found))
                }
                Some(child) => walk(child, found),
                None => {}
            }
        }
    }
    let mut rules = Vec::new();
    for crd in kubeless_api::all() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        walk(&schema["openAPIV3Schema"], &mut rules);
    }
    assert!(rules.len() >= 4, "{} rules", rules.len());
    for (rule, node) in rules {
        let compiled = kube_cel::compile_schema(&node);
        assert!(!compiled.has_errors(), "{rule} does not compile");
        let warnings =
            kube_cel::analyze_rule(&rule, &compiled, kube_cel::ScopeContext::CrdValidation);
        let serious: Vec<_> = warnings
            .iter()
            .filter(|w| !matches!(w.kind, kube_cel::WarningKind::MissingBounds))
            .collect();
        assert!(serious.is_empty(), "{rule}: {serious:?}");
    }
}

/// Cost of validating a Function in process (what the CLI and devcluster pay per write):
/// structural checks alone (the CRD with its CEL rules stripped) as the baseline, then with the
/// CEL rules. Prints numbers; run with
/// `cargo test -p kubeless-api --release --test validate -- --ignored --nocapture`.
#[test]
#[ignore = "measurement, not a pass/fail test"]
fn measure_validation_cost() {
    fn strip_rules(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("x-kubernetes-validations");
                m.values_mut().for_each(strip_rules);
            }
            Value::Array(a) => a.iter_mut().for_each(strip_rules),
            _ => {}
        }
    }
    let crd = serde_json::to_value(&kubeless_api::crd::<Function>().spec.versions[0].schema)
        .unwrap()["openAPIV3Schema"]
        .clone();
    let mut bare = crd.clone();
    strip_rules(&mut bare);
    let with_cel = validate::CrdSchema::new(crd);
    let without = validate::CrdSchema::new(bare);
    let obj = serde_json::to_value(function("hello", base_spec())).unwrap();
    const N: u32 = 500;
    for (label, schema) in [
        ("structural only (baseline)", &without),
        ("structural + CEL", &with_cel),
    ] {
        let start = std::time::Instant::now();
        for _ in 0..N {
            let mut o = obj.clone();
            assert!(schema.validate(&mut o, None).is_empty());
        }
        let per = start.elapsed() / N;
        println!("{label}: {per:?} per Function");
    }
}

/// Every trigger field the docs call checked is refused by the schema with its field path:
/// negative or unparsable durations, a multiplier below 1, numbers past int32.
#[test]
fn trigger_fields_the_docs_call_checked() {
    let schemas: std::collections::HashMap<String, validate::CrdSchema> = kubeless_api::all()
        .into_iter()
        .map(|crd| {
            let schema = serde_json::to_value(
                crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .unwrap()
                    .open_api_v3_schema
                    .as_ref()
                    .unwrap(),
            )
            .unwrap();
            (crd.spec.names.kind, validate::CrdSchema::new(schema))
        })
        .collect();
    let base = |kind: &str| -> Value {
        let spec = match kind {
            "CronJobTrigger" => json!({"schedule": "*/5 * * * *", "function-name": "hello"}),
            "KafkaTrigger" | "NATSTrigger" => {
                json!({"topic": "t", "functionSelector": {"matchLabels": {"function": "hello"}}})
            }
            "KinesisTrigger" => json!({"function-name": "hello", "stream": "s"}),
            "RedisTrigger" => json!({"url": "redis://127.0.0.1:6379", "stream": "s",
                "functionSelector": {"matchLabels": {"function": "hello"}}}),
            other => panic!("no base for {other}"),
        };
        json!({"apiVersion": "kubeless.io/v1beta1", "kind": kind,
            "metadata": {"name": "t", "namespace": "default"}, "spec": spec})
    };
    let check = |kind: &str, pointer: &str, value: Value, path: &str, contains: &str| {
        let mut obj = base(kind);
        validate_ok(&schemas[kind], &obj, kind);
        set_pointer(&mut obj, pointer, value.clone());
        let errors = schemas[kind].validate(&mut obj, None);
        assert!(
            errors
                .iter()
                .any(|e| e.field == path && e.detail.contains(contains)),
            "{kind} {path} = {value}: expected an error on {path} containing {contains:?}, got {errors:?}"
        );
    };
    let retry_kinds = [
        "CronJobTrigger",
        "KafkaTrigger",
        "NATSTrigger",
        "KinesisTrigger",
        "RedisTrigger",
    ];
    for kind in retry_kinds {
        for d in [
            "-1s",
            "forever",
            "10",
            "1d",
            "1.2.3s",
            " 1s",
            "s",
            "9999999999999h",
        ] {
            for f in ["initialBackoff", "maxBackoff"] {
                check(
                    kind,
                    &format!("/spec/retry/{f}"),
                    json!(d),
                    &format!("spec.retry.{f}"),
                    "should match",
                );
            }
        }
        check(
            kind,
            "/spec/retry/multiplier",
            json!(-2.0),
            "spec.retry.multiplier",
            "should be greater than or equal to 1",
        );
        check(
            kind,
            "/spec/retry/multiplier",
            json!(0.5),
            "spec.retry.multiplier",
            "should be greater than or equal to 1",
        );
        check(
            kind,
            "/spec/retry/maxAttempts",
            json!(1_000_000_000_000i64),
            "spec.retry.maxAttempts",
            "should be less than or equal to 2147483647",
        );
        check(
            kind,
            "/spec/retry/maxAttempts",
            json!(0),
            "spec.retry.maxAttempts",
            "should be greater than or equal to 1",
        );
        // What parse_duration reads stays accepted.
        for d in ["0", "500ms", "1.5s", "1m30s", "2h", ".5s"] {
            let mut obj = base(kind);
            set_pointer(&mut obj, "/spec/retry/initialBackoff", json!(d));
            set_pointer(&mut obj, "/spec/retry/multiplier", json!(1.0));
            validate_ok(&schemas[kind], &obj, kind);
            kubeless_api::delivery::parse_duration("d", d).unwrap();
        }
    }
    for d in ["-1s", "forever"] {
        check(
            "NATSTrigger",
            "/spec/jetStream/ackWait",
            json!(d),
            "spec.jetStream.ackWait",
            "should match",
        );
    }
    check(
        "NATSTrigger",
        "/spec/maxInFlight",
        json!(1_000_000_000_000i64),
        "spec.maxInFlight",
        "should be less than or equal to 2147483647",
    );
    for f in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        check(
            "CronJobTrigger",
            &format!("/spec/{f}"),
            json!(1_000_000_000_000i64),
            &format!("spec.{f}"),
            "should be less than or equal to 2147483647",
        );
        check(
            "CronJobTrigger",
            &format!("/spec/{f}"),
            json!(-1),
            &format!("spec.{f}"),
            "should be greater than or equal to 0",
        );
    }
    // The Function's HPA numbers are int32 too.
    let f = function(
        "hello",
        with(
            "/horizontalPodAutoscaler/spec/maxReplicas",
            json!(1_000_000_000_000i64),
        ),
    );
    assert_field(
        &refused(&f),
        "spec.horizontalPodAutoscaler.spec.maxReplicas",
        "should be less than or equal to 2147483647",
    );
}

fn validate_ok(schema: &validate::CrdSchema, obj: &Value, kind: &str) {
    let errors = schema.validate(&mut obj.clone(), None);
    assert!(
        errors.is_empty(),
        "{kind}: a valid object was refused: {errors:?}"
    );
}

/// Sets `value` at `pointer`, creating the objects on the way.
fn set_pointer(obj: &mut Value, pointer: &str, value: Value) {
    let mut node = obj;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    for part in &parts[..parts.len() - 1] {
        node = node
            .as_object_mut()
            .unwrap()
            .entry(part.to_string())
            .or_insert_with(|| json!({}));
    }
    node.as_object_mut()
        .unwrap()
        .insert(parts[parts.len() - 1].to_string(), value);
}
