//! What every trigger needs and `kubeless-trigger` does not have yet, kept apart from the Redis
//! code so it can move into the runtime as it is: a unit that is one task ([`UnitTask`]), the
//! flags, leader-election split and `serve` every trigger binary has, and a pair's delivery with
//! its metrics ([`PairDelivery`]). Nothing here knows Redis.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubeless_api::conditions::reasons;
use kubeless_api::{DeliveryPolicy, Function, delivery::exponential_backoff};
use kubeless_invoke::{Event, FunctionTarget, Invoker, Outcome, RetryPolicy};
use kubeless_service::{Context, LeaseConfig, ServiceArgs, ThrottledEvents};
use kubeless_trigger::metrics::{PairMetrics, outcome};
use kubeless_trigger::{Delivered, Delivery, Finished, FunctionSelector, Names, Problem};
use kubeless_trigger::{ResolutionArgs, Settings, Source};
use kubeless_trigger::{TriggerMetrics, Unit, UnitContext, UnitState};
use tokio::sync::{Notify, watch};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};

/// Sets a unit's state; a change wakes the control loop so the trigger's status follows at once.
pub struct StateSender(watch::Sender<UnitState>, Arc<Notify>);

impl StateSender {
    pub fn set(&self, s: UnitState) {
        if self
            .0
            .send_if_modified(|old| std::mem::replace(old, s.clone()) != s)
        {
            self.1.notify_one();
        }
    }
}

/// A unit run by one task that returns once its token is cancelled. Stopping gives it `drain`
/// to finish what is in flight; past that the task is dropped, as a crash would.
pub struct UnitTask(
    CancellationToken,
    AbortOnDropHandle<()>,
    watch::Receiver<UnitState>,
    Duration,
);

impl UnitTask {
    pub fn spawn<F, Fut>(ctx: &UnitContext, drain: Duration, body: F) -> Self
    where
        F: FnOnce(StateSender, CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let ((tx, rx), stop) = (
            watch::channel(UnitState::Starting),
            CancellationToken::new(),
        );
        let task = tokio::spawn(body(
            StateSender(tx, Arc::clone(&ctx.changed)),
            stop.clone(),
        ));
        Self(stop, AbortOnDropHandle::new(task), rx, drain)
    }
}

impl Unit for UnitTask {
    fn state(&self) -> UnitState {
        self.2.borrow().clone()
    }

    fn stop(self) -> impl Future<Output = ()> + Send + 'static {
        self.0.cancel();
        async move { drop(tokio::time::timeout(self.3, self.1).await) }
    }
}

/// The flags of an event trigger besides the shared ones.
#[derive(Debug, Clone, clap::Args)]
pub struct TriggerArgs {
    #[command(flatten)]
    pub resolution: ResolutionArgs,
    /// Seconds a stopping unit waits for the event in flight (then it is delivered again later).
    #[arg(long, env = "KUBELESS_DRAIN_TIMEOUT_SECONDS", default_value_t = 30)]
    pub drain_timeout_seconds: u64,
    /// Seconds between full recomputations (watch events trigger one at once).
    #[arg(long, env = "KUBELESS_RESYNC_SECONDS", default_value_t = 30)]
    pub resync_seconds: u64,
}

/// Every replica runs units (the broker spreads the work); the Lease only gates status writes,
/// so the scaffold's whole-process election is switched off.
pub fn split_leader_election(
    mut service: ServiceArgs,
    name: &str,
) -> (ServiceArgs, Option<LeaseConfig>) {
    let lease = service.clone().into_config(name).lease;
    service.leader_elect = false;
    (service, lease)
}

/// What a source is built from.
pub struct Parts {
    pub invoker: Invoker,
    pub events: ThrottledEvents,
    pub metrics: TriggerMetrics,
    /// This pod's name (`POD_NAME`, else `HOSTNAME`, else the service's).
    pub pod: String,
    /// How long a stopping unit waits for the event in flight.
    pub drain_timeout: Duration,
}

/// What a trigger binary runs under [`kubeless_service::run`]: the client, the endpoint
/// resolver, the metrics, the control loop; ready once the caches synced; returns once drained.
pub async fn serve<S: Source>(
    ctx: Context,
    args: TriggerArgs,
    lease: Option<LeaseConfig>,
    names: Names,
    source: impl FnOnce(Parts) -> S,
) -> Result<(), kube::Error> {
    let resync = Duration::from_secs(args.resync_seconds);
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => kube::Client::try_default().await?,
    };
    let namespace = ctx.config.watch_namespace.clone();
    let (resolver, endpoints) = args
        .resolution
        .resolution()
        .build(&client, namespace.as_deref());
    let metrics = TriggerMetrics::register(&ctx.metrics, names);
    let field_manager = format!("kubeless-{}", ctx.name);
    let source = source(Parts {
        invoker: Invoker::new(resolver),
        events: kubeless_trigger::controller::throttled_events(&client, &field_manager),
        metrics: metrics.clone(),
        pod: ["POD_NAME", "HOSTNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|p| !p.is_empty()))
            .unwrap_or_else(|| ctx.name.clone()),
        drain_timeout: Duration::from_secs(args.drain_timeout_seconds),
    });
    let settings = Settings {
        namespace,
        resync: resync.max(Duration::from_secs(1)),
        lease,
    };
    let shutdown = ctx.shutdown.token().clone();
    let mut running =
        kubeless_trigger::run(client, source, settings, metrics, &ctx.metrics, shutdown);
    endpoints.into_iter().for_each(|watch| running.keep(watch));
    running.wait_synced().await;
    ctx.readiness.set_ready(true);
    running.join().await;
    Ok(())
}

