//! `kubeless function ...`.

use std::{collections::BTreeMap, time::Duration};

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
};
use kube::{
    ResourceExt,
    api::{DeleteParams, ListParams, LogParams, PostParams},
};
use kubeless_api::{CronJobTrigger, CronJobTriggerSpec, Function};
use rand::{Rng, distr::Alphanumeric};
use serde::Serialize;

use crate::{
    args::{
        CallArgs, DeployArgs, DescribeArgs, FunctionCmd, FunctionFlags, ListArgs, LogsArgs,
        TopArgs, UpdateArgs,
    },
    ctx::Ctx,
    error::{Error, Result},
    metrics,
    output::{self, ItemList, Table},
    source, spec, wait,
};

pub async fn run(ctx: &Ctx, cmd: FunctionCmd) -> Result<()> {
    match cmd {
        FunctionCmd::Deploy(a) => deploy(ctx, a).await,
        FunctionCmd::Update(a) => update(ctx, a).await,
        FunctionCmd::Call(a) => call(ctx, a).await,
        FunctionCmd::Delete(a) => delete(ctx, &a.name).await,
        FunctionCmd::List(a) => list(ctx, a).await,
        FunctionCmd::Describe(a) => describe(ctx, a).await,
        FunctionCmd::Logs(a) => logs(ctx, a).await,
        FunctionCmd::Top(a) => top(ctx, a).await,
        FunctionCmd::Init(a) => crate::manifest::init(&a.runtime, &a.name, &a.dir),
        FunctionCmd::Run(a) => crate::local::run(&a).await,
    }
}

async fn resolve(flags: &FunctionFlags) -> Result<spec::Resolved> {
    let source = match &flags.from_file {
        Some(from) => Some(source::load(from).await?),
        None => None,
    };
    let deps = match &flags.dependencies {
        Some(from) => Some(source::load_text(from).await?),
        None => None,
    };
    Ok(spec::Resolved { source, deps })
}

pub async fn get_function(ctx: &Ctx, name: &str) -> Result<Function> {
    ctx.api::<Function>().get(name).await.map_err(|e| {
        Error::kube_on(
            format!(
                "Unable to find function {name} in namespace {}",
                ctx.namespace
            ),
            e,
            404,
            format!(
                "`kubeless function ls` lists the functions of this namespace (pick another with -n); \
                 deploy it with `kubeless function deploy {name} ...`"
            ),
        )
    })
}

async fn deploy(ctx: &Ctx, args: DeployArgs) -> Result<()> {
    let DeployArgs {
        name,
        flags,
        schedule,
    } = args;
    spec::validate_deploy(&flags)?;
    if let Some(rt) = &flags.runtime
        && !flags.dryrun
    {
        crate::config::check_runtime(ctx, rt).await?;
    }
    let resolved = resolve(&flags).await?;
    let function = spec::apply(&name, &ctx.namespace, &flags, resolved, None)?;
    kubeless_api::validate::function(&function)?;
    let trigger = schedule.map(|schedule| {
        let mut t = CronJobTrigger::new(
            &name,
            CronJobTriggerSpec {
                schedule,
                function_name: name.clone(),
                ..CronJobTriggerSpec::default()
            },
        );
        t.metadata.namespace = Some(ctx.namespace.clone());
        t.metadata.labels = function.metadata.labels.clone();
        t
    });
    if let Some(t) = &trigger {
        // The schema's rules first (the API server's own message), then what its pattern cannot
        // say (field ranges such as minute 99), with the cron parser the controller uses.
        kubeless_api::validate::cronjob_trigger(t)?;
        if let Err(why) = crate::trigger::check_schedule(&t.spec.schedule) {
            return Err(crate::trigger::schedule_error(&t.spec.schedule, &why));
        }
    }
    if flags.dryrun {
        output::print(&output::render_dryrun(&function, flags.output)?)?;
        if let Some(t) = &trigger {
            output::print(&format!("---\n{}", output::render_dryrun(t, flags.output)?))?;
        }
        return Ok(());
    }
    eprintln!("Deploying function...");
    let created = ctx
        .api::<Function>()
        .create(&PostParams::default(), &function)
        .await
        .map_err(|e| {
            Error::kube_on(
                format!("Cannot deploy function {name} in namespace {}", ctx.namespace),
                e,
                409,
                format!(
                    "function {name} already exists: change it with `kubeless function update {name}` \
                     (same flags), or remove it with `kubeless function delete {name}`"
                ),
            )
        })?;
    eprintln!("Function {name} submitted for deployment");
    if let Some(t) = trigger {
        ctx.api::<CronJobTrigger>()
            .create(&PostParams::default(), &t)
            .await
            .map_err(|e| Error::kube(format!("Failed to create the cronjob trigger {name}"), e))?;
        eprintln!("Cronjob trigger {name} created");
    }
    finish(ctx, &name, created.metadata.generation, &flags).await
}

