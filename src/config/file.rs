//! The TOML configuration file, and the layer type every source fills.
//!
//! Each source (file, environment) produces a [`Layer`] whose fields are all
//! optional; layers are merged by precedence and then resolved against the
//! built-in defaults (see [`super::Settings::resolve`]).

use serde::{Deserialize, Deserializer};

use crate::redact::Secret;

/// One source of settings. `None` means "this source does not say".
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// `[app]`: the Laravel app on this machine, if any.
    #[serde(default)]
    pub app: AppLayer,
    /// `[redis]`: the queue connection's Redis.
    #[serde(default)]
    pub redis: RedisLayer,
    /// `[queue]`: the queue connection.
    #[serde(default)]
    pub queue: QueueLayer,
    /// `[database]`: the database queue's database and table (driver
    /// `database`).
    #[serde(default)]
    pub database: DatabaseLayer,
    /// `[sqs]`: the SQS queue's account, region and credentials (driver
    /// `sqs`).
    #[serde(default)]
    pub sqs: SqsLayer,
    /// `[cache]`: where restart and maxExceptions keys live.
    #[serde(default)]
    pub cache: CacheLayer,
    /// `[failed]`: where failed jobs go.
    #[serde(default)]
    pub failed: FailedLayer,
    /// `[worker]`: daemon behaviour beyond artisan's flags.
    #[serde(default)]
    pub worker: WorkerLayer,
    /// `[metrics]`: the Prometheus and health endpoint.
    #[serde(default)]
    pub metrics: MetricsLayer,
    /// `[horizon]`: records for Horizon's dashboard.
    #[serde(default)]
    pub horizon: HorizonLayer,
    /// `[pulse]`: Laravel Pulse's queue entries for jobs Laravel does not
    /// run.
    #[serde(default)]
    pub pulse: PulseLayer,
    /// `[bookkeeping]`: unique locks and batch counters for jobs Laravel's
    /// code does not run.
    #[serde(default)]
    pub bookkeeping: BookkeepingLayer,
    /// `[[handlers]]`, in match order.
    #[serde(default)]
    pub handlers: Option<Vec<HandlerEntry>>,
}

/// `[app]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AppLayer {
    /// The app's root directory: its `storage/framework/down` file means
    /// maintenance mode, and its file cache lives below it.
    pub path: Option<std::path::PathBuf>,
    /// The app's Laravel version (`"8.83"`): exception classes and wording
    /// follow it. Default: the newest.
    pub laravel: Option<String>,
}

/// `[redis]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RedisLayer {
    /// `redis://[user:pass@]host:port/db`, `rediss://`, or `unix:///path?db=N`.
    pub url: Option<String>,
    /// Key prefix of the connection (`REDIS_PREFIX`).
    pub prefix: Option<String>,
    /// A Redis Cluster (`REDIS_CLUSTER=redis`): the cluster client, seeded
    /// from `url` and `nodes`, and queue names in hash tags (Laravel 13.5+).
    pub cluster: Option<bool>,
    /// More cluster seed nodes (`redis://host:port`), beside `url`.
    pub nodes: Option<Vec<String>>,
    /// Redis Sentinel: the sentinels (`host:port`, or `rediss://host:port`
    /// for TLS), asked in order for the master of `service`.
    pub sentinels: Option<Vec<String>>,
    /// Sentinel: the master's name in the sentinels' configuration.
    pub service: Option<String>,
    /// Sentinel: the sentinels' own password, if they require one.
    pub sentinel_password: Option<String>,
    /// PEM file of the CA that signed the server's certificate (`rediss://`);
    /// unset: the system's roots.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate, for servers that require one (mutual TLS).
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<std::path::PathBuf>,
    /// Skip the server certificate check (Laravel's `verify_peer => false`).
    pub tls_insecure: Option<bool>,
    /// `REDIS_SCHEME` (`tls` turns `redis://` into `rediss://`); from the
    /// environment only.
    #[serde(skip)]
    pub scheme: Option<String>,
}

