//! The http-trigger-controller end to end on devcluster: a real Python function pod
//! (kubeless-runtime), the controller in-process writing Ingresses and status, and its built-in
//! gateway serving the triggers over HTTP. Uses the kubeless-runtime binary `cargo build
//! --workspace --bins` left in this test's target dir.
#![cfg(test)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use http_trigger_controller::{Settings, run};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use kubeless_api::{HttpTrigger, HttpTriggerSpec, conditions};
use kubeless_testkit::{NS, PythonFunction, TestCluster, eventually, free_port};
use tokio_util::sync::CancellationToken;

const HANDLER: &str = r#"
def hello(event, context):
    req = event["extensions"]["request"]
    data = event["data"]
    if isinstance(data, bytes):
        data = data.decode()
    return {
        "ns": event["event-namespace"],
        "has_id": bool(event["event-id"]),
        "path": req.path,
        "query": req.query_string,
        "data": data,
    }
"#;

struct Http {
    client: HttpClient<HttpConnector, Full<Bytes>>,
    gateway: SocketAddr,
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Http {
    async fn send(
        &self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("http://{}{}", self.gateway, path))
            .header("host", host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_string()))).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(20), self.client.request(req))
            .await
            .expect("gateway answered in time")
            .expect("request to the gateway");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    async fn get(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        self.send("GET", host, path, headers, "").await
    }
}

