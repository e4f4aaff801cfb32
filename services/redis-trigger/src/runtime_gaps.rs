//! What every trigger needs and `kubeless-trigger` does not have yet, kept apart from the Redis
//! code so it can move into the runtime as it is: a unit that is one task ([`UnitTask`]), the
//! leader-election split and the `serve` every trigger binary runs, and the delivery metrics.
//! Nothing here knows Redis.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubeless_invoke::Invoker;
use kubeless_service::{Context, LeaseConfig, ServiceArgs, ThrottledEvents};
use kubeless_trigger::metrics::{PairMetrics, outcome};
use kubeless_trigger::{Delivered, Finished, Names, ResolutionArgs, Settings, Source};
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
}

/// What a trigger binary runs under [`kubeless_service::run`]: the client, the endpoint
/// resolver, the metrics, the control loop; ready once the caches synced; returns once drained.
pub async fn serve<S: Source>(
    ctx: Context,
    resolution: ResolutionArgs,
    resync: Duration,
    lease: Option<LeaseConfig>,
    names: Names,
    source: impl FnOnce(Parts) -> S,
) -> Result<(), kube::Error> {
    let client = match ctx.kube_client.clone() {
        Some(c) => c,
        None => kube::Client::try_default().await?,
    };
    let namespace = ctx.config.watch_namespace.clone();
    let (resolver, endpoints) = resolution.resolution().build(&client, namespace.as_deref());
    let metrics = TriggerMetrics::register(&ctx.metrics, names);
    let field_manager = format!("kubeless-{}", ctx.name);
    let source = source(Parts {
        invoker: Invoker::new(resolver),
        events: kubeless_trigger::controller::throttled_events(&client, &field_manager),
        metrics: metrics.clone(),
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

/// Counts one finished delivery that started at `started`.
pub fn record(pair: &PairMetrics, done: &Delivered, started: Instant) {
    pair.retry.inc_by(done.retries);
    pair.latency.observe(started.elapsed().as_secs_f64());
    let label = match done.finished {
        Finished::Delivered => outcome::SUCCESS,
        Finished::DeadLettered => outcome::DEAD_LETTER,
        Finished::Skipped => outcome::SKIPPED,
    };
    pair.outcome(label).inc();
}