/// `[queue]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueLayer {
    /// The connection name written to failed_jobs (`redis`).
    pub connection: Option<String>,
    /// The connection's driver, `redis` or `database`, as
    /// `queue.connections.NAME.driver`; unset: the skeleton's names decide
    /// (`database` is the database driver, any other name Redis).
    pub driver: Option<String>,
    /// Default queue when `--queue` is not given.
    pub queue: Option<String>,
    /// Seconds; `"null"` disables reclaiming.
    #[serde(default, deserialize_with = "nullable_seconds")]
    pub retry_after: Option<Nullable>,
    /// Seconds to block on `:notify`; `"null"` never blocks. On the
    /// beanstalkd driver: seconds a reserve waits (default 0).
    #[serde(default, deserialize_with = "nullable_seconds")]
    pub block_for: Option<Nullable>,
    /// The server of a beanstalkd connection, as its `host` key
    /// (`BEANSTALKD_QUEUE_HOST`, default `localhost`).
    pub host: Option<String>,
    /// Its port, as its `port` key (default 11300).
    pub port: Option<u16>,
    /// `BEANSTALKD_QUEUE`: the beanstalkd connection's default queue;
    /// from the environment only (`[queue] queue` in the file), applied on
    /// the beanstalkd driver.
    #[serde(skip)]
    pub beanstalkd_queue: Option<String>,
    /// `BEANSTALKD_QUEUE_RETRY_AFTER` (the 11+ skeleton's
    /// `(int) env('BEANSTALKD_QUEUE_RETRY_AFTER', 90)`, seconds); from the
    /// environment only, applied on the beanstalkd driver as
    /// `[queue] retry_after`.
    #[serde(skip)]
    pub beanstalkd_retry_after: Option<Nullable>,
    /// Most jobs moved per migrate; -1 for all.
    pub migration_batch_size: Option<i64>,
    /// `fail` (default) or `release`.
    pub unmatched: Option<String>,
    /// Seconds before a released unmatched job is available again.
    pub unmatched_release_delay: Option<u64>,
    /// Set (never from the file) where the app's own settings name a
    /// connection whose `driver` the worker does not run (the skeleton's
    /// `sync`, `failover`, `deferred`…): the commands that open the
    /// queue refuse it, naming it, and the others (`failed`, `forget`)
    /// still work. A `[queue] driver` of that kind in the config file is
    /// refused at load instead.
    #[serde(skip)]
    pub unserved: Option<bool>,
    /// A `failover` connection's members with their drivers, from the
    /// app's answer (`queue.connections.NAME.connections`); never from
    /// the file or a `.env`, which cannot say them.
    #[serde(skip)]
    pub members: Option<Vec<super::failover::FailoverMember>>,
}

/// `[database]`: where the database driver's jobs table is.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DatabaseLayer {
    /// The database: `sqlite:///abs/path`, `mysql://…` (MySQL and MariaDB)
    /// or `postgres://…` (the queue connection's `connection`, from
    /// `DB_QUEUE_CONNECTION`, else the app's default `DB_CONNECTION`).
    pub url: Option<String>,
    /// The jobs table (`DB_QUEUE_TABLE`, default `jobs`).
    pub table: Option<String>,
    /// `DB_QUEUE`: the database connection's default queue; from the
    /// environment only (`[queue] queue` in the file). Applies only when
    /// the driver is `database` (see `config::database::for_driver`).
    #[serde(skip)]
    pub queue: Option<String>,
    /// `DB_QUEUE_RETRY_AFTER` (seconds, or null: 60 s); from the
    /// environment only, as [`DatabaseLayer::queue`].
    #[serde(skip)]
    pub retry_after: Option<Nullable>,
}

