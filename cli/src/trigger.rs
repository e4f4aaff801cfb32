//! `kubeless trigger http|cronjob|kafka|nats|kinesis ...`.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::{
    Resource, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use kubeless_api::{
    Condition, CronJobTrigger, CronJobTriggerSpec, Function, HttpTrigger, HttpTriggerSpec,
    KafkaTrigger, KafkaTriggerSpec, KinesisTrigger, KinesisTriggerSpec, NatsTrigger,
    NatsTriggerSpec,
    conditions::{READY, find_condition},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::{
    args::{
        CronjobArgs, CronjobCmd, DryrunArgs, HttpCmd, HttpCreateArgs, HttpUpdateArgs, KafkaCmd,
        KinesisCmd, KinesisTriggerArgs, NatsCmd, OutArgs, SelectorTriggerArgs, TriggerCmd,
    },
    ctx::Ctx,
    error::{Error, Result},
    output::{self, ItemList, Table},
    selector,
};

pub async fn run(ctx: &Ctx, cmd: TriggerCmd) -> Result<()> {
    match cmd {
        TriggerCmd::Http(c) => match c {
            HttpCmd::Create(a) => http_create(ctx, a).await,
            HttpCmd::Update(a) => http_update(ctx, a).await,
            HttpCmd::Delete(a) => delete::<HttpTrigger>(ctx, &a.name, "HTTP trigger").await,
            HttpCmd::Describe(a) => describe::<HttpTrigger>(ctx, a, "HTTP trigger", http_url).await,
            HttpCmd::List(a) => list::<HttpTrigger>(ctx, a, http_table).await,
        },
        TriggerCmd::Cronjob(c) => match c {
            CronjobCmd::Create(a) => cronjob(ctx, a, true).await,
            CronjobCmd::Update(a) => cronjob(ctx, a, false).await,
            CronjobCmd::Delete(a) => {
                delete::<CronJobTrigger>(ctx, &a.name, "cronjob trigger").await
            }
            CronjobCmd::Describe(a) => {
                describe::<CronJobTrigger>(ctx, a, "cronjob trigger", no_url).await
            }
            CronjobCmd::List(a) => list::<CronJobTrigger>(ctx, a, cronjob_table).await,
        },
        TriggerCmd::Kafka(c) => match c {
            KafkaCmd::Create(a) => kafka(ctx, a, true).await,
            KafkaCmd::Update(a) => kafka(ctx, a, false).await,
            KafkaCmd::Delete(a) => delete::<KafkaTrigger>(ctx, &a.name, "Kafka trigger").await,
            KafkaCmd::Describe(a) => {
                describe::<KafkaTrigger>(ctx, a, "Kafka trigger", no_url).await
            }
            KafkaCmd::List(a) => list::<KafkaTrigger>(ctx, a, kafka_table).await,
        },
        TriggerCmd::Nats(c) => match c {
            NatsCmd::Create(a) => nats(ctx, a, true).await,
            NatsCmd::Update(a) => nats(ctx, a, false).await,
            NatsCmd::Delete(a) => delete::<NatsTrigger>(ctx, &a.name, "NATS trigger").await,
            NatsCmd::Describe(a) => describe::<NatsTrigger>(ctx, a, "NATS trigger", no_url).await,
            NatsCmd::List(a) => list::<NatsTrigger>(ctx, a, nats_table).await,
            NatsCmd::Publish(a) => crate::brokers::nats_publish(a).await,
        },
        TriggerCmd::Kinesis(c) => match c {
            KinesisCmd::Create(a) => kinesis(ctx, a, true).await,
            KinesisCmd::Update(a) => kinesis(ctx, a, false).await,
            KinesisCmd::Delete(a) => {
                delete::<KinesisTrigger>(ctx, &a.name, "Kinesis trigger").await
            }
            KinesisCmd::Describe(a) => {
                describe::<KinesisTrigger>(ctx, a, "Kinesis trigger", no_url).await
            }
            KinesisCmd::List(a) => list::<KinesisTrigger>(ctx, a, kinesis_table).await,
            KinesisCmd::Publish(a) => crate::brokers::kinesis_publish(ctx, a).await,
            KinesisCmd::CreateStream(a) => crate::brokers::kinesis_create_stream(ctx, a).await,
        },
    }
}

trait Kind:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + kube::CustomResourceExt
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}
impl<K> Kind for K where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + kube::CustomResourceExt
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

