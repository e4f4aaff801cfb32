//! The command tree, with Kubeless 1.0.8's command names, aliases, flag names and defaults.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kubeless: a Kubernetes-native serverless framework.
#[derive(Debug, Parser)]
#[command(name = "kubeless", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub kube: KubeArgs,
    /// On failure, also print the full detail (the API server's whole answer).
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// How to reach the cluster, as kubectl does it.
#[derive(Debug, Clone, Args, Default)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace of the objects (default: the context's namespace, else "default").
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

// A command line is parsed once; boxing the big variant would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Deploy, update, call and inspect functions.
    #[command(subcommand)]
    Function(FunctionCmd),
    /// Manage HTTP, cronjob, Kafka, NATS and Kinesis triggers.
    #[command(subcommand)]
    Trigger(TriggerCmd),
    /// Manage the autoscaling of functions.
    #[command(subcommand)]
    Autoscale(AutoscaleCmd),
    /// Manage Kafka topics.
    #[command(subcommand)]
    Topic(TopicCmd),
    /// Create or update Functions and triggers from manifests (a file or a folder of them).
    #[command(after_help = "Examples:
  kubeless apply -f hello.yaml
  kubeless apply -f manifests/        every .yaml, .yml and .json file, in name order")]
    Apply(ApplyArgs),
    /// Print the controller configuration and the supported runtimes.
    GetServerConfig,
    /// Serve the web dashboard on localhost, with this kubeconfig's rights.
    Ui(crate::ui::UiArgs),
    /// Print the version of this kubeless command, of the Kubernetes server and of the CRDs.
    Version,
    /// Print a shell completion script.
    Completion {
        #[arg(value_enum)]
        shell: Shell,
    },
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A manifest file, or a folder of them.
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR")]
    pub filename: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

/// `-o/--out` of list, describe and top.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutFormat {
    Json,
    Yaml,
}

/// `-o/--output` of `--dryrun`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum DryrunFormat {
    Json,
    #[default]
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PullPolicy {
    #[value(name = "Always")]
    Always,
    #[value(name = "IfNotPresent")]
    IfNotPresent,
    #[value(name = "Never")]
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum FunctionCmd {
    /// Write a starter function and its manifest in the current folder.
    #[command(after_help = "Examples:
  kubeless function init python3.11 hello
  kubeless apply -f hello.yaml")]
    Init(InitArgs),
    /// Deploy a function.
    #[command(after_help = "Examples:
  kubeless function deploy hello --runtime python3.11 --handler hello.handler --from-file hello.py
  kubeless function deploy hello -r nodejs20 --handler hello.handler -f hello.js -d package.json
  kubeless function deploy tick -r python3.11 --handler tick.handler -f tick.py --schedule '*/5 * * * *'")]
    Deploy(DeployArgs),
    /// Update a function.
    #[command(after_help = "Examples:
  kubeless function update hello --from-file hello.py --wait
  kubeless function update hello --env GREETING=hi --memory 256Mi")]
    Update(UpdateArgs),
    /// Call a function through the API server's service proxy.
    Call(CallArgs),
    /// Delete a function.
    Delete(NameArg),
    /// List functions.
    #[command(visible_alias = "ls")]
    List(ListArgs),
    /// Describe a function.
    Describe(DescribeArgs),
    /// Print the log of a function's pod.
    #[command(after_help = "Examples:
  kubeless function logs hello --tail 20
  kubeless function logs hello --since 5m --follow")]
    Logs(LogsArgs),
    /// Show call metrics of functions.
    #[command(
        visible_alias = "stats",
        after_help = "Examples:
  kubeless function top
  kubeless function top -f hello --watch"
    )]
    Top(TopArgs),
    /// Serve a function from local files over HTTP, without any cluster.
    #[command(after_help = "Examples:
  kubeless function run hello.py                       handler hello.handler, runtime python3.12
  kubeless function run --handler hello.foo -e GREETING=hi
  kubeless function run hello.js --port 9000 &
  curl -d '{\"name\": \"Ada\"}' -H 'Content-Type: application/json' localhost:9000