/// `[sqs]`: where the SQS driver's queues are, as the app's `sqs`
/// connection names them.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SqsLayer {
    /// `prefix` (`SQS_PREFIX`): `https://sqs.REGION.amazonaws.com/ACCOUNT`.
    pub prefix: Option<String>,
    /// `suffix` (`SQS_SUFFIX`).
    pub suffix: Option<String>,
    /// `region` (`AWS_DEFAULT_REGION`, default `us-east-1`).
    pub region: Option<String>,
    /// `key` (`AWS_ACCESS_KEY_ID`); with `secret`, else AWS's default
    /// credential chain.
    pub key: Option<String>,
    /// `secret` (`AWS_SECRET_ACCESS_KEY`); never shown.
    pub secret: Option<Secret>,
    /// `token` (`AWS_SESSION_TOKEN`); never shown.
    pub token: Option<Secret>,
    /// `endpoint` (`AWS_ENDPOINT_URL_SQS`, else `AWS_ENDPOINT_URL`): a local
    /// or compatible SQS.
    pub endpoint: Option<String>,
    /// `SQS_QUEUE`: the connection's default queue; from the environment
    /// only (`[queue] queue` in the file), applied on the `sqs` driver.
    #[serde(skip)]
    pub queue: Option<String>,
    /// `overflow_enabled` (`SQS_OVERFLOW_ENABLED`, Laravel 13.9+'s
    /// `overflow.enabled`, default false): follow overflow pointer bodies
    /// (`{"@pointer":"laravel:sqs-payloads:{uuid}"}`) to their payload in
    /// the cache store. Off, a pointer body is a payload like any other,
    /// as Laravel reads it then.
    pub overflow_enabled: Option<bool>,
    /// `overflow_store` (`SQS_OVERFLOW_STORE`, Laravel 13.9+'s
    /// `overflow.store`): the app's cache store holding the payloads of
    /// overflow pointer bodies; unset or equal to `[cache] store`: that
    /// store.
    pub overflow_store: Option<String>,
    /// `overflow_delete_after_processing` (`overflow.delete_after_processing`,
    /// default true): forget a pointer's payload once its job is deleted.
    pub overflow_delete_after_processing: Option<bool>,
}

/// `[cache]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheLayer {
    /// `redis`, `file`, `database` or `none`.
    pub store: Option<String>,
    /// File store directory; default `{app path}/storage/framework/cache/data`.
    pub path: Option<std::path::PathBuf>,
    /// The cache Redis (store `redis`; defaults to `[redis] url` on
    /// database `database`), or the cache database (store `database`:
    /// `sqlite://`, `mysql://`, `postgres://`; defaults to `[failed] url`).
    pub url: Option<String>,
    /// The database store's table (`DB_CACHE_TABLE`, default `cache`).
    pub table: Option<String>,
    /// Database of the cache connection (`REDIS_CACHE_DB`, default 1).
    pub database: Option<i64>,
    /// Redis connection prefix of the cache connection; defaults to
    /// `[redis] prefix` (Laravel's global `options.prefix` applies to both).
    pub redis_prefix: Option<String>,
    /// The cache store prefix (`CACHE_PREFIX`).
    pub prefix: Option<String>,
    /// Put `:` after a non-empty prefix (Laravel ≤ 10); 11+ does not.
    pub colon: Option<bool>,
}

