//! Typed accessors over the raw templates: partial Deployments, Services and v2beta1 HPAs.
#![cfg(test)]

use std::{path::PathBuf, time::Duration};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeless_api::{
    CronJobTrigger, Function, HttpTrigger, KinesisTrigger, NatsTrigger,
    parse::{Archive, Encoding},
    triggers::{ConcurrencyPolicy, Gateway, StartingPosition},
};

fn fixture<T: serde::de::DeserializeOwned>(name: &str) -> T {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn partial_deployment_template_decodes_with_filled_required_fields() {
    let f: Function = fixture("function-partial-deployment.yaml");
    let d = f.deployment_template().unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.selector.match_labels, None);
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    assert_eq!(c.name, "");
    let env = c.env.as_ref().unwrap();
    assert_eq!(
        (env[0].name.as_str(), env[0].value.as_deref()),
        ("FOO", Some("bar"))
    );
    let limits = c.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "100Mi");
    // The raw template is untouched by decoding.
    assert!(
        f.spec.deployment.as_ref().unwrap().0["spec"]
            .get("selector")
            .is_none()
    );
}

#[test]
fn full_deployment_template_keeps_everything() {
    let f: Function = fixture("function-full.yaml");
    let d = f.deployment_template().unwrap();
    assert_eq!(
        d.metadata.annotations.unwrap()["sidecar.istio.io/inject"],
        "false"
    );
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("fn-runner"));
    assert_eq!(pod.init_containers.unwrap()[0].name, "");
    assert_eq!(pod.volumes.unwrap()[0].name, "db-creds");
    let secret_ref = pod.containers[0].env.as_ref().unwrap()[1]
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(secret_ref.key, "password");
}

#[test]
fn dryrun_templates_with_nulls_decode() {
    let f: Function = fixture("function-dryrun-null-containers.yaml");
    let d = f.deployment_template().unwrap();
    assert!(d.spec.unwrap().template.spec.unwrap().containers.is_empty());
    assert!(
        f.spec.service_spec().unwrap().is_none(),
        "service: {{}} means default"
    );
    assert_eq!(f.spec.timeout_duration().unwrap(), Duration::from_secs(180));

    let f: Function = fixture("function-dryrun.yaml");
    assert!(
        f.hpa_v2().unwrap().is_none(),
        "all-empty HPA means no autoscaling"
    );
    let svc = f.spec.service_spec().unwrap().unwrap();
    assert_eq!(svc.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        svc.ports.unwrap()[0].target_port,
        Some(IntOrString::Int(8080))
    );
}

#[test]
fn partial_service_ports_decode() {
    let f: Function = fixture("function-partial-deployment.yaml");
    let svc = f.spec.service_spec().unwrap().unwrap();
    let port = &svc.ports.unwrap()[0];
    assert_eq!(port.name, None);
    assert_eq!(port.port, 9090);
    assert_eq!(port.target_port, Some(IntOrString::Int(8080)));
}

#[test]
fn v2beta1_cpu_hpa_converts_to_v2() {
    let f: Function = fixture("function-full.yaml");
    let hpa = f.hpa_v2().unwrap().unwrap();
    assert_eq!(hpa.metadata.name.as_deref(), Some("hello"));
    assert_eq!(hpa.metadata.labels.unwrap()["function"], "hello");
    let spec = hpa.spec.unwrap();
    assert_eq!((spec.min_replicas, spec.max_replicas), (Some(1), 5));
    // apps/v1beta1 no longer serves Deployments.
    assert_eq!(
        spec.scale_target_ref.api_version.as_deref(),
        Some("apps/v1")
    );
    assert_eq!(spec.scale_target_ref.name, "hello");
    let m = &spec.metrics.unwrap()[0];
    assert_eq!(m.type_, "Resource");
    let r = m.resource.as_ref().unwrap();
    assert_eq!(r.name, "cpu");
    assert_eq!(r.target.type_, "Utilization");
    assert_eq!(r.target.average_utilization, Some(70));
}

#[test]
fn every_v2beta1_metric_source_converts() {
    let f: Function = fixture("function-hpa-v2beta1-metrics.yaml");
    let spec = f.hpa_v2().unwrap().unwrap().spec.unwrap();
    let m = spec.metrics.unwrap();
    assert_eq!(m.len(), 5);

    let mem = m[0].resource.as_ref().unwrap();
    assert_eq!(
        (
            mem.target.type_.as_str(),
            mem.target.average_value.as_ref().unwrap().0.as_str()
        ),
        ("AverageValue", "100Mi")
    );

    let pods = m[1].pods.as_ref().unwrap();
    assert_eq!(pods.metric.name, "function_calls");
    assert_eq!(pods.target.type_, "AverageValue");
    assert_eq!(pods.target.average_value.as_ref().unwrap().0, "10");

    let obj = m[2].object.as_ref().unwrap();
    assert_eq!(
        (
            obj.described_object.kind.as_str(),
            obj.described_object.name.as_str()
        ),
        ("Service", "scaled")
    );
    assert_eq!(obj.metric.name, "function_calls");
    assert_eq!(obj.target.type_, "Value");
    assert_eq!(obj.target.value.as_ref().unwrap().0, "100");

    let ext = m[3].external.as_ref().unwrap();
    assert_eq!(ext.metric.name, "queue_depth");
    assert_eq!(
        ext.metric
            .selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["queue"],
        "orders"
    );
    assert_eq!(ext.target.type_, "AverageValue");

    let cr = m[4].container_resource.as_ref().unwrap();
    assert_eq!((cr.name.as_str(), cr.container.as_str()), ("cpu", "scaled"));
    assert_eq!(cr.target.average_utilization, Some(60));
    assert_eq!(m[4].type_, "ContainerResource");
}