The function runs with the interpreters on this machine (python3, node, ruby, php) and the
packages they have; dependency files are not installed. Go and Java need the cluster's
compile step: deploy them.")]
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The function's file (default: <module>.* from --handler, else the only function file
    /// in the current folder).
    pub file: Option<PathBuf>,
    /// Function entry point as <file>.<function> [default: <file name>.handler].
    #[arg(long)]
    pub handler: Option<String>,
    /// Runtime, e.g. python3.12 [default: from the file's suffix].
    #[arg(short = 'r', long)]
    pub runtime: Option<String>,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: std::net::IpAddr,
    /// Environment variables of the function, k=v or k:v (repeat or separate with commas).
    #[arg(short = 'e', long = "env", value_delimiter = ',')]
    pub env: Vec<String>,
    /// Maximum duration of one call, in seconds.
    #[arg(long, default_value = "180")]
    pub timeout: String,
    /// A fixed number of worker processes (default: one, growing with concurrent calls).
    #[arg(long)]
    pub workers: Option<usize>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Runtime of the function, e.g. python3.11 or nodejs20.
    pub runtime: String,
    /// Name of the function (and of the files written).
    pub name: String,
    /// Folder to write into.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct NameArg {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
}

/// Flags shared by `function deploy` and `function update`.
#[derive(Debug, Args, Default, Clone)]
pub struct FunctionFlags {
    /// Runtime, e.g. python3.11 (see `kubeless get-server-config`).
    #[arg(short = 'r', long)]
    pub runtime: Option<String>,
    /// Function entry point as <file>.<function>.
    #[arg(long)]
    pub handler: Option<String>,
    /// The function source: a file, a .zip, a .tar/.tar.gz/.tgz archive or an http(s) URL.
    #[arg(short = 'f', long = "from-file", value_name = "FILE|URL")]
    pub from_file: Option<String>,
    /// Labels of the function, k=v or k:v (repeat or separate with commas).
    #[arg(short = 'l', long = "label", value_delimiter = ',')]
    pub labels: Vec<String>,
    /// Secrets mounted into the function pod at /<secret> (repeat or separate with commas).
    #[arg(long, value_delimiter = ',')]
    pub secrets: Vec<String>,
    /// Environment variables, k=v or k:v (repeat or separate with commas).
    #[arg(short = 'e', long = "env", value_delimiter = ',')]
    pub env: Vec<String>,
    /// Node selectors of the function pod, k=v or k:v.
    #[arg(long = "node-selectors", value_delimiter = ',')]
    pub node_selectors: Vec<String>,
    /// Service account of the function pod.
    #[arg(long = "service-account")]
    pub service_account: Option<String>,
    /// The function's dependencies (requirements.txt, package.json, ...): a file or an http(s) URL.
    #[arg(short = 'd', long = "dependencies", value_name = "FILE|URL")]
    pub dependencies: Option<String>,
    /// Memory request and limit, e.g. 128Mi.
    #[arg(long)]
    pub memory: Option<String>,
    /// CPU request and limit, e.g. 100m.
    #[arg(long)]
    pub cpu: Option<String>,
    /// A custom runtime image (a prebuilt function image); no build step is run.
    #[arg(long = "runtime-image")]
    pub runtime_image: Option<String>,
    /// Image pull policy of the function container [deploy default: Always].
    #[arg(long = "image-pull-policy", value_enum)]
    pub image_pull_policy: Option<PullPolicy>,
    /// Maximum duration of one call, in seconds [deploy default: "180"].
    #[arg(long)]
    pub timeout: Option<String>,
    /// Output format of --dryrun.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: DryrunFormat,
    /// Make the function's Service headless (no cluster IP).
    #[arg(long)]
    pub headless: bool,
    /// Print the Function object instead of creating it.
    #[arg(long)]
    pub dryrun: bool,
    /// Port the function listens on [deploy default: 8080].
    #[arg(long, value_parser = clap::value_parser!(i32).range(1..=65535))]
    pub port: Option<i32>,
    /// Port of the function's Service (0: same as --port) [deploy default: 0].
    #[arg(long = "servicePort", value_parser = clap::value_parser!(i32).range(0..=65535))]
    pub service_port: Option<i32>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// Waiting for the function to become ready after deploy/update.
#[derive(Debug, Args, Default, Clone)]
pub struct WaitArgs {
    /// Wait until the function is ready (default when stdout is a terminal).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Do not wait for the function to become ready.
    #[arg(long = "no-wait")]
    pub no_wait: bool,
    /// How long to wait for readiness, in seconds.
    #[arg(long = "wait-timeout", default_value_t = 300, value_name = "SECONDS")]
    pub wait_timeout: u64,
}

#[derive(Debug, Args)]
pub struct DeployArgs {
    pub name: String,
    #[command(flatten)]
    pub flags: FunctionFlags,
    /// Also create a cronjob trigger with this schedule (cron syntax).
    #[arg(long)]
    pub schedule: Option<String>,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    #[command(flatten)]
    pub flags: FunctionFlags,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  kubeless function call hello
  kubeless function call hello --data '{\"name\": \"Ada\"}'
  kubeless function call hello --data @event.json -H 'X-Trace: 1' -i
  echo hi | kubeless function call hello --data -
  kubeless function call hello --method PUT --data 'x=1'")]
pub struct CallArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Data sent to the function: text, @FILE for a file's content, or - for stdin (as curl).
    #[arg(short = 'd', long)]
    pub data: Option<String>,
    /// HTTP method [default: POST with --data, else GET].
    #[arg(short = 'X', long)]
    pub method: Option<String>,
    /// Extra request header, "Name: value" (repeat for more).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Print the HTTP status line and the response headers before the body.
    #[arg(short = 'i', long = "include")]
    pub include: bool,
    /// Give up on the call after this many seconds.
    #[arg(long = "call-timeout", default_value_t = 200, value_name = "SECONDS")]
    pub call_timeout: u64,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only these functions.
    #[arg(add = crate::complete::object_names())]
    pub names: Vec<String>,
    /// Output format: json or yaml (default: a table).
    #[arg(short = 'o', long = "out", value_enum)]
    pub out: Option<OutFormat>,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Output format: json or yaml (default: text).
    #[arg(short = 'o', long = "out", value_enum)]
    pub out: Option<OutFormat>,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Follow the log.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<i64>,
    /// Only lines newer than this: 30s, 5m, 2h.
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Only this function.
    #[arg(short = 'f', long = "function", add = crate::complete::function_names())]
    pub function: Option<String>,
    /// Output format: json or yaml (default: a table).
    #[arg(short = 'o', long = "out", value_enum)]
    pub out: Option<OutFormat>,
    /// Print the table again every --interval seconds until interrupted.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Seconds between two tables of --watch.
    #[arg(long, default_value_t = 2, value_name = "SECONDS")]
    pub interval: u64,
}

/// `-o/--out` only.
#[derive(Debug, Args)]
pub struct OutArgs {
    /// Output format: json or yaml (default: a table).
    #[arg(short = 'o', long = "out", value_enum)]
    pub out: Option<OutFormat>,
}

#[derive(Debug, Args)]
pub struct TriggerDescribeArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Output format: json or yaml (default: text).
    #[arg(short = 'o', long = "out", value_enum)]
    pub out: Option<OutFormat>,
}