/// Where and how a unit delivers, as its plan gives it (a change restarts the unit).
#[derive(Clone, Debug, PartialEq)]
pub struct Destination {
    pub target: FunctionTarget,
    pub policy: DeliveryPolicy,
    /// The dead-letter destination (stream, topic, subject); `None`: failed events are skipped.
    pub dead_letter: Option<String>,
    /// The trigger, which Events and metrics name.
    pub trigger: ObjectReference,
}

/// Where one unit delivers: the runtime's [`Delivery`] of its (trigger, function) pair, with
/// the pair's metrics counted around each event.
pub struct PairDelivery {
    pub to: Destination,
    /// `<namespace>/<function>`.
    pub function: String,
    pub policy: RetryPolicy,
    pub metrics: PairMetrics,
}

impl PairDelivery {
    pub fn new(parts: &Parts, to: &Destination) -> Self {
        let (ns, name) = (&to.target.namespace, &to.target.name);
        let pair = format!("{ns}/{}", to.trigger.name.as_deref().unwrap_or_default());
        Self {
            function: format!("{ns}/{name}"),
            policy: kubeless_trigger::retry_policy(&to.policy),
            metrics: parts.metrics.pair(&pair, name),
            to: to.clone(),
        }
    }

    /// Delivers `event` (`at` names it in logs and Events) until done: `dead_letter` writes it
    /// to the dead-letter destination (a "stream", `noun`) once retries ran out. Stopping the
    /// unit waits for it; [`UnitTask`]'s drain timeout cuts it off.
    pub async fn deliver<F, Fut>(
        &self,
        parts: &Parts,
        event: &Event,
        at: &str,
        noun: &'static str,
        dead_letter: F,
    ) -> Option<Delivered>
    where
        F: FnMut(&str, &Outcome) -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let delivery = Delivery {
            invoker: &parts.invoker,
            target: &self.to.target,
            policy: &self.policy,
            function: &self.function,
            dead_letter: self.to.dead_letter.as_deref(),
            dead_letter_noun: noun,
            regarding: Some((&parts.events, &self.to.trigger)),
            max_wait: Duration::from_secs(30),
        };
        let (started, pair) = (Instant::now(), &self.metrics);
        pair.in_flight.inc();
        let done = delivery
            .deliver(event, at, &CancellationToken::new(), dead_letter)
            .await;
        pair.in_flight.dec();
        let done = done?;
        pair.retry.inc_by(done.retries);
        pair.latency.observe(started.elapsed().as_secs_f64());
        let label = match done.finished {
            Finished::Delivered => outcome::SUCCESS,
            Finished::DeadLettered => outcome::DEAD_LETTER,
            Finished::Skipped => outcome::SKIPPED,
        };
        pair.outcome(label).inc();
        Some(done)
    }
}

/// The live Functions of `ns` a trigger's `functionSelector` selects; a bad selector is the
/// trigger's `InvalidSelector` problem.
pub fn select<'a>(
    selector: &LabelSelector,
    ns: &'a str,
    functions: &'a [Arc<Function>],
) -> Result<impl Iterator<Item = &'a Arc<Function>>, Problem> {
    let selector = FunctionSelector::new(selector).map_err(|e| Problem {
        reason: reasons::INVALID_SELECTOR,
        message: e.to_string(),
    })?;
    Ok(functions.iter().filter(move |f| {
        let meta = &f.metadata;
        meta.deletion_timestamp.is_none()
            && meta.namespace.as_deref() == Some(ns)
            && selector.matches(meta.labels.as_ref().unwrap_or(&Default::default()))
    }))
}

/// Runs `session` until `stop`, and again after each error with backoff (0.5 s doubling to
/// 30 s, from the start again after the unit ran): meanwhile the unit is `Failed
/// { BrokerUnavailable }`. It never gives up: the broker may come back.
pub async fn reconnecting<F, Fut, E>(
    state: &StateSender,
    stop: &CancellationToken,
    what: &str,
    mut session: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut failures = 0;
    while !stop.is_cancelled() {
        let Err(e) = session().await else { return };
        let ran = matches!(*state.0.borrow(), UnitState::Running { .. });
        failures = if ran { 1 } else { failures + 1 };
        tracing::warn!(unit = what, error = %e, "broker unavailable; reconnecting");
        let message = format!("{what}: {e}");
        state.set(UnitState::Failed {
            reason: reasons::BROKER_UNAVAILABLE,
            message,
        });
        let wait = exponential_backoff(
            Duration::from_millis(500),
            2.0,
            Duration::from_secs(30),
            failures,
        );
        stop.run_until_cancelled(tokio::time::sleep(wait)).await;
    }
}