async fn finish(
    ctx: &Ctx,
    name: &str,
    generation: Option<i64>,
    flags: &FunctionFlags,
) -> Result<()> {
    if wait::should_wait(&flags.wait) {
        wait::wait_ready(ctx, name, generation, flags.wait.wait_timeout).await
    } else {
        eprintln!("Check the deployment status executing 'kubeless function ls {name}'");
        Ok(())
    }
}

async fn update(ctx: &Ctx, args: UpdateArgs) -> Result<()> {
    let UpdateArgs { name, flags } = args;
    if let Some(rt) = &flags.runtime
        && !flags.dryrun
    {
        crate::config::check_runtime(ctx, rt).await?;
    }
    let resolved = resolve(&flags).await?;
    if flags.dryrun {
        let existing = get_function(ctx, &name).await?;
        let mut function = spec::apply(&name, &ctx.namespace, &flags, resolved, Some(existing))?;
        kubeless_api::validate::function(&function)?;
        function.metadata.managed_fields = None;
        return output::print(&output::render_dryrun(&function, flags.output)?);
    }
    eprintln!("Redeploying function...");
    let updated = submit_update(ctx, &name, &flags, resolved).await?;
    eprintln!("Function {name} submitted for deployment");
    finish(ctx, &name, updated.metadata.generation, &flags).await
}

/// Tries of an update whose Function changed between the read and the write.
const UPDATE_TRIES: usize = 5;

/// Applies the flags and resolved source to the stored Function `name` and replaces it. Returns
/// the stored object: its generation is the one a rollout waits for.
///
/// The replace carries the resourceVersion it read, so a concurrent write (the controller's
/// status, which also moves the resourceVersion) makes it 409 Conflict: then the Function is read
/// again and the flags applied to it anew, as kubectl does, a few times.
pub async fn submit_update(
    ctx: &Ctx,
    name: &str,
    flags: &FunctionFlags,
    resolved: spec::Resolved,
) -> Result<Function> {
    let mut tries = 0;
    let mut validated: Option<Function> = None;
    loop {
        tries += 1;
        let existing = get_function(ctx, name).await?;
        let mut function = spec::apply(
            name,
            &ctx.namespace,
            flags,
            resolved.clone(),
            Some(existing),
        )?;
        // Keep the status out of a spec update (it is a subresource).
        function.status = None;
        // The same rules as the CRD schema, checked before anything is sent (once per distinct
        // object: a retry after a controller's status write sends the same spec and metadata).
        let same = validated.as_ref().is_some_and(|v| {
            v.spec == function.spec
                && v.metadata.labels == function.metadata.labels
                && v.metadata.annotations == function.metadata.annotations
        });
        if !same {
            kubeless_api::validate::function(&function)?;
            validated = Some(function.clone());
        }
        match ctx
            .api::<Function>()
            .replace(name, &PostParams::default(), &function)
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 && tries < UPDATE_TRIES => {
                tokio::time::sleep(std::time::Duration::from_millis(10 * tries as u64)).await;
            }
            other => return other.map_err(|e| Error::kube(format!("Failed to update {name}"), e)),
        }
    }
}

