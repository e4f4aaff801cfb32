use super::annotations::*;
use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubeless_api::HttpTriggerSpec;

fn trigger(spec: HttpTriggerSpec) -> HttpTrigger {
    let mut t = HttpTrigger::new("hello-trigger", spec);
    t.metadata.namespace = Some("team".into());
    t.metadata.uid = Some("uid-1".into());
    t
}

fn spec(gateway: &str) -> HttpTriggerSpec {
    HttpTriggerSpec {
        function_name: "hello".into(),
        gateway: (!gateway.is_empty()).then(|| gateway.to_string()),
        ..HttpTriggerSpec::default()
    }
}

fn port() -> FunctionPort {
    FunctionPort {
        port: 8080,
        name: Some("http-function-port".into()),
    }
}

fn ann(i: &Ingress) -> BTreeMap<String, String> {
    i.metadata.annotations.clone().unwrap_or_default()
}

fn class(i: &Ingress) -> &str {
    i.spec
        .as_ref()
        .unwrap()
        .ingress_class_name
        .as_deref()
        .unwrap()
}

fn only_path(i: &Ingress) -> &HTTPIngressPath {
    let rules = i.spec.as_ref().unwrap().rules.as_ref().unwrap();
    assert_eq!(rules.len(), 1);
    let paths = &rules[0].http.as_ref().unwrap().paths;
    assert_eq!(paths.len(), 1);
    &paths[0]
}

fn host(i: &Ingress) -> Option<&str> {
    i.spec.as_ref().unwrap().rules.as_ref().unwrap()[0]
        .host
        .as_deref()
}

#[test]
fn nginx_default_has_class_rewrite_and_owner() {
    for gw in ["", "nginx"] {
        let i = build_ingress(&trigger(spec(gw)), &port()).unwrap();
        assert_eq!(class(&i), "nginx");
        assert_eq!(
            ann(&i),
            BTreeMap::from([(NGINX_REWRITE_TARGET.into(), "/".into())])
        );
        assert_eq!(i.metadata.name.as_deref(), Some("hello-trigger"));
        assert_eq!(i.metadata.namespace.as_deref(), Some("team"));
        let owner = &i.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "HTTPTrigger");
        assert_eq!(owner.name, "hello-trigger");
        assert_eq!(owner.uid, "uid-1");
        assert_eq!(owner.controller, Some(true));
        let labels = i.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["function"], "hello");
        assert_eq!(labels["created-by"], "kubeless");
        // no host: a rule for every host; no tls
        assert_eq!(host(&i), None);
        assert!(i.spec.as_ref().unwrap().tls.is_none());
        let p = only_path(&i);
        assert_eq!(p.path.as_deref(), Some("/"));
        assert_eq!(p.path_type, "Prefix");
        let svc = p.backend.service.as_ref().unwrap();
        assert_eq!(svc.name, "hello");
        assert_eq!(svc.port.as_ref().unwrap().number, Some(8080));
    }
}

#[test]
fn traefik_and_kong_set_their_class() {
    let t = build_ingress(&trigger(spec("traefik")), &port()).unwrap();
    assert_eq!(class(&t), "traefik");
    assert!(ann(&t).is_empty(), "{:?}", ann(&t));
    let k = build_ingress(&trigger(spec("kong")), &port()).unwrap();
    assert_eq!(class(&k), "kong");
    assert_eq!(
        ann(&k),
        BTreeMap::from([(KONG_STRIP_PATH.into(), "true".into())])
    );
}

#[test]
fn unknown_gateway_is_rejected() {
    let err = build_ingress(&trigger(spec("envoy")), &port()).unwrap_err();
    assert_eq!(err, BuildError::UnknownGateway("envoy".into()));
    assert_eq!(err.reason(), "InvalidSpec");
}

#[test]
fn host_and_path_are_normalised() {
    let mut s = spec("nginx");
    s.host_name = Some(" Hello.Example.COM ".into());
    s.path = Some("/api/v1/".into());
    let i = build_ingress(&trigger(s), &port()).unwrap();
    assert_eq!(host(&i), Some("hello.example.com"));
    assert_eq!(only_path(&i).path.as_deref(), Some("/api/v1"));
    let mut s = spec("nginx");
    s.path = Some("echo".into());
    let t = trigger(s);
    assert_eq!(trigger_path(&t), "/echo");
    assert_eq!(trigger_url(&t, None), "/echo");
    assert_eq!(trigger_url(&t, Some("1.2.3.4")), "http://1.2.3.4/echo");
}

