//! The umbrella chart, linted and rendered by the real Helm engine (deploy/helm/render.py, through
//! helm-python-sdk): every values case renders, every rendered object parses as its Kubernetes
//! type, pods pass PodSecurity "restricted", RBAC is least-privilege (Leases only in the release
//! namespace, no cluster-wide object in a namespace-scoped install), image values apply, the
//! values schema refuses misspelt keys, every helm command of docs/helm.md renders, the generated
//! schema and values reference are current, and the chart's CRDs are the generated ones.
#![cfg(test)]

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::PathBuf,
    process::Command,
    sync::OnceLock,
};

use integration_tests::{helm_install_rank, render_chart, repo_root, yaml_documents};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        autoscaling::v2::HorizontalPodAutoscaler,
        core::v1::{ConfigMap, PodSpec, Service, ServiceAccount},
        networking::v1::NetworkPolicy,
        policy::v1::PodDisruptionBudget,
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use serde_json::Value;

/// What render.py wrote: each case's objects and its JSON summary.
struct Rendered {
    cases: BTreeMap<String, Vec<Value>>,
    summary: Value,
    crds: Vec<Value>,
}

fn rendered() -> &'static Rendered {
    static RENDERED: OnceLock<Rendered> = OnceLock::new();
    RENDERED.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("kubeless-helm-{}", std::process::id()));
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).unwrap();
        let output = Command::new("python3")
            .arg(repo_root().join("deploy/helm/render.py"))
            .arg(&out)
            .output()
            .expect("python3 must be installed");
        assert!(
            output.status.success(),
            "deploy/helm/render.py failed (needs `pip install helm-python-sdk pyyaml`, which scripts/test.sh does):\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
        let mut cases = BTreeMap::new();
        for case in summary["cases"].as_object().unwrap().keys() {
            let text = fs::read_to_string(out.join(format!("{case}.yaml"))).unwrap();
            cases.insert(case.clone(), yaml_documents(&text).unwrap());
        }
        let crds = yaml_documents(&fs::read_to_string(out.join("crds.yaml")).unwrap()).unwrap();
        let _ = fs::remove_dir_all(&out);
        Rendered {
            cases,
            summary,
            crds,
        }
    })
}

fn case(name: &str) -> &'static [Value] {
    rendered()
        .cases
        .get(name)
        .unwrap_or_else(|| panic!("render.py wrote no case {name}"))
}

fn parse_as_kind(doc: &Value) -> Result<(), String> {
    let kind = doc["kind"].as_str().ok_or("object without kind")?;
    let v = doc.clone();
    let res = match kind {
        "Deployment" => serde_json::from_value::<Deployment>(v).map(drop),
        "Service" => serde_json::from_value::<Service>(v).map(drop),
        "ServiceAccount" => serde_json::from_value::<ServiceAccount>(v).map(drop),
        "ConfigMap" => serde_json::from_value::<ConfigMap>(v).map(drop),
        "ClusterRole" => serde_json::from_value::<ClusterRole>(v).map(drop),
        "ClusterRoleBinding" => serde_json::from_value::<ClusterRoleBinding>(v).map(drop),
        "Role" => serde_json::from_value::<Role>(v).map(drop),
        "RoleBinding" => serde_json::from_value::<RoleBinding>(v).map(drop),
        "HorizontalPodAutoscaler" => serde_json::from_value::<HorizontalPodAutoscaler>(v).map(drop),
        "PodDisruptionBudget" => serde_json::from_value::<PodDisruptionBudget>(v).map(drop),
        "NetworkPolicy" => serde_json::from_value::<NetworkPolicy>(v).map(drop),
        "CustomResourceDefinition" => {
            serde_json::from_value::<CustomResourceDefinition>(v).map(drop)
        }
        // The Prometheus Operator's type is not in k8s-openapi: check the fields it needs.
        "ServiceMonitor" => {
            if doc["apiVersion"] != "monitoring.coreos.com/v1"
                || doc["spec"]["selector"]["matchLabels"].as_object().is_none()
                || doc["spec"]["endpoints"]
                    .as_array()
                    .is_none_or(Vec::is_empty)
            {
                return Err(format!(
                    "ServiceMonitor without selector or endpoints: {doc}"
                ));
            }
            Ok(())
        }
        other => return Err(format!("kind {other} has no parser in this test: add one")),
    };
    res.map_err(|e| format!("{kind}: {e}"))
}

