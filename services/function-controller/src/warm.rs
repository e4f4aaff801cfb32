//! The warm pool (the contract is in [`kubeless_api::warm`]): pre-started runtime pods that take
//! a woken Function's code, so its first calls do not wait for its own pod.
//!
//! * [`pool_pod`] and [`specialize_request`] are pure: what a pool pod looks like, and whether
//!   (and with what) a Function can run on one.
//! * [`run_pool`] keeps the configured number of idle pool pods per runtime.
//! * [`claim`] runs on a wake: it takes an idle pod, specializes it and adds it to the Function's
//!   Service with an EndpointSlice of its own. [`release`] removes both once the Function's own
//!   pod is ready (or it went back to zero, or was deleted).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, HTTPGetAction, Pod, PodSpec, Probe, Secret, SecretKeySelector,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kubeless_api::warm::{
    self, EnvPair, FUNCTION_ANNOTATION, POD_ANNOTATION, POOL_LABEL, SLICE_MANAGER, SLICE_SUFFIX,
    STATE_CLAIMED, STATE_IDLE, STATE_LABEL, Source, SpecializeRequest, TOKEN_ENV, TOKEN_KEY,
};
use kubeless_api::{Function, FunctionSpec};
use tokio_util::sync::CancellationToken;

use crate::builders::{self, Desired, INIT_PREPARE, INSTALL_VOLUME, SRC_DIR, SRC_VOLUME};
use crate::config::ControllerConfig;
use kubeless_api::labels::{SERVICE_NAME_LABEL, SLICE_MANAGED_BY_LABEL};

/// Event reason: a woken Function answers from a warm pool pod.
pub const WARM_START: &str = "WarmStart";
/// Event reason: the warm start failed; the Function waits for its own pod.
pub const WARM_START_FAILED: &str = "WarmStartFailed";
/// How long a specialize call may take (the runtime starts its workers in it).
const SPECIALIZE_TIMEOUT: Duration = Duration::from_secs(30);
/// After its EndpointSlice is gone, a released pool pod lives this long, so callers that
/// resolved it just before finish their calls.
const RELEASE_GRACE: Duration = Duration::from_secs(2);
/// How long pods just created may take to show in the cache.
const CREATE_SETTLE: Duration = Duration::from_secs(5);
/// How often the pool is checked besides pod changes.
const POOL_TICK: Duration = Duration::from_secs(5);

/// The warm pool settings (controller flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WarmSettings {
    /// Idle pods to keep per runtime id (`python3.11`).
    pub runtimes: BTreeMap<String, u32>,
    /// Namespace of the pool pods and the token Secret.
    pub namespace: String,
    /// Secret holding the specialize token.
    pub token_secret: String,
}

impl WarmSettings {
    pub fn enabled(&self) -> bool {
        self.runtimes.values().any(|n| *n > 0)
    }
}

/// Parses `--warm-pool`: `python3.11=2,nodejs20` (a runtime without a count keeps one pod).
pub fn parse_pool(s: &str) -> Result<BTreeMap<String, u32>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (runtime, count) = match part.split_once('=') {
            Some((r, n)) => (
                r.trim(),
                n.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n <= 100)
                    .ok_or_else(|| format!("{part:?}: the pod count must be 0 to 100"))?,
            ),
            None => (part, 1),
        };
        if runtime.is_empty() {
            return Err(format!("{part:?}: no runtime"));
        }
        out.insert(runtime.to_string(), count);
    }
    Ok(out)
}

#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error("the runtime {runtime} cannot have a warm pool: {message}")]
    Runtime { runtime: String, message: String },
    #[error("{action} failed")]
    Api {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("the specialize call to pool pod {pod} failed")]
    Call {
        pod: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("pool pod {pod} refused the function (HTTP {status}): {body}")]
    Refused {
        pod: String,
        status: u16,
        body: String,
    },
    #[error("the warm pool Secret {0} has no token")]
    NoToken(String),
}

/// Why a Function does not run on a pool pod (it then waits for its own pod, as without a pool).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ineligible(pub &'static str);