pub async fn delete(ctx: &Ctx, name: &str) -> Result<()> {
    ctx.api::<Function>()
        .delete(name, &DeleteParams::default())
        .await
        .map_err(|e| Error::kube(format!("Failed to delete function {name}"), e))?;
    Ok(())
}

/// `/api/v1/namespaces/{ns}/services/{svc}:{port}/proxy/{path}` of the function's Service.
pub async fn proxy_path(ctx: &Ctx, name: &str, path: &str) -> Result<String> {
    let svc =
        ctx.api::<Service>().get(name).await.map_err(|e| {
            Error::kube(format!("Unable to find the service for function {name}"), e)
        })?;
    let first = svc
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p.into_iter().next())
        .ok_or_else(|| Error::usage(format!("The service of function {name} has no port")))?;
    let port = first
        .name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| first.port.to_string());
    Ok(format!(
        "/api/v1/namespaces/{}/services/{name}:{port}/proxy/{path}",
        ctx.namespace
    ))
}

/// `application/json` for JSON objects and arrays (Kubeless only recognised objects).
pub fn content_type_of(data: &str) -> &'static str {
    match serde_json::from_str::<serde_json::Value>(data) {
        Ok(serde_json::Value::Object(_) | serde_json::Value::Array(_)) => "application/json",
        _ => "application/x-www-form-urlencoded",
    }
}

pub fn event_id() -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(11)
        .map(char::from)
        .collect()
}

/// The body of `--data`: the text itself, the content of `@FILE`, or stdin for `-`.
pub fn read_data(data: &str) -> Result<Vec<u8>> {
    if data == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map_err(|source| {
            Error::Read {
                path: "<stdin>".into(),
                source,
            }
        })?;
        Ok(buf)
    } else if let Some(path) = data.strip_prefix('@') {
        std::fs::read(path).map_err(|source| Error::Read {
            path: path.into(),
            source,
        })
    } else {
        Ok(data.as_bytes().to_vec())
    }
}

/// `Name: value` of `--header`.
pub fn parse_header(h: &str) -> Result<(http::HeaderName, http::HeaderValue)> {
    let bad = || {
        Error::usage(format!(
            "Invalid --header {h:?}: write it as \"Name: value\", e.g. -H 'X-Trace: 1'"
        ))
    };
    let (k, v) = h.split_once(':').ok_or_else(bad)?;
    let name = http::HeaderName::from_bytes(k.trim().as_bytes()).map_err(|_| bad())?;
    let value = http::HeaderValue::from_str(v.trim()).map_err(|_| bad())?;
    Ok((name, value))
}

/// Why nobody can answer for the function, when no endpoint of its Service is ready: the
/// Function's Ready condition and its pods' waiting reasons.
async fn no_endpoint_reason(ctx: &Ctx, name: &str) -> Result<Option<String>> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let slices = ctx
        .api::<EndpointSlice>()
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .map_err(|e| Error::kube(format!("reading the endpoints of function {name}"), e))?
        .items;
    let ready = slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
    if ready {
        return Ok(None);
    }
    let mut why = Vec::new();
    if let Ok(f) = ctx.api::<Function>().get(name).await
        && let Some(c) = f
            .status
            .as_ref()
            .and_then(|s| kubeless_api::find_condition(&s.conditions, "Ready"))
    {
        why.push(
            format!(
                "Ready={} {} {}",
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
            .trim_end()
            .to_string(),
        );
    }
    if let Some(p) = wait::pod_problem(&wait::function_pods(ctx, name).await?) {
        why.push(format!("pod {}: {}: {}", p.pod, p.reason, p.message));
    }
    if why.is_empty() {
        why.push("no pod is running".into());
    }
    Ok(Some(why.join("; ")))
}

