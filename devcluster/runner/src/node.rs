//! The Node object for the host the runner runs pods on, as a kubelet registers its
//! node: capacity and allocatable from the machine (CPUs, memory), a Ready condition,
//! and node info. `kubectl get nodes` lists it and `kubectl top node` reads its
//! allocatable resources.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::NODE_NAME;

/// What a real kubelet allows by default.
const MAX_PODS: &str = "110";

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_image() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

/// The node as the runner registers it now.
pub fn desired() -> Node {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory = crate::usage::meminfo().map_or(0, |m| m.total);
    let resources: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity(cpus.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Ki", memory / 1024)),
        ),
        ("pods".to_string(), Quantity(MAX_PODS.into())),
    ]
    .into();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    Node {
        metadata: ObjectMeta {
            name: Some(NODE_NAME.into()),
            labels: Some(
                [
                    ("kubernetes.io/hostname".to_string(), NODE_NAME.to_string()),
                    ("kubernetes.io/os".to_string(), "linux".to_string()),
                    (
                        "kubernetes.io/arch".to_string(),
                        std::env::consts::ARCH.to_string(),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                message: Some("devcluster runner is posting ready status".into()),
                last_heartbeat_time: Some(now.clone()),
                last_transition_time: Some(now),
            }]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: "127.0.0.1".into(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: NODE_NAME.into(),
                },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: std::env::consts::ARCH.into(),
                operating_system: std::env::consts::OS.into(),
                kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
                os_image: os_image(),
                machine_id: read_trimmed("/etc/machine-id"),
                boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
                container_runtime_version: "devcluster://local-processes".into(),
                kubelet_version: "v1.34.0-devcluster".into(),
                kube_proxy_version: String::new(),
                system_uuid: String::new(),
                swap: None,
            }),
            ..Default::default()
        }),
    }
}

/// Creates the node, or replaces the status of the one a previous run left (a data dir).
pub async fn register(client: &Client) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let node = desired();
    match api.create(&PostParams::default(), &node).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let mut current = api.get(NODE_NAME).await?;
            current.status = node.status;
            api.replace_status(NODE_NAME, &PostParams::default(), &current)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}