/// The pool pod of `runtime`: the pod a Function of that runtime gets, without a function.
/// Built with the same builder as Functions' Deployments, so image and settings agree.
pub fn pool_pod(
    runtime: &str,
    cfg: &ControllerConfig,
    settings: &WarmSettings,
) -> Result<Pod, WarmError> {
    let label = warm::runtime_label(runtime);
    let shell = Function {
        metadata: ObjectMeta {
            name: Some(format!("pool-{label}")),
            namespace: Some(settings.namespace.clone()),
            uid: Some("warm-pool".into()),
            ..ObjectMeta::default()
        },
        spec: FunctionSpec {
            runtime: Some(runtime.into()),
            handler: Some("pool.pool".into()),
            function: Some(String::new()),
            ..FunctionSpec::default()
        },
        status: None,
    };
    let desired = builders::build(&shell, cfg).map_err(|e| WarmError::Runtime {
        runtime: runtime.into(),
        message: e.to_string(),
    })?;
    let template = desired
        .deployment
        .spec
        .map(|s| s.template)
        .unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    if spec
        .init_containers
        .as_ref()
        .is_some_and(|c| c.iter().any(|c| c.name != INIT_PREPARE))
    {
        return Err(WarmError::Runtime {
            runtime: runtime.into(),
            message: "its functions are compiled before they run".into(),
        });
    }
    spec.init_containers = None;
    spec.affinity = None;
    spec.automount_service_account_token = Some(false);
    spec.volumes = spec
        .volumes
        .map(|v| v.into_iter().filter(|v| v.name == INSTALL_VOLUME).collect());
    let Some(c) = spec.containers.first_mut() else {
        return Err(WarmError::Runtime {
            runtime: runtime.into(),
            message: "no runtime container".into(),
        });
    };
    c.name = "runtime".into();
    let mut env: Vec<EnvVar> = c
        .env
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            !matches!(
                e.name.as_str(),
                "FUNC_HANDLER" | "MOD_NAME" | "FUNC_TIMEOUT"
            )
        })
        .collect();
    env.push(EnvVar {
        name: TOKEN_ENV.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: settings.token_secret.clone(),
                key: TOKEN_KEY.into(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
    });
    c.env = Some(env);
    let port = c
        .ports
        .as_ref()
        .and_then(|p| p.first())
        .map(|p| p.container_port)
        .unwrap_or(8080);
    c.readiness_probe = Some(Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/healthz".into()),
            port: IntOrString::Int(port),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(1),
        ..Probe::default()
    });
    spec.containers.truncate(1);
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("kubeless-pool-{label}-")),
            namespace: Some(settings.namespace.clone()),
            labels: Some(
                [
                    (POOL_LABEL.to_string(), label),
                    (STATE_LABEL.to_string(), STATE_IDLE.to_string()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

fn runtime_container(spec: &PodSpec) -> Option<&Container> {
    spec.containers.first()
}

/// The specialize call that runs `desired`'s function on `pool`, or why it cannot: only a
/// Function whose pod is the pool pod plus its code and plain environment variables qualifies
/// (no dependencies to install, no build image, no volumes, service account or env from
/// Secrets, no runtime settings of its own).
pub fn specialize_request(
    desired: &Desired,
    pool: &PodSpec,
) -> Result<SpecializeRequest, Ineligible> {
    if desired.build.is_some() {
        return Err(Ineligible("it runs a built image"));
    }
    let pod = desired
        .deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .ok_or(Ineligible("no pod template"))?;
    let steps = pod.init_containers.as_deref().unwrap_or_default();
    let [prepare] = steps else {
        return Err(Ineligible(
            "it has dependencies to install or code to compile",
        ));
    };
    if prepare.name != INIT_PREPARE {
        return Err(Ineligible("it has steps before it runs"));
    }
    if pod.containers.len() != 1
        || pod.service_account_name.is_some()
        || pod
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name != SRC_VOLUME && v.name != INSTALL_VOLUME)
    {
        return Err(Ineligible(
            "its pod has its own containers, volumes or service account",
        ));
    }
    let (Some(c), Some(p)) = (runtime_container(pod), runtime_container(pool)) else {
        return Err(Ineligible("no runtime container"));
    };
    if c.image != p.image {
        return Err(Ineligible("its image is not the pool's"));
    }
    if c.env_from.is_some()
        || c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name != INSTALL_VOLUME)
    {
        return Err(Ineligible("it mounts volumes or takes env from elsewhere"));
    }
    let pool_env: HashMap<&str, Option<&str>> = p
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    let mut env = Vec::new();
    for var in c.env.iter().flatten() {
        if var.name == "KUBELESS_LISTEN_ADDRESS" {
            continue;
        }
        let Some(value) = var.value.clone() else {
            return Err(Ineligible("an env var comes from a Secret or a field"));
        };
        if var.name.starts_with("KUBELESS_")
            && var.name != "KUBELESS_INSTALL_VOLUME"
            && pool_env.get(var.name.as_str()) != Some(&Some(value.as_str()))
        {
            return Err(Ineligible(
                "it sets runtime settings (KUBELESS_*) of its own",
            ));
        }
        env.push(EnvPair {
            name: var.name.clone(),
            value,
        });
    }
    let step_env = |name: &str| {
        prepare
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    if step_env("KUBELESS_DEPS_FILE").is_some() {
        return Err(Ineligible("it has dependencies to install"));
    }
    let file = step_env("KUBELESS_FUNC_SOURCE")
        .and_then(|s| s.strip_prefix(&format!("{SRC_DIR}/")).map(str::to_string))
        .ok_or(Ineligible("no function source"))?;
    let content = desired
        .config_map
        .data
        .as_ref()
        .and_then(|d| d.get(&file))
        .cloned()
        .ok_or(Ineligible("no function source"))?;
    Ok(SpecializeRequest {
        env,
        source: Source {
            file,
            content,
            content_type: step_env("KUBELESS_FUNC_CONTENT_TYPE").unwrap_or_else(|| "text".into()),
            checksum: step_env("KUBELESS_FUNC_CHECKSUM").unwrap_or_default(),
        },
    })
}

/// The EndpointSlice that adds `pod_ip:port` to Function `f`'s Service.
pub fn warm_slice(
    f: &Function,
    desired: &Desired,
    pod: (&str, &str),
    pod_ip: &str,
    port: i32,
) -> EndpointSlice {
    let name = f.name_any();
    let owner = f.controller_owner_ref(&());
    let port_name = desired
        .service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| p.name.clone());
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{name}{SLICE_SUFFIX}")),
            namespace: f.namespace(),
            labels: Some(
                [
                    (SERVICE_NAME_LABEL.to_string(), name.clone()),
                    (
                        SLICE_MANAGED_BY_LABEL.to_string(),
                        SLICE_MANAGER.to_string(),
                    ),
                    (
                        kubeless_api::labels::CREATED_BY.to_string(),
                        kubeless_api::labels::CREATED_BY_VALUE.to_string(),
                    ),
                    (kubeless_api::labels::FUNCTION.to_string(), name),
                ]
                .into(),
            ),
            annotations: Some(
                [(POD_ANNOTATION.to_string(), format!("{}/{}", pod.0, pod.1))].into(),
            ),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        address_type: if pod_ip.contains(':') { "IPv6" } else { "IPv4" }.into(),
        endpoints: vec![Endpoint {
            addresses: vec![pod_ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            ..Endpoint::default()
        }],
        ports: Some(vec![EndpointPort {
            name: port_name,
            port: Some(port),
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

/// A pool pod given to a Function.
#[derive(Clone, Debug)]
struct Claimed {
    namespace: String,
    name: String,
}

/// The warm pool's state in the controller.
pub struct Warm {
    pub settings: WarmSettings,
    client: Client,
    pods: reflector::Store<Pod>,
    http: reqwest::Client,
    token: tokio::sync::OnceCell<String>,
    claims: Mutex<HashMap<(String, String), Claimed>>,
    /// Per runtime label: when pods were last created, and the idle count that made.
    created: Mutex<HashMap<String, (Instant, u32)>>,
    /// Released pods waiting out [`RELEASE_GRACE`]: not adopted again.
    released: Mutex<std::collections::HashSet<String>>,
}

impl Warm {
    /// Starts watching the pool pods; `None` when no runtime has a pool.
    pub fn start(client: &Client, settings: WarmSettings) -> Option<(Arc<Self>, PoolWatch)> {
        if !settings.enabled() {
            return None;
        }
        let (pods, writer) = reflector::store();
        let api: Api<Pod> = Api::namespaced(client.clone(), &settings.namespace);
        let stream = watcher(api, watcher::Config::default().labels(POOL_LABEL))
            .default_backoff()
            .reflect(writer);
        let warm = Arc::new(Self {
            settings,
            client: client.clone(),
            pods,
            http: reqwest::Client::builder()
                .timeout(SPECIALIZE_TIMEOUT)
                .build()
                .unwrap_or_default(),
            token: tokio::sync::OnceCell::new(),
            claims: Mutex::new(HashMap::new()),
            created: Mutex::new(HashMap::new()),
            released: Mutex::new(Default::default()),
        });
        Some((warm, PoolWatch(Box::pin(stream))))
    }

    /// The pool pod (`namespace/name`) serving Function `namespace/name`, if any.
    pub fn claimed(&self, namespace: &str, name: &str) -> Option<String> {
        self.claims()
            .get(&(namespace.to_string(), name.to_string()))
            .map(|c| format!("{}/{}", c.namespace, c.name))
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Claimed>> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The specialize token, from the pool Secret (created with a random token when missing).
    async fn token(&self) -> Result<&str, WarmError> {
        self.token
            .get_or_try_init(|| async {
                let api: Api<Secret> =
                    Api::namespaced(self.client.clone(), &self.settings.namespace);
                let read = |s: &Secret| {
                    s.data
                        .as_ref()
                        .and_then(|d| d.get(TOKEN_KEY))
                        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
                        .filter(|t| !t.is_empty())
                };
                let api_err = |action| move |source| WarmError::Api { action, source };
                if let Some(s) = api
                    .get_opt(&self.settings.token_secret)
                    .await
                    .map_err(api_err("reading the warm pool Secret"))?
                {
                    return read(&s)
                        .ok_or_else(|| WarmError::NoToken(self.settings.token_secret.clone()));
                }
                let token = hex::encode(rand::random::<[u8; 32]>());
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.settings.token_secret.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    string_data: Some([(TOKEN_KEY.to_string(), token.clone())].into()),
                    ..Secret::default()
                };
                match api.create(&PostParams::default(), &secret).await {
                    Ok(_) => Ok(token),
                    // Another replica made it first: use theirs.
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        let s = api
                            .get(&self.settings.token_secret)
                            .await
                            .map_err(api_err("reading the warm pool Secret"))?;
                        read(&s)
                            .ok_or_else(|| WarmError::NoToken(self.settings.token_secret.clone()))
                    }
                    Err(source) => Err(WarmError::Api {
                        action: "creating the warm pool Secret",
                        source,
                    }),
                }
            })
            .await
            .map(String::as_str)
    }

    /// Idle, ready pool pods of `runtime`, oldest first.
    fn idle_ready(&self, runtime: &str) -> Vec<Arc<Pod>> {
        let label = warm::runtime_label(runtime);
        let mut pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| {
                p.labels().get(POOL_LABEL) == Some(&label)
                    && p.labels().get(STATE_LABEL).map(String::as_str) == Some(STATE_IDLE)
                    && p.metadata.deletion_timestamp.is_none()
                    && pod_ready(p)
                    && pod_ip(p).is_some()
            })
            .collect();
        pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
        pods
    }
}

/// The pool pod watch, driven by [`run_pool`].
pub struct PoolWatch(
    std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send>,
    >,
);

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_ip(p: &Pod) -> Option<&str> {
    p.status.as_ref().and_then(|s| s.pod_ip.as_deref())
}

/// Keeps the pool filled until `stop`: on every pool pod change and every few seconds.
pub async fn run_pool(
    warm: Arc<Warm>,
    config: Arc<std::sync::RwLock<Arc<ControllerConfig>>>,
    watch: PoolWatch,
    stop: CancellationToken,
) {
    use futures::StreamExt;
    let mut stream = watch.0;
    let mut tick = tokio::time::interval(POOL_TICK);
    // The store holds the whole list once the first one is done.
    let mut listed = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
            ev = stream.next() => match ev {
                Some(Ok(watcher::Event::InitDone)) => listed = true,
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => continue,
                Some(Ok(_)) => {}
                Some(Err(e)) => { tracing::warn!(error = %e, "watching the warm pool pods"); continue; }
                None => return,
            },
        }
        if !listed {
            continue;
        }
        let cfg = config
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone());
        if let Err(e) = fill(&warm, &cfg).await {
            tracing::warn!(error = %e, source = ?std::error::Error::source(&e), "keeping the warm pool filled");
        }
    }
}

/// One pass: creates missing idle pods, deletes surplus ones and adopts claims made before a
/// restart.
async fn fill(warm: &Warm, cfg: &ControllerConfig) -> Result<(), WarmError> {
    warm.token().await?;
    let api: Api<Pod> = Api::namespaced(warm.client.clone(), &warm.settings.namespace);
    let pods = warm.pods.state();
    let live = |p: &&Arc<Pod>| p.metadata.deletion_timestamp.is_none();
    let wanted: BTreeMap<String, (&String, u32)> = warm
        .settings
        .runtimes
        .iter()
        .map(|(r, n)| (warm::runtime_label(r), (r, *n)))
        .collect();
    let mut doomed = Vec::new();
    for (label, (runtime, count)) in &wanted {
        let idle: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(live)
            .filter(|p| {
                p.labels().get(POOL_LABEL) == Some(label)
                    && p.labels().get(STATE_LABEL).map(String::as_str) == Some(STATE_IDLE)
            })
            .collect();
        let have = u32::try_from(idle.len()).unwrap_or(u32::MAX);
        // Pods created moments ago may not be in the cache yet: do not create them twice.
        let pending = warm
            .created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(label)
            .is_some_and(|(at, want)| at.elapsed() < CREATE_SETTLE && have < *want);
        if have < *count && !pending {
            let pod = pool_pod(runtime, cfg, &warm.settings)?;
            for _ in have..*count {
                api.create(&PostParams::default(), &pod)
                    .await
                    .map_err(|source| WarmError::Api {
                        action: "creating a warm pool pod",
                        source,
                    })?;
            }
            warm.created
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(label.clone(), (Instant::now(), *count));
            tracing::info!(runtime = %runtime, created = count - have, "started warm pool pods");
        }
        doomed.extend(idle.iter().skip(*count as usize).map(|p| p.name_any()));
    }
    for p in pods.iter().filter(live) {
        let label = p.labels().get(POOL_LABEL).cloned().unwrap_or_default();
        match p.labels().get(STATE_LABEL).map(String::as_str) {
            Some(STATE_IDLE) if !wanted.contains_key(&label) => doomed.push(p.name_any()),
            // Claimed before a restart: remembered again, so the Function's next reconcile
            // releases it.
            Some(STATE_CLAIMED)
                if !warm
                    .released
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&p.name_any()) =>
            {
                let owner = p
                    .annotations()
                    .get(FUNCTION_ANNOTATION)
                    .and_then(|a| a.split_once('/'));
                match owner {
                    Some((ns, name)) => {
                        warm.claims()
                            .entry((ns.to_string(), name.to_string()))
                            .or_insert_with(|| Claimed {
                                namespace: p.namespace().unwrap_or_default(),
                                name: p.name_any(),
                            });
                    }
                    None => doomed.push(p.name_any()),
                }
            }
            _ => {}
        }
    }
    for name in doomed {
        delete_pod(&api, &name).await?;
    }
    Ok(())
}