/// `[bookkeeping]`: what the worker does around jobs Laravel's own code
/// does not run (see [`crate::whole`]).
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BookkeepingLayer {
    /// Release unique locks and record batches natively (default true).
    pub enabled: Option<bool>,
    /// `ShouldBeUniqueUntilProcessing` classes (`*` wildcards): their
    /// lock is released before the run, never after.
    pub until_processing: Option<Vec<String>>,
    /// `ShouldBeUnique` classes whose `uniqueId` is a property (or none)
    /// (`*` wildcards): for payloads before Laravel 11.39, which do not
    /// carry their lock, the key is built from the class and property.
    pub unique: Option<Vec<String>>,
    /// The app's name of the `[cache]` store (a key of `cache.stores`):
    /// locks a payload places there are released. Default: the app's
    /// default store (read through PHP), else the store's kind.
    pub lock_store: Option<String>,
    /// Redis store: the lock connection (`lock_connection`); default the
    /// `[redis]` URL (the skeleton's `default` connection).
    pub lock_url: Option<String>,
    /// Database store: the locks table (`lock_table`, default `cache_locks`).
    pub lock_table: Option<String>,
    /// The batches database (`queue.batching.database`); default
    /// `[failed] url` (the app's default connection).
    pub batches_url: Option<String>,
    /// The batches table (`queue.batching.table`, default `job_batches`).
    pub batches_table: Option<String>,
    /// The `[[handlers]]` entry (its `match`) that finishes, in the PHP
    /// bridge's finish mode, the jobs other handlers ran whose bookkeeping
    /// needs PHP (a chain, an encrypted command). Default: the first entry
    /// whose books Laravel keeps (the bridge).
    pub finish_with: Option<String>,
}

/// `[failed]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FailedLayer {
    /// `database-uuids`, `redis` or `null`.
    pub driver: Option<String>,
    /// Database URL for `database-uuids`: `sqlite://`, `mysql://`, `postgres://`.
    pub url: Option<String>,
    /// Table name (`failed_jobs`).
    pub table: Option<String>,
}

/// `[worker]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkerLayer {
    /// Seconds between SIGTERM and SIGKILL of a timed-out handler.
    pub kill_grace: Option<u64>,
    /// Bytes of each of stdout and stderr kept per handler call.
    pub output_limit: Option<usize>,
    /// A file the worker loop rewrites every few seconds while it runs,
    /// for `laravel-worker health` (Docker `HEALTHCHECK`).
    pub heartbeat_file: Option<std::path::PathBuf>,
    /// Seconds between two log lines of the same repeated error (the first
    /// is logged, then one summary with a count per interval; 0 = log every
    /// occurrence).
    pub error_summary_interval: Option<u64>,
    /// Seconds the jobs in flight get to finish once the worker stops; the
    /// ones still running then are released at once (the attempt counted). Unset:
    /// wait for every job, as `queue:work` does.
    pub drain_timeout: Option<u64>,
    /// What to do with a running handler whose reservation is lost:
    /// `"kill"` (the default) or `"keep"`.
    pub on_lease_lost: Option<String>,
    /// Faults of a handler itself, in a row, that trip it (default 5;
    /// 0 = never); `[[handlers]] trip_after` wins for its entry.
    pub trip_after: Option<u32>,
    /// Seconds a tripped handler waits before a trial job (default 10),
    /// doubling at each failed trial up to 32 times this.
    pub trip_backoff: Option<u64>,
    /// What a trip does to the worker: `"release"` (the default: hand the
    /// handler's jobs back and try it again later) or `"exit"` (drain and
    /// exit with status 4).
    pub on_handler_tripped: Option<String>,
    /// Slots per queue: `"off"` (the default: `--queue`'s priority order),
    /// `"simple"` or `"auto"` (Horizon's `balance`).
    pub balance: Option<String>,
    /// What `auto` follows: `"time"` (the default) or `"size"`.
    pub auto_scaling_strategy: Option<String>,
    /// Slots every queue keeps when balanced (default 1).
    pub min_processes: Option<usize>,
    /// Slots in all when balanced (default `--concurrency`).
    pub max_processes: Option<usize>,
    /// Slots a queue gains or loses per round (default 1).
    pub balance_max_shift: Option<usize>,
    /// Seconds between two rounds of `auto` (default 3).
    pub balance_cooldown: Option<u64>,
    /// `[worker.queues.NAME]`: one queue's own `min_processes` and
    /// `max_processes`.
    pub queues: Option<std::collections::BTreeMap<String, QueueProcessesLayer>>,
}

