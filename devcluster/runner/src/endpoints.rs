//! Endpoints and EndpointSlices for every Service with a selector, from the
//! pods' status (podIP, Ready) and the Service's target ports.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};

use crate::ctx::{Ctx, MANAGED_BY, MANAGED_BY_LABEL, is_conflict, is_not_found, ns_name};
use crate::error::Result;
use crate::util::{controller_ref, map_selector_matches, pod_phase, pod_ready};

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// A resolved (name, port, protocol) triple of a Service port on one pod.
type PortKey = Vec<(Option<String>, i32, String)>;

/// The port numbers a Service's ports point at on `pod` (named targetPorts
/// are looked up in the pod's container ports).
fn resolve_ports(svc: &Service, pod: &Pod) -> PortKey {
    let mut out = Vec::new();
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    for sp in ports.into_iter().flatten() {
        let protocol = sp.protocol.clone().unwrap_or_else(|| "TCP".into());
        let port = match &sp.target_port {
            None => Some(sp.port),
            Some(IntOrString::Int(i)) => Some(*i),
            Some(IntOrString::String(name)) => name.parse::<i32>().ok().or_else(|| {
                pod.spec.as_ref().and_then(|s| {
                    s.containers
                        .iter()
                        .flat_map(|c| c.ports.iter().flatten())
                        .find(|p| p.name.as_deref() == Some(name.as_str()))
                        .map(|p| p.container_port)
                })
            }),
        };
        if let Some(port) = port {
            out.push((sp.name.clone(), port, protocol));
        }
    }
    out
}

fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.namespace(),
        name: Some(pod.name_any()),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    }
}

fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
}

/// Pods a Service selects that can appear as endpoints.
fn selected<'a>(svc: &Service, pods: &'a [Arc<Pod>]) -> Vec<&'a Pod> {
    let ns = svc.namespace();
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Vec::new();
    };
    let mut out: Vec<&Pod> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p.namespace() == ns)
        .filter(|p| map_selector_matches(sel, p.labels()))
        .filter(|p| pod_ip(p).is_some())
        .filter(|p| !matches!(pod_phase(p), "Succeeded" | "Failed"))
        .collect();
    out.sort_by_key(|p| pod_ip(p));
    out
}

fn base_meta(svc: &Service, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: svc.namespace(),
        labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())].into()),
        ..Default::default()
    }
}

/// The Endpoints object for `svc` (same name as the Service).
pub fn compute_endpoints(svc: &Service, pods: &[Arc<Pod>]) -> Endpoints {
    let publish_all = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    let mut groups: BTreeMap<PortKey, EndpointSubset> = BTreeMap::new();
    for pod in selected(svc, pods) {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ports = resolve_ports(svc, pod);
        if ports.is_empty() {
            continue;
        }
        let Some(ip) = pod_ip(pod) else { continue };
        let subset = groups
            .entry(ports.clone())
            .or_insert_with(|| EndpointSubset {
                ports: Some(
                    ports
                        .iter()
                        .map(|(name, port, protocol)| EndpointPort {
                            name: name.clone(),
                            port: *port,
                            protocol: Some(protocol.clone()),
                            app_protocol: None,
                        })
                        .collect(),
                ),
                ..Default::default()
            });
        let addr = EndpointAddress {
            ip,
            hostname: None,
            node_name: Some(crate::NODE_NAME.into()),
            target_ref: Some(pod_ref(pod)),
        };
        let list = if publish_all || pod_ready(pod) {
            subset.addresses.get_or_insert_with(Vec::new)
        } else {
            subset.not_ready_addresses.get_or_insert_with(Vec::new)
        };
        list.push(addr);
    }
    let subsets: Vec<EndpointSubset> = groups.into_values().collect();
    Endpoints {
        metadata: base_meta(svc, svc.name_any()),
        subsets: (!subsets.is_empty()).then_some(subsets),
    }
}

