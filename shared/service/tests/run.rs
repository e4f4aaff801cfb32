//! `run_inner` end to end without a cluster: admin server, readiness, shutdown, errors.

#![cfg(test)]

use kubeless_service::args::ServiceConfig;
use kubeless_service::telemetry::{LogFormat, TelemetryConfig};
use kubeless_service::{RunError, run_inner};

fn config() -> ServiceConfig {
    ServiceConfig {
        telemetry: TelemetryConfig {
            service_name: "test".into(),
            filter: "info".into(),
            format: LogFormat::Text,
            otlp_endpoint: None,
        },
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        watch_namespace: None,
        lease: None,
        shutdown_grace: std::time::Duration::from_secs(25),
    }
}

#[tokio::test]
async fn service_runs_with_admin_server_and_drains_on_shutdown() {
    let result = run_inner("test", config(), |ctx| async move {
        let base = format!("http://{}", ctx.admin_addr);
        kubeless_service::install_crypto_provider();
        let http = reqwest::Client::new();
        let status = |path: &'static str| {
            let (http, base) = (http.clone(), base.clone());
            async move {
                http.get(format!("{base}{path}"))
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            }
        };
        assert_eq!(status("/healthz").await, 200);
        assert_eq!(status("/readyz").await, 503);
        ctx.readiness.set_ready(true);
        assert_eq!(status("/readyz").await, 200);
        assert_eq!(status("/metrics").await, 200);
        assert!(ctx.leader.is_none());
        // What a signal does; the service then drains and returns.
        ctx.shutdown.trigger();
        ctx.shutdown.cancelled().await;
        Ok::<_, std::io::Error>(())
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test]
async fn service_errors_are_returned() {
    let result = run_inner("test", config(), |_ctx| async {
        Err(std::io::Error::other("boom"))
    })
    .await;
    match result {
        Err(RunError::Service(e)) => assert_eq!(e.to_string(), "boom"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn busy_admin_port_is_an_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = config();
    cfg.admin_addr = taken.local_addr().unwrap();
    let result = run_inner("test", cfg, |_ctx| async { Ok::<_, std::io::Error>(()) }).await;
    assert!(matches!(result, Err(RunError::Admin(_))), "{result:?}");
    // The message names the flag to change.
    let Err(RunError::Admin(e)) = result else {
        unreachable!()
    };
    let text = e.to_string();
    assert!(
        text.contains("--admin-addr") && text.contains("KUBELESS_ADMIN_ADDR"),
        "{text}"
    );
}

#[tokio::test]
async fn a_service_that_does_not_drain_is_abandoned_after_the_grace_period() {
    let mut cfg = config();
    cfg.shutdown_grace = std::time::Duration::from_secs(1);
    let started = std::time::Instant::now();
    let result = run_inner("test", cfg, |ctx| async move {
        ctx.shutdown.trigger();
        // A broker that never answers.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(())
    })
    .await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(RunError::DrainTimedOut(_))),
        "{result:?}"
    );
    assert!(
        took >= std::time::Duration::from_millis(900) && took < std::time::Duration::from_secs(5),
        "{took:?}"
    );
}
