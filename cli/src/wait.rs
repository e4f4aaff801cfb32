//! Waiting after deploy/update until the Function's Ready condition settles.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use kube::Api;
use kubeless_api::{
    Function,
    conditions::{READY, find_condition, reasons},
};

use crate::{
    args::WaitArgs,
    ctx::Ctx,
    error::{Error, Result},
};

/// Reasons of a `Ready=False` condition that will not fix themselves.
const FAILURE_REASONS: &[&str] = &[
    reasons::UNKNOWN_RUNTIME,
    reasons::INVALID_SPEC,
    reasons::CHECKSUM_MISMATCH,
    reasons::DEPENDENCIES_FAILED,
    reasons::BUILD_FAILED,
    reasons::DEPLOYMENT_FAILED,
    reasons::APPLY_FAILED,
];

/// Wait by default on a terminal; `--wait` / `--no-wait` override.
pub fn should_wait(args: &WaitArgs) -> bool {
    if args.no_wait {
        false
    } else {
        args.wait || std::io::stdout().is_terminal()
    }
}

/// What the Function's status says about the generation we wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Ready,
    Failed { reason: String, message: String },
    Pending(String),
}

pub fn phase(f: &Function, generation: Option<i64>) -> Phase {
    let status = f.status.clone().unwrap_or_default();
    let Some(cond) = find_condition(&status.conditions, READY) else {
        return Phase::Pending("waiting for the controller".into());
    };
    let observed = cond.observed_generation.or(status.observed_generation);
    if let (Some(want), Some(seen)) = (generation, observed)
        && seen < want
    {
        return Phase::Pending("waiting for the controller to see the change".into());
    }
    let reason = cond.reason.clone().unwrap_or_default();
    let message = cond.message.clone().unwrap_or_default();
    if cond.is_true() {
        Phase::Ready
    } else if cond.status == kubeless_api::conditions::STATUS_FALSE
        && FAILURE_REASONS.contains(&reason.as_str())
    {
        Phase::Failed { reason, message }
    } else if message.is_empty() {
        Phase::Pending(reason)
    } else {
        Phase::Pending(format!("{reason}: {message}"))
    }
}

/// Polls the Function until Ready (prints "Function <name> is ready") or a failure.
pub async fn wait_ready(
    ctx: &Ctx,
    name: &str,
    generation: Option<i64>,
    timeout: u64,
) -> Result<()> {
    let api: Api<Function> = ctx.api();
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let spinner = ['|', '/', '-', '\\'];
    let mut tick = 0usize;
    let mut last_line = String::new();
    loop {
        let f = api
            .get(name)
            .await
            .map_err(|e| Error::kube(format!("reading function {name}"), e))?;
        let phase = phase(&f, generation);
        match phase {
            Phase::Ready => {
                if tty {
                    eprint!("\r\x1b[K");
                }
                return crate::output::println(&format!("Function {name} is ready"));
            }
            Phase::Failed { reason, message } => {
                if tty {
                    eprint!("\r\x1b[K");
                }
                return Err(Error::FunctionFailed {
                    name: name.to_string(),
                    reason,
                    message,
                });
            }
            Phase::Pending(what) => {
                let elapsed = started.elapsed().as_secs();
                if tty {
                    eprint!(
                        "\r\x1b[K{} Waiting for function {name} ({elapsed}s): {what}",
                        spinner[tick % spinner.len()]
                    );
                    let _ = std::io::stderr().flush();
                } else if what != last_line {
                    eprintln!("Waiting for function {name}: {what}");
                }
                last_line = what;
            }
        }
        if started.elapsed() >= Duration::from_secs(timeout) {
            if tty {
                eprintln!();
            }
            return Err(Error::WaitTimeout {
                name: name.to_string(),
                secs: timeout,
            });
        }
        tick += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use kubeless_api::{Condition, FunctionSpec, FunctionStatus};

    use super::*;

    fn with(cond: Option<Condition>, observed: Option<i64>) -> Function {
        let mut f = Function::new("f", FunctionSpec::default());
        f.status = Some(FunctionStatus {
            observed_generation: observed,
            conditions: cond.into_iter().collect(),
            ..FunctionStatus::default()
        });
        f
    }

    #[test]
    fn phases() {
        assert!(matches!(
            phase(&with(None, None), Some(1)),
            Phase::Pending(_)
        ));
        let ready = Condition::ready(reasons::RECONCILED, "ok");
        assert_eq!(
            phase(&with(Some(ready.clone()), Some(2)), Some(2)),
            Phase::Ready
        );
        // A Ready condition of an older generation does not count.
        assert!(matches!(
            phase(&with(Some(ready), Some(1)), Some(2)),
            Phase::Pending(_)
        ));
        let bad = Condition::not_ready(reasons::CHECKSUM_MISMATCH, "sha differs");
        assert_eq!(
            phase(&with(Some(bad), None), Some(1)),
            Phase::Failed {
                reason: "ChecksumMismatch".into(),
                message: "sha differs".into()
            }
        );
        let progressing = Condition::not_ready(reasons::PROGRESSING, "1/2 ready");
        assert_eq!(
            phase(&with(Some(progressing), None), None),
            Phase::Pending("Progressing: 1/2 ready".into())
        );
    }
}