#[test]
fn v2_hpa_passes_through_and_defaults_its_name() {
    let f: Function = fixture("function-hpa-v2.yaml");
    let hpa = f.hpa_v2().unwrap().unwrap();
    assert_eq!(hpa.metadata.name.as_deref(), Some("modern"));
    let spec = hpa.spec.unwrap();
    let m = spec.metrics.unwrap();
    assert_eq!(
        m[0].resource.as_ref().unwrap().target.average_utilization,
        Some(50)
    );
    let obj = m[1].object.as_ref().unwrap();
    assert_eq!(obj.described_object.name, "modern");
    assert_eq!(obj.target.value.as_ref().unwrap().0, "200");
    let down = spec.behavior.unwrap().scale_down.unwrap();
    assert_eq!(down.stabilization_window_seconds, Some(120));
    assert_eq!(down.policies.unwrap()[0].period_seconds, 60);
}

#[test]
fn hpa_with_target_but_no_max_replicas_is_an_error() {
    let mut v: serde_json::Value = fixture("function-hpa-v2.yaml");
    v["spec"]["horizontalPodAutoscaler"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("maxReplicas");
    let f: Function = serde_json::from_value(v).unwrap();
    assert!(f.hpa_v2().is_err());
}

#[test]
fn function_field_helpers() {
    let f: Function = fixture("function-full.yaml");
    assert_eq!(f.spec.timeout_duration().unwrap(), Duration::from_secs(30));
    let rt = f.spec.runtime_ref().unwrap().unwrap();
    assert_eq!((rt.id.as_str(), rt.version.as_str()), ("python", "3.8"));
    let h = f.spec.handler_parts().unwrap();
    assert_eq!(
        (h.module.as_str(), h.function.as_str()),
        ("hello", "handler")
    );
    assert_eq!(f.spec.custom_image(), None);
    assert_eq!(f.spec.service_port().unwrap(), 8080);
    let partial: Function = fixture("function-partial-deployment.yaml");
    assert_eq!(partial.spec.service_port().unwrap(), 9090);
    assert_eq!(
        kubeless_api::function::in_cluster_url("hello", "default", 9090, "cluster.local."),
        "http://hello.default.svc.cluster.local:9090"
    );

    let zipped: Function = fixture("function-url-zip.yaml");
    let ct = zipped.spec.content_type().unwrap();
    assert_eq!((ct.encoding, ct.archive), (Encoding::Url, Archive::Zip));

    let custom: Function = fixture("function-custom-image.yaml");
    assert_eq!(
        custom.spec.custom_image(),
        Some("registry.example.invalid/team/custom-fn:1.2.3")
    );
    assert!(custom.spec.runtime_ref().unwrap().is_none());
    assert_eq!(custom.spec.service_port().unwrap(), 8080);
}

#[test]
fn trigger_defaults_and_new_fields() {
    let h: HttpTrigger = fixture("httptrigger-minimal.yaml");
    assert_eq!(h.spec.gateway_kind(), Ok(Gateway::Nginx));
    let h: HttpTrigger = fixture("httptrigger-dryrun.yaml");
    assert_eq!(h.spec.gateway_kind(), Ok(Gateway::Traefik));

    let c: CronJobTrigger = fixture("cronjobtrigger-full.yaml");
    assert_eq!(c.spec.concurrency(), ConcurrencyPolicy::Allow);
    assert_eq!(
        (c.spec.successful_history(), c.spec.failed_history()),
        (3, 1)
    );
    assert_eq!(c.spec.delivery_policy().unwrap().max_attempts, 5);
    let c: CronJobTrigger = fixture("cronjobtrigger-new-fields.yaml");
    assert_eq!(c.spec.concurrency(), ConcurrencyPolicy::Forbid);
    assert_eq!(
        (c.spec.successful_history(), c.spec.failed_history()),
        (5, 2)
    );
    let p = c.spec.delivery_policy().unwrap();
    assert_eq!(
        (p.max_attempts, p.initial_backoff),
        (3, Duration::from_millis(500))
    );

    let n: NatsTrigger = fixture("natstrigger.yaml");
    assert!(!n.spec.jet_stream_enabled());
    assert_eq!(n.spec.max_in_flight(), 1);
    let n: NatsTrigger = fixture("natstrigger-jetstream.yaml");
    assert!(n.spec.jet_stream_enabled());
    assert_eq!(n.spec.max_in_flight(), 8);
    assert_eq!(
        n.spec
            .jet_stream
            .as_ref()
            .unwrap()
            .ack_wait_duration()
            .unwrap(),
        Duration::from_secs(45)
    );

    let k: KinesisTrigger = fixture("kinesistrigger.yaml");
    assert_eq!(k.spec.starting(), StartingPosition::Latest);
    let k: KinesisTrigger = fixture("kinesistrigger-new-fields.yaml");
    assert_eq!(k.spec.starting(), StartingPosition::AtTimestamp);
    assert_eq!(
        k.spec.starting_timestamp.as_ref().unwrap().0.as_second(),
        1_704_164_645
    );
}
