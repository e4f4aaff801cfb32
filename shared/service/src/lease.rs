//! Lease-based leader election on `coordination.k8s.io/v1` Leases.
//!
//! The decision (create, acquire, renew or wait) is the pure function [`decide`]; [`next_spec`]
//! builds the Lease spec to write. [`LeaderElector`] is the loop that reads and writes the Lease
//! through the API server and publishes `is_leader` on a watch channel.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Leader election settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// Time between renewals, and between acquisition attempts while not leader.
    pub renew_interval: Duration,
}

/// What a Lease says, in the form the decision needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    pub holder: Option<String>,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    pub duration: Option<Duration>,
    pub transitions: i32,
}

impl LeaseRecord {
    pub fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        Self {
            holder: spec.holder_identity.clone().filter(|h| !h.is_empty()),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            duration: spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    /// When the Lease runs out; `None` when it has no usable time or duration (treated as free).
    pub fn expires_at(&self) -> Option<Timestamp> {
        let last = self.renew_time.or(self.acquire_time)?;
        let dur = SignedDuration::try_from(self.duration?).ok()?;
        last.checked_add(dur).ok()
    }
}

/// What to do with the Lease now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAction {
    /// No Lease object exists: create one naming us.
    Create,
    /// The Lease is free or expired: take it over.
    Acquire,
    /// We hold it: renew it.
    Renew,
    /// Another candidate holds a live Lease.
    Wait { holder: String, remaining: Duration },
}

/// Decides from the current Lease (`None`: no object), the time and our identity.
pub fn decide(record: Option<&LeaseRecord>, now: Timestamp, identity: &str) -> LeaseAction {
    let Some(record) = record else {
        return LeaseAction::Create;
    };
    let holder = match &record.holder {
        None => return LeaseAction::Acquire,
        Some(h) if h == identity => return LeaseAction::Renew,
        Some(h) => h,
    };
    match record.expires_at() {
        Some(expiry) if expiry > now => LeaseAction::Wait {
            holder: holder.clone(),
            remaining: Duration::try_from(expiry.duration_since(now)).unwrap_or_default(),
        },
        _ => LeaseAction::Acquire,
    }
}

/// The Lease spec to write for `action`; `None` for [`LeaseAction::Wait`].
pub fn next_spec(
    action: &LeaseAction,
    record: Option<&LeaseRecord>,
    now: Timestamp,
    identity: &str,
    lease_duration: Duration,
) -> Option<LeaseSpec> {
    let duration_secs = i32::try_from(lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    let prev = record.cloned().unwrap_or_default();
    let (acquire_time, transitions) = match action {
        LeaseAction::Wait { .. } => return None,
        LeaseAction::Create => (now, 0),
        LeaseAction::Acquire => (now, prev.transitions.saturating_add(1)),
        LeaseAction::Renew => (prev.acquire_time.unwrap_or(now), prev.transitions),
    };
    Some(LeaseSpec {
        holder_identity: Some(identity.to_string()),
        acquire_time: Some(MicroTime(acquire_time)),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(duration_secs),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    })
}

/// The spec that gives the Lease up: no holder and a one-second duration so others take over
/// at their next attempt.
pub fn release_spec(record: &LeaseRecord, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_duration_seconds: Some(1),
        lease_transitions: Some(record.transitions),
        ..LeaseSpec::default()
    }
}