/// One EndpointSlice per distinct set of resolved ports.
pub fn compute_slices(svc: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSlice> {
    let mut groups: BTreeMap<PortKey, Vec<Endpoint>> = BTreeMap::new();
    let publish_all = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    for pod in selected(svc, pods) {
        let ports = resolve_ports(svc, pod);
        let Some(ip) = pod_ip(pod) else { continue };
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let serving = pod_ready(pod);
        groups.entry(ports).or_default().push(Endpoint {
            addresses: vec![ip],
            conditions: Some(EndpointConditions {
                ready: Some((serving || publish_all) && !terminating),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            node_name: Some(crate::NODE_NAME.into()),
            target_ref: Some(pod_ref(pod)),
            ..Default::default()
        });
    }
    if groups.is_empty() {
        // An empty slice still tells clients "no endpoints" explicitly.
        groups.insert(Vec::new(), Vec::new());
    }
    groups
        .into_iter()
        .map(|(ports, endpoints)| {
            let digest = Sha256::digest(format!("{ports:?}").as_bytes());
            let name = format!("{}-{}", svc.name_any(), &hex::encode(digest)[..5]);
            let mut meta = base_meta(svc, name);
            if let Some(labels) = meta.labels.as_mut() {
                labels.insert(SERVICE_NAME_LABEL.into(), svc.name_any());
                labels.insert(SLICE_MANAGED_BY_LABEL.into(), MANAGED_BY.into());
            }
            meta.owner_references = controller_ref(svc).map(|r| vec![r]);
            EndpointSlice {
                metadata: meta,
                address_type: "IPv4".into(),
                endpoints,
                ports: Some(
                    ports
                        .into_iter()
                        .map(|(name, port, protocol)| SlicePort {
                            name,
                            port: Some(port),
                            protocol: Some(protocol),
                            app_protocol: None,
                        })
                        .collect(),
                ),
            }
        })
        .collect()
}

fn has_selector(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty())
}

/// Writes and deletions in flight at once in a pass: a burst of deleted Services (hundreds of
/// stale objects) must not hold back the Endpoints of a Service created meanwhile.
const CONCURRENT_WRITES: usize = 16;

/// One change a pass makes.
enum Op {
    Endpoints(String, Endpoints),
    Slice(String, EndpointSlice),
    DeleteEndpoints(String, String),
    DeleteSlice(String, String),
}

/// One pass: write what differs, then delete what no Service wants any more. The writes come
/// first and everything runs [`CONCURRENT_WRITES`] at a time, so a new Service's Endpoints do
/// not queue behind the deletion of many old ones.
pub async fn reconcile_all(ctx: Arc<Ctx>) -> Result<()> {
    let pods = ctx.stores.pods.state();
    let services = ctx.stores.services.state();
    let mut wanted_eps: std::collections::HashSet<(String, String)> = Default::default();
    let mut wanted_slices: std::collections::HashSet<(String, String)> = Default::default();
    let mut ops = Vec::new();
    for svc in services.iter().filter(|s| has_selector(s)) {
        let (ns, name) = ns_name(svc.as_ref());
        wanted_eps.insert((ns.clone(), name));
        ops.push(Op::Endpoints(ns.clone(), compute_endpoints(svc, &pods)));
        for slice in compute_slices(svc, &pods) {
            wanted_slices.insert((ns.clone(), slice.name_any()));
            ops.push(Op::Slice(ns.clone(), slice));
        }
    }
    for eps in ctx.stores.endpoints.state() {
        let key = ns_name(eps.as_ref());
        if !wanted_eps.contains(&key) {
            ops.push(Op::DeleteEndpoints(key.0, key.1));
        }
    }
    for slice in ctx.stores.slices.state() {
        let key = ns_name(slice.as_ref());
        if !wanted_slices.contains(&key) {
            ops.push(Op::DeleteSlice(key.0, key.1));
        }
    }
    futures::stream::iter(ops)
        .for_each_concurrent(CONCURRENT_WRITES, |op| run(&ctx, op))
        .await;
    Ok(())
}

/// Carries out one change; failures are logged, and the next pass tries again.
async fn run(ctx: &Ctx, op: Op) {
    match op {
        Op::Endpoints(ns, eps) => {
            let service = eps.name_any();
            if let Err(e) = write_endpoints(ctx, &ns, eps).await {
                tracing::warn!(%ns, %service, error = %e, "writing Endpoints failed");
            }
        }
        Op::Slice(ns, slice) => {
            let name = slice.name_any();
            if let Err(e) = write_slice(ctx, &ns, slice).await {
                tracing::warn!(%ns, slice = %name, error = %e, "writing EndpointSlice failed");
            }
        }
        Op::DeleteEndpoints(ns, name) => {
            let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), &ns);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => tracing::warn!(error = %e, "deleting stale Endpoints failed"),
            }
        }
        Op::DeleteSlice(ns, name) => {
            let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &ns);
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => tracing::warn!(error = %e, "deleting stale EndpointSlice failed"),
            }
        }
    }
}

