//! A real Python function pod on devcluster, deployed by hand: what the function-controller
//! would create for a Function, without running it, so a test of another service gets a
//! function pod (the runtime proxy and a Python worker as local processes) and nothing more.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Client;
use kubeless_api::Function;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::create;

/// The runtime image the pods run; devcluster's image map turns it into the `kubeless-runtime`
/// binary of this target dir (start the cluster with [`crate::TestCluster::with_pods`]).
pub const PYTHON_IMAGE: &str = "kubeless-rs/runtime-python:3.11";

/// The Service port of every function, as the function-controller writes it.
const SERVICE_PORT: u16 = 8080;

/// A Python function `name` whose `source` is `handler.py` and whose entry point is the
/// function `handler` in it. [`deploy`](Self::deploy) creates the code ConfigMap, a Deployment
/// of one pod running [`PYTHON_IMAGE`] (one worker, ready on `/healthz`, listening on its pod
/// address), a Service `name` on port 8080 selecting it, and the Function object, all labelled
/// `function=<name>`, `created-by=kubeless` and the extra [`label`](Self::label)s.
#[derive(Debug, Clone)]
pub struct PythonFunction {
    name: String,
    source: String,
    handler: String,
    labels: BTreeMap<String, String>,
    env: Vec<(String, String)>,
    timeout: u32,
    port: u16,
}

impl PythonFunction {
    /// Timeout 10 s, container port 8080, no extra labels or env.
    pub fn new(name: &str, source: &str, handler: &str) -> Self {
        let labels = [("function", name), ("created-by", "kubeless")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            name: name.to_string(),
            source: source.to_string(),
            handler: handler.to_string(),
            labels,
            env: Vec::new(),
            timeout: 10,
            port: SERVICE_PORT,
        }
    }

    /// A label on every object and the pod (what trigger selectors match).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }

    /// An environment variable of the function's container.
    pub fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_string(), value.into()));
        self
    }

    /// The function's timeout in seconds (the Function's `timeout`, the pod's `FUNC_TIMEOUT`).
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout = seconds;
        self
    }

    /// The container port, the Service's targetPort (its port stays 8080).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Creates the ConfigMap, Deployment, Service and Function in [`NS`].
    pub async fn deploy(&self, client: &Client) {
        let (name, labels, port) = (&self.name, &self.labels, self.port);
        let mut env = vec![
            json!({"name": "FUNC_HANDLER", "value": self.handler}),
            json!({"name": "MOD_NAME", "value": "handler"}),
            json!({"name": "FUNC_PORT", "value": port.to_string()}),
            json!({"name": "FUNC_RUNTIME", "value": "python3.11"}),
            json!({"name": "FUNC_TIMEOUT", "value": self.timeout.to_string()}),
            json!({"name": "KUBELESS_INSTALL_VOLUME", "value": "/kubeless"}),
            json!({"name": "KUBELESS_WORKERS", "value": "1"}),
            json!({"name": "KUBELESS_LISTEN_ADDRESS",
                   "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        ];
        env.extend(self.env.iter().map(|(k, v)| json!({"name": k, "value": v})));
        let config_map: ConfigMap = typed(json!({
            "metadata": {"name": name, "labels": labels},
            "data": {"handler.py": self.source}
        }));
        let deployment: Deployment = typed(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"function": name}},
              "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [{"name": name, "image": PYTHON_IMAGE, "env": env,
                  "ports": [{"name": "http", "containerPort": port}],
                  "readinessProbe": {"httpGet": {"path": "/healthz", "port": port},
                                     "periodSeconds": 1},
                  "volumeMounts": [{"name": "code", "mountPath": "/kubeless"}]}],
                "volumes": [{"name": "code", "configMap": {"name": name}}]}}}
        }));
        let service: Service = typed(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"selector": {"function": name},
                     "ports": [{"name": "http-function-port", "port": SERVICE_PORT,
                                "targetPort": port, "protocol": "TCP"}]}
        }));
        create(client, &config_map).await;
        create(client, &deployment).await;
        create(client, &service).await;
        self.create_function(client).await;
    }

    /// The Function object alone (no pod): a function the cluster knows but does not run.
    pub async fn create_function(&self, client: &Client) {
        let function: Function = typed(json!({
            "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": {"runtime": "python3.11", "handler": format!("handler.{}", self.handler),
                     "timeout": self.timeout.to_string(), "function": self.source}
        }));
        create(client, &function).await;
    }
}

fn typed<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}