/// One request to a function, as `function call` and the dashboard's call form send it.
#[derive(Debug, Clone)]
pub struct CallRequest {
    pub method: http::Method,
    /// Extra headers; the Kubeless event headers not given here are filled in.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// `event-namespace` when the headers do not set it.
    pub event_namespace: &'static str,
}

/// What the function answered, and how long the round trip through the proxy took.
#[derive(Debug, Clone)]
pub struct CallAnswer {
    pub status: http::StatusCode,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub elapsed: Duration,
}

/// Sends `req` to function `name` through the API server's service proxy, adding the Kubeless
/// event headers (`event-id`, `event-time`, `event-namespace`, `event-type`) it lacks.
pub async fn send_call(ctx: &Ctx, name: &str, req: CallRequest) -> Result<CallAnswer> {
    let CallRequest {
        method,
        headers,
        body,
        event_namespace,
    } = req;
    let path = proxy_path(ctx, name, "").await?;
    let has = |h: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(h));
    let mut builder = http::Request::builder().method(method).uri(path);
    if !has("event-id") {
        builder = builder.header("event-id", event_id());
    }
    if !has("event-time") {
        builder = builder.header(
            "event-time",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        );
    }
    if !has("event-namespace") {
        builder = builder.header("event-namespace", event_namespace);
    }
    if !has("event-type") {
        let content_type = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| content_type_of(&String::from_utf8_lossy(&body)).to_string());
        builder = builder.header("event-type", content_type);
    }
    for (k, v) in &headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder
        .body(body)
        .map_err(|e| Error::usage(format!("building the request: {e}")))?;
    let started = std::time::Instant::now();
    let response = ctx
        .client
        .send(request.map(kube::client::Body::from))
        .await
        .map_err(|e| Error::kube(format!("Cannot call function {name}"), e))?;
    let status = response.status();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| Error::kube(format!("reading the answer of function {name}"), e))?;
    Ok(CallAnswer {
        status,
        headers,
        body: body.to_vec(),
        elapsed: started.elapsed(),
    })
}

/// A function scaled to zero is woken, as the gateway and the triggers wake it (a new
/// `kubeless.io/last-activity`), and waited for until it has a ready endpoint: the call goes
/// through the API server's service proxy, which would find no pod.
async fn wake_if_at_zero(ctx: &Ctx, name: &str, timeout: Duration) -> Result<()> {
    use kubeless_api::scale::{ScaleState, activity_now};
    let api = ctx.api::<Function>();
    let Ok(f) = api.get(name).await else {
        return Ok(());
    };
    if ScaleState::of(&f) != ScaleState::AtZero {
        return Ok(());
    }
    eprintln!("function {name} is scaled to zero: waking it");
    kubeless_invoke::activity::write_activity(&ctx.client, &ctx.namespace, name, &activity_now())
        .await
        .map_err(|e| Error::kube(format!("waking function {name}"), e))?;
    let started = std::time::Instant::now();
    while started.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let woke = api.get(name).await.is_ok_and(|f| {
            ScaleState::of(&f) != ScaleState::AtZero
                && f.status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0)
                    > 0
        });
        if woke && no_endpoint_reason(ctx, name).await?.is_none() {
            return Ok(());
        }
    }
    Err(Error::NoEndpoint {
        name: name.to_string(),
        why: format!("it was scaled to zero and is still waking after {timeout:?}"),
    })
}

