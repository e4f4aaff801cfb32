//! Two leader-election candidates against a devcluster API server.

#![cfg(test)]

use std::time::{Duration, Instant};

use devcluster_apiserver::{ServerConfig, start};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kubeless_service::lease::{LeaseConfig, LeaseMetrics};
use kubeless_service::{LeaderElector, Metrics};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig {
        name: "test-controller".into(),
        namespace: "default".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_interval: Duration::from_millis(200),
    }
}

async fn wait_for(rx: &mut watch::Receiver<bool>, want: bool, within: Duration) -> bool {
    tokio::time::timeout(within, rx.wait_for(|l| *l == want))
        .await
        .is_ok()
}

#[tokio::test]
async fn one_leader_at_a_time_with_handover() {
    let server = start(ServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");

    let metrics_a = Metrics::new("kubeless");
    let token_a = CancellationToken::new();
    let (mut a, task_a) = LeaderElector::new(
        client.clone(),
        config("pod-a"),
        LeaseMetrics::register(&metrics_a),
    )
    .spawn(token_a.clone());
    assert!(
        wait_for(&mut a, true, Duration::from_secs(10)).await,
        "pod-a never led"
    );

    let token_b = CancellationToken::new();
    let (mut b, task_b) = LeaderElector::new(
        client.clone(),
        config("pod-b"),
        LeaseMetrics::register(&Metrics::new("kubeless")),
    )
    .spawn(token_b.clone());
    // While pod-a renews, pod-b must stay a follower (several lease durations' worth of attempts).
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(!*b.borrow(), "two leaders");
        assert!(*a.borrow(), "pod-a lost a healthy lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lease = leases.get("test-controller").await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
    assert_eq!(spec.lease_transitions, Some(0));
    assert!(
        metrics_a
            .encode()
            .unwrap()
            .contains("kubeless_leader_election_is_leader 1")
    );

    // pod-a shuts down: it releases the Lease and pod-b takes over without waiting for expiry.
    let released_at = Instant::now();
    token_a.cancel();
    task_a.await.unwrap();
    assert!(!*a.borrow());
    assert!(
        wait_for(&mut b, true, Duration::from_secs(5)).await,
        "pod-b never took over"
    );
    assert!(
        released_at.elapsed() < Duration::from_millis(1900),
        "handover waited for expiry"
    );
    let spec = leases.get("test-controller").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-b"));
    assert_eq!(spec.lease_transitions, Some(1));

    // pod-b dies without releasing: a new pod-a only leads after the lease expired.
    task_b.abort();
    let _ = task_b.await;
    let died_at = Instant::now();
    let token_a2 = CancellationToken::new();
    let (mut a2, task_a2) = LeaderElector::new(
        client.clone(),
        config("pod-a"),
        LeaseMetrics::register(&Metrics::new("kubeless")),
    )
    .spawn(token_a2.clone());
    assert!(
        wait_for(&mut a2, true, Duration::from_secs(10)).await,
        "no failover after expiry"
    );
    assert!(
        died_at.elapsed() >= Duration::from_millis(1500),
        "took a live lease after {:?}",
        died_at.elapsed()
    );
    let spec = leases.get("test-controller").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("pod-a"));
    assert_eq!(spec.lease_transitions, Some(2));

    token_a2.cancel();
    task_a2.await.unwrap();
    token_b.cancel();
    server.shutdown().await;
}
