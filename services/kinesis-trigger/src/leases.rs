//! A Lease per shard (opt-in, `--shard-leases`): several replicas read one trigger's shards
//! without reading any shard twice. Each replica also renews a *member* Lease per trigger, so
//! every replica knows how many are live and takes at most its share,
//! `ceil(readable shards / live members)`; a replica over its share hands shards back one per
//! round, after flushing their checkpoints. Leases live in the trigger's namespace, are owned by
//! the trigger, and reuse the scaffold's pure lease decision ([`kubeless_service::lease`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use kubeless_service::lease::{LeaseRecord, decide, next_spec, release_spec};

/// Label with the trigger's name on every Lease of a trigger.
pub const TRIGGER_LABEL: &str = "kinesistriggers.kubeless.io/trigger";
/// Label telling shard Leases (`shard`) from member Leases (`member`).
pub const KIND_LABEL: &str = "kinesistriggers.kubeless.io/lease";

/// Settings of the shard-lease mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLeaseSettings {
    /// This replica's holder identity (the pod name).
    pub identity: String,
    /// How long a Lease stays valid without renewal; renewed every ListShards round, so it must
    /// be a few times `--list-shards-seconds`.
    pub duration: Duration,
}

/// A Kubernetes name (DNS subdomain) from free text: lowercase, other characters turned to `-`,
/// at most 253 characters.
pub fn object_name(raw: &str) -> String {
    let mut s: String = raw
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    s.truncate(253);
    s.trim_matches(|c| c == '-' || c == '.').to_string()
}

/// The shareable Leases of one trigger, as seen by one replica.
pub struct ShardLeases {
    api: Api<Lease>,
    trigger: String,
    settings: ShardLeaseSettings,
    owner: Option<OwnerReference>,
}

impl ShardLeases {
    pub fn new(
        client: Client,
        namespace: &str,
        trigger: &str,
        settings: ShardLeaseSettings,
        owner: Option<OwnerReference>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            trigger: trigger.to_string(),
            settings,
            owner,
        }
    }

    pub fn shard_lease(&self, shard: &str) -> String {
        object_name(&format!("{}-{shard}", self.trigger))
    }

    fn member_lease(&self) -> String {
        object_name(&format!(
            "{}-member-{}",
            self.trigger, self.settings.identity
        ))
    }

    /// Renews this replica's member Lease.
    pub async fn announce(&self) -> Result<bool, kube::Error> {
        self.hold_named(&self.member_lease(), "member").await
    }

    /// Takes (if free or expired) or renews the Lease of `shard`; `true` when we hold it.
    pub async fn hold(&self, shard: &str) -> Result<bool, kube::Error> {
        self.hold_named(&self.shard_lease(shard), "shard").await
    }

    async fn hold_named(&self, name: &str, kind: &str) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(name).await?;
        let record = current
            .as_ref()
            .map(|l| LeaseRecord::from_spec(l.spec.as_ref()));
        let action = decide(record.as_ref(), now, &self.settings.identity);
        let Some(spec) = next_spec(
            &action,
            record.as_ref(),
            now,
            &self.settings.identity,
            self.settings.duration,
        ) else {
            return Ok(false);
        };
        let pp = PostParams::default();
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        labels: Some(
                            [
                                (TRIGGER_LABEL.to_string(), object_name(&self.trigger)),
                                (KIND_LABEL.to_string(), kind.to_string()),
                            ]
                            .into(),
                        ),
                        owner_references: self.owner.clone().map(|o| vec![o]),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&pp, &lease).await.map(drop)
            }
            // Replace with the resourceVersion we read: of two racing replicas one gets 409.
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api.replace(name, &pp, &lease).await.map(drop)
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease of `shard` up (only if we hold it), so another replica takes it at once.
    pub async fn release(&self, shard: &str) -> Result<(), kube::Error> {
        self.release_named(&self.shard_lease(shard)).await
    }

    /// Gives up the member Lease (on shutdown).
    pub async fn leave(&self) -> Result<(), kube::Error> {
        self.release_named(&self.member_lease()).await
    }

    async fn release_named(&self, name: &str) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(name).await? else {
            return Ok(());
        };
        let record = LeaseRecord::from_spec(lease.spec.as_ref());
        if record.holder.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(release_spec(&record, Timestamp::now()));
        match self.api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Replicas whose member Lease is live (at least 1: us).
    pub async fn live_members(&self) -> Result<usize, kube::Error> {
        let selector = format!(
            "{TRIGGER_LABEL}={},{KIND_LABEL}=member",
            object_name(&self.trigger)
        );
        let now = Timestamp::now();
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let live = list
            .items
            .iter()
            .map(|l| LeaseRecord::from_spec(l.spec.as_ref()))
            .filter(|r| r.holder.is_some() && r.expires_at().is_some_and(|e| e > now))
            .count();
        Ok(live.max(1))
    }
}

/// This replica's share of `readable` shards among `members` live replicas.
pub fn share(readable: usize, members: usize) -> usize {
    readable.div_ceil(members.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_and_shares_cover_every_shard() {
        assert_eq!(
            object_name("Orders-shardId-000000000001"),
            "orders-shardid-000000000001"
        );
        assert_eq!(object_name("t-member-pod_1:x"), "t-member-pod-1-x");
        assert!(object_name(&"a".repeat(400)).len() <= 253);
        assert_eq!(share(4, 2), 2);
        assert_eq!(share(5, 2), 3);
        assert_eq!(share(1, 3), 1);
        assert_eq!(share(0, 2), 0);
        assert_eq!(share(3, 0), 3);
    }
}