async fn call(ctx: &Ctx, args: CallArgs) -> Result<()> {
    let CallArgs {
        name,
        data,
        method,
        headers,
        include,
        call_timeout,
    } = args;
    // Read the data first: a missing @file is the user's to fix before anything is sent.
    let body = data.as_deref().map(read_data).transpose()?;
    let extra = headers
        .iter()
        .map(|h| parse_header(h))
        .collect::<Result<Vec<_>>>()?;
    let method = match method {
        Some(m) => http::Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| {
            Error::usage(format!("Invalid --method {m:?}: use GET, POST, PUT, ..."))
        })?,
        None if body.is_some() => http::Method::POST,
        None => http::Method::GET,
    };
    // A function without a Service is not deployed at all: say that before looking at pods.
    proxy_path(ctx, &name, "").await?;
    wake_if_at_zero(ctx, &name, Duration::from_secs(call_timeout)).await?;
    if let Some(why) = no_endpoint_reason(ctx, &name).await? {
        return Err(Error::NoEndpoint { name, why });
    }
    // Kubeless's headers for the body, unless a --header names them: the user's win.
    let mut headers: Vec<(String, String)> = match &body {
        None => vec![(
            "event-type".into(),
            "application/x-www-form-urlencoded".into(),
        )],
        Some(b) => {
            let ct = content_type_of(&String::from_utf8_lossy(b));
            vec![
                ("event-type".into(), ct.into()),
                (http::header::CONTENT_TYPE.as_str().into(), ct.into()),
            ]
        }
    };
    headers.retain(|(k, _)| {
        !extra
            .iter()
            .any(|(n, _)| n.as_str().eq_ignore_ascii_case(k))
    });
    headers.extend(extra.iter().map(|(k, v)| {
        (
            k.as_str().to_string(),
            String::from_utf8_lossy(v.as_bytes()).into_owned(),
        )
    }));
    let request = CallRequest {
        method,
        headers,
        body: body.unwrap_or_default(),
        event_namespace: "cli.kubeless.io",
    };
    let answer = tokio::time::timeout(
        Duration::from_secs(call_timeout),
        send_call(ctx, &name, request),
    )
    .await
    .map_err(|_| Error::CallTimeout)??;
    let status = answer.status;
    let text = String::from_utf8_lossy(&answer.body).into_owned();
    if include {
        let mut head_text = format!("HTTP/1.1 {status}\n");
        for (k, v) in &answer.headers {
            head_text.push_str(&format!("{k}: {v}\n"));
        }
        head_text.push('\n');
        output::print(&head_text)?;
    }
    if status == http::StatusCode::REQUEST_TIMEOUT {
        return Err(Error::CallTimeout);
    }
    if status == http::StatusCode::SERVICE_UNAVAILABLE {
        let why = no_endpoint_reason(ctx, &name)
            .await?
            .unwrap_or_else(|| text.trim_end().to_string());
        return Err(Error::NoEndpoint { name, why });
    }
    if !status.is_success() && !include {
        return Err(Error::CallFailed {
            status: status.as_u16(),
            body: text.trim_end().to_string(),
        });
    }
    if text.ends_with('\n') || text.is_empty() {
        output::print(&text)?;
    } else {
        output::println(&text)?;
    }
    if status.is_success() {
        Ok(())
    } else {
        Err(Error::CallFailed {
            status: status.as_u16(),
            body: String::from("(printed above)"),
        })
    }
}

/// STATUS of `function list`: from the function's Deployment, as Kubeless showed it.
pub fn status_of(deployment: Option<&Deployment>) -> String {
    match deployment {
        None => "MISSING: Check controller logs".into(),
        Some(d) => {
            let st = d.status.clone().unwrap_or_default();
            let ready = st.ready_replicas.unwrap_or(0);
            let replicas = st.replicas.unwrap_or(0);
            let word = if ready > 0 { "READY" } else { "NOT READY" };
            format!("{ready}/{replicas} {word}")
        }
    }
}