/// `--dryrun` and `-o/--output`, on trigger create/update.
#[derive(Debug, Args, Clone, Copy)]
pub struct DryrunArgs {
    /// Print the object instead of writing it.
    #[arg(long)]
    pub dryrun: bool,
    /// Output format of --dryrun.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: DryrunFormat,
}

// ------------------------------------------------------------------ triggers

#[derive(Debug, Subcommand)]
pub enum TriggerCmd {
    /// HTTP triggers (Ingress).
    #[command(subcommand)]
    Http(HttpCmd),
    /// Cronjob triggers.
    #[command(subcommand)]
    Cronjob(CronjobCmd),
    /// Kafka triggers.
    #[command(subcommand)]
    Kafka(KafkaCmd),
    /// NATS triggers.
    #[command(subcommand)]
    Nats(NatsCmd),
    /// Kinesis triggers.
    #[command(subcommand)]
    Kinesis(KinesisCmd),
}

#[derive(Debug, Subcommand)]
pub enum HttpCmd {
    /// Create an HTTP trigger.
    Create(HttpCreateArgs),
    /// Update an HTTP trigger.
    Update(HttpUpdateArgs),
    /// Delete an HTTP trigger.
    Delete(NameArg),
    /// Show an HTTP trigger: its spec, its conditions with their reasons, and its URL.
    Describe(TriggerDescribeArgs),
    /// List HTTP triggers.
    #[command(visible_alias = "ls")]
    List(OutArgs),
}