async fn delete_pod(api: &Api<Pod>, name: &str) -> Result<(), WarmError> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(WarmError::Api {
            action: "deleting a warm pool pod",
            source,
        }),
    }
}

/// What a claim did, for the Event.
pub struct ClaimOutcome {
    pub pod: String,
    pub ready_ms: f64,
}

/// On a wake: runs `f` on an idle pool pod of its runtime until its own pod is ready. `Ok(None)`
/// when it does not qualify or no pod is free (it then waits for its own pod).
pub async fn claim(
    warm: &Warm,
    f: &Function,
    desired: &Desired,
) -> Result<Option<ClaimOutcome>, WarmError> {
    let runtime = f.spec.runtime.as_deref().unwrap_or("").trim();
    if warm.settings.runtimes.get(runtime).is_none_or(|n| *n == 0) {
        return Ok(None);
    }
    let key = (f.namespace().unwrap_or_default(), f.name_any());
    if warm.claims().contains_key(&key) {
        return Ok(None);
    }
    let started = Instant::now();
    let token = warm.token().await?.to_string();
    let api: Api<Pod> = Api::namespaced(warm.client.clone(), &warm.settings.namespace);
    for pod in warm.idle_ready(runtime) {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let request = match specialize_request(desired, spec) {
            Ok(r) => r,
            Err(Ineligible(why)) => {
                tracing::info!(function = %key.1, namespace = %key.0, why, "not eligible for the warm pool; waiting for its own pod");
                return Ok(None);
            }
        };
        let name = pod.name_any();
        // Take it: the resourceVersion makes a second claimer (another replica) fail.
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": pod.resource_version(),
                "labels": { STATE_LABEL: STATE_CLAIMED },
                "annotations": { FUNCTION_ANNOTATION: format!("{}/{}", key.0, key.1) },
            }
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
            Err(source) => {
                return Err(WarmError::Api {
                    action: "claiming a warm pool pod",
                    source,
                });
            }
        }
        // Recorded at once, so the pool pass does not take it for an orphan.
        warm.claims().insert(
            key.clone(),
            Claimed {
                namespace: warm.settings.namespace.clone(),
                name: name.clone(),
            },
        );
        let ip = pod_ip(&pod).unwrap_or_default().to_string();
        let port = spec
            .containers
            .first()
            .and_then(|c| c.ports.as_ref())
            .and_then(|p| p.first())
            .map(|p| p.container_port)
            .unwrap_or(8080);
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.clone()
        };
        let url = format!("http://{host}:{port}{}", warm::SPECIALIZE_PATH);
        let sent = warm
            .http
            .post(&url)
            .bearer_auth(&token)
            .json(&request)
            .send()
            .await;
        let failure = match sent {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(WarmError::Refused {
                pod: name.clone(),
                status: r.status().as_u16(),
                body: r.text().await.unwrap_or_default(),
            }),
            Err(source) => Some(WarmError::Call {
                pod: name.clone(),
                source,
            }),
        };
        if let Some(e) = failure {
            // A pod that failed once is not given to anyone else.
            warm.claims().remove(&key);
            delete_pod(&api, &name).await?;
            return Err(e);
        }
        let slice = warm_slice(f, desired, (&warm.settings.namespace, &name), &ip, port);
        let slices: Api<EndpointSlice> = Api::namespaced(warm.client.clone(), &key.0);
        let created = match slices.create(&PostParams::default(), &slice).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => slices
                .replace(&slice.name_any(), &PostParams::default(), &slice)
                .await
                .map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(source) = created {
            warm.claims().remove(&key);
            delete_pod(&api, &name).await?;
            return Err(WarmError::Api {
                action: "adding the warm pod to the Function's Service",
                source,
            });
        }
        return Ok(Some(ClaimOutcome {
            pod: name,
            ready_ms: started.elapsed().as_secs_f64() * 1000.0,
        }));
    }
    tracing::info!(function = %key.1, namespace = %key.0, runtime, "no idle warm pool pod; waiting for its own pod");
    Ok(None)
}