pub fn list_table(functions: &[Function], deployments: &BTreeMap<String, Deployment>) -> Table {
    let mut t = Table::new(&[
        "NAME",
        "NAMESPACE",
        "HANDLER",
        "RUNTIME",
        "DEPENDENCIES",
        "STATUS",
    ]);
    for f in functions {
        let name = f.name_any();
        let deps = f
            .spec
            .deps
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        t.row(vec![
            name.clone(),
            f.namespace().unwrap_or_default(),
            f.spec.handler.clone().unwrap_or_default(),
            f.spec.runtime.clone().unwrap_or_default(),
            deps,
            status_of(deployments.get(&name)),
        ]);
    }
    t
}

/// The object as the user wrote it: no managed fields.
fn clean(mut f: Function) -> Function {
    f.metadata.managed_fields = None;
    f
}

async fn list(ctx: &Ctx, args: ListArgs) -> Result<()> {
    let ListArgs { names, out } = args;
    let mut functions: Vec<Function> = if names.is_empty() {
        ctx.api::<Function>()
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube("listing functions", e))?
            .items
    } else {
        let mut v = Vec::new();
        for n in &names {
            v.push(get_function(ctx, n).await?);
        }
        v
    };
    functions.sort_by_key(|f| f.name_any());
    let functions: Vec<Function> = functions.into_iter().map(clean).collect();
    if let Some(format) = out {
        return output::print(&output::render(&ItemList::new(functions), format)?);
    }
    let deployments: BTreeMap<String, Deployment> = ctx
        .api::<Deployment>()
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing deployments", e))?
        .items
        .into_iter()
        .map(|d| (d.name_any(), d))
        .collect();
    output::print(&list_table(&functions, &deployments).render())
}

pub fn describe_text(f: &Function) -> String {
    let d = f.spec.deployment_template().ok();
    let container = d
        .and_then(|d| d.spec)
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().next());
    let env: Vec<serde_json::Value> = container
        .as_ref()
        .and_then(|c| c.env.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|e| serde_json::json!({"name": e.name, "value": e.value.unwrap_or_default()}))
        .collect();
    let memory = container
        .as_ref()
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "0".into());
    let labels = serde_json::to_string(&f.labels()).unwrap_or_default();
    let env = serde_json::to_string(&env).unwrap_or_default();
    let status = f
        .status
        .as_ref()
        .and_then(|s| kubeless_api::find_condition(&s.conditions, "Ready"))
        .map(|c| {
            format!(
                "Ready={} {} {}",
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
            .trim_end()
            .to_string()
        })
        .unwrap_or_else(|| "Unknown".into());
    let rows = [
        ("Name", f.name_any()),
        ("Namespace", f.namespace().unwrap_or_default()),
        ("Handler", f.spec.handler.clone().unwrap_or_default()),
        ("Runtime", f.spec.runtime.clone().unwrap_or_default()),
        ("Label", labels),
        ("Envvars", env),
        ("Memory", memory),
        ("Timeout", f.spec.timeout.clone().unwrap_or_default()),
        ("Checksum", f.spec.checksum.clone().unwrap_or_default()),
        ("Status", status),
        (
            "Image",
            f.status
                .as_ref()
                .and_then(|s| s.image.clone())
                .unwrap_or_default(),
        ),
        ("Build", build_text(f)),
        ("Dependencies", f.spec.deps.clone().unwrap_or_default()),
    ];
    let mut out = String::new();
    for (k, v) in rows {
        let key = format!("{k}:");
        out.push_str(format!("{key:<14}{}", v.trim_end()).trim_end());
        out.push('\n');
    }
    out
}

/// The build step's state: `Built <image>`, `Building (Job <job>)`, `Failed: <log tail>`, or
/// `none` (the dependencies are installed at pod start).
fn build_text(f: &Function) -> String {
    let Some(b) = f.status.as_ref().and_then(|s| s.build.as_ref()) else {
        return "none (dependencies installed at pod start)".into();
    };
    let mut text = b.state.clone();
    if let Some(job) = &b.job {
        text.push_str(&format!(" (Job {job})"));
    }
    if b.state == kubeless_api::build::states::FAILED
        && let Some(m) = &b.message
    {
        text.push_str(&format!(": {}", m.replace('\n', " ")));
    }
    text
}