#[test]
fn backend_uses_the_service_port_not_the_target_port() {
    let svc = Service {
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                target_port: Some(IntOrString::Int(8080)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let p = FunctionPort::resolve(Some(&svc), None);
    assert_eq!(
        p,
        FunctionPort {
            port: 80,
            name: Some("http".into())
        }
    );
    let i = build_ingress(&trigger(spec("nginx")), &p).unwrap();
    let backend = only_path(&i).backend.service.as_ref().unwrap();
    assert_eq!(backend.port.as_ref().unwrap().number, Some(80));
}

#[test]
fn function_port_falls_back_to_the_function_template_then_default() {
    let mut f = Function::new("hello", Default::default());
    f.spec.service = Some(
        serde_json::from_value(serde_json::json!({
            "ports": [{"name": "web", "port": 9000, "targetPort": 9001}]
        }))
        .unwrap(),
    );
    assert_eq!(
        FunctionPort::resolve(None, Some(&f)),
        FunctionPort {
            port: 9000,
            name: Some("web".into())
        }
    );
    assert_eq!(FunctionPort::resolve(None, None), FunctionPort::default());
    // a Service without ports does not hide the template
    let empty = Service::default();
    assert_eq!(FunctionPort::resolve(Some(&empty), Some(&f)).port, 9000);
}

#[test]
fn cors_annotation_per_gateway() {
    for (gw, key) in [
        ("nginx", NGINX_ENABLE_CORS),
        ("traefik", GENERIC_ENABLE_CORS),
        ("kong", GENERIC_ENABLE_CORS),
    ] {
        let mut s = spec(gw);
        s.cors_enable = Some(true);
        let a = ann(&build_ingress(&trigger(s), &port()).unwrap());
        assert_eq!(a.get(key).map(String::as_str), Some("true"), "{gw}");
        let other = if key == NGINX_ENABLE_CORS {
            GENERIC_ENABLE_CORS
        } else {
            NGINX_ENABLE_CORS
        };
        assert!(!a.contains_key(other), "{gw}");
        // off: no CORS annotation at all
        let mut s = spec(gw);
        s.cors_enable = Some(false);
        let a = ann(&build_ingress(&trigger(s), &port()).unwrap());
        assert!(!a.keys().any(|k| k.ends_with("enable-cors")), "{gw}");
    }
}

#[test]
fn basic_auth_nginx_and_traefik() {
    let mut s = spec("nginx");
    s.basic_auth_secret = Some("creds".into());
    let a = ann(&build_ingress(&trigger(s), &port()).unwrap());
    assert_eq!(a[NGINX_AUTH_TYPE], "basic");
    assert_eq!(a[NGINX_AUTH_SECRET], "creds");
    assert_eq!(a[NGINX_AUTH_REALM], AUTH_REALM);

    let mut s = spec("traefik");
    s.basic_auth_secret = Some("creds".into());
    let a = ann(&build_ingress(&trigger(s), &port()).unwrap());
    assert_eq!(a[TRAEFIK_AUTH_TYPE], "basic");
    assert_eq!(a[TRAEFIK_AUTH_SECRET], "creds");
    assert!(!a.contains_key(NGINX_AUTH_SECRET));

    // blank secret name means no auth
    let mut s = spec("nginx");
    s.basic_auth_secret = Some("  ".into());
    let a = ann(&build_ingress(&trigger(s), &port()).unwrap());
    assert!(!a.contains_key(NGINX_AUTH_TYPE));
}

#[test]
fn basic_auth_with_kong_is_a_clear_error() {
    let mut s = spec("kong");
    s.basic_auth_secret = Some("creds".into());
    let err = build_ingress(&trigger(s), &port()).unwrap_err();
    assert_eq!(err, BuildError::BasicAuthUnsupported);
    assert_eq!(err.reason(), REASON_BASIC_AUTH_UNSUPPORTED);
}

#[test]
fn tls_secret_goes_into_spec_tls() {
    let mut s = spec("nginx");
    s.host_name = Some("fn.example.com".into());
    s.tls_secret = Some("my-cert".into());
    let t = trigger(s);
    let i = build_ingress(&t, &port()).unwrap();
    let tls = i.spec.as_ref().unwrap().tls.as_ref().unwrap();
    assert_eq!(tls.len(), 1);
    assert_eq!(tls[0].secret_name.as_deref(), Some("my-cert"));
    assert_eq!(tls[0].hosts, Some(vec!["fn.example.com".to_string()]));
    assert!(!ann(&i).contains_key(TLS_ACME));
    assert_eq!(trigger_url(&t, None), "https://fn.example.com/");
}

#[test]
fn tls_acme_per_gateway() {
    for gw in ["nginx", "traefik", "kong"] {
        let mut s = spec(gw);
        s.host_name = Some("fn.example.com".into());
        s.tls = Some(true);
        let i = build_ingress(&trigger(s), &port()).unwrap();
        let a = ann(&i);
        assert_eq!(a[TLS_ACME], "true", "{gw}");
        assert_eq!(
            a.contains_key(NGINX_SSL_REDIRECT),
            gw == "nginx",
            "ssl-redirect only for nginx ({gw})"
        );
        let tls = i.spec.as_ref().unwrap().tls.as_ref().unwrap();
        assert_eq!(tls[0].secret_name.as_deref(), Some("hello-trigger-tls"));
    }
}

#[test]
fn tls_and_tls_secret_conflict() {
    let mut s = spec("nginx");
    s.tls = Some(true);
    s.tls_secret = Some("x".into());
    assert_eq!(
        build_ingress(&trigger(s), &port()).unwrap_err(),
        BuildError::TlsConflict
    );
}

#[test]
fn trigger_annotations_are_copied_and_win() {
    let mut t = trigger(spec("nginx"));
    t.metadata.annotations = Some(BTreeMap::from([
        (NGINX_REWRITE_TARGET.to_string(), "/v2".to_string()),
        ("team.example.com/owner".to_string(), "payments".to_string()),
        (LAST_APPLIED.to_string(), "{...}".to_string()),
    ]));
    let a = ann(&build_ingress(&t, &port()).unwrap());
    assert_eq!(a[NGINX_REWRITE_TARGET], "/v2");
    assert_eq!(a["team.example.com/owner"], "payments");
    assert!(!a.contains_key(LAST_APPLIED));
}

#[test]
fn function_labels_win_over_trigger_labels() {
    let mut t = trigger(spec("nginx"));
    t.metadata.labels = Some(BTreeMap::from([
        ("function".to_string(), "other".to_string()),
        ("tier".to_string(), "web".to_string()),
    ]));
    let i = build_ingress(&t, &port()).unwrap();
    let labels = i.metadata.labels.unwrap();
    assert_eq!(labels["function"], "hello");
    assert_eq!(labels["tier"], "web");
}

#[test]
fn everything_at_once_for_nginx() {
    let mut s = spec("nginx");
    s.host_name = Some("a.example.com".into());
    s.path = Some("p".into());
    s.cors_enable = Some(true);
    s.basic_auth_secret = Some("creds".into());
    s.tls = Some(true);
    let i = build_ingress(&trigger(s), &port()).unwrap();
    let keys: Vec<String> = ann(&i).into_keys().collect();
    assert_eq!(
        keys,
        vec![
            TLS_ACME,
            NGINX_AUTH_REALM,
            NGINX_AUTH_SECRET,
            NGINX_AUTH_TYPE,
            NGINX_ENABLE_CORS,
            NGINX_REWRITE_TARGET,
            NGINX_SSL_REDIRECT,
        ]
    );
}

#[test]
fn empty_function_name_and_missing_namespace() {
    let mut s = spec("nginx");
    s.function_name = " ".into();
    assert_eq!(
        build_ingress(&trigger(s), &port()).unwrap_err(),
        BuildError::NoFunction
    );
    let mut t = trigger(spec("nginx"));
    t.metadata.namespace = None;
    assert_eq!(
        build_ingress(&t, &port()).unwrap_err(),
        BuildError::NoNamespace
    );
}