/// What a failing test needs to explain itself: pods, slices and pod logs.
async fn dump(client: &Client, dir: &Path) {
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for p in pods.list(&ListParams::default()).await.unwrap() {
        eprintln!(
            "pod {:?} status {}",
            p.metadata.name,
            serde_json::to_string(&p.status).unwrap()
        );
    }
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    for s in slices.list(&ListParams::default()).await.unwrap() {
        eprintln!("slice {}", serde_json::to_string(&s).unwrap());
    }
    for entry in walk(dir) {
        eprintln!("file {}", entry.display());
        if entry.extension().and_then(|e| e.to_str()) == Some("log") {
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            let tail: String = text
                .chars()
                .rev()
                .take(3000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            eprintln!("--- {}\n{tail}", entry.display());
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn trigger(name: &str, spec: HttpTriggerSpec) -> HttpTrigger {
    let mut t = HttpTrigger::new(name, spec);
    t.metadata.namespace = Some(NS.into());
    t
}

fn basic(user: &str, pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_triggers_through_the_builtin_gateway() {
    let c = TestCluster::with_pods(&["kubeless-runtime"]).await;
    let client = c.client.clone();
    // The container port differs from the Service's 8080, which checks that the gateway follows
    // the targetPort (and the Ingress the Service port). A free port: pods of other clusters on
    // the machine may listen meanwhile.
    PythonFunction::new("hello", HANDLER, "hello")
        .timeout(30)
        .port(free_port())
        .deploy(&client)
        .await;

    let token = CancellationToken::new();
    let metrics = kubeless_service::Metrics::new("kubeless");
    let running = run(
        client.clone(),
        Settings {
            namespace: None,
            ingress: true,
            gateway_addr: Some("127.0.0.1:0".parse().unwrap()),
            secret_ttl: Duration::from_millis(0),
            instance: None,
            lease: None,
            wake: Default::default(),
            hosts: Default::default(),
        },
        &metrics,
        token.clone(),
    )
    .await
    .unwrap();
    let http = Http {
        client: HttpClient::builder(TokioExecutor::new()).build_http(),
        gateway: running.gateway_addr.unwrap(),
    };

    let triggers: Api<HttpTrigger> = Api::namespaced(client.clone(), NS);
    triggers
        .create(
            &PostParams::default(),
            &trigger(
                "hello",
                HttpTriggerSpec {
                    function_name: "hello".into(),
                    host_name: Some("hello.example.com".into()),
                    path: Some("greet".into()),
                    ..HttpTriggerSpec::default()
                },
            ),
        )
        .await
        .unwrap();

    // 1. host + path -> the function, prefix stripped, Kubeless headers added.
    let deadline = Instant::now() + Duration::from_secs(90);
    let answer = loop {
        let a = http
            .send(
                "POST",
                "hello.example.com",
                "/greet/sub?x=1",
                &[("content-type", "text/plain")],
                "ping",
            )
            .await;
        if a.status == 200 {
            break a;
        }
        if Instant::now() > deadline {
            dump(&client, c.dir.path()).await;
            panic!(
                "the function did not answer through the gateway: {} {}",
                a.status, a.body
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["ns"], "httptriggers.kubeless.io", "{body}");
    assert_eq!(body["has_id"], true);
    assert_eq!(body["path"], "/sub");
    assert_eq!(body["query"], "x=1");
    assert_eq!(body["data"], "ping");
    // another host does not match the host-specific trigger
    assert_eq!(
        http.get("other.example.com", "/greet", &[]).await.status,
        404
    );

    // The controller wrote the Ingress and a Ready status with the URL.
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), NS);
    let ing = eventually("the Ingress", Duration::from_secs(30), || async {
        ingresses.get_opt("hello").await.unwrap()
    })
    .await;
    let spec = ing.spec.unwrap();
    assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
    let rule = &spec.rules.unwrap()[0];
    assert_eq!(rule.host.as_deref(), Some("hello.example.com"));
    let path = &rule.http.as_ref().unwrap().paths[0];
    assert_eq!(path.path.as_deref(), Some("/greet"));
    assert_eq!(
        path.backend
            .service
            .as_ref()
            .unwrap()
            .port
            .as_ref()
            .unwrap()
            .number,
        Some(8080)
    );
    let status = eventually("a Ready status", Duration::from_secs(30), || async {
        let t = triggers.get("hello").await.unwrap();
        t.status.filter(|s| conditions::is_ready(&s.conditions))
    })
    .await;
    assert_eq!(
        status.url.as_deref(),
        Some("http://hello.example.com/greet")
    );

    // 2. basic auth: 401 without or with wrong credentials, 200 with them.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let mut data = BTreeMap::new();
    data.insert(
        "auth".to_string(),
        k8s_openapi::ByteString(
            b"alice:{SHA}YWXIkDPDfrJ6I4yV+0kqTJdT5SE=\nbob:$apr1$Zx9Q3pLm$gy6x49kIZzZDFQDfRR86Y/\n"
                .to_vec(),
        ),
    );
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("creds".into()),
                    ..Default::default()
                },
                data: Some(data),
                ..Secret::default()
            },
        )
        .await
        .unwrap();
    triggers
        .create(
            &PostParams::default(),
            &trigger(
                "secure",
                HttpTriggerSpec {
                    function_name: "hello".into(),
                    path: Some("secure".into()),
                    basic_auth_secret: Some("creds".into()),
                    ..HttpTriggerSpec::default()
                },
            ),
        )
        .await
        .unwrap();
    let denied = eventually("the secure route", Duration::from_secs(30), || async {
        let a = http.get("any.host", "/secure", &[]).await;
        (a.status != 404).then_some(a)
    })
    .await;
    assert_eq!(denied.status, 401);
    assert!(
        denied.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic realm=")
    );
    let wrong = basic("alice", "nope");
    assert_eq!(
        http.get("any.host", "/secure", &[("authorization", &wrong)])
            .await
            .status,
        401
    );
    for user in ["alice", "bob"] {
        let good = basic(user, "s3cret!");
        let a = http
            .get("any.host", "/secure/x", &[("authorization", &good)])
            .await;
        assert_eq!(a.status, 200, "{user}: {}", a.body);
        assert!(a.body.contains("\"/x\""), "{}", a.body);
    }

    // 3. CORS: the gateway answers the preflight; responses carry Access-Control-*.
    triggers
        .create(
            &PostParams::default(),
            &trigger(
                "cors",
                HttpTriggerSpec {
                    function_name: "hello".into(),
                    path: Some("cors".into()),
                    cors_enable: Some(true),
                    ..HttpTriggerSpec::default()
                },
            ),
        )
        .await
        .unwrap();
    let origin = ("origin", "https://app.example");
    let pre = eventually("the CORS preflight", Duration::from_secs(30), || async {
        let a = http
            .send(
                "OPTIONS",
                "any.host",
                "/cors",
                &[origin, ("access-control-request-method", "POST")],
                "",
            )
            .await;
        (a.status == 204).then_some(a)
    })
    .await;
    assert_eq!(
        pre.headers["access-control-allow-origin"],
        "https://app.example"
    );
    assert!(
        pre.headers["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let a = http.get("any.host", "/cors", &[origin]).await;
    assert_eq!(a.status, 200);
    assert_eq!(
        a.headers["access-control-allow-origin"],
        "https://app.example"
    );
    // a trigger without cors-enable passes OPTIONS to the function and adds nothing
    let a = http.get("hello.example.com", "/greet", &[origin]).await;
    assert!(!a.headers.contains_key("access-control-allow-origin"));

    // 4. A trigger naming a missing function: condition + Event, 503 from the gateway.
    triggers
        .create(
            &PostParams::default(),
            &trigger(
                "orphan",
                HttpTriggerSpec {
                    function_name: "missing".into(),
                    path: Some("orphan".into()),
                    ..HttpTriggerSpec::default()
                },
            ),
        )
        .await
        .unwrap();
    eventually("FunctionNotFound", Duration::from_secs(30), || async {
        let t = triggers.get("orphan").await.unwrap();
        let c = conditions::find_condition(&t.status?.conditions, conditions::READY)?.clone();
        (c.reason.as_deref() == Some(conditions::reasons::FUNCTION_NOT_FOUND)).then_some(())
    })
    .await;
    let events: Api<KubeEvent> = Api::namespaced(client.clone(), NS);
    eventually(
        "a FunctionNotFound Event",
        Duration::from_secs(30),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("FunctionNotFound")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("orphan")
                })
                .then_some(())
        },
    )
    .await;
    assert!(ingresses.get_opt("orphan").await.unwrap().is_none());
    let a = eventually("the orphan route", Duration::from_secs(30), || async {
        let a = http.get("any.host", "/orphan", &[]).await;
        (a.status != 404).then_some(a)
    })
    .await;
    assert_eq!(a.status, 503);

    // 5. Trigger deleted -> 404.
    triggers
        .delete("hello", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "404 after deleting the trigger",
        Duration::from_secs(30),
        || async {
            (http.get("hello.example.com", "/greet", &[]).await.status == 404).then_some(())
        },
    )
    .await;

    token.cancel();
    tokio::time::timeout(Duration::from_secs(40), running.join())
        .await
        .expect("the service stops after shutdown");
    c.shutdown().await;
}