async fn describe(ctx: &Ctx, args: DescribeArgs) -> Result<()> {
    let f = clean(get_function(ctx, &args.name).await?);
    match args.out {
        Some(format) => output::print(&output::render(&f, format)?),
        None => output::print(&describe_text(&f)),
    }
}

/// The log of function `name`'s ready pod (else its first pod), as a stream of bytes: the last
/// `tail` lines and those of the last `since_seconds` when given.
pub async fn log_stream(
    ctx: &Ctx,
    name: &str,
    follow: bool,
    tail: Option<i64>,
    since_seconds: Option<i64>,
) -> Result<std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>>> {
    let pods = ctx
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("function={name}")))
        .await
        .map_err(|e| Error::kube(format!("listing the pods of function {name}"), e))?
        .items;
    let is_ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let pod = pods
        .iter()
        .find(|p| is_ready(p))
        .or_else(|| pods.first())
        .ok_or_else(|| Error::usage(format!("Unable to find a pod of function {name}")))?;
    let has_container = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().any(|c| c.name == name));
    let params = LogParams {
        container: has_container.then(|| name.to_string()),
        follow,
        tail_lines: tail,
        since_seconds,
        ..LogParams::default()
    };
    let pod_name = pod.name_any();
    let stream = ctx
        .api::<Pod>()
        .log_stream(&pod_name, &params)
        .await
        .map_err(|e| Error::kube(format!("reading the log of pod {pod_name}"), e))?;
    Ok(Box::pin(stream))
}

async fn logs(ctx: &Ctx, args: LogsArgs) -> Result<()> {
    let LogsArgs {
        name,
        follow,
        tail,
        since,
    } = args;
    let since_seconds = since.as_deref().map(parse_since).transpose()?;
    let mut lines = log_stream(ctx, &name, follow, tail, since_seconds)
        .await?
        .lines();
    while let Some(line) = lines
        .try_next()
        .await
        .map_err(|e| Error::Stdout(std::io::Error::other(e)))?
    {
        output::println(&line)?;
    }
    Ok(())
}

/// `--since`: `30s`, `5m`, `2h` (or plain seconds) as seconds.
pub fn parse_since(s: &str) -> Result<i64> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "s"),
    };
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => 0,
    };
    match num.parse::<i64>() {
        Ok(n) if n > 0 && mult > 0 => Ok(n * mult),
        _ => Err(Error::usage(format!(
            "Invalid --since {s:?}: give a duration such as 30s, 5m or 2h"
        ))),
    }
}

/// One row of `function top`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TopRow {
    pub name: String,
    pub namespace: String,
    pub method: String,
    pub total_calls: f64,
    pub total_failures: f64,
    pub total_duration_seconds: f64,
    pub avg_duration_seconds: f64,
}

pub fn top_rows(name: &str, namespace: &str, text: &str) -> Vec<TopRow> {
    metrics::parse(text)
        .into_iter()
        .map(|(method, s)| {
            let count = if s.duration_count > 0.0 {
                s.duration_count
            } else {
                s.calls
            };
            TopRow {
                name: name.to_string(),
                namespace: namespace.to_string(),
                method,
                total_calls: s.calls,
                total_failures: s.failures,
                total_duration_seconds: s.duration_sum,
                avg_duration_seconds: if count > 0.0 {
                    s.duration_sum / count
                } else {
                    0.0
                },
            }
        })
        .collect()
}

pub fn top_table(rows: &[TopRow]) -> Table {
    let mut t = Table::new(&[
        "NAME",
        "NAMESPACE",
        "METHOD",
        "TOTAL_CALLS",
        "TOTAL_FAILURES",
        "TOTAL_DURATION_SECONDS",
        "AVG_DURATION_SECONDS",
    ]);
    for r in rows {
        t.row(vec![
            r.name.clone(),
            r.namespace.clone(),
            r.method.clone(),
            format!("{}", r.total_calls),
            format!("{}", r.total_failures),
            format!("{}", r.total_duration_seconds),
            format!("{}", r.avg_duration_seconds),
        ]);
    }
    t
}