fn of_kind<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    docs.iter().filter(move |d| d["kind"] == kind)
}

fn subcharts() -> BTreeSet<String> {
    fs::read_dir(repo_root().join("deploy/helm/kubeless/charts"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "common")
        .collect()
}

#[test]
fn chart_lints_renders_and_parses() {
    let subcharts = subcharts();
    assert!(subcharts.len() >= 6, "a subchart per service");
    for (name, docs) in &rendered().cases {
        for doc in docs {
            parse_as_kind(doc).unwrap_or_else(|e| panic!("case {name}: {e}"));
        }
    }
    for name in std::iter::once("all-on".to_string())
        .chain(std::iter::once("all-off".to_string()))
        .chain(subcharts.iter().map(|s| format!("only-{s}")))
    {
        let docs = case(&name);
        let apps: BTreeSet<String> = docs
            .iter()
            .filter_map(|d| d["metadata"]["labels"]["app.kubernetes.io/name"].as_str())
            .map(str::to_string)
            .collect();
        let expected: BTreeSet<String> = match name.as_str() {
            "all-on" => subcharts.clone(),
            "all-off" => BTreeSet::new(),
            only => subcharts
                .iter()
                .filter(|s| only == format!("only-{s}"))
                .cloned()
                .collect(),
        };
        assert_eq!(apps, expected, "case {name}: services rendered");
        for app in &expected {
            let kinds: BTreeSet<&str> = docs
                .iter()
                .filter(|d| d["metadata"]["labels"]["app.kubernetes.io/name"] == app.as_str())
                .filter_map(|d| d["kind"].as_str())
                .collect();
            for needed in ["Deployment", "ServiceAccount"] {
                assert!(
                    kinds.contains(needed),
                    "case {name}: {app} renders a {needed}"
                );
            }
        }
    }

    // The chart ships exactly the generated CRDs.
    let mut generated = Vec::new();
    let mut files: Vec<PathBuf> = fs::read_dir(repo_root().join("deploy/crds"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        generated.extend(yaml_documents(&fs::read_to_string(f).unwrap()).unwrap());
    }
    assert_eq!(generated.len(), 7, "seven generated CRDs in deploy/crds");
    assert_eq!(
        rendered().crds,
        generated,
        "deploy/helm/kubeless/crds differs from deploy/crds: run `cargo run -p kubeless-api --bin crdgen`"
    );
    for crd in &rendered().crds {
        parse_as_kind(crd).unwrap();
    }
}

/// The PodSecurity "restricted" rules a pod template must pass (Kubernetes Pod Security
/// Standards, v1.25+), plus resources and probes on every container.
fn check_pod(spec: &PodSpec, what: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let psc = spec.security_context.clone().unwrap_or_default();
    for (flag, name) in [
        (spec.host_network, "hostNetwork"),
        (spec.host_pid, "hostPID"),
        (spec.host_ipc, "hostIPC"),
    ] {
        if flag == Some(true) {
            problems.push(format!("{what}: {name}"));
        }
    }
    for v in spec.volumes.iter().flatten() {
        if v.host_path.is_some() {
            problems.push(format!("{what}: hostPath volume {}", v.name));
        }
    }
    if psc.run_as_user == Some(0) {
        problems.push(format!("{what}: pod runAsUser 0"));
    }
    let pod_seccomp = psc.seccomp_profile.as_ref().map(|s| s.type_.clone());
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let w = format!("{what} container {}", c.name);
        let sc = c.security_context.clone().unwrap_or_default();
        if sc.allow_privilege_escalation != Some(false) {
            problems.push(format!("{w}: allowPrivilegeEscalation is not false"));
        }
        if sc.privileged == Some(true) {
            problems.push(format!("{w}: privileged"));
        }
        let caps = sc.capabilities.clone().unwrap_or_default();
        if !caps.drop.iter().flatten().any(|d| d == "ALL") {
            problems.push(format!("{w}: capabilities do not drop ALL"));
        }
        if caps.add.iter().flatten().any(|a| a != "NET_BIND_SERVICE") {
            problems.push(format!("{w}: adds capabilities {:?}", caps.add));
        }
        if sc.run_as_non_root.or(psc.run_as_non_root) != Some(true) {
            problems.push(format!("{w}: runAsNonRoot is not true"));
        }
        if sc.run_as_user.or(psc.run_as_user) != Some(65532) {
            problems.push(format!("{w}: not the images' user 65532"));
        }
        let seccomp = sc
            .seccomp_profile
            .as_ref()
            .map(|s| s.type_.clone())
            .or(pod_seccomp.clone());
        if !matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")) {
            problems.push(format!("{w}: seccomp is not RuntimeDefault"));
        }
        if sc.read_only_root_filesystem != Some(true) {
            problems.push(format!("{w}: root filesystem is writable"));
        }
        let res = c.resources.clone().unwrap_or_default();
        if !res
            .requests
            .as_ref()
            .is_some_and(|r| r.contains_key("memory"))
            || !res
                .limits
                .as_ref()
                .is_some_and(|r| r.contains_key("memory"))
        {
            problems.push(format!("{w}: no memory request and limit"));
        }
        for (probe, name) in [
            (&c.liveness_probe, "liveness"),
            (&c.readiness_probe, "readiness"),
            (&c.startup_probe, "startup"),
        ] {
            if probe.is_none() {
                problems.push(format!("{w}: no {name} probe"));
            }
        }
    }
    problems
}

