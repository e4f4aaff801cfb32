//! Start, stop and handover times of the real function-controller binary against devcluster
//! (issue 16, issue 20). Printed, and failing only far past the targets (first reconcile
//! within 1 s, exit within 2 s of SIGTERM, a standby leading within the lease duration):
//! the test fails past 10 s, so a loaded machine does not make it flaky. And a fault (issue 20):
//! the controller SIGKILLed while it creates 200 Functions' objects, the Functions changed while
//! it is down, then started again: every Function converges on its new spec; then SIGKILLed
//! while deleting them all: after a restart nothing is left, no orphan child.
#![cfg(test)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Env, NS};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::json;

/// Fail only past this: ten times the targets.
const LIMIT: Duration = Duration::from_secs(10);
const LEASE_SECONDS: u32 = 4;

fn spawn(env: &Env, identity: &str, leader_elect: bool) -> Child {
    let log = std::fs::File::create(env.dir.path().join(format!("{identity}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_function-controller"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("KUBECONFIG", env.kubeconfig())
        .env("KUBELESS_ADMIN_ADDR", "127.0.0.1:0")
        .env(
            "KUBELESS_LOG_LEVEL",
            std::env::var("FC_TEST_LOG").unwrap_or("info".into()),
        )
        .env("KUBELESS_LEADER_ELECT", leader_elect.to_string())
        .env("KUBELESS_LEASE_DURATION_SECONDS", LEASE_SECONDS.to_string())
        .env("KUBELESS_LEASE_RENEW_SECONDS", "1")
        .env("POD_NAMESPACE", NS)
        .env("POD_NAME", identity)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap()
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM failed");
}

/// Time until the process exits, or `None` if it is still running after [`LIMIT`].
fn time_to_exit(child: &mut Child) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < LIMIT {
        if child.try_wait().unwrap().is_some() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

async fn create_function(env: &Env, name: &str) {
    env.create(json!({
        "apiVersion": "kubeless.io/v1beta1", "kind": "Function",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"handler": "hello.handler", "runtime": "python3.12",
                 "function": "def handler(e, c):\n    return 'hi'\n"}
    }))
    .await;
}

/// Time from `since` until `name` has a Ready condition (its first reconcile wrote status).
async fn time_to_status(env: &Env, name: &str, since: Instant) -> Option<Duration> {
    while since.elapsed() < LIMIT {
        let f = env.fns().get(name).await.unwrap();
        if f.status.is_some_and(|s| !s.conditions.is_empty()) {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn holder(env: &Env) -> Option<String> {
    Api::<Lease>::namespaced(env.client.clone(), NS)
        .get_opt("function-controller")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("> 10 s (still waiting)".into(), |d| {
        format!("{:.2} s", d.as_secs_f64())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_and_sigterm_times() {
    let env = Env::start(false).await;
    let mut report = Vec::new();

    // SIGTERM in the first second of start, several times (it used to hang 4 runs of 4).
    let mut early = Vec::new();
    for (i, delay_ms) in [100u64, 300, 600, 900].into_iter().enumerate() {
        let mut c = spawn(&env, &format!("early-{i}"), false);
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        sigterm(&c);
        early.push((delay_ms, time_to_exit(&mut c)));
    }
    for (delay, t) in &early {
        report.push(format!(
            "SIGTERM {delay} ms after start: exited in {}",
            secs(*t)
        ));
    }

    // First reconcile after start: a Function that exists before the controller.
    create_function(&env, "before-start").await;
    let started = Instant::now();
    let mut c = spawn(&env, "single", false);
    let first = time_to_status(&env, "before-start", started).await;
    report.push(format!("start to first reconcile: {}", secs(first)));
    // A Function created while it runs.
    let created = Instant::now();
    create_function(&env, "while-running").await;
    let react = time_to_status(&env, "while-running", created).await;
    report.push(format!("new Function to its status: {}", secs(react)));
    sigterm(&c);
    let stop = time_to_exit(&mut c);
    report.push(format!("SIGTERM while running: exited in {}", secs(stop)));

    eprintln!("function-controller lifecycle:\n  {}", report.join("\n  "));
    for (delay, t) in &early {
        assert!(
            t.is_some(),
            "SIGTERM {delay} ms after start: still running after 10 s; logs in {}",
            env.dir.path().display()
        );
    }
    assert!(first.is_some(), "no first reconcile within 10 s");
    assert!(react.is_some(), "new Function not reconciled within 10 s");
    assert!(stop.is_some(), "still running 10 s after SIGTERM");
    env.shutdown().await;
}

/// Handover in `env`: two replicas, SIGKILL the leader, time until the standby holds the Lease
/// and reconciles a Function created after the kill; prints the times and asserts them.
async fn handover(env: &Env) {
    let mut report = Vec::new();
    let mut a = spawn(env, "replica-a", true);
    let mut b = spawn(env, "replica-b", true);
    let t0 = Instant::now();
    let mut leader = None;
    while t0.elapsed() < LIMIT && leader.is_none() {
        leader = holder(env).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leader = leader.expect("a replica takes the Lease");
    report.push(format!("first leader after {}", secs(Some(t0.elapsed()))));
    let new_leader = if leader == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    let (dead, standby) = if leader == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    dead.kill().unwrap();
    dead.wait().unwrap();
    let killed = Instant::now();
    create_function(env, "after-kill").await;
    let mut handover = None;
    while killed.elapsed() < LIMIT + Duration::from_secs(u64::from(LEASE_SECONDS)) {
        let h = holder(env).await;
        if h.is_some() && h.as_deref() != Some(leader.as_str()) {
            handover = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.push(format!(
        "leader SIGKILLed: standby took the Lease in {} (lease duration {LEASE_SECONDS} s)",
        secs(handover)
    ));
    let reconciled = time_to_status(env, "after-kill", killed).await;
    report.push(format!(
        "leader SIGKILLed: standby reconciled a new Function in {}",
        secs(reconciled)
    ));
    sigterm(standby);
    let standby_stop = time_to_exit(standby);
    report.push(format!(
        "SIGTERM of the new leader: exited in {}",
        secs(standby_stop)
    ));

    eprintln!("function-controller handover:\n  {}", report.join("\n  "));
    assert!(
        handover.is_some(),
        "no handover within lease duration + 10 s"
    );
    assert!(
        reconciled.is_some(),
        "the new leader did not reconcile; its log:\n{}",
        std::fs::read_to_string(env.dir.path().join(format!("{new_leader}.log")))
            .unwrap_or_default()
    );
    assert!(
        standby_stop.is_some(),
        "new leader still running 10 s after SIGTERM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_times() {
    let env = Env::start(false).await;
    handover(&env).await;
    env.shutdown().await;
}

const FUNCTIONS: usize = 200;

/// How many of the `FUNCTIONS` ConfigMaps hold `code`.
async fn config_maps_with(env: &Env, code: &str) -> usize {
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), NS)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|cm| {
            cm.data
                .as_ref()
                .is_some_and(|d| d.values().any(|v| v.contains(code)))
        })
        .count()
}

async fn count_of<K>(env: &Env) -> usize
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    Api::<K>::namespaced(env.client.clone(), NS)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_reconcile_then_restart_converges_every_function() {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
    let env = Env::start(false).await;
    for i in 0..FUNCTIONS {
        create_function(&env, &format!("f{i}")).await;
    }
    let mut first = spawn(&env, "first", false);
    let started = Instant::now();
    while count_of::<Deployment>(&env).await < FUNCTIONS / 4 && started.elapsed() < LIMIT * 6 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill().unwrap(); // SIGKILL: whatever it was writing stays half done
    first.wait().unwrap();
    let at_kill = count_of::<Deployment>(&env).await;
    eprintln!("controller SIGKILLed with {at_kill} of {FUNCTIONS} Deployments written");
    assert!(at_kill < FUNCTIONS, "the kill must come mid-way");

    // While it is down, every Function gets new code.
    let patch = json!({"spec": {"function": "def handler(e, c):\n    return 'v2'\n"}});
    for i in 0..FUNCTIONS {
        env.fns()
            .patch(
                &format!("f{i}"),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
    let mut second = spawn(&env, "second", false);
    let restarted = Instant::now();
    let converged = loop {
        let fns = env.fns().list(&Default::default()).await.unwrap().items;
        let observed = fns
            .iter()
            .filter(|f| {
                f.status.as_ref().and_then(|s| s.observed_generation) == f.metadata.generation
            })
            .count();
        if observed == FUNCTIONS && config_maps_with(&env, "'v2'").await == FUNCTIONS {
            break Some(restarted.elapsed());
        }
        if restarted.elapsed() > LIMIT * 12 {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "after the restart, {FUNCTIONS} changed Functions converged in {}",
        secs(converged)
    );
    // It used to take 30 s in about half the runs: reconciles waiting on the child caches were
    // not woken when they filled (see function_controller::reconcile::Stores::signal_filled).
    // Normally 1-2 s; failing only past 15 s keeps a loaded machine from making this flaky.
    if converged.is_none_or(|d| d > Duration::from_secs(15)) {
        let log = std::fs::read_to_string(env.dir.path().join("second.log")).unwrap_or_default();
        panic!(
            "{FUNCTIONS} Functions did not converge within 15 s of the restart ({}); its log:\n{log}",
            secs(converged)
        );
    }
    // Exactly one of each child per Function: nothing duplicated or left over by the kill.
    assert_eq!(count_of::<Deployment>(&env).await, FUNCTIONS);
    assert_eq!(count_of::<Service>(&env).await, FUNCTIONS);

    // Deleting: every Function, the controller SIGKILLed once the first 20 are gone.
    // The deletes go out on their own task, so the kill can land while they are still coming.
    let fns = env.fns();
    let deleter = tokio::spawn(async move {
        for i in 0..FUNCTIONS {
            fns.delete(&format!("f{i}"), &Default::default())
                .await
                .unwrap();
        }
    });
    let deleting = Instant::now();
    while env
        .fns()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len()
        > FUNCTIONS / 2
        && deleting.elapsed() < LIMIT * 6
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = second.kill();
    let _ = second.wait();
    deleter.await.unwrap();
    let left = env
        .fns()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    eprintln!("controller SIGKILLed with {left} of {FUNCTIONS} Functions still being deleted");
    assert!(left > 0, "the kill must come before the deletions end");
    let mut third = spawn(&env, "third", false);
    let restarted = Instant::now();
    let gone = loop {
        let functions = env
            .fns()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len();
        let children = count_of::<Deployment>(&env).await
            + count_of::<Service>(&env).await
            + count_of::<k8s_openapi::api::core::v1::ConfigMap>(&env).await;
        if functions == 0 && children == 0 {
            break Some(restarted.elapsed());
        }
        if restarted.elapsed() > LIMIT * 6 {
            eprintln!("{functions} Functions and {children} children left");
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = third.kill();
    let _ = third.wait();
    eprintln!(
        "after the restart, the deletions finished with no orphan in {}",
        secs(gone)
    );
    assert!(
        gone.is_some(),
        "Functions or their children left after the restart; logs in {}",
        env.dir.path().display()
    );
    env.shutdown().await;
}