/// Prints the object (`--dryrun`), creates it, or replaces it.
async fn write<K: Kind>(
    ctx: &Ctx,
    mut obj: K,
    create: bool,
    dry: DryrunArgs,
    what: &str,
) -> Result<()> {
    let name = obj.name_any();
    obj.meta_mut().managed_fields = None;
    // Refused here with the API server's own message, before anything is sent.
    kubeless_api::validate::resource(&obj, &name)?;
    if dry.dryrun {
        return output::print(&output::render_dryrun(&obj, dry.output)?);
    }
    let api = ctx.api::<K>();
    if create {
        let sub = subcommand(what);
        api.create(&PostParams::default(), &obj)
            .await
            .map_err(|e| {
                Error::kube_on(
                    format!("Cannot create {what} {name} in namespace {}", ctx.namespace),
                    e,
                    409,
                    format!(
                        "a {what} with this name exists: change it with `kubeless trigger {sub} update {name}`, \
                         or delete it with `kubeless trigger {sub} delete {name}`"
                    ),
                )
            })?;
        eprintln!("{what} {name} created in namespace {}", ctx.namespace);
    } else {
        api.replace(&name, &PostParams::default(), &obj)
            .await
            .map_err(|e| Error::kube(format!("Failed to update {what} {name}"), e))?;
        eprintln!("{what} {name} updated");
    }
    Ok(())
}

/// `http` for "HTTP trigger": the `kubeless trigger` subcommand of a kind.
fn subcommand(what: &str) -> String {
    what.split(' ').next().unwrap_or(what).to_lowercase()
}

async fn get<K: Kind>(ctx: &Ctx, name: &str, what: &str) -> Result<K> {
    let sub = subcommand(what);
    ctx.api::<K>().get(name).await.map_err(|e| {
        Error::kube_on(
            format!(
                "Unable to find {what} {name} in namespace {}",
                ctx.namespace
            ),
            e,
            404,
            format!("`kubeless trigger {sub} list` shows the {what}s of this namespace (-n)"),
        )
    })
}

async fn delete<K: Kind>(ctx: &Ctx, name: &str, what: &str) -> Result<()> {
    ctx.api::<K>()
        .delete(name, &DeleteParams::default())
        .await
        .map_err(|e| Error::kube(format!("Failed to delete {what} {name}"), e))?;
    Ok(())
}

async fn list<K: Kind>(ctx: &Ctx, args: OutArgs, table: fn(&[K]) -> Table) -> Result<()> {
    let mut items = ctx
        .api::<K>()
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing triggers", e))?
        .items;
    items.sort_by_key(|i| i.name_any());
    for i in &mut items {
        i.meta_mut().managed_fields = None;
    }
    match args.out {
        Some(format) => output::print(&output::render(&ItemList::new(items), format)?),
        None => output::print(&table(&items).render()),
    }
}

async fn check_function(ctx: &Ctx, name: &str) -> Result<()> {
    ctx.api::<Function>().get(name).await.map_err(|e| {
        Error::kube_on(
            format!(
                "Unable to find Function {name} in namespace {}",
                ctx.namespace
            ),
            e,
            404,
            format!("deploy it first with `kubeless function deploy {name} ...`, or check the name with `kubeless function ls`"),
        )
    })?;
    Ok(())
}

