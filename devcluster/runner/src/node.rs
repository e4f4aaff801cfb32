//! The Node object for the host the runner runs pods on, as a kubelet registers its
//! node: capacity and allocatable from the machine (CPUs, memory), a Ready condition,
//! and node info. `kubectl get nodes` lists it and `kubectl top node` reads its
//! allocatable resources. A node agent ([`crate::NodeAgent`]) also says where its kubelet API
//! listens and keeps the node alive: its Lease in `kube-node-lease`, renewed as a kubelet
//! renews it, and status heartbeats ([`keep_alive`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio_util::sync::CancellationToken;

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

/// Where a node's Lease lives.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// What the registered node says beyond the machine: its name, the port of its kubelet API
/// (none under devcluster, whose API server runs exec and logs itself) and its runtime.
#[derive(Clone, Debug)]
pub struct Identity {
    pub name: String,
    pub kubelet_port: Option<u16>,
    pub runtime: String,
}

impl Identity {
    /// devcluster's own node.
    pub fn devcluster() -> Self {
        Self {
            name: crate::NODE_NAME.to_string(),
            kubelet_port: None,
            runtime: "devcluster://local-processes".into(),
        }
    }
}

/// The conditions a healthy kubelet reports, with `now` as their heartbeat.
fn conditions(now: &Time) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    };
    vec![
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "devcluster runner is posting ready status",
        ),
    ]
}

/// The node as the runner registers it now.
pub fn desired(id: &Identity) -> Node {
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
            name: Some(id.name.clone()),
            labels: Some(
                [
                    ("kubernetes.io/hostname".to_string(), id.name.clone()),
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
            conditions: Some(if id.kubelet_port.is_some() {
                conditions(&now)
            } else {
                // devcluster's node: as it always was, one condition.
                conditions(&now).split_off(3)
            }),
            daemon_endpoints: id.kubelet_port.map(|port| NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: i32::from(port),
                }),
            }),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: "127.0.0.1".into(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: id.name.clone(),
                },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: std::env::consts::ARCH.into(),
                operating_system: std::env::consts::OS.into(),
                kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
                os_image: os_image(),
                machine_id: read_trimmed("/etc/machine-id"),
                boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
                container_runtime_version: id.runtime.clone(),
                kubelet_version: "v1.34.0-devcluster".into(),
                kube_proxy_version: String::new(),
                system_uuid: String::new(),
                swap: None,
            }),
            ..Default::default()
        }),
    }
}

/// Creates the node, or replaces the status of the one a previous run left (a data dir, or a
/// node agent that was restarted). Returns the node's uid.
pub async fn register(client: &Client, id: &Identity) -> Result<Option<String>, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let node = desired(id);
    match api.create(&PostParams::default(), &node).await {
        Ok(created) => Ok(created.metadata.uid),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let mut current = api.get(&id.name).await?;
            current.status = node.status;
            api.replace_status(&id.name, &PostParams::default(), &current)
                .await
                .map(|n| n.metadata.uid)
        }
        Err(e) => Err(e),
    }
}

/// How a node agent keeps its node alive.
#[derive(Clone, Debug)]
pub struct KeepAlive {
    /// Between two renewals of the Lease (a kubelet: 10 s).
    pub lease_renew: Duration,
    /// The Lease's duration; the node lifecycle controller counts the node gone when a renewal is
    /// this late (plus its grace period).
    pub lease_duration: Duration,
    /// Between two status heartbeats (the node's conditions with a fresh `lastHeartbeatTime`).
    pub status_report: Duration,
}

impl Default for KeepAlive {
    fn default() -> Self {
        Self {
            lease_renew: Duration::from_secs(10),
            lease_duration: Duration::from_secs(40),
            status_report: Duration::from_secs(60),
        }
    }
}

/// The node's Lease as a kubelet writes it: held by the node, owned by the Node object (so the
/// garbage collector removes it with the node).
pub fn lease(name: &str, node_uid: Option<&str>, duration: Duration, now: MicroTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(LEASE_NAMESPACE.to_string()),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.to_string(),
                    uid: uid.to_string(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.to_string()),
            lease_duration_seconds: Some(i32::try_from(duration.as_secs()).unwrap_or(40)),
            renew_time: Some(now),
            ..Default::default()
        }),
    }
}

/// Renews the Lease once: creates it, or writes the current one with a new renew time (a
/// conflict is retried at the next renewal, as the kubelet does).
pub async fn renew_lease(
    client: &Client,
    name: &str,
    node_uid: Option<&str>,
    duration: Duration,
) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    match api.get_opt(name).await? {
        None => api
            .create(
                &PostParams::default(),
                &lease(name, node_uid, duration, now),
            )
            .await
            .map(|_| ()),
        Some(mut current) => {
            let spec = current.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(name.to_string());
            spec.lease_duration_seconds = Some(i32::try_from(duration.as_secs()).unwrap_or(40));
            spec.renew_time = Some(now);
            api.replace(name, &PostParams::default(), &current)
                .await
                .map(|_| ())
        }
    }
}

/// Writes the node's conditions with a fresh heartbeat.
pub async fn heartbeat(client: &Client, name: &str) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    // A node may get its Node, not `nodes/status` (the Node authorizer's rules).
    let current = api.get(name).await?;
    let before = current
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    let mut fresh = conditions(&now);
    // A condition that did not change keeps its transition time.
    for c in fresh.iter_mut() {
        if let Some(old) = before
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            c.last_transition_time = old.last_transition_time.clone();
        }
    }
    let patch = serde_json::json!({ "status": { "conditions": fresh } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

/// Renews the Lease and reports status heartbeats until `stop`.
pub async fn keep_alive(
    client: Client,
    name: String,
    node_uid: Option<String>,
    every: KeepAlive,
    stop: CancellationToken,
) {
    let mut lease_tick = tokio::time::interval(every.lease_renew);
    let mut status_tick = tokio::time::interval(every.status_report);
    // The first status tick would repeat the registration: skip it.
    status_tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = lease_tick.tick() => {
                if let Err(e) = renew_lease(&client, &name, node_uid.as_deref(), every.lease_duration).await {
                    tracing::warn!(node = %name, error = %e, "renewing the node lease failed; retrying");
                }
            }
            _ = status_tick.tick() => {
                if let Err(e) = heartbeat(&client, &name).await {
                    tracing::warn!(node = %name, error = %e, "node status heartbeat failed; retrying");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_node_agent_says_where_its_kubelet_listens_and_reports_every_condition() {
        let id = Identity {
            name: "node-a".into(),
            kubelet_port: Some(10250),
            runtime: "devcluster://local-processes".into(),
        };
        let node = desired(&id);
        assert_eq!(node.metadata.name.as_deref(), Some("node-a"));
        let status = node.status.unwrap();
        let port = status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port;
        assert_eq!(port, 10250);
        let addresses = status.addresses.unwrap();
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && a.address == "127.0.0.1")
        );
        let conditions = status.conditions.unwrap();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(conditions.len(), 4);

        let own = desired(&Identity::devcluster());
        let own_status = own.status.unwrap();
        assert!(own_status.daemon_endpoints.is_none());
        assert_eq!(own_status.conditions.unwrap().len(), 1);
    }

    #[test]
    fn the_lease_is_held_and_owned_by_the_node() {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let l = lease("node-a", Some("uid-1"), Duration::from_secs(40), now);
        assert_eq!(l.metadata.namespace.as_deref(), Some(LEASE_NAMESPACE));
        let spec = l.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("node-a"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        let owner = &l.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "uid-1"));
    }
}