/// `[worker.queues.NAME]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueProcessesLayer {
    /// Slots this queue always keeps.
    pub min_processes: Option<usize>,
    /// Slots this queue never exceeds.
    pub max_processes: Option<usize>,
}

/// `[metrics]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricsLayer {
    /// `host:port` to serve `/metrics`, `/healthz` and `/readyz` on; unset:
    /// no endpoint.
    pub listen: Option<String>,
    /// Seconds between two readings of the queue backlog gauges; 0: off.
    pub backlog_interval: Option<u64>,
    /// Seconds a client has to send a request's head (line and headers),
    /// from when the endpoint starts waiting for it (default 5).
    pub header_timeout: Option<u64>,
    /// Seconds a connection may go without a byte read or written before
    /// it is closed (default 30).
    pub idle_timeout: Option<u64>,
    /// Connections served at once (default 32, and never more than a
    /// quarter of the process's open-file limit); more are closed at once.
    pub max_connections: Option<usize>,
}

/// `[horizon]`: the records Horizon's dashboard reads (job records,
/// metrics, a master and its supervisors), written on the queue's Redis.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HorizonLayer {
    /// Write the records; default false.
    pub enabled: Option<bool>,
    /// Horizon's key prefix (`horizon.prefix`, `HORIZON_PREFIX`); default
    /// `Str::slug(APP_NAME, '_')` + `_horizon:`, `laravel_horizon:`.
    pub prefix: Option<String>,
    /// Horizon's Redis when `horizon.use` names another connection than
    /// the queue's; default: the queue's.
    pub url: Option<String>,
    /// Take `horizon:snapshot`'s metric snapshots every five minutes and
    /// trim the job lists, as a scheduled `horizon:snapshot` and a PHP
    /// master would; default false.
    pub snapshot: Option<bool>,
    /// `horizon.trim.recent`, minutes (default 60).
    pub trim_recent: Option<u64>,
    /// `horizon.trim.pending`, minutes (default 60).
    pub trim_pending: Option<u64>,
    /// `horizon.trim.completed`, minutes (default 60).
    pub trim_completed: Option<u64>,
    /// `horizon.trim.recent_failed`, minutes (default 10080).
    pub trim_recent_failed: Option<u64>,
    /// `horizon.trim.failed`, minutes (default 10080).
    pub trim_failed: Option<u64>,
    /// `horizon.trim.monitored`, minutes (default 10080).
    pub trim_monitored: Option<u64>,
}

/// `[pulse]`: Laravel Pulse's Queues and Slow Jobs entries for the jobs
/// a process, persistent or HTTP handler runs (the bridge's jobs fire
/// Laravel's events, which the app's Pulse records itself).
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PulseLayer {
    /// `true`: write them, and refuse to start when Pulse's ingest cannot
    /// be used; `false` (or `PULSE_ENABLED=false`): never. Unset: written
    /// when the app's settings name Pulse (a `PULSE_*` variable) or its
    /// database has Pulse's tables.
    pub enabled: Option<bool>,
    /// `storage` (Pulse's tables, the default) or `redis` (the ingest
    /// stream): `PULSE_INGEST_DRIVER`.
    pub ingest: Option<String>,
    /// The database of Pulse's tables (`sqlite://`, `mysql://`,
    /// `postgres://`): `PULSE_DB_CONNECTION`, else `DB_CONNECTION`.
    pub url: Option<String>,
    /// The Redis of the ingest stream (`PULSE_REDIS_CONNECTION`); default:
    /// the queue's.
    pub redis_url: Option<String>,
    /// `PULSE_QUEUES_ENABLED` (default true).
    pub queues: Option<bool>,
    /// `PULSE_QUEUES_SAMPLE_RATE`, 0 to 1 (default 1).
    pub queues_sample_rate: Option<f64>,
    /// `PULSE_SLOW_JOBS_ENABLED` (default true).
    pub slow_jobs: Option<bool>,
    /// `PULSE_SLOW_JOBS_SAMPLE_RATE`, 0 to 1 (default 1).
    pub slow_jobs_sample_rate: Option<f64>,
    /// `PULSE_SLOW_JOBS_THRESHOLD`, milliseconds (default 1000); a
    /// threshold map's `default`.
    pub slow_jobs_threshold: Option<u64>,
    /// A threshold map's other entries, in order: the first pattern
    /// (PHP's `preg_match`, delimiters included) matching a job's name
    /// gives its threshold.
    pub slow_jobs_thresholds: Option<Vec<ThresholdEntry>>,
    /// The `Queues` recorder's `ignore` patterns (job names).
    pub queues_ignore: Option<Vec<String>>,
    /// The `SlowJobs` recorder's `ignore` patterns (job names).
    pub slow_jobs_ignore: Option<Vec<String>>,
}

