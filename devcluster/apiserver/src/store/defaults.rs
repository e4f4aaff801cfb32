//! What a fresh cluster has: the default namespaces, a `default` ServiceAccount in each, and
//! the default ClusterRoles.

use serde_json::json;

use super::{State, Store, Track, meta, ns_gr};
use crate::registry::GroupResource;

impl Store {
    /// What a fresh real cluster has: the four namespaces, each with its `default`
    /// ServiceAccount, and the default ClusterRoles (`cluster-admin`, `admin`, `edit`, `view`
    /// and the roles they aggregate).
    pub fn ensure_default_namespaces(&self) {
        let Some(def) = self.def(&ns_gr()) else {
            return;
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if self.get(&ns_gr(), "", name).is_none() {
                let _ = self.create(
                    &def,
                    "v1",
                    "",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
                );
            }
            // Namespaces from a data dir written before ServiceAccounts were made.
            let mut st = self.lock();
            self.ensure_default_service_account(&mut st, name);
        }
        let cr = GroupResource::new("rbac.authorization.k8s.io", "clusterroles");
        let Some(def) = self.def(&cr) else { return };
        for role in crate::auth::bootstrap::cluster_roles() {
            let name = meta(&role, "name").unwrap_or_default();
            if self.get(&cr, "", &name).is_none()
                && let Err(e) = self.create(&def, "v1", "", role)
            {
                tracing::warn!("devcluster: ClusterRole {name}: {}", e.message);
            }
        }
    }

    /// The `default` ServiceAccount the real controller-manager creates in every namespace.
    pub(super) fn ensure_default_service_account(&self, st: &mut State, ns: &str) {
        let gr = GroupResource::new("", "serviceaccounts");
        let exists = st
            .objects
            .get(&gr)
            .is_some_and(|m| m.contains_key(&(ns.to_string(), "default".to_string())));
        if exists {
            return;
        }
        if let Some(def) = self.def(&gr) {
            let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": ns}});
            if let Err(e) = self.create_locked(st, &def, "v1", ns, sa, Track::Update) {
                tracing::warn!("devcluster: default ServiceAccount in {ns}: {}", e.message);
            }
        }
    }
}