#[test]
fn every_pod_passes_restricted_and_has_resources_and_probes() {
    let mut problems = Vec::new();
    let mut pods = 0;
    for (name, docs) in &rendered().cases {
        for d in of_kind(docs, "Deployment") {
            let dep: Deployment = serde_json::from_value(d.clone()).unwrap();
            let spec = dep.spec.unwrap().template.spec.unwrap();
            let what = format!("case {name} {}", d["metadata"]["name"]);
            problems.extend(check_pod(&spec, &what));
            pods += 1;
        }
    }
    assert!(pods > 20, "rendered Deployments checked: {pods}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn rules(doc: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(doc["rules"].clone()).unwrap_or_default()
}

fn grants(rule: &PolicyRule, group: &str, resource: &str) -> bool {
    rule.api_groups
        .iter()
        .flatten()
        .any(|g| g == group || g == "*")
        && rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == resource || r == "*")
}

const WRITE_VERBS: [&str; 6] = [
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "*",
];

#[test]
fn leases_only_through_roles_in_the_release_namespace() {
    for name in ["all-on", "options", "doc-1", "doc-2", "doc-3"] {
        let docs = case(name);
        let cluster_leases: Vec<&Value> = of_kind(docs, "ClusterRole")
            .filter(|d| {
                rules(d)
                    .iter()
                    .any(|r| grants(r, "coordination.k8s.io", "leases"))
            })
            .collect();
        // The one exception: kinesis-trigger's per-shard Leases live in the triggers' namespaces.
        for d in &cluster_leases {
            assert_eq!(
                d["metadata"]["labels"]["app.kubernetes.io/name"], "kinesis-trigger",
                "case {name}: a ClusterRole grants Leases: {d}"
            );
        }
        let deployments: Vec<&Value> = of_kind(docs, "Deployment").collect();
        for dep in deployments {
            let app = &dep["metadata"]["labels"]["app.kubernetes.io/name"];
            // The dashboard elects no leader: it writes only what its user asks for.
            if app == "dashboard" {
                continue;
            }
            let lease_roles: Vec<&Value> = of_kind(docs, "Role")
                .filter(|r| &r["metadata"]["labels"]["app.kubernetes.io/name"] == app)
                .filter(|r| {
                    rules(r)
                        .iter()
                        .any(|r| grants(r, "coordination.k8s.io", "leases"))
                })
                .collect();
            assert!(
                lease_roles
                    .iter()
                    .any(|r| r["metadata"]["namespace"] == dep["metadata"]["namespace"]),
                "case {name}: {app} has a Lease Role in its own namespace"
            );
        }
    }
    // In the default install, with kinesis shardLeases off, no ClusterRole grants Leases at all.
    assert!(
        of_kind(case("all-on"), "ClusterRole").all(|d| !rules(d).iter().any(|r| grants(
            r,
            "coordination.k8s.io",
            "leases"
        ))),
        "all-on: Leases through a ClusterRole"
    );
}

