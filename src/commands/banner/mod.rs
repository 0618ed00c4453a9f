//! The start-up banner of `work`: what this worker is and what it watches,
//! in one INFO log line an operator can read (or, with `--json`, one JSON
//! line on stderr), before the first job.
//!
//! It names the version and build (git commit), the config sources in
//! order of precedence, the Redis address (never its password), every
//! queue's full ready-list key, the cache store and the exact restart key
//! watched (`queue:restart` writes it), the failed-job store, each handler
//! with its program and transport, and the concurrency. Durations are
//! written in seconds (`90 s`), never as Rust values.

use serde::Serialize;

use crate::cli::{BUILD, VERSION};
use crate::config::{CacheSettings, FailedSettings, HandlerSpec, Settings, redact};
use crate::queue::Queue;
use crate::worker::WorkerOptions;

mod block;
mod limits;

pub use limits::Limits;

/// One queue the worker takes jobs from.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct QueueLine {
    /// The queue's name (`default`).
    pub name: String,
    /// Its ready list's full key, prefix included
    /// (`laravel_database_queues:default`).
    pub key: String,
}

/// One `[[handlers]]` entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HandlerLine {
    /// The displayName pattern.
    #[serde(rename = "match")]
    pub pattern: String,
    /// `process`, `persistent` or `http`.
    pub transport: String,
    /// The program (command handlers) or the URL without credentials
    /// (HTTP handlers).
    pub target: String,
    /// The queues it is limited to; empty: all.
    pub queues: Vec<String>,
}

/// What `work` prints once at start.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Banner {
    /// The crate version.
    pub version: String,
    /// The git commit of the build, or `unknown`.
    pub build: String,
    /// Where the settings came from, lowest precedence first.
    pub config_sources: Vec<String>,
    /// The queue connection's driver, as `queue.connections.NAME.driver`
    /// names it (`redis`, `database`, `sqs`, `beanstalkd`).
    pub driver: String,
    /// The queue connection name (written into failed_jobs).
    pub connection: String,
    /// Where the queue is, as its driver describes it (the queue Redis;
    /// the database's engine, version, place, table and lock clause; the
    /// SQS prefix, endpoint and region; the beanstalkd server), without
    /// credentials.
    pub at: String,
    /// The same as `at`, on the Redis driver only: the field 0.1.0's JSON
    /// line named it by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// The queues, highest priority first.
    pub queues: Vec<QueueLine>,
    /// `retry_after` in words: `90 s` or `never`.
    pub retry_after: String,
    /// `block_for` in words: `5 s`, or when unset `unset (BLPOP on :notify for up to --sleep)`.
    pub block_for: String,
    /// The cache store: `redis <address>`, `file <dir>` or `none`.
    pub cache: String,
    /// The restart marker watched: the full Redis key, the file store's
    /// path, or `none` (no restart signal).
    pub restart_key: String,
    /// The failed-job store: `database-uuids <table> at <url>`, `redis
    /// <key>` or `null`.
    pub failed: String,
    /// The handlers, in match order.
    pub handlers: Vec<HandlerLine>,
    /// Jobs run at once.
    pub concurrency: usize,
    /// `queue:work`'s limits and flags.
    pub limits: Limits,
    /// The metrics and health endpoint's `[metrics] listen` address, or
    /// `off`.
    pub metrics: String,
    /// The heartbeat file `health` reads, or `off`.
    pub heartbeat: String,
    /// Whether Horizon's records are written (`[horizon] enabled`).
    pub horizon: bool,
}

/// Seconds in words: `90 s`, or `none_text` for `None`.
fn seconds(value: Option<u64>, none_text: &str) -> String {
    value.map_or_else(|| none_text.to_string(), |s| format!("{s} s"))
}

/// The cache store and the restart marker it watches, in words.
fn cache_lines(cache: &CacheSettings) -> (String, String) {
    match cache {
        CacheSettings::Redis {
            connection,
            key_prefix,
        } => (
            format!("redis {}", connection.describe()),
            format!("{key_prefix}{}", crate::cache::RESTART_KEY),
        ),
        CacheSettings::File { dir } => (
            format!("file {}", dir.display()),
            crate::cache::file::FileCache::new(dir.clone())
                .path(crate::cache::RESTART_KEY)
                .display()
                .to_string(),
        ),
        CacheSettings::Database { url, table, prefix } => (
            format!("database table {table} at {}", redact::url(url)),
            format!("{prefix}{} (table {table})", crate::cache::RESTART_KEY),
        ),
        CacheSettings::None => ("none".into(), "none (no restart signal)".into()),
    }
}