pub async fn scrape(ctx: &Ctx, name: &str) -> Result<String> {
    let path = proxy_path(ctx, name, "metrics").await?;
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| Error::usage(format!("building the request: {e}")))?;
    // Kubeless gave each scrape 5 seconds.
    tokio::time::timeout(Duration::from_secs(5), ctx.client.request_text(request))
        .await
        .map_err(|_| Error::usage(format!("scraping function {name}: timed out after 5s")))?
        .map_err(|e| Error::kube(format!("scraping the metrics of function {name}"), e))
}

async fn top(ctx: &Ctx, args: TopArgs) -> Result<()> {
    let TopArgs {
        function,
        out,
        watch,
        interval,
    } = args;
    let names: Vec<String> = match function {
        Some(f) => vec![get_function(ctx, &f).await?.name_any()],
        None => {
            let mut v: Vec<String> = ctx
                .api::<Function>()
                .list(&ListParams::default())
                .await
                .map_err(|e| Error::kube("listing functions", e))?
                .items
                .iter()
                .map(|f| f.name_any())
                .collect();
            v.sort();
            v
        }
    };
    loop {
        let mut rows = Vec::new();
        for name in &names {
            match scrape(ctx, name).await {
                Ok(text) => rows.extend(top_rows(name, &ctx.namespace, &text)),
                Err(e) => eprintln!("WARNING: {}", e.human()),
            }
        }
        let text = match out {
            Some(format) => output::render(&rows, format)?,
            None => top_table(&rows).render(),
        };
        if !watch {
            return output::print(&text);
        }
        // Redraw in place on a terminal; one table after another otherwise.
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            output::print(&format!("\x1b[2J\x1b[H{text}"))?;
        } else {
            output::print(&format!("{text}\n"))?;
        }
        tokio::time::sleep(Duration::from_secs(interval.max(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_and_ids() {
        assert_eq!(content_type_of(r#"{"a":1}"#), "application/json");
        assert_eq!(content_type_of("[1,2]"), "application/json");
        assert_eq!(
            content_type_of("hello"),
            "application/x-www-form-urlencoded"
        );
        assert_eq!(content_type_of("42"), "application/x-www-form-urlencoded");
        let id = event_id();
        assert_eq!(id.len(), 11);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(event_id(), id);
    }

    #[test]
    fn since_durations() {
        assert_eq!(parse_since("30s").ok(), Some(30));
        assert_eq!(parse_since("5m").ok(), Some(300));
        assert_eq!(parse_since("2h").ok(), Some(7200));
        assert_eq!(parse_since("45").ok(), Some(45));
        assert!(parse_since("soon").is_err());
        assert!(parse_since("5d").is_err());
        assert!(parse_since("0s").is_err());
    }

    #[test]
    fn top_average() {
        let rows = top_rows(
            "f",
            "ns",
            "function_calls_total{method=\"GET\"} 4\nfunction_duration_seconds_sum{method=\"GET\"} 2\nfunction_duration_seconds_count{method=\"GET\"} 4\n",
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].avg_duration_seconds, 0.5);
        assert_eq!(rows[0].total_calls, 4.0);
    }

    #[test]
    fn status_column() {
        assert_eq!(status_of(None), "MISSING: Check controller logs");
        let mut d = Deployment {
            status: Some(k8s_openapi::api::apps::v1::DeploymentStatus {
                replicas: Some(2),
                ready_replicas: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(status_of(Some(&d)), "1/2 READY");
        d.status = Some(Default::default());
        assert_eq!(status_of(Some(&d)), "0/0 NOT READY");
    }
}