/// Text of `trigger <kind> describe`: the object's spec, its URL (HTTP) and every condition
/// with its reason and message.
fn describe_text<K: Kind>(obj: &K, what: &str, url: Option<String>) -> Result<String> {
    let value = serde_json::to_value(obj).map_err(|e| Error::Encode {
        format: "json",
        message: e.to_string(),
    })?;
    let mut out = format!(
        "Name:         {}\nNamespace:    {}\nKind:         {what}\n",
        obj.name_any(),
        obj.namespace().unwrap_or_default()
    );
    if let Some(url) = url {
        out.push_str(&format!("URL:          {url}\n"));
    }
    out.push_str("Spec:\n");
    let spec = output::to_yaml(&value["spec"])?;
    for line in spec.lines() {
        out.push_str(&format!("  {line}\n"));
    }
    out.push_str("Conditions:\n");
    let conditions: Vec<Condition> = value
        .get("status")
        .and_then(|s| s.get("conditions"))
        .cloned()
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap_or_default();
    if conditions.is_empty() {
        out.push_str("  (none yet: is the controller of this trigger kind running?)\n");
    }
    for c in &conditions {
        let line = format!(
            "  {}={} {} {}",
            c.type_,
            c.status,
            c.reason.as_deref().unwrap_or(""),
            c.message.as_deref().unwrap_or("")
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out)
}

async fn describe<K: Kind>(
    ctx: &Ctx,
    args: crate::args::TriggerDescribeArgs,
    what: &str,
    url: fn(&K) -> Option<String>,
) -> Result<()> {
    let mut obj: K = get(ctx, &args.name, what).await?;
    obj.meta_mut().managed_fields = None;
    match args.out {
        Some(format) => output::print(&output::render(&obj, format)?),
        None => output::print(&describe_text(&obj, what, url(&obj))?),
    }
}

fn no_url<K>(_: &K) -> Option<String> {
    None
}

/// Where an HTTP trigger answers: `http(s)://<host><path>` (the Ingress's rule).
pub fn http_url(t: &HttpTrigger) -> Option<String> {
    let host = t.spec.host_name.as_deref().filter(|h| !h.is_empty())?;
    let tls = t.spec.tls == Some(true) || t.spec.tls_secret.is_some();
    let path = t.spec.path.as_deref().unwrap_or("");
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Some(format!(
        "{}://{host}{path}",
        if tls { "https" } else { "http" }
    ))
}

fn new_meta<K: Kind>(obj: &mut K, ctx: &Ctx) {
    obj.meta_mut().namespace = Some(ctx.namespace.clone());
}

/// READY column: `True`, or the status with the reason why not (`False (FunctionNotFound)`).
pub fn ready(conditions: &[Condition]) -> String {
    match find_condition(conditions, READY) {
        None => "Unknown".into(),
        Some(c) if c.is_true() => c.status.clone(),
        Some(c) => match c.reason.as_deref().filter(|r| !r.is_empty()) {
            Some(reason) => format!("{} ({reason})", c.status),
            None => c.status.clone(),
        },
    }
}

// ----------------------------------------------------------------------- http

/// Kubeless's default host for nginx: `<function>.<API server host>.nip.io`.
pub fn default_host(function: &str, api_host: &str) -> String {
    format!("{function}.{api_host}.nip.io")
}

async fn http_create(ctx: &Ctx, a: HttpCreateArgs) -> Result<()> {
    let HttpCreateArgs {
        name,
        function_name,
        path,
        hostname,
        enable_tls_acme,
        gateway,
        basic_auth_secret,
        tls_secret,
        cors_enable,
        dry,
    } = a;
    if !dry.dryrun {
        check_function(ctx, &function_name).await?;
    }
    let host_name = match hostname {
        Some(h) => Some(h),
        None if gateway == "nginx" => Some(default_host(&function_name, &ctx.api_host)),
        None => None,
    };
    let mut t = HttpTrigger::new(
        &name,
        HttpTriggerSpec {
            function_name,
            host_name,
            tls: enable_tls_acme.then_some(true),
            tls_secret,
            path,
            basic_auth_secret,
            gateway: Some(gateway),
            cors_enable: cors_enable.then_some(true),
        },
    );
    new_meta(&mut t, ctx);
    let url = http_url(&t);
    write(ctx, t, true, dry, "HTTP trigger").await?;
    if let (Some(url), false) = (url, dry.dryrun) {
        eprintln!("The function answers at {url} once the Ingress controller serves the route");
    }
    Ok(())
}

async fn http_update(ctx: &Ctx, a: HttpUpdateArgs) -> Result<()> {
    let HttpUpdateArgs {
        name,
        function_name,
        path,
        hostname,
        enable_tls_acme,
        gateway,
        basic_auth_secret,
        tls_secret,
        dry,
    } = a;
    let mut t: HttpTrigger = get(ctx, &name, "HTTP trigger").await?;
    if let Some(f) = function_name {
        if !dry.dryrun {
            check_function(ctx, &f).await?;
        }
        t.spec.function_name = f;
    }
    if path.is_some() {
        t.spec.path = path;
    }
    if hostname.is_some() {
        t.spec.host_name = hostname;
    }
    if enable_tls_acme {
        t.spec.tls = Some(true);
        t.spec.tls_secret = None;
    }
    if tls_secret.is_some() {
        t.spec.tls_secret = tls_secret;
        t.spec.tls = None;
    }
    if !gateway.is_empty() {
        t.spec.gateway = Some(gateway);
    }
    if basic_auth_secret.is_some() {
        t.spec.basic_auth_secret = basic_auth_secret;
    }
    t.status = None;
    write(ctx, t, false, dry, "HTTP trigger").await
}

fn http_table(items: &[HttpTrigger]) -> Table {
    let mut t = Table::new(&[
        "NAME",
        "NAMESPACE",
        "FUNCTION NAME",
        "HOST",
        "PATH",
        "GATEWAY",
        "TLS",
        "READY",
    ]);
    for i in items {
        let tls = match (&i.spec.tls_secret, i.spec.tls) {
            (Some(s), _) => format!("secret:{s}"),
            (None, Some(true)) => "acme".into(),
            _ => String::new(),
        };
        t.row(vec![
            i.name_any(),
            i.namespace().unwrap_or_default(),
            i.spec.function_name.clone(),
            i.spec.host_name.clone().unwrap_or_default(),
            i.spec.path.clone().unwrap_or_default(),
            i.spec.gateway.clone().unwrap_or_default(),
            tls,
            ready(&i.status.clone().unwrap_or_default().conditions),
        ]);
    }
    t
}

// -------------------------------------------------------------------- cronjob

fn payload(a: &CronjobArgs) -> Result<Option<Value>> {
    let (raw, what) = match (&a.payload, &a.payload_from_file) {
        (Some(p), _) => (p.clone(), "--payload".to_string()),
        (None, Some(path)) => (
            std::fs::read_to_string(path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?,
            path.display().to_string(),
        ),
        (None, None) => return Ok(None),
    };
    serde_json::from_str(&raw)
        .map(Some)
        .map_err(|source| Error::Json {
            what: format!("payload JSON in {what}"),
            source,
        })
}

/// Checks a cron schedule before it is sent: five fields (six with a leading seconds field, for
/// the controller's scheduler mode) or an `@hourly`-style alias, each field in range. The
/// same parser (croner) as the cronjob-trigger-controller.
pub fn check_schedule(s: &str) -> Result<(), String> {
    use croner::parser::{CronParser, Seconds, Year};
    let text = s.trim();
    if text.is_empty() {
        return Err("the schedule is empty".into());
    }
    let normalized = if text.eq_ignore_ascii_case("@midnight") {
        "@daily"
    } else {
        text
    };
    let fields = normalized.split_whitespace().count();
    if !normalized.starts_with('@') && !(5..=6).contains(&fields) {
        return Err(format!(
            "it has {fields} fields, a schedule has 5 (minute hour day-of-month month day-of-week)"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
        .parse(normalized)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A usage error for a bad schedule, naming the flag and an example.
pub fn schedule_error(s: &str, why: &str) -> Error {
    Error::usage(format!(
        "Invalid cron schedule {s:?} in --schedule: {why}. Use five fields, e.g. \"*/5 * * * *\" (every 5 minutes) or \"@hourly\""
    ))
}

async fn cronjob(ctx: &Ctx, a: CronjobArgs, create: bool) -> Result<()> {
    let body = payload(&a)?;
    let CronjobArgs {
        name,
        schedule,
        function,
        dry,
        ..
    } = a;
    if let Some(s) = &schedule
        && let Err(why) = check_schedule(s)
    {
        return Err(schedule_error(s, &why));
    }
    if let Some(f) = &function
        && !dry.dryrun
    {
        check_function(ctx, f).await?;
    }
    let t = if create {
        let schedule = schedule.ok_or_else(|| Error::usage("--schedule is required"))?;
        let function_name = function.ok_or_else(|| Error::usage("--function is required"))?;
        let mut t = CronJobTrigger::new(
            &name,
            CronJobTriggerSpec {
                schedule,
                function_name,
                payload: body,
                ..CronJobTriggerSpec::default()
            },
        );
        new_meta(&mut t, ctx);
        t
    } else {
        let mut t: CronJobTrigger = get(ctx, &name, "cronjob trigger").await?;
        if let Some(s) = schedule {
            t.spec.schedule = s;
        }
        if let Some(f) = function {
            t.spec.function_name = f;
        }
        if body.is_some() {
            t.spec.payload = body;
        }
        t.status = None;
        t
    };
    write(ctx, t, create, dry, "cronjob trigger").await
}

fn cronjob_table(items: &[CronJobTrigger]) -> Table {
    let mut t = Table::new(&["NAME", "NAMESPACE", "SCHEDULE", "FUNCTION NAME", "READY"]);
    for i in items {
        t.row(vec![
            i.name_any(),
            i.namespace().unwrap_or_default(),
            i.spec.schedule.clone(),
            i.spec.function_name.clone(),
            ready(&i.status.clone().unwrap_or_default().conditions),
        ]);
    }
    t
}

// ---------------------------------------------------------------- kafka, nats

async fn kafka(ctx: &Ctx, a: SelectorTriggerArgs, create: bool) -> Result<()> {
    let SelectorTriggerArgs {
        name,
        trigger_topic,
        function_selector,
        dry,
    } = a;
    let selector = function_selector
        .as_deref()
        .map(selector::parse)
        .transpose()?;
    let t = if create {
        let mut t = KafkaTrigger::new(
            &name,
            KafkaTriggerSpec {
                topic: trigger_topic.ok_or_else(|| Error::usage("--trigger-topic is required"))?,
                function_selector: selector
                    .ok_or_else(|| Error::usage("--function-selector is required"))?,
                ..KafkaTriggerSpec::default()
            },
        );
        new_meta(&mut t, ctx);
        t
    } else {
        let mut t: KafkaTrigger = get(ctx, &name, "Kafka trigger").await?;
        if let Some(topic) = trigger_topic {
            t.spec.topic = topic;
        }
        if let Some(s) = selector {
            t.spec.function_selector = s;
        }
        t.status = None;
        t
    };
    write(ctx, t, create, dry, "Kafka trigger").await
}

async fn nats(ctx: &Ctx, a: SelectorTriggerArgs, create: bool) -> Result<()> {
    let SelectorTriggerArgs {
        name,
        trigger_topic,
        function_selector,
        dry,
    } = a;
    let selector = function_selector
        .as_deref()
        .map(selector::parse)
        .transpose()?;
    let t = if create {
        let mut t = NatsTrigger::new(
            &name,
            NatsTriggerSpec {
                topic: trigger_topic.ok_or_else(|| Error::usage("--trigger-topic is required"))?,
                function_selector: selector
                    .ok_or_else(|| Error::usage("--function-selector is required"))?,
                ..NatsTriggerSpec::default()
            },
        );
        new_meta(&mut t, ctx);
        t
    } else {
        let mut t: NatsTrigger = get(ctx, &name, "NATS trigger").await?;
        if let Some(topic) = trigger_topic {
            t.spec.topic = topic;
        }
        if let Some(s) = selector {
            t.spec.function_selector = s;
        }
        t.status = None;
        t
    };
    write(ctx, t, create, dry, "NATS trigger").await
}

fn kafka_table(items: &[KafkaTrigger]) -> Table {
    let mut t = Table::new(&["NAME", "NAMESPACE", "TOPIC", "FUNCTION SELECTOR", "READY"]);
    for i in items {
        t.row(vec![
            i.name_any(),
            i.namespace().unwrap_or_default(),
            i.spec.topic.clone(),
            selector::to_query(&i.spec.function_selector),
            ready(&i.status.clone().unwrap_or_default().conditions),
        ]);
    }
    t
}

fn nats_table(items: &[NatsTrigger]) -> Table {
    let mut t = Table::new(&["NAME", "NAMESPACE", "TOPIC", "FUNCTION SELECTOR", "READY"]);
    for i in items {
        t.row(vec![
            i.name_any(),
            i.namespace().unwrap_or_default(),
            i.spec.topic.clone(),
            selector::to_query(&i.spec.function_selector),
            ready(&i.status.clone().unwrap_or_default().conditions),
        ]);
    }
    t
}

// -------------------------------------------------------------------- kinesis

async fn kinesis(ctx: &Ctx, a: KinesisTriggerArgs, create: bool) -> Result<()> {
    let KinesisTriggerArgs {
        name,
        stream,
        aws_region,
        shard_id,
        function_name,
        secret,
        endpoint,
        dry,
    } = a;
    if let Some(f) = &function_name
        && !dry.dryrun
    {
        check_function(ctx, f).await?;
    }
    let t = if create {
        let mut t = KinesisTrigger::new(
            &name,
            KinesisTriggerSpec {
                function_name: function_name
                    .ok_or_else(|| Error::usage("--function-name is required"))?,
                stream: stream.ok_or_else(|| Error::usage("--stream is required"))?,
                aws_region: Some(
                    aws_region.ok_or_else(|| Error::usage("--aws-region is required"))?,
                ),
                shard: shard_id,
                secret,
                endpoint,
                ..KinesisTriggerSpec::default()
            },
        );
        new_meta(&mut t, ctx);
        t
    } else {
        let mut t: KinesisTrigger = get(ctx, &name, "Kinesis trigger").await?;
        if let Some(f) = function_name {
            t.spec.function_name = f;
        }
        if let Some(s) = stream {
            t.spec.stream = s;
        }
        if aws_region.is_some() {
            t.spec.aws_region = aws_region;
        }
        if shard_id.is_some() {
            t.spec.shard = shard_id;
        }
        if secret.is_some() {
            t.spec.secret = secret;
        }
        if endpoint.is_some() {
            t.spec.endpoint = endpoint;
        }
        t.status = None;
        t
    };
    write(ctx, t, create, dry, "Kinesis trigger").await
}

fn kinesis_table(items: &[KinesisTrigger]) -> Table {
    let mut t = Table::new(&[
        "NAME",
        "NAMESPACE",
        "REGION",
        "STREAM",
        "SHARD",
        "FUNCTION NAME",
        "READY",
    ]);
    for i in items {
        t.row(vec![
            i.name_any(),
            i.namespace().unwrap_or_default(),
            i.spec.aws_region.clone().unwrap_or_default(),
            i.spec.stream.clone(),
            i.spec.shard.clone().unwrap_or_else(|| "*".into()),
            i.spec.function_name.clone(),
            ready(&i.status.clone().unwrap_or_default().conditions),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_and_hosts() {
        assert!(check_schedule("*/5 * * * *").is_ok());
        assert!(check_schedule("0 0 * * 1-5").is_ok());
        assert!(check_schedule("@hourly").is_ok());
        assert!(check_schedule("@midnight").is_ok());
        assert!(check_schedule("every minute").is_err());
        assert!(check_schedule("* * *").is_err());
        assert!(check_schedule("99 * * * *").is_err());
        assert!(check_schedule("* * * * mon-xyz").is_err());
        assert_eq!(default_host("hello", "127.0.0.1"), "hello.127.0.0.1.nip.io");
    }

    #[test]
    fn urls_and_ready_reasons() {
        let mut t = HttpTrigger::new(
            "h",
            HttpTriggerSpec {
                function_name: "f".into(),
                host_name: Some("f.example.com".into()),
                path: Some("api".into()),
                ..HttpTriggerSpec::default()
            },
        );
        assert_eq!(http_url(&t).as_deref(), Some("http://f.example.com/api"));
        t.spec.tls_secret = Some("cert".into());
        assert_eq!(http_url(&t).as_deref(), Some("https://f.example.com/api"));
        t.spec.host_name = None;
        assert_eq!(http_url(&t), None);
        let not_ready = Condition::not_ready("FunctionNotFound", "no function f");
        assert_eq!(ready(&[not_ready]), "False (FunctionNotFound)");
        assert_eq!(ready(&[Condition::ready("Reconciled", "ok")]), "True");
        assert_eq!(ready(&[]), "Unknown");
        assert_eq!(subcommand("HTTP trigger"), "http");
    }
}