/// One entry of Pulse's slow-job threshold map: `{ pattern = "#^App\\\\Jobs\\\\Import#", ms = 10000 }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ThresholdEntry {
    /// A PHP `preg_match` pattern, delimiters included.
    pub pattern: String,
    /// The threshold of the jobs it matches, milliseconds.
    pub ms: u64,
}

/// One `[[handlers]]` entry.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HandlerEntry {
    /// displayName pattern; `*` is a wildcard.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Program and arguments (no shell).
    pub command: Option<Vec<String>>,
    /// Default time limit in seconds for jobs with no payload `timeout`.
    pub timeout: Option<u64>,
    /// `process` (one process per call, the default) or `persistent`.
    pub mode: Option<String>,
    /// Persistent mode: most warm processes (default 1), started as calls
    /// need them.
    pub processes: Option<usize>,
    /// Persistent mode: processes started at once and kept however idle
    /// (default 0).
    pub min_processes: Option<usize>,
    /// Persistent mode: seconds a process may stay idle before it is
    /// stopped, down to `min_processes` (default: never stopped).
    pub idle_timeout: Option<u64>,
    /// Persistent mode: jobs reserved ahead of the free processes, each
    /// waiting for one (default: one per process; 0: only what can start).
    pub reserve_ahead: Option<usize>,
    /// Persistent mode: write a busy process's next request before it
    /// answers (default false).
    pub pipeline: Option<bool>,
    /// Persistent mode: calls before a process is replaced (0 = never).
    pub max_jobs: Option<u64>,
    /// Persistent mode: resident MB above which a process is replaced.
    pub max_memory: Option<u64>,
    /// HTTP handler: the endpoint each job is POSTed to (instead of
    /// `command`).
    pub url: Option<String>,
    /// HTTP handler: seconds allowed to connect (default 5).
    pub connect_timeout: Option<u64>,
    /// HTTP handler: name of the environment variable holding a bearer
    /// token (the name, never the token).
    pub token_env: Option<String>,
    /// HTTP handler: name of the environment variable holding the HMAC
    /// signing key (the name, never the key).
    pub secret_env: Option<String>,
    /// Only jobs from these queues match this entry (any transport).
    pub queues: Option<Vec<String>>,
    /// Command handlers: environment variables set for the handler, on top
    /// of what it inherits (or of nothing, with `env_clear`).
    pub env: Option<std::collections::BTreeMap<String, String>>,
    /// Command handlers: start from an empty environment instead of the
    /// daemon's (default false); the handler then sees only `env` and the
    /// daemon's `LARAVEL_WORKER_*` variables.
    pub env_clear: Option<bool>,
    /// Command handlers: pass `data.command` decoded to JSON (the command
    /// file in process mode, the request's `command` in persistent mode);
    /// default true. The PHP bridge reads the payload itself: `false`
    /// saves the decoding, and for a job of many megabytes twice its size
    /// in the worker's memory.
    pub decode_command: Option<bool>,
    /// Command handlers: the Linux scheduling policy of the handler's
    /// processes: `"batch"` (default), `"other"` or `"idle"`
    /// ([`crate::handler::scheduling::Scheduling`]).
    pub scheduling: Option<String>,
    /// Faults of this handler itself, in a row, that trip it (default
    /// `[worker] trip_after`; 0 = never).
    pub trip_after: Option<u32>,
    /// Who does Laravel's bookkeeping (unique lock, batch counters) for
    /// this handler's jobs: `"laravel"` (the PHP bridge) or `"worker"`;
    /// default `"laravel"` when the command runs
    /// `laravel-worker-bridge.php`, else `"worker"`.
    pub bookkeeping: Option<String>,
}