#[derive(Debug, Args)]
pub struct HttpCreateArgs {
    pub name: String,
    /// Name of the function to expose.
    #[arg(long = "function-name", required = true, add = crate::complete::function_names())]
    pub function_name: String,
    /// URL path of the route.
    #[arg(long)]
    pub path: Option<String>,
    /// Host name of the route (nginx default: <function>.<API server host>.nip.io).
    #[arg(long)]
    pub hostname: Option<String>,
    /// Get a TLS certificate from ACME (kubernetes.io/tls-acme).
    #[arg(long = "enableTLSAcme", conflicts_with = "tls_secret")]
    pub enable_tls_acme: bool,
    /// Ingress controller: nginx, traefik or kong.
    #[arg(long, default_value = "nginx", value_parser = ["nginx", "traefik", "kong"])]
    pub gateway: String,
    /// Secret with the basic-auth users.
    #[arg(long = "basic-auth-secret")]
    pub basic_auth_secret: Option<String>,
    /// Secret with the TLS certificate.
    #[arg(long = "tls-secret")]
    pub tls_secret: Option<String>,
    /// Allow cross-origin requests.
    #[arg(long = "cors-enable")]
    pub cors_enable: bool,
    #[command(flatten)]
    pub dry: DryrunArgs,
}

#[derive(Debug, Args)]
pub struct HttpUpdateArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Name of the function to expose.
    #[arg(long = "function-name", add = crate::complete::function_names())]
    pub function_name: Option<String>,
    /// URL path of the route.
    #[arg(long)]
    pub path: Option<String>,
    /// Host name of the route.
    #[arg(long)]
    pub hostname: Option<String>,
    /// Get a TLS certificate from ACME (kubernetes.io/tls-acme).
    #[arg(long = "enableTLSAcme", conflicts_with = "tls_secret")]
    pub enable_tls_acme: bool,
    /// Ingress controller: nginx, traefik or kong (empty: unchanged).
    #[arg(long, default_value = "", value_parser = ["", "nginx", "traefik", "kong"])]
    pub gateway: String,
    /// Secret with the basic-auth users.
    #[arg(long = "basic-auth-secret")]
    pub basic_auth_secret: Option<String>,
    /// Secret with the TLS certificate.
    #[arg(long = "tls-secret")]
    pub tls_secret: Option<String>,
    #[command(flatten)]
    pub dry: DryrunArgs,
}

#[derive(Debug, Subcommand)]
pub enum CronjobCmd {
    /// Create a cronjob trigger.
    Create(CronjobArgs),
    /// Update a cronjob trigger.
    Update(CronjobArgs),
    /// Delete a cronjob trigger.
    Delete(NameArg),
    /// Show a cronjob trigger: its spec, its conditions with their reasons.
    Describe(TriggerDescribeArgs),
    /// List cronjob triggers.
    #[command(visible_alias = "ls")]
    List(OutArgs),
}

#[derive(Debug, Args)]
pub struct CronjobArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Schedule in cron syntax, e.g. "*/5 * * * *".
    #[arg(long)]
    pub schedule: Option<String>,
    /// Name of the function to call.
    #[arg(long, add = crate::complete::function_names())]
    pub function: Option<String>,
    /// Payload sent with each call, as a JSON string.
    #[arg(short = 'p', long, conflicts_with = "payload_from_file")]
    pub payload: Option<String>,
    /// Payload sent with each call, from a JSON file.
    #[arg(short = 'f', long = "payload-from-file")]
    pub payload_from_file: Option<PathBuf>,
    #[command(flatten)]
    pub dry: DryrunArgs,
}