/// Takes `f`'s warm pod out of its Service and deletes it (after a grace for calls in flight).
/// Cheap when `f` has none.
pub async fn release(warm: &Arc<Warm>, f: &Function) -> Result<(), WarmError> {
    let key = (f.namespace().unwrap_or_default(), f.name_any());
    let Some(claimed) = warm.claims().get(&key).cloned() else {
        return Ok(());
    };
    let slices: Api<EndpointSlice> = Api::namespaced(warm.client.clone(), &key.0);
    match slices
        .delete(
            &format!("{}{SLICE_SUFFIX}", key.1),
            &DeleteParams::default(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(source) => {
            return Err(WarmError::Api {
                action: "removing the warm pod from the Function's Service",
                source,
            });
        }
    }
    warm.claims().remove(&key);
    tracing::info!(function = %key.1, namespace = %key.0, pod = %claimed.name, "released the warm pool pod");
    let api: Api<Pod> = Api::namespaced(warm.client.clone(), &claimed.namespace);
    warm.released
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(claimed.name.clone());
    let released = Arc::clone(warm);
    tokio::spawn(async move {
        tokio::time::sleep(RELEASE_GRACE).await;
        if let Err(e) = delete_pod(&api, &claimed.name).await {
            tracing::warn!(error = %e, pod = %claimed.name, "deleting a released warm pool pod");
        }
        // Gone from the cache by the time the set forgets it.
        tokio::time::sleep(RELEASE_GRACE).await;
        released
            .released
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&claimed.name);
    });
    Ok(())
}

#[cfg(test)]
mod tests;