/// The transport a `[[handlers]]` entry means. [`HandlerEntry::transport`]
/// is the one place that decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// One process per job (`command`, `mode` unset or `"process"`).
    Process,
    /// Warm processes (`command`, `mode = "persistent"`).
    Persistent,
    /// An HTTP POST per job (`url`).
    Http,
}

impl HandlerEntry {
    /// Whether a command handler gets `data.command` decoded to JSON
    /// (`decode_command`, default true).
    pub fn decodes_command(&self) -> bool {
        self.decode_command.unwrap_or(true)
    }

    /// This entry's transport: `url` means HTTP, `mode = "persistent"` warm
    /// processes, anything else one process per job. (Entries that set
    /// both `url` and `command`, or an unknown `mode`, are refused when the
    /// settings are resolved.)
    pub fn transport(&self) -> Transport {
        match (&self.url, self.mode.as_deref()) {
            (Some(_), _) => Transport::Http,
            (None, Some("persistent")) => Transport::Persistent,
            (None, _) => Transport::Process,
        }
    }
}

/// A setting that Laravel allows to be `null`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nullable {
    /// Explicitly null.
    Null,
    /// Seconds.
    Seconds(u64),
}

impl Nullable {
    /// `None` for null.
    pub fn seconds(self) -> Option<u64> {
        match self {
            Nullable::Null => None,
            Nullable::Seconds(s) => Some(s),
        }
    }

    /// Reads `"null"` (any case, as Laravel's `env()`), or whole seconds.
    pub fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("null") || t.eq_ignore_ascii_case("(null)") {
            return Some(Nullable::Null);
        }
        t.parse().ok().map(Nullable::Seconds)
    }
}

fn nullable_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Nullable>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(u64),
        Text(String),
        Flag(bool),
    }
    Ok(Some(match Raw::deserialize(d)? {
        Raw::Seconds(s) => Nullable::Seconds(s),
        Raw::Flag(false) => Nullable::Null,
        Raw::Flag(true) => {
            return Err(serde::de::Error::custom(
                "expected seconds, \"null\" or false",
            ));
        }
        Raw::Text(t) => Nullable::parse(&t)
            .ok_or_else(|| serde::de::Error::custom("expected seconds, \"null\" or false"))?,
    }))
}