#[derive(Debug, Subcommand)]
pub enum KafkaCmd {
    /// Create a Kafka trigger.
    Create(SelectorTriggerArgs),
    /// Update a Kafka trigger.
    Update(SelectorTriggerArgs),
    /// Delete a Kafka trigger.
    Delete(NameArg),
    /// Show a Kafka trigger: its spec, its conditions with their reasons.
    Describe(TriggerDescribeArgs),
    /// List Kafka triggers.
    #[command(visible_alias = "ls")]
    List(OutArgs),
}

#[derive(Debug, Subcommand)]
pub enum NatsCmd {
    /// Create a NATS trigger.
    Create(SelectorTriggerArgs),
    /// Update a NATS trigger.
    Update(SelectorTriggerArgs),
    /// Delete a NATS trigger.
    Delete(NameArg),
    /// Show a NATS trigger: its spec, its conditions with their reasons.
    Describe(TriggerDescribeArgs),
    /// List NATS triggers.
    #[command(visible_alias = "ls")]
    List(OutArgs),
    /// Publish a message to a NATS subject.
    Publish(NatsPublishArgs),
}

/// Kafka and NATS triggers: a topic and a function label selector.
#[derive(Debug, Args)]
pub struct SelectorTriggerArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Topic (Kafka) or subject (NATS) to consume.
    #[arg(long = "trigger-topic")]
    pub trigger_topic: Option<String>,
    /// Label query selecting the functions, e.g. "function=hello" or "app in (a,b)".
    #[arg(long = "function-selector")]
    pub function_selector: Option<String>,
    #[command(flatten)]
    pub dry: DryrunArgs,
}

#[derive(Debug, Args)]
pub struct NatsPublishArgs {
    /// The message body.
    #[arg(long)]
    pub message: String,
    /// Subject to publish to.
    #[arg(long, default_value = "kubeless")]
    pub topic: String,
    /// NATS server URL.
    #[arg(
        long,
        env = "NATS_URL",
        default_value = "nats://nats.nats-io.svc.cluster.local:4222"
    )]
    pub url: String,
}

#[derive(Debug, Subcommand)]
pub enum KinesisCmd {
    /// Create a Kinesis trigger.
    Create(KinesisTriggerArgs),
    /// Update a Kinesis trigger.
    Update(KinesisTriggerArgs),
    /// Delete a Kinesis trigger.
    Delete(NameArg),
    /// Show a Kinesis trigger: its spec, its conditions with their reasons.
    Describe(TriggerDescribeArgs),
    /// List Kinesis triggers.
    #[command(visible_alias = "ls")]
    List(OutArgs),
    /// Put records into a Kinesis stream.
    Publish(KinesisPublishArgs),
    /// Create a Kinesis stream.
    CreateStream(KinesisCreateStreamArgs),
}

#[derive(Debug, Args)]
pub struct KinesisTriggerArgs {
    #[arg(add = crate::complete::object_names())]
    pub name: String,
    /// Stream to read.
    #[arg(long)]
    pub stream: Option<String>,
    /// AWS region of the stream.
    #[arg(long = "aws-region")]
    pub aws_region: Option<String>,
    /// Only this shard (default: every shard).
    #[arg(long = "shard-id")]
    pub shard_id: Option<String>,
    /// Name of the function to call.
    #[arg(long = "function-name", add = crate::complete::function_names())]
    pub function_name: Option<String>,
    /// Secret with aws_access_key_id and aws_secret_access_key.
    #[arg(long)]
    pub secret: Option<String>,
    /// Kinesis endpoint URL (e.g. an emulator).
    #[arg(long)]
    pub endpoint: Option<String>,
    #[command(flatten)]
    pub dry: DryrunArgs,
}

/// How to reach Kinesis from the CLI.
#[derive(Debug, Args, Clone)]
pub struct AwsArgs {
    /// AWS region.
    #[arg(long = "aws-region", env = "AWS_REGION")]
    pub aws_region: String,
    /// Kinesis endpoint URL (e.g. an emulator).
    #[arg(long, env = "KINESIS_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Secret (in --namespace) with aws_access_key_id and aws_secret_access_key; without it the
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN env is used.
    #[arg(long)]
    pub secret: Option<String>,
}