/// Whether a leader whose renewals keep failing must give up: the next attempt would come after
/// the Lease ran out, when another candidate may already lead.
pub fn should_step_down(since_last_renew: Duration, config: &LeaseConfig) -> bool {
    since_last_renew + config.renew_interval >= config.lease_duration
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading Lease {namespace}/{name} failed")]
    Get {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing Lease {namespace}/{name} failed")]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Leader election metrics, registered under `leader_election`.
#[derive(Debug, Clone, Default)]
pub struct LeaseMetrics {
    pub is_leader: Gauge,
    pub transitions: Counter,
    pub renew_failures: Counter,
}

impl LeaseMetrics {
    pub fn register(metrics: &Metrics) -> Self {
        let m = Self::default();
        metrics.register_with("leader_election", |r| {
            r.register(
                "is_leader",
                "1 while this process holds the Lease",
                m.is_leader.clone(),
            );
            r.register(
                "transitions",
                "Times this process became leader",
                m.transitions.clone(),
            );
            r.register(
                "renew_failures",
                "Failed reads or writes of the Lease",
                m.renew_failures.clone(),
            );
        });
        m
    }
}

/// The loop that holds or waits for the Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    metrics: LeaseMetrics,
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: LeaseConfig, metrics: LeaseMetrics) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            metrics,
        }
    }

    /// Starts the loop. The receiver says whether we lead; the task ends after `token` is
    /// cancelled and the Lease was released.
    pub fn spawn(
        self,
        token: CancellationToken,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = watch::channel(false);
        (rx, tokio::spawn(self.run(tx, token)))
    }

    async fn run(self, tx: watch::Sender<bool>, token: CancellationToken) {
        let mut leader = false;
        let mut last_renew = Instant::now();
        loop {
            match self.attempt().await {
                Ok(true) => {
                    last_renew = Instant::now();
                    if !leader {
                        leader = true;
                        self.metrics.transitions.inc();
                        self.metrics.is_leader.set(1);
                        tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became leader");
                        tx.send_replace(true);
                    }
                }
                Ok(false) => {
                    if leader {
                        tracing::warn!(lease = %self.config.name, "Lease taken by another candidate; stepping down");
                        leader = false;
                        self.metrics.is_leader.set(0);
                        tx.send_replace(false);
                    }
                }
                Err(err) => {
                    self.metrics.renew_failures.inc();
                    tracing::warn!(error = %err, source = ?std::error::Error::source(&err), "leader election attempt failed");
                    if leader && should_step_down(last_renew.elapsed(), &self.config) {
                        tracing::warn!(lease = %self.config.name, "could not renew the Lease in time; stepping down");
                        leader = false;
                        self.metrics.is_leader.set(0);
                        tx.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = token.cancelled() => break,
                _ = tokio::time::sleep(self.config.renew_interval) => {}
            }
        }
        if leader {
            if let Err(err) = self.release().await {
                tracing::warn!(error = %err, "releasing the Lease failed; it expires on its own");
            }
            self.metrics.is_leader.set(0);
            tx.send_replace(false);
        }
    }

    /// One read-decide-write round. `Ok(true)` when we hold the Lease afterwards.
    pub async fn attempt(&self) -> Result<bool, LeaseError> {
        let name = &self.config.name;
        let current = self
            .api
            .get_opt(name)
            .await
            .map_err(|source| LeaseError::Get {
                namespace: self.config.namespace.clone(),
                name: name.clone(),
                source,
            })?;
        let record = current
            .as_ref()
            .map(|l| LeaseRecord::from_spec(l.spec.as_ref()));
        let now = Timestamp::now();
        let action = decide(record.as_ref(), now, &self.config.identity);
        let Some(spec) = next_spec(
            &action,
            record.as_ref(),
            now,
            &self.config.identity,
            self.config.lease_duration,
        ) else {
            return Ok(false);
        };
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // The fetched resourceVersion makes the write fail if another candidate wrote
                // in between, so two candidates can never both win.
                lease.spec = Some(spec);
                self.api.replace(name, &PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(source) => Err(LeaseError::Write {
                namespace: self.config.namespace.clone(),
                name: name.clone(),
                source,
            }),
        }
    }

    /// Gives the Lease up if we still hold it.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let name = &self.config.name;
        let Some(mut lease) = self
            .api
            .get_opt(name)
            .await
            .map_err(|source| LeaseError::Get {
                namespace: self.config.namespace.clone(),
                name: name.clone(),
                source,
            })?
        else {
            return Ok(());
        };
        let record = LeaseRecord::from_spec(lease.spec.as_ref());
        if record.holder.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(release_spec(&record, Timestamp::now()));
        match self.api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(source) => Err(LeaseError::Write {
                namespace: self.config.namespace.clone(),
                name: name.clone(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "pod-a";
    const OTHER: &str = "pod-b";

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn held_by(holder: &str, renewed: i64, duration: u64, transitions: i32) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.to_string()),
            acquire_time: Some(ts(0)),
            renew_time: Some(ts(renewed)),
            duration: Some(Duration::from_secs(duration)),
            transitions,
        }
    }

    fn config() -> LeaseConfig {
        LeaseConfig {
            name: "ctl".into(),
            namespace: "kubeless".into(),
            identity: ME.into(),
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
        }
    }

    #[test]
    fn missing_lease_is_created_with_zero_transitions() {
        assert_eq!(decide(None, ts(0), ME), LeaseAction::Create);
        let spec = next_spec(
            &LeaseAction::Create,
            None,
            ts(3),
            ME,
            Duration::from_secs(15),
        )
        .unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.acquire_time, Some(MicroTime(ts(3))));
        assert_eq!(spec.renew_time, Some(MicroTime(ts(3))));
    }

    #[test]
    fn free_lease_is_acquired() {
        let free = LeaseRecord {
            holder: None,
            transitions: 4,
            ..LeaseRecord::default()
        };
        assert_eq!(decide(Some(&free), ts(0), ME), LeaseAction::Acquire);
        let spec = next_spec(
            &LeaseAction::Acquire,
            Some(&free),
            ts(0),
            ME,
            Duration::from_secs(15),
        )
        .unwrap();
        assert_eq!(spec.lease_transitions, Some(5));
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
    }

    #[test]
    fn empty_holder_string_counts_as_free() {
        let spec = LeaseSpec {
            holder_identity: Some(String::new()),
            renew_time: Some(MicroTime(ts(0))),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        };
        let rec = LeaseRecord::from_spec(Some(&spec));
        assert_eq!(decide(Some(&rec), ts(1), ME), LeaseAction::Acquire);
    }

    #[test]
    fn live_lease_of_another_is_respected() {
        let rec = held_by(OTHER, 10, 15, 2);
        assert_eq!(
            decide(Some(&rec), ts(20), ME),
            LeaseAction::Wait {
                holder: OTHER.into(),
                remaining: Duration::from_secs(5)
            }
        );
        assert!(
            next_spec(
                &decide(Some(&rec), ts(20), ME),
                Some(&rec),
                ts(20),
                ME,
                Duration::from_secs(15)
            )
            .is_none()
        );
    }

    #[test]
    fn expired_lease_of_another_is_taken_over() {
        let rec = held_by(OTHER, 10, 15, 2);
        // Exactly at expiry the lease is no longer live.
        assert_eq!(decide(Some(&rec), ts(25), ME), LeaseAction::Acquire);
        assert_eq!(decide(Some(&rec), ts(100), ME), LeaseAction::Acquire);
        let spec = next_spec(
            &LeaseAction::Acquire,
            Some(&rec),
            ts(100),
            ME,
            Duration::from_secs(15),
        )
        .unwrap();
        assert_eq!(spec.lease_transitions, Some(3));
        assert_eq!(spec.acquire_time, Some(MicroTime(ts(100))));
    }

    #[test]
    fn own_lease_is_renewed_keeping_acquire_time_and_transitions() {
        let rec = held_by(ME, 10, 15, 7);
        assert_eq!(decide(Some(&rec), ts(12), ME), LeaseAction::Renew);
        // Even past expiry: nobody else took it, so it is still ours to renew.
        assert_eq!(decide(Some(&rec), ts(60), ME), LeaseAction::Renew);
        let spec = next_spec(
            &LeaseAction::Renew,
            Some(&rec),
            ts(12),
            ME,
            Duration::from_secs(15),
        )
        .unwrap();
        assert_eq!(spec.acquire_time, Some(MicroTime(ts(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(ts(12))));
        assert_eq!(spec.lease_transitions, Some(7));
    }

    #[test]
    fn lease_without_times_or_duration_counts_as_expired() {
        let rec = LeaseRecord {
            holder: Some(OTHER.into()),
            ..LeaseRecord::default()
        };
        assert_eq!(decide(Some(&rec), ts(0), ME), LeaseAction::Acquire);
        let rec = LeaseRecord {
            holder: Some(OTHER.into()),
            renew_time: Some(ts(0)),
            duration: None,
            ..LeaseRecord::default()
        };
        assert_eq!(decide(Some(&rec), ts(0), ME), LeaseAction::Acquire);
        // acquire_time is used when renew_time is missing.
        let rec = LeaseRecord {
            holder: Some(OTHER.into()),
            acquire_time: Some(ts(0)),
            duration: Some(Duration::from_secs(15)),
            ..LeaseRecord::default()
        };
        assert!(matches!(
            decide(Some(&rec), ts(5), ME),
            LeaseAction::Wait { .. }
        ));
    }

    #[test]
    fn transitions_count_across_a_handover_sequence() {
        // A creates, B waits, A releases, B acquires, B lets it expire, A takes over.
        let d = Duration::from_secs(15);
        let spec = next_spec(&decide(None, ts(0), ME), None, ts(0), ME, d).unwrap();
        let rec = LeaseRecord::from_spec(Some(&spec));
        assert!(matches!(
            decide(Some(&rec), ts(1), OTHER),
            LeaseAction::Wait { .. }
        ));
        let rec = LeaseRecord::from_spec(Some(&release_spec(&rec, ts(2))));
        assert_eq!(rec.holder, None);
        let action = decide(Some(&rec), ts(3), OTHER);
        assert_eq!(action, LeaseAction::Acquire);
        let rec = LeaseRecord::from_spec(next_spec(&action, Some(&rec), ts(3), OTHER, d).as_ref());
        assert_eq!(rec.transitions, 1);
        let action = decide(Some(&rec), ts(30), ME);
        assert_eq!(action, LeaseAction::Acquire);
        let rec = LeaseRecord::from_spec(next_spec(&action, Some(&rec), ts(30), ME, d).as_ref());
        assert_eq!(rec.transitions, 2);
        assert_eq!(rec.holder.as_deref(), Some(ME));
    }

    #[test]
    fn released_lease_expires_after_one_second() {
        let rec = held_by(ME, 10, 15, 1);
        let released = LeaseRecord::from_spec(Some(&release_spec(&rec, ts(11))));
        assert_eq!(released.duration, Some(Duration::from_secs(1)));
        assert_eq!(released.transitions, 1);
        assert_eq!(decide(Some(&released), ts(11), OTHER), LeaseAction::Acquire);
    }

    #[test]
    fn step_down_before_the_lease_can_expire() {
        let c = config();
        assert!(!should_step_down(Duration::from_secs(5), &c));
        assert!(!should_step_down(Duration::from_secs(9), &c));
        assert!(should_step_down(Duration::from_secs(10), &c));
        assert!(should_step_down(Duration::from_secs(40), &c));
    }
}