/// The failed-job store in words.
fn failed_line(settings: &Settings) -> String {
    match &settings.failed {
        FailedSettings::Database { url, table } => {
            format!("database-uuids table {table} at {}", redact::url(url))
        }
        // The hash `RedisFailedStore::new` writes (hash-tagged on a cluster).
        FailedSettings::Redis if settings.redis.is_cluster() => format!(
            "redis {}{{laravel-worker:failed_jobs}}",
            settings.redis_prefix
        ),
        FailedSettings::Redis => {
            format!("redis {}laravel-worker:failed_jobs", settings.redis_prefix)
        }
        FailedSettings::Null => "null (failed jobs are discarded)".into(),
    }
}

/// Each queue with where its jobs are, in the driver's words (a Redis
/// ready list's full key, a table and its `queue` column, a queue URL),
/// highest priority first.
fn queue_lines(queue: &Queue, queues: &[String]) -> Vec<QueueLine> {
    queues
        .iter()
        .map(|name| QueueLine {
            name: name.clone(),
            key: queue.location(&queue.handle(name)),
        })
        .collect()
}

/// One `[[handlers]]` entry: its transport and program or URL.
fn handler_line(h: &HandlerSpec) -> HandlerLine {
    let target = match (h.http(), h.command()) {
        (Some(http), _) => redact::url(&http.url),
        (None, command) => command
            .and_then(|c| c.command.first())
            .cloned()
            .unwrap_or_default(),
    };
    HandlerLine {
        pattern: h.pattern.clone(),
        transport: h.transport_name().to_string(),
        target,
        queues: h.queues.clone().unwrap_or_default(),
    }
}

impl Banner {
    /// The banner of a worker with `settings` (its sources as
    /// [`Settings::sources`]) and `options`, serving `queue`, its
    /// heartbeat file `heartbeat` (`--heartbeat-file` or `[worker]
    /// heartbeat_file`): the driver's fields come from the opened queue
    /// (where it is, where each queue's jobs are) and from its settings
    /// (how an idle worker waits).
    pub fn new(
        settings: &Settings,
        queue: &Queue,
        options: &WorkerOptions,
        heartbeat: Option<&std::path::Path>,
    ) -> Banner {
        let at = queue.describe();
        let driver = settings.driver.name().to_string();
        let redis = (driver == "redis").then(|| at.clone());
        let (cache, restart_key) = cache_lines(&settings.cache);
        Banner {
            version: VERSION.into(),
            build: BUILD.into(),
            config_sources: settings.sources.clone(),
            driver,
            connection: settings.connection.clone(),
            at,
            redis,
            queues: queue_lines(queue, &options.queues),
            retry_after: seconds(settings.retry_after, "never"),
            block_for: settings.driver.idle_wait_words(settings.block_for),
            cache,
            restart_key,
            failed: failed_line(settings),
            handlers: settings.handlers.iter().map(handler_line).collect(),
            concurrency: options.concurrency,
            limits: Limits::of(options),
            metrics: settings.metrics_listen.clone().unwrap_or("off".into()),
            heartbeat: heartbeat.map_or("off".into(), |p| p.display().to_string()),
            horizon: settings.horizon.is_some(),
        }
    }

    /// The banner as one JSON object (`"message":"worker starting"`,
    /// `"level":"info"` and the fields above).
    pub fn json(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            map.insert("level".into(), "info".into());
            map.insert("message".into(), "worker starting".into());
        }
        value.to_string()
    }

    /// Writes the banner: a block of INFO log lines, one per subject
    /// ([`Banner::lines`]), or with `json` one JSON line on stderr (stdout
    /// carries the job events).
    pub fn emit(&self, json: bool) {
        if json {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "{}", self.json());
            return;
        }
        for line in self.lines() {
            tracing::info!("{line}");
        }
    }
}