#[derive(Debug, Args)]
pub struct KinesisPublishArgs {
    /// Stream to write to.
    #[arg(long)]
    pub stream: String,
    /// Partition key of the records.
    #[arg(long = "partition-key", default_value = "kubeless")]
    pub partition_key: String,
    /// Records to put (repeat or separate with commas).
    #[arg(long, value_delimiter = ',', required = true)]
    pub records: Vec<String>,
    #[command(flatten)]
    pub aws: AwsArgs,
}

#[derive(Debug, Args)]
pub struct KinesisCreateStreamArgs {
    /// Stream name (or --stream-name).
    pub name: Option<String>,
    /// Stream name.
    #[arg(long = "stream-name")]
    pub stream_name: Option<String>,
    /// Number of shards.
    #[arg(long = "shard-count", default_value_t = 1)]
    pub shard_count: i32,
    #[command(flatten)]
    pub aws: AwsArgs,
}

// ----------------------------------------------------------------- autoscale

#[derive(Debug, Subcommand)]
pub enum AutoscaleCmd {
    /// Autoscale a function on CPU or requests per second.
    Create(AutoscaleCreateArgs),
    /// List autoscaled functions.
    #[command(visible_alias = "ls")]
    List(OutArgs),
    /// Stop autoscaling a function.
    Delete(NameArg),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Metric {
    Cpu,
    Qps,
}

#[derive(Debug, Args)]
pub struct AutoscaleCreateArgs {
    /// The function.
    #[arg(add = crate::complete::function_names())]
    pub name: String,
    /// Minimum number of replicas.
    #[arg(long, default_value_t = 1)]
    pub min: i32,
    /// Maximum number of replicas.
    #[arg(long, default_value_t = 1)]
    pub max: i32,
    /// Metric: cpu (average utilisation, percent) or qps (calls per second).
    #[arg(long, value_enum, default_value = "cpu")]
    pub metric: Metric,
    /// Target value of the metric.
    #[arg(long)]
    pub value: String,
}

// --------------------------------------------------------------------- topic

#[derive(Debug, Subcommand)]
pub enum TopicCmd {
    /// Create a Kafka topic.
    Create(TopicCreateArgs),
    /// Delete a Kafka topic.
    Delete(TopicDeleteArgs),
    /// List Kafka topics.
    #[command(visible_alias = "ls")]
    List(TopicListArgs),
    /// Publish a message to a Kafka topic.
    Publish(TopicPublishArgs),
}

/// Where Kafka is.
#[derive(Debug, Args, Clone)]
pub struct KafkaArgs {
    /// Kafka bootstrap brokers, host:port[,host:port].
    #[arg(long, env = "KAFKA_BROKERS", default_value = "kafka.kubeless:9092")]
    pub brokers: String,
    /// Accepted for compatibility with Kubeless; unused (the CLI talks to the brokers directly).
    #[arg(long = "kafka-namespace", default_value = "kubeless")]
    pub kafka_namespace: String,
}

#[derive(Debug, Args)]
pub struct TopicDeleteArgs {
    pub topic: String,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

#[derive(Debug, Args)]
pub struct TopicCreateArgs {
    pub topic: String,
    /// Partitions of a new topic.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Replication factor of a new topic.
    #[arg(long = "replication-factor", default_value_t = 1)]
    pub replication_factor: i32,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

#[derive(Debug, Args)]
pub struct TopicListArgs {
    /// Output format: json or yaml (default: one name a line).
    #[arg(short = 'o', long = "out", value_enum)]
    pub out: Option<OutFormat>,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}

#[derive(Debug, Args)]
pub struct TopicPublishArgs {
    /// The message body.
    #[arg(long)]
    pub data: String,
    /// Topic to publish to.
    #[arg(long, default_value = "kubeless")]
    pub topic: String,
    #[command(flatten)]
    pub kafka: KafkaArgs,
}
