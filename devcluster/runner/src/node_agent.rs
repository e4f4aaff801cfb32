//! The runner as a node of a real control plane (kube-apiserver, kube-controller-manager,
//! kube-scheduler): it registers its Node and keeps it alive (Lease and status heartbeats),
//! runs the Pods the scheduler binds to it (watched with the field selector
//! `spec.nodeName=NAME`, all a node may list), reports their status, and serves the kubelet API
//! the API server calls for logs, exec, attach and port-forward ([`crate::kubelet_api`]). It runs
//! none of devcluster's controllers: the kube-controller-manager owns Deployments, ReplicaSets,
//! Jobs, Endpoints and the rest.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::reflector;
use tokio_util::sync::CancellationToken;

use crate::container::PodRuntime;
use crate::node::{self, Identity, KeepAlive};
use crate::{Error, Result, RunnerConfig, ctx, kubelet, kubelet_api, reflect};

/// Settings of a node agent.
#[derive(Clone, Debug)]
pub struct NodeAgent {
    /// The Node's name; the client must be `system:node:NAME` for the Node authorizer.
    pub node_name: String,
    /// Where the kubelet API listens (a loopback address; port 0 picks a free one). The Node
    /// says which (`status.daemonEndpoints.kubeletEndpoint.port`), with address 127.0.0.1.
    pub kubelet_bind: SocketAddr,
    pub tls: KubeletTls,
    pub keep_alive: KeepAlive,
}

impl NodeAgent {
    pub fn new(node_name: impl Into<String>, tls: KubeletTls) -> Self {
        Self {
            node_name: node_name.into(),
            kubelet_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls,
            keep_alive: KeepAlive::default(),
        }
    }
}

/// The kubelet API's certificates (PEM).
#[derive(Clone)]
pub struct KubeletTls {
    /// The serving certificate (chain), for 127.0.0.1, signed by a CA the API server trusts
    /// (`--kubelet-certificate-authority`).
    pub cert_pem: String,
    pub key_pem: String,
    /// Clients must present a certificate signed by this CA: the one that signed the API
    /// server's `--kubelet-client-certificate`.
    pub client_ca_pem: String,
}

impl std::fmt::Debug for KubeletTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletTls").finish_non_exhaustive()
    }
}

/// Runs the node until `shutdown`, then stops every pod's processes and returns.
pub(crate) async fn run(
    client: Client,
    config: RunnerConfig,
    agent: NodeAgent,
    shutdown: CancellationToken,
) -> Result<()> {
    for dir in [&config.work_dir, &config.logs_dir] {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|source| Error::Io {
                path: dir.clone(),
                source,
            })?;
    }
    if let PodRuntime::Container(rt) = &config.pods {
        crate::container::remove_leftovers(rt, &config.work_dir.to_string_lossy()).await;
    }
    if config.pod_ip_base.is_loopback() {
        tracing::warn!(
            range = %config.pod_ip_base,
            "pod addresses are loopback: the API server refuses them in Endpoints and EndpointSlices, so Services list no pods of this node"
        );
    }
    let listener = kubelet_api::bind(&agent).await?;
    let identity = Identity {
        name: agent.node_name.clone(),
        kubelet_port: Some(listener.port),
        runtime: match &config.pods {
            PodRuntime::Process => "devcluster://local-processes".into(),
            PodRuntime::Container(_) => "devcluster://podman".into(),
        },
    };
    // As a kubelet: registration is retried until it works (the API server may still be starting).
    let node_uid = loop {
        match node::register(&client, &identity).await {
            Ok(uid) => break uid,
            Err(e) => {
                tracing::warn!(node = %agent.node_name, error = %e, "registering the node failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    };
    tracing::info!(node = %agent.node_name, kubelet_port = listener.port, "node registered");
    let background = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(node::keep_alive(
        client.clone(),
        agent.node_name.clone(),
        node_uid,
        agent.keep_alive.clone(),
        background.clone(),
    ));

    let wakers = Arc::new(ctx::Wakers::default());
    let watchers = CancellationToken::new();
    let bound_here = format!("spec.nodeName={}", agent.node_name);
    let pods = reflect::<Pod>(
        &client,
        None,
        Some(&bound_here),
        &wakers,
        &watchers,
        &mut tasks,
    );
    tokio::select! {
        _ = pods.wait_until_ready() => {}
        _ = shutdown.cancelled() => {
            background.cancel();
            watchers.cancel();
            while tasks.join_next().await.is_some() {}
            return Ok(());
        }
    }
    // The kubelet reads only pods; the other caches stay empty (no controller runs here).
    let stores = ctx::Stores {
        pods,
        deployments: reflector::store().0,
        services: reflector::store().0,
        jobs: reflector::store().0,
        cronjobs: reflector::store().0,
        endpoints: reflector::store().0,
        slices: reflector::store().0,
        hpas: reflector::store().0,
    };
    let ctx = Arc::new(ctx::Ctx {
        client,
        stores,
        config,
        wakers,
    });
    tasks.spawn(kubelet_api::serve(
        listener,
        ctx.clone(),
        background.clone(),
    ));
    let kubelet_cancel = CancellationToken::new();
    let kubelet = tokio::spawn(kubelet::run(ctx.clone(), kubelet_cancel.clone()));
    tracing::info!(node = %agent.node_name, "node agent started");

    shutdown.cancelled().await;
    tracing::info!(node = %agent.node_name, "node agent stopping");
    kubelet_cancel.cancel();
    if let Err(e) = kubelet.await {
        tracing::error!(error = %e, "kubelet task failed");
    }
    background.cancel();
    watchers.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}