async fn write_endpoints(ctx: &Ctx, ns: &str, mut eps: Endpoints) -> Result<()> {
    let name = eps.name_any();
    let cached = ctx
        .stores
        .endpoints
        .get(&kube::runtime::reflector::ObjectRef::new(&name).within(ns));
    if let Some(c) = &cached
        && c.subsets == eps.subsets
    {
        return Ok(());
    }
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(&name).await? {
        Some(current) => {
            if current.subsets == eps.subsets && current.labels().get(MANAGED_BY_LABEL).is_some() {
                return Ok(());
            }
            eps.metadata.resource_version = current.metadata.resource_version;
            match api.replace(&name, &PostParams::default(), &eps).await {
                Ok(_) => Ok(()),
                Err(e) if is_conflict(&e) => Ok(()), // next pass retries with fresh data
                Err(e) => Err(e.into()),
            }
        }
        None => match api.create(&PostParams::default(), &eps).await {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e.into()),
        },
    }
}

async fn write_slice(ctx: &Ctx, ns: &str, mut slice: EndpointSlice) -> Result<()> {
    let name = slice.name_any();
    let same = |c: &EndpointSlice| c.endpoints == slice.endpoints && c.ports == slice.ports;
    let cached = ctx
        .stores
        .slices
        .get(&kube::runtime::reflector::ObjectRef::new(&name).within(ns));
    if cached.as_deref().is_some_and(same) {
        return Ok(());
    }
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(&name).await? {
        Some(current) => {
            if same(&current) {
                return Ok(());
            }
            slice.metadata.resource_version = current.metadata.resource_version;
            match api.replace(&name, &PostParams::default(), &slice).await {
                Ok(_) => Ok(()),
                Err(e) if is_conflict(&e) => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
        None => match api.create(&PostParams::default(), &slice).await {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, ip: &str, ready: bool, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels},
                "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip,
                    "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
            }))
            .unwrap(),
        )
    }

    fn svc(target: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": target}]}
        }))
        .unwrap()
    }

    #[test]
    fn ready_and_not_ready_addresses() {
        let pods = vec![
            pod("a", "127.1.0.3", true, serde_json::json!({"app": "web"})),
            pod("b", "127.1.0.2", false, serde_json::json!({"app": "web"})),
            pod("c", "127.1.0.4", true, serde_json::json!({"app": "other"})),
        ];
        let eps = compute_endpoints(&svc(serde_json::json!(8080)), &pods);
        let subsets = eps.subsets.unwrap();
        assert_eq!(subsets.len(), 1);
        let s = &subsets[0];
        assert_eq!(
            s.addresses
                .as_ref()
                .unwrap()
                .iter()
                .map(|a| a.ip.as_str())
                .collect::<Vec<_>>(),
            vec!["127.1.0.3"]
        );
        assert_eq!(s.not_ready_addresses.as_ref().unwrap()[0].ip, "127.1.0.2");
        assert_eq!(s.ports.as_ref().unwrap()[0].port, 8080);
        assert_eq!(
            s.addresses.as_ref().unwrap()[0]
                .target_ref
                .as_ref()
                .unwrap()
                .name
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn named_target_port_and_slices() {
        let pods = vec![pod(
            "a",
            "127.1.0.3",
            true,
            serde_json::json!({"app": "web"}),
        )];
        let service = svc(serde_json::json!("http"));
        let eps = compute_endpoints(&service, &pods);
        assert_eq!(
            eps.subsets.unwrap()[0].ports.as_ref().unwrap()[0].port,
            8080
        );
        let slices = compute_slices(&service, &pods);
        assert_eq!(slices.len(), 1);
        let s = &slices[0];
        assert_eq!(
            s.labels().get(SERVICE_NAME_LABEL).map(String::as_str),
            Some("web")
        );
        assert_eq!(s.endpoints[0].addresses, vec!["127.1.0.3"]);
        assert_eq!(
            s.endpoints[0].conditions.as_ref().unwrap().ready,
            Some(true)
        );
        assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(8080));
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            "svc-uid"
        );
    }

    #[test]
    fn terminating_pods_leave_endpoints() {
        let mut p = (*pod("a", "127.1.0.3", true, serde_json::json!({"app": "web"}))).clone();
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let pods = vec![Arc::new(p)];
        assert!(
            compute_endpoints(&svc(serde_json::json!(8080)), &pods)
                .subsets
                .is_none()
        );
        let slices = compute_slices(&svc(serde_json::json!(8080)), &pods);
        let c = slices[0].endpoints[0].conditions.clone().unwrap();
        assert_eq!((c.ready, c.terminating), (Some(false), Some(true)));
    }

    #[test]
    fn no_pods_gives_empty_endpoints() {
        let eps = compute_endpoints(&svc(serde_json::json!(8080)), &[]);
        assert!(eps.subsets.is_none());
        assert_eq!(eps.metadata.name.as_deref(), Some("web"));
        let slices = compute_slices(&svc(serde_json::json!(8080)), &[]);
        assert_eq!(slices.len(), 1);
        assert!(slices[0].endpoints.is_empty());
    }
}