#[test]
fn namespace_scoped_install_has_no_cluster_wide_write() {
    let docs_case = rendered().summary["docs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["values"]["global"]["functionsNamespace"].is_string())
        .expect("docs/helm.md shows a namespace-scoped install")["case"]
        .as_str()
        .unwrap()
        .to_string();
    for name in ["namespaced", docs_case.as_str()] {
        let docs = case(name);
        assert!(
            of_kind(docs, "Deployment").count() >= 3,
            "case {name} renders the services"
        );
        for kind in ["ClusterRole", "ClusterRoleBinding"] {
            let found: Vec<&Value> = of_kind(docs, kind).collect();
            assert!(found.is_empty(), "case {name}: {kind} {found:?}");
        }
        // Every namespaced object sits in the release namespace or in functionsNamespace.
        for d in docs {
            let ns = d["metadata"]["namespace"].as_str();
            assert!(
                matches!(ns, Some("kubeless" | "functions")),
                "case {name}: {} {} in namespace {ns:?}",
                d["kind"],
                d["metadata"]["name"]
            );
        }
        // Write verbs on anything but Leases, Events and the services' own objects are only
        // granted in functionsNamespace; the release namespace only gets Leases.
        for role in of_kind(docs, "Role") {
            if role["metadata"]["namespace"] == "kubeless" {
                for r in rules(role) {
                    let writes = r.verbs.iter().any(|v| WRITE_VERBS.contains(&v.as_str()));
                    if writes {
                        assert!(
                            grants(&r, "coordination.k8s.io", "leases")
                                && r.resources.as_ref().map_or(0, Vec::len) == 1,
                            "case {name}: release-namespace Role {} writes {:?}",
                            role["metadata"]["name"],
                            r.resources
                        );
                    }
                }
            }
        }
        // The services watch only functionsNamespace.
        for dep in of_kind(docs, "Deployment") {
            let env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap();
            assert!(
                env.iter()
                    .any(|e| e["name"] == "KUBELESS_WATCH_NAMESPACE" && e["value"] == "functions"),
                "case {name}: {} watches only functionsNamespace",
                dep["metadata"]["name"]
            );
        }
        // Each service's rules are bound to its own ServiceAccount in functionsNamespace.
        let bindings: Vec<&Value> = of_kind(docs, "RoleBinding")
            .filter(|b| b["metadata"]["namespace"] == "functions")
            .collect();
        assert!(
            bindings.len() >= of_kind(docs, "Deployment").count(),
            "case {name}: a RoleBinding in functionsNamespace per service"
        );
    }
    // The cluster-wide install of the same services does use ClusterRoles (the test above can fail).
    assert!(of_kind(case("all-on"), "ClusterRole").count() >= 3);
}

fn containers(docs: &[Value]) -> Vec<(String, Value)> {
    of_kind(docs, "Deployment")
        .flat_map(|d| {
            let app = d["metadata"]["labels"]["app.kubernetes.io/name"]
                .as_str()
                .unwrap()
                .to_string();
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |c| (app.clone(), c.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .map(str::to_string)
}

/// The pod template policy's values reach the controller as its env: restricted by default,
/// loosened field by field.
#[test]
fn template_policy_values_reach_the_controller() {
    let controller = |docs: &[Value]| {
        containers(docs)
            .into_iter()
            .find(|(app, _)| app == "function-controller")
            .map(|(_, c)| c)
            .unwrap()
    };
    let c = controller(case("all-on"));
    assert_eq!(
        env_value(&c, "KUBELESS_TEMPLATE_POLICY").as_deref(),
        Some("restricted")
    );
    assert_eq!(
        env_value(&c, "KUBELESS_TEMPLATE_ALLOW_HOST_NETWORK").as_deref(),
        Some("false")
    );
    assert_eq!(
        env_value(&c, "KUBELESS_TEMPLATE_ALLOWED_SERVICE_ACCOUNTS").as_deref(),
        Some("")
    );
    let c = controller(case("options"));
    assert_eq!(
        env_value(&c, "KUBELESS_TEMPLATE_ALLOW_HOST_NETWORK").as_deref(),
        Some("true")
    );
    assert_eq!(
        env_value(&c, "KUBELESS_TEMPLATE_ALLOWED_SERVICE_ACCOUNTS").as_deref(),
        Some("builder,metrics")
    );
    assert_eq!(
        env_value(&c, "KUBELESS_TEMPLATE_ALLOW_HOST_PATH").as_deref(),
        Some("false")
    );
    assert!(
        rendered().summary["rejected"]["template-policy-mode"]
            .as_str()
            .is_some_and(|e| e.contains("permissive") || e.contains("mode")),
        "{}",
        rendered().summary["rejected"]["template-policy-mode"]
    );
}

#[test]
fn image_values_registry_tag_digest_and_pull_secrets() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let docs = case("options");
    let mut seen = 0;
    for (app, c) in containers(docs) {
        let image = c["image"].as_str().unwrap();
        let want = match app.as_str() {
            "function-controller" => {
                format!("127.0.0.1:5000/kubeless-rs/function-controller@{digest}")
            }
            "kafka-trigger" => "registry.example:5000/kubeless-rs/kafka-trigger:9.9.9".into(),
            other => format!("127.0.0.1:5000/kubeless-rs/{other}:1.2.3"),
        };
        assert_eq!(image, want, "{app}");
        seen += 1;
        if app == "cronjob-trigger-controller" {
            assert_eq!(
                env_value(&c, "KUBELESS_CRON_INVOKER_IMAGE").as_deref(),
                Some(format!("127.0.0.1:5000/kubeless-rs/cron-invoker@{digest}").as_str())
            );
        }
    }
    assert_eq!(seen, subcharts().len());
    for d in of_kind(docs, "Deployment") {
        let secrets: Vec<&str> = d["spec"]["template"]["spec"]["imagePullSecrets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        let want: &[&str] =
            if d["metadata"]["labels"]["app.kubernetes.io/name"] == "function-controller" {
                &["global-pull", "fc-pull"]
            } else {
                &["global-pull"]
            };
        assert_eq!(secrets, want, "{}", d["metadata"]["name"]);
    }
    // Defaults: no registry, the chart's appVersion, no pull secrets.
    for (app, c) in containers(case("all-on")) {
        assert_eq!(c["image"], format!("kubeless-rs/{app}:0.1.0"));
    }
    assert!(
        of_kind(case("all-on"), "Deployment")
            .all(|d| d["spec"]["template"]["spec"]["imagePullSecrets"].is_null())
    );
}

#[test]
fn optional_objects_render_when_switched_on() {
    let docs = case("options");
    let deployments = of_kind(docs, "Deployment").count();
    for kind in ["PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor"] {
        assert_eq!(
            of_kind(docs, kind).count(),
            deployments,
            "options: a {kind} per service"
        );
        assert_eq!(of_kind(case("all-on"), kind).count(), 0, "off by default");
    }
    for sm in of_kind(docs, "ServiceMonitor") {
        assert_eq!(sm["metadata"]["labels"]["release"], "prometheus");
        // The metrics Service it selects exists and exposes the admin port.
        let selector = sm["spec"]["selector"]["matchLabels"].as_object().unwrap();
        let svc = of_kind(docs, "Service")
            .find(|s| {
                selector
                    .iter()
                    .all(|(k, v)| &s["metadata"]["labels"][k] == v)
            })
            .unwrap_or_else(|| panic!("no Service for {}", sm["metadata"]["name"]));
        assert_eq!(svc["spec"]["ports"][0]["port"], 8081);
    }
    // The gateway's NetworkPolicy also lets clients reach the gateway port.
    let gw = of_kind(docs, "NetworkPolicy")
        .find(|n| n["metadata"]["labels"]["app.kubernetes.io/name"] == "http-trigger-controller")
        .unwrap();
    let ports: Vec<&Value> = gw["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["ports"].as_array().unwrap())
        .map(|p| &p["port"])
        .collect();
    assert!(ports.contains(&&Value::from("gateway")), "{ports:?}");
    // The Grafana dashboard ConfigMap carries the dashboard JSON and the sidecar label.
    let cm = of_kind(docs, "ConfigMap")
        .find(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("grafana dashboard ConfigMap");
    let dashboard: Value =
        serde_json::from_str(cm["data"]["kubeless.json"].as_str().unwrap()).unwrap();
    assert_eq!(dashboard["uid"], "kubeless-rs");
}

/// Metric names a service or runtime registers, read from the sources: `register_with("sub", ..)`
/// blocks of `r.register("name", ..)` (prefixed `kubeless_`), the runtime proxy's own names, and
/// the trigger runtime's families under each trigger's `Names { prefix, units, .. }`.
fn registered_metrics() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut files = Vec::new();
    for dir in ["services", "shared", "runtimes"] {
        collect_rs(&repo_root().join(dir), &mut files);
    }
    // The trigger runtime registers its families under a prefix each trigger names.
    let runtime = fs::read_to_string(repo_root().join("shared/trigger/src/metrics.rs")).unwrap();
    let families: Vec<String> = runtime
        .split("r.register(")
        .skip(1)
        .filter_map(|call| {
            let first_arg = call.split(',').next()?;
            first_arg.split('"').nth(1).map(str::to_string)
        })
        .collect();
    assert!(families.contains(&"deliveries".to_string()), "{families:?}");
    let field = |text: &str, key: &str| -> Option<String> {
        let rest = text.split(&format!("{key}: \"")).nth(1)?;
        rest.split('"').next().map(str::to_string)
    };
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        for block in text.split("Names {").skip(1) {
            let (Some(prefix), Some(units)) = (field(block, "prefix"), field(block, "units"))
            else {
                continue;
            };
            names.insert(format!("kubeless_{prefix}_{units}"));
            for family in &families {
                names.insert(format!("kubeless_{prefix}_{family}"));
            }
        }
    }
    for f in files {
        let text = fs::read_to_string(&f).unwrap();
        let mut subsystem: Option<String> = None;
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.split("register_with(\"").nth(1) {
                subsystem = rest.split('"').next().map(str::to_string);
            }
            if line.contains("register(") {
                let mut call = line.to_string();
                if !call.contains('"') {
                    call = lines.next().unwrap_or_default().to_string();
                }
                if let Some(name) = call.split('"').nth(1) {
                    match (&subsystem, f.to_string_lossy().contains("runtimes/proxy")) {
                        (_, true) => names.insert(name.to_string()),
                        (Some(sub), false) => names.insert(format!("kubeless_{sub}_{name}")),
                        (None, false) => false,
                    };
                }
            }
        }
    }
    names
}

fn collect_rs(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && !p.ends_with("tests") && !p.ends_with("target") {
            collect_rs(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn dashboard_queries_only_registered_metrics() {
    let dashboard: Value = serde_json::from_str(
        &fs::read_to_string(repo_root().join("deploy/helm/kubeless/dashboards/kubeless.json"))
            .unwrap(),
    )
    .unwrap();
    let registered = registered_metrics();
    assert!(
        registered.contains("kubeless_function_controller_reconciles")
            && registered.contains("function_calls"),
        "metric scan works: {registered:?}"
    );
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("kubeless_") || word.starts_with("function_") {
                    queried.insert(word.to_string());
                }
            }
        }
    }
    assert!(queried.len() > 20, "dashboard queries: {queried:?}");
    for q in &queried {
        let base = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| q.strip_suffix(s))
            .unwrap_or(q);
        assert!(
            registered.contains(base),
            "the dashboard queries {q}, which nothing registers"
        );
    }
    // Every service's subsystem has at least one panel.
    for sub in [
        "function_controller",
        "http_gateway",
        "cronjob_trigger",
        "kafka_trigger",
        "nats_trigger",
        "kinesis_trigger",
    ] {
        assert!(
            queried.iter().any(|q| q.contains(sub)),
            "no panel for {sub}"
        );
    }
}

#[test]
fn misspelt_keys_and_wrong_values_fail_rendering() {
    let rejected = rendered().summary["rejected"].as_object().unwrap();
    assert!(rejected.len() >= 5);
    for (name, error) in rejected {
        let error = error
            .as_str()
            .unwrap_or_else(|| panic!("values case {name} rendered; the schema must refuse it"));
        assert!(
            error.contains("schema"),
            "{name} failed for another reason: {error}"
        );
    }
    assert!(
        rejected["kafka-brokers-top-level"]
            .as_str()
            .unwrap()
            .contains("'brokers' not allowed")
    );
}

#[test]
fn every_helm_command_in_docs_renders() {
    let docs = rendered().summary["docs"].as_array().unwrap();
    let page = fs::read_to_string(repo_root().join("docs/helm.md")).unwrap();
    let shown = page
        .lines()
        .filter(|l| {
            ["helm install ", "helm upgrade ", "helm template "]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .count();
    assert!(shown >= 6, "docs/helm.md shows the install commands");
    assert_eq!(
        docs.len(),
        shown,
        "every helm command of docs/helm.md was rendered"
    );
    let mut kafka = false;
    let mut registry = false;
    for d in docs {
        let objects = case(d["case"].as_str().unwrap());
        assert!(
            of_kind(objects, "Deployment").count() >= 3,
            "{}: renders the services",
            d["command"]
        );
        let values = &d["values"];
        if let Some(brokers) = values["kafka-trigger"]["kafka"]["brokers"].as_str() {
            let (_, c) = containers(objects)
                .into_iter()
                .find(|(app, _)| app == "kafka-trigger")
                .expect("kafka-trigger rendered");
            assert_eq!(env_value(&c, "KAFKA_BROKERS").as_deref(), Some(brokers));
            kafka = true;
        }
        if let Some(reg) = values["global"]["imageRegistry"].as_str() {
            for (app, c) in containers(objects) {
                assert!(
                    c["image"].as_str().unwrap().starts_with(&format!("{reg}/")),
                    "{app}: {}",
                    c["image"]
                );
            }
            registry = true;
        }
    }
    assert!(
        kafka && registry,
        "docs show the Kafka and registry installs"
    );
}

#[test]
fn values_schema_and_reference_are_current() {
    let output = Command::new("python3")
        .arg(repo_root().join("deploy/helm/gen_values.py"))
        .arg("--check")
        .output()
        .expect("python3 must be installed");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Every key of the reference has a description (a comment in values.yaml).
    let reference = fs::read_to_string(repo_root().join("docs/helm-values.md")).unwrap();
    let undocumented: Vec<&str> = reference
        .lines()
        .filter(|l| l.starts_with("| `") && l.ends_with("|  |"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "keys without a comment in values.yaml:\n{}",
        undocumented.join("\n")
    );
}

/// Tools built for Kubeless read `runtime-images` of the `kubeless-config` ConfigMap: the chart
/// fills it with the built-in catalogue (the generated files/runtime-images.json), in Kubeless's
/// JSON shape, with the images behind global.imageRegistry when one is set; a value given in
/// config.data wins.
#[test]
fn kubeless_config_describes_the_builtin_runtimes() {
    let images_of = |case_name: &str| -> (Vec<String>, Vec<String>) {
        let cm = of_kind(case(case_name), "ConfigMap")
            .find(|d| d["metadata"]["name"] == "kubeless-config")
            .unwrap_or_else(|| panic!("case {case_name}: no kubeless-config ConfigMap"));
        let text = cm["data"]["runtime-images"].as_str().unwrap();
        let catalogue: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("case {case_name}: runtime-images is not JSON: {e}"));
        let ids: Vec<String> = catalogue
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["ID"].as_str().unwrap().to_string())
            .collect();
        let images: Vec<String> = catalogue
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["versions"].as_array().unwrap().iter())
            .flat_map(|v| v["images"].as_array().unwrap().iter())
            .map(|i| i["image"].as_str().unwrap().to_string())
            .collect();
        (ids, images)
    };
    let (ids, images) = images_of("all-on");
    for id in ["python", "nodejs", "ruby", "php", "go", "java"] {
        assert!(ids.iter().any(|i| i == id), "{id} missing from {ids:?}");
    }
    assert!(
        images.iter().all(|i| i.starts_with("kubeless-rs/runtime-")),
        "{images:?}"
    );
    let (_, images) = images_of("options");
    assert!(
        images
            .iter()
            .all(|i| i.starts_with("127.0.0.1:5000/kubeless-rs/runtime-")),
        "{images:?}"
    );
    let generated = fs::read_to_string(
        repo_root()
            .join("deploy/helm/kubeless/charts/function-controller/files/runtime-images.json"),
    )
    .unwrap();
    let kubeless_config =
        fs::read_to_string(repo_root().join("deploy/kubeless-config.yaml")).unwrap();
    assert!(
        kubeless_config.contains(&generated.trim().replace('\n', "\n    ")),
        "the chart's catalogue and deploy/kubeless-config.yaml differ: run `cargo run -p function-controller --bin kubeless-config`"
    );
}

/// Every case, and what the chart tests apply ([`render_chart`]), is in Helm's install order by
/// kind: each ServiceAccount comes before any Deployment that names it, so no ReplicaSet's first
/// pod is refused for a missing ServiceAccount.
#[test]
fn rendered_objects_are_in_helm_install_order() {
    let check = |what: &str, docs: &[Value]| {
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        for pair in kinds.windows(2) {
            assert!(
                helm_install_rank(pair[0]) <= helm_install_rank(pair[1]),
                "{what}: {} before {} is not Helm's install order: {kinds:?}",
                pair[0],
                pair[1]
            );
        }
        let mut deployments = 0;
        for (i, d) in docs
            .iter()
            .enumerate()
            .filter(|(_, d)| d["kind"] == "Deployment")
        {
            deployments += 1;
            let sa = d["spec"]["template"]["spec"]["serviceAccountName"]
                .as_str()
                .unwrap_or("default");
            if sa == "default" {
                continue;
            }
            let sa_at = docs
                .iter()
                .position(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] == sa);
            assert!(
                sa_at.is_some_and(|at| at < i),
                "{what}: Deployment {} names ServiceAccount {sa}, which is not rendered before it",
                d["metadata"]["name"]
            );
        }
        deployments
    };
    let mut deployments = 0;
    for (name, docs) in &rendered().cases {
        deployments += check(name, docs);
    }
    assert!(deployments > 20, "Deployments checked: {deployments}");
    // The shared render the chart tests apply gives the same order.
    let applied = render_chart(&serde_json::json!({"global": {}}), "kubeless");
    assert!(
        check("render_chart", &applied) > 0,
        "render_chart renders Deployments"
    );
}