impl Layer {
    /// Parses a TOML file's text.
    ///
    /// # Errors
    /// TOML syntax errors and unknown keys, with their position.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// Resolves each handler program given as a relative path (it holds a
    /// `/` but does not start with one) against `dir`, the directory of the
    /// config file it was read from, so a worker started from any folder runs
    /// the same program. Absolute paths and bare names (looked up in `PATH`
    /// when the job runs) are kept as they are; arguments after the program
    /// are never changed. A relative `dir` is made absolute against the
    /// working directory first.
    pub fn resolve_handler_paths(&mut self, dir: &std::path::Path) {
        let dir = if dir.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            dir
        };
        let base = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        for handler in self.handlers.iter_mut().flatten() {
            if let Some(program) = handler.command.as_mut().and_then(|c| c.first_mut())
                && program.contains('/')
                && !program.starts_with('/')
            {
                *program = base.join(&*program).to_string_lossy().into_owned();
            }
        }
    }

    /// This layer with every value `over` sets replacing ours.
    pub fn overlaid_by(self, over: Layer) -> Layer {
        Layer {
            app: self.app.overlaid_by(over.app),
            redis: self.redis.overlaid_by(over.redis),
            queue: self.queue.overlaid_by(over.queue),
            database: self.database.overlaid_by(over.database),
            sqs: self.sqs.overlaid_by(over.sqs),
            cache: self.cache.overlaid_by(over.cache),
            failed: self.failed.overlaid_by(over.failed),
            worker: self.worker.overlaid_by(over.worker),
            metrics: self.metrics.overlaid_by(over.metrics),
            horizon: self.horizon.overlaid_by(over.horizon),
            pulse: self.pulse.overlaid_by(over.pulse),
            bookkeeping: self.bookkeeping.overlaid_by(over.bookkeeping),
            handlers: over.handlers.or(self.handlers),
        }
    }
}

/// `overlaid_by` for a section: each field `over` sets replaces ours. The
/// struct literal names every field, so a field left out of the list does
/// not compile.
macro_rules! overlay {
    ($section:ident { $($field:ident),* $(,)? }) => {
        impl $section {
            /// This section with every value `over` sets replacing ours.
            fn overlaid_by(self, over: $section) -> $section {
                $section {
                    $($field: over.$field.or(self.$field)),*
                }
            }
        }
    };
}

overlay!(AppLayer { path, laravel });
overlay!(RedisLayer {
    url,
    prefix,
    cluster,
    nodes,
    sentinels,
    service,
    sentinel_password,
    tls_ca_file,
    tls_cert_file,
    tls_key_file,
    tls_insecure,
    scheme,
});
overlay!(QueueLayer {
    connection,
    driver,
    unserved,
    members,
    queue,
    retry_after,
    block_for,
    host,
    port,
    beanstalkd_queue,
    beanstalkd_retry_after,
    migration_batch_size,
    unmatched,
    unmatched_release_delay,
});
overlay!(CacheLayer {
    store,
    path,
    url,
    table,
    database,
    redis_prefix,
    prefix,
    colon,
});
overlay!(FailedLayer { driver, url, table });
overlay!(BookkeepingLayer {
    enabled,
    until_processing,
    unique,
    lock_store,
    lock_url,
    lock_table,
    batches_url,
    batches_table,
    finish_with,
});
overlay!(DatabaseLayer {
    url,
    table,
    queue,
    retry_after,
});
overlay!(SqsLayer {
    prefix,
    suffix,
    region,
    key,
    secret,
    token,
    endpoint,
    queue,
    overflow_enabled,
    overflow_store,
    overflow_delete_after_processing,
});
overlay!(WorkerLayer {
    kill_grace,
    output_limit,
    heartbeat_file,
    error_summary_interval,
    drain_timeout,
    on_lease_lost,
    trip_after,
    trip_backoff,
    on_handler_tripped,
    balance,
    auto_scaling_strategy,
    min_processes,
    max_processes,
    balance_max_shift,
    balance_cooldown,
    queues,
});
overlay!(MetricsLayer {
    listen,
    backlog_interval,
    header_timeout,
    idle_timeout,
    max_connections,
});
overlay!(HorizonLayer {
    enabled,
    prefix,
    url,
    snapshot,
    trim_recent,
    trim_pending,
    trim_completed,
    trim_recent_failed,
    trim_failed,
    trim_monitored,
});
overlay!(PulseLayer {
    enabled,
    ingest,
    url,
    redis_url,
    queues,
    queues_sample_rate,
    slow_jobs,
    slow_jobs_sample_rate,
    slow_jobs_threshold,
    slow_jobs_thresholds,
    queues_ignore,
    slow_jobs_ignore,
});
