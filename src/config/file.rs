//! The TOML configuration file, and the layer type every source fills.
//!
//! Each source (file, environment) produces a [`Layer`] whose fields are all
//! optional; layers are merged by precedence and then resolved against the
//! built-in defaults (see [`super::Settings::resolve`]).

use serde::{Deserialize, Deserializer};

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
    /// Default queue when `--queue` is not given.
    pub queue: Option<String>,
    /// Seconds; `"null"` disables reclaiming.
    #[serde(default, deserialize_with = "nullable_seconds")]
    pub retry_after: Option<Nullable>,
    /// Seconds to block on `:notify`; `"null"` never blocks.
    #[serde(default, deserialize_with = "nullable_seconds")]
    pub block_for: Option<Nullable>,
    /// Most jobs moved per migrate; -1 for all.
    pub migration_batch_size: Option<i64>,
    /// `fail` (default) or `release`.
    pub unmatched: Option<String>,
    /// Seconds before a released unmatched job is available again.
    pub unmatched_release_delay: Option<u64>,
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
    /// ones still running then are handed back at once (released). Unset:
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
    /// Persistent mode: warm processes kept (default 1).
    pub processes: Option<usize>,
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
    /// Faults of this handler itself, in a row, that trip it (default
    /// `[worker] trip_after`; 0 = never).
    pub trip_after: Option<u32>,
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
            app: AppLayer {
                path: over.app.path.or(self.app.path),
                laravel: over.app.laravel.or(self.app.laravel),
            },
            redis: RedisLayer {
                url: over.redis.url.or(self.redis.url),
                prefix: over.redis.prefix.or(self.redis.prefix),
                cluster: over.redis.cluster.or(self.redis.cluster),
                nodes: over.redis.nodes.or(self.redis.nodes),
                sentinels: over.redis.sentinels.or(self.redis.sentinels),
                service: over.redis.service.or(self.redis.service),
                sentinel_password: over
                    .redis
                    .sentinel_password
                    .or(self.redis.sentinel_password),
                tls_ca_file: over.redis.tls_ca_file.or(self.redis.tls_ca_file),
                tls_cert_file: over.redis.tls_cert_file.or(self.redis.tls_cert_file),
                tls_key_file: over.redis.tls_key_file.or(self.redis.tls_key_file),
                tls_insecure: over.redis.tls_insecure.or(self.redis.tls_insecure),
                scheme: over.redis.scheme.or(self.redis.scheme),
            },
            queue: QueueLayer {
                connection: over.queue.connection.or(self.queue.connection),
                queue: over.queue.queue.or(self.queue.queue),
                retry_after: over.queue.retry_after.or(self.queue.retry_after),
                block_for: over.queue.block_for.or(self.queue.block_for),
                migration_batch_size: over
                    .queue
                    .migration_batch_size
                    .or(self.queue.migration_batch_size),
                unmatched: over.queue.unmatched.or(self.queue.unmatched),
                unmatched_release_delay: over
                    .queue
                    .unmatched_release_delay
                    .or(self.queue.unmatched_release_delay),
            },
            cache: CacheLayer {
                store: over.cache.store.or(self.cache.store),
                path: over.cache.path.or(self.cache.path),
                url: over.cache.url.or(self.cache.url),
                database: over.cache.database.or(self.cache.database),
                redis_prefix: over.cache.redis_prefix.or(self.cache.redis_prefix),
                prefix: over.cache.prefix.or(self.cache.prefix),
                colon: over.cache.colon.or(self.cache.colon),
                table: over.cache.table.or(self.cache.table),
            },
            failed: FailedLayer {
                driver: over.failed.driver.or(self.failed.driver),
                url: over.failed.url.or(self.failed.url),
                table: over.failed.table.or(self.failed.table),
            },
            worker: WorkerLayer {
                kill_grace: over.worker.kill_grace.or(self.worker.kill_grace),
                output_limit: over.worker.output_limit.or(self.worker.output_limit),
                heartbeat_file: over.worker.heartbeat_file.or(self.worker.heartbeat_file),
                drain_timeout: over.worker.drain_timeout.or(self.worker.drain_timeout),
                on_lease_lost: over.worker.on_lease_lost.or(self.worker.on_lease_lost),
                trip_after: over.worker.trip_after.or(self.worker.trip_after),
                trip_backoff: over.worker.trip_backoff.or(self.worker.trip_backoff),
                on_handler_tripped: over
                    .worker
                    .on_handler_tripped
                    .or(self.worker.on_handler_tripped),
                error_summary_interval: over
                    .worker
                    .error_summary_interval
                    .or(self.worker.error_summary_interval),
            },
            metrics: MetricsLayer {
                listen: over.metrics.listen.or(self.metrics.listen),
                backlog_interval: over
                    .metrics
                    .backlog_interval
                    .or(self.metrics.backlog_interval),
                header_timeout: over.metrics.header_timeout.or(self.metrics.header_timeout),
                idle_timeout: over.metrics.idle_timeout.or(self.metrics.idle_timeout),
                max_connections: over
                    .metrics
                    .max_connections
                    .or(self.metrics.max_connections),
            },
            horizon: HorizonLayer {
                enabled: over.horizon.enabled.or(self.horizon.enabled),
                prefix: over.horizon.prefix.or(self.horizon.prefix),
                url: over.horizon.url.or(self.horizon.url),
                snapshot: over.horizon.snapshot.or(self.horizon.snapshot),
                trim_recent: over.horizon.trim_recent.or(self.horizon.trim_recent),
                trim_pending: over.horizon.trim_pending.or(self.horizon.trim_pending),
                trim_completed: over.horizon.trim_completed.or(self.horizon.trim_completed),
                trim_recent_failed: over
                    .horizon
                    .trim_recent_failed
                    .or(self.horizon.trim_recent_failed),
                trim_failed: over.horizon.trim_failed.or(self.horizon.trim_failed),
                trim_monitored: over.horizon.trim_monitored.or(self.horizon.trim_monitored),
            },
            handlers: over.handlers.or(self.handlers),
        }
    }
}
