//! Watching the store: the change events, and subscriptions that replay the kept history
//! before the live channel.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;

use super::{State, Store};
use crate::registry::GroupResource;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct WatchEvent {
    pub rv: u64,
    pub gr: GroupResource,
    pub namespace: String,
    pub etype: EventType,
    pub obj: Arc<Value>,
    /// The object before this change, so selector watchers see objects leave.
    pub prev: Option<Arc<Value>>,
    /// The object serialized once, shared by every watcher that sends it as is.
    pub encoded: std::sync::OnceLock<bytes::Bytes>,
}

/// The resourceVersion asked for is older than the history kept (410 Gone).
#[derive(Debug, Clone, Copy)]
pub struct TooOld;

/// Changes to replay, then the live channel.
pub type Subscription = (Vec<Arc<WatchEvent>>, broadcast::Receiver<Arc<WatchEvent>>);

impl Store {
    /// Subscribes to changes after `from_rv`; returns the changes already in history.
    /// Err(TooOld) when `from_rv` is older than the history kept (410 Gone).
    pub fn watch_from(&self, gr: &GroupResource, from_rv: u64) -> Result<Subscription, TooOld> {
        let st = self.lock();
        let rx = self.events.subscribe();
        let replay = Self::history_since(&st, gr, from_rv)?;
        Ok((replay, rx))
    }

    /// Changes after `from_rv` still in history (used after a lagging receiver).
    pub fn replay_since(
        &self,
        gr: &GroupResource,
        from_rv: u64,
    ) -> Result<Vec<Arc<WatchEvent>>, TooOld> {
        let st = self.lock();
        Self::history_since(&st, gr, from_rv)
    }

    fn history_since(
        st: &State,
        gr: &GroupResource,
        from_rv: u64,
    ) -> Result<Vec<Arc<WatchEvent>>, TooOld> {
        if from_rv < st.history_floor {
            return Err(TooOld);
        }
        let start = st.history.partition_point(|e| e.rv <= from_rv);
        Ok(st
            .history
            .range(start..)
            .filter(|e| e.gr == *gr)
            .cloned()
            .collect())
    }

    /// Current objects plus a subscription starting right after them.
    pub fn snapshot_and_watch(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<WatchEvent>>) {
        let st = self.lock();
        let rx = self.events.subscribe();
        let items = st
            .objects
            .get(gr)
            .map(|m| {
                m.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|x| x == n))
                    .map(|(_, o)| o.clone())
                    .collect()
            })
            .unwrap_or_default();
        (items, st.rv, rx)
    }
}
