//! Basic-auth Secrets, read on demand with `get` (the gateway needs no list/watch on Secrets)
//! and cached for a short time so a request burst costs one API call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::auth::Credentials;

/// How long a Secret read is reused (also for "not found").
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

type Key = (String, String);
type Entry = (Instant, Option<Arc<Credentials>>);

/// Where credentials come from: the API server, or a fixed map (tests, benches).
pub struct SecretStore {
    client: Option<kube::Client>,
    ttl: Duration,
    cache: Mutex<HashMap<Key, Entry>>,
}

impl SecretStore {
    /// Reads Secrets through `client`.
    pub fn kube(client: kube::Client, ttl: Duration) -> Self {
        Self {
            client: Some(client),
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Fixed credentials per (namespace, secret name); never expire.
    pub fn fixed(entries: impl IntoIterator<Item = ((String, String), Credentials)>) -> Self {
        let far = Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600);
        Self {
            client: None,
            ttl: Duration::MAX,
            cache: Mutex::new(
                entries
                    .into_iter()
                    .map(|(k, c)| (k, (far, Some(Arc::new(c)))))
                    .collect(),
            ),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        // Every update is one insert: the map is consistent even after a panic elsewhere.
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The credentials of Secret `name` in `namespace`; `None` when it does not exist or has
    /// none of the known keys.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Credentials>>, kube::Error> {
        let key = (namespace.to_string(), name.to_string());
        if let Some((until, creds)) = self.lock().get(&key)
            && *until > Instant::now()
        {
            return Ok(creds.clone());
        }
        let Some(client) = &self.client else {
            return Ok(None);
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let creds = api.get_opt(name).await?.and_then(|s| {
            let c = Credentials::from_secret_data(&s.data.unwrap_or_default())?;
            for problem in &c.unsupported {
                tracing::warn!(
                    namespace,
                    secret = name,
                    problem,
                    "basic auth entry ignored"
                );
            }
            Some(Arc::new(c))
        });
        let until = Instant::now()
            .checked_add(self.ttl)
            .unwrap_or_else(Instant::now);
        self.lock().insert(key, (until, creds.clone()));
        Ok(creds)
    }
}
