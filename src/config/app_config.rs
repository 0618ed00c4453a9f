//! Settings read from the app itself: `php/laravel-worker-config.php` boots
//! the app's configuration (its `.env`, the process environment, its
//! `config/*.php` or `bootstrap/cache/config.php` when `config:cache`d) and
//! prints what Laravel resolved; this module runs it and maps the answer
//! onto a [`Layer`].
//!
//! It runs with `--app=/srv/app`, and by default when `--env-file` points
//! into a directory that has `artisan` and `bootstrap/app.php` and `php` is
//! on the `PATH`. Where PHP is absent the `.env` rules ([`super::dotenv`])
//! apply alone, and the start-up log says so.
//!
//! The app's answer holds passwords: nothing here logs it, and every URL
//! that reaches a message goes through [`super::redact`].

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use super::database::DbConnection;
use super::driver::{Driver, QueueDriverSettings};
use super::failover::FailoverMember;
use super::file::{Layer, Nullable, ThresholdEntry};
use crate::exception::LaravelVersion;

/// The reader script, fed to `php` on stdin (so the binary needs no files
/// beside it).
const SCRIPT: &str = include_str!("../../php/laravel-worker-config.php");

/// Longest the reader may take (the app boots its configuration only; a
/// hang is a broken app, not a slow one).
const TIMEOUT: Duration = Duration::from_secs(60);

/// Most bytes of the reader's answer (stdout): 4 MiB; more is refused.
const MAX_OUTPUT: u64 = 4 * 1024 * 1024;

/// Bytes of the reader's stderr kept (the last ones, where PHP's message
/// is): 64 KiB; the rest is read and dropped.
const MAX_STDERR: usize = 64 * 1024;

/// Where the app to ask is, from `--app` and `--env-file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppSource {
    /// `--app=PATH`: asked for; a failure to read it is fatal.
    Explicit(PathBuf),
    /// The `--env-file`'s directory, which has `artisan`: asked when PHP
    /// is there; a failure falls back to the `.env` rules with a warning.
    Detected(PathBuf),
    /// Nothing to ask (no app, or `--app=none`).
    None,
}

impl AppSource {
    /// Chooses from the flags: `--app` (`none` or `off` turns reading off),
    /// else the `--env-file`'s directory when it holds `artisan` and
    /// `bootstrap/app.php`.
    pub fn choose(app: Option<&Path>, env_file: Option<&Path>) -> AppSource {
        match app {
            Some(p) if p == Path::new("none") || p == Path::new("off") => AppSource::None,
            Some(p) => AppSource::Explicit(p.to_path_buf()),
            None => {
                let Some(env_file) = env_file else {
                    return AppSource::None;
                };
                let dir = env_file
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                if dir.join("artisan").is_file() && dir.join("bootstrap/app.php").is_file() {
                    AppSource::Detected(dir.to_path_buf())
                } else {
                    AppSource::None
                }
            }
        }
    }
}

/// Warns when settings follow the `.env` rules although the app beside
/// `env_file` has a cached configuration (`bootstrap/cache/config.php`,
/// made by `php artisan config:cache`): Laravel then reads the cache and
/// ignores the `.env`, so values changed in the `.env` (or in
/// `config/*.php`) since the cache was made are not the app's. Only PHP
/// can read the cache; the worker says so instead of guessing.
pub fn warn_if_config_cached(env_file: &Path) {
    let dir = env_file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let cached = dir.join("bootstrap/cache/config.php");
    if cached.is_file() {
        tracing::warn!(
            cache = %cached.display(),
            "the app's configuration is cached (config:cache): Laravel reads the cache, \
             not the .env, so the settings derived from the .env may not be the app's; \
             put php on the PATH (or pass --app) or set them in the config file"
        );
    }
}

/// Why the app could not be asked.
#[derive(Debug)]
pub enum ReadError {
    /// No `php` on the `PATH`.
    NoPhp,
    /// PHP ran and failed, or printed something that is not the answer.
    Failed(anyhow::Error),
}

/// Runs the reader against the app at `dir` and maps its answer.
///
/// # Errors
/// [`ReadError::NoPhp`] when `php` cannot be started;
/// [`ReadError::Failed`] when `dir` is not an app directory, the app does
/// not boot (PHP's message, which names no secret of ours), the reader
/// runs past its time or prints more than 4 MiB, or the answer cannot be
/// used.
pub fn read(dir: &Path) -> Result<Layer, ReadError> {
    read_for(dir, None)
}

/// As [`read`], for the queue connection `wanted` (see
/// [`layer_for_connection`]).
///
/// # Errors
/// As [`read`].
pub fn read_for(dir: &Path, wanted: Option<&str>) -> Result<Layer, ReadError> {
    let dir = std::fs::canonicalize(dir)
        .with_context(|| format!("cannot open the app directory {}", dir.display()))
        .map_err(ReadError::Failed)?;
    if !dir.join("bootstrap/app.php").is_file() {
        return Err(ReadError::Failed(anyhow::anyhow!(
            "{} is not a Laravel app: it has no bootstrap/app.php",
            dir.display()
        )));
    }
    let answer = run_php(&dir)?;
    let value: Value = serde_json::from_slice(&answer)
        .context("the app's configuration reader printed something that is not JSON")
        .map_err(ReadError::Failed)?;
    layer_for_connection(&value, &dir, wanted).map_err(ReadError::Failed)
}

/// `php -- --app=DIR` with the script on stdin; its stdout. Its stdout
/// and stderr are read at the same time, so that neither can fill its
/// pipe and stall the other.
fn run_php(dir: &Path) -> Result<Vec<u8>, ReadError> {
    let mut child = spawn_php(dir)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A PHP that exits early closes the pipe: its status says why.
        let _ = stdin.write_all(SCRIPT.as_bytes());
    }
    let deadline = Instant::now() + TIMEOUT;
    let out = child
        .stdout
        .take()
        .map(|s| on_thread(move || head(s, MAX_OUTPUT + 1)));
    let err = child
        .stderr
        .take()
        .map(|s| on_thread(move || tail(s, MAX_STDERR)));
    let out = receive(out, deadline);
    if out.as_ref().is_some_and(|o| o.len() as u64 > MAX_OUTPUT) {
        stop(&mut child);
        return Err(ReadError::Failed(anyhow::anyhow!(
            "the app's configuration reader printed more than {} MiB, more than any \
             configuration needs; check the app's config/*.php",
            MAX_OUTPUT >> 20
        )));
    }
    let err = receive(err, deadline);
    let (Some(out), Some(err)) = (out, err) else {
        stop(&mut child);
        return Err(ReadError::Failed(anyhow::anyhow!(
            "the app's configuration reader ran longer than {} s",
            TIMEOUT.as_secs()
        )));
    };
    let status = child
        .wait()
        .context("waiting for php")
        .map_err(ReadError::Failed)?;
    if !status.success() {
        return Err(ReadError::Failed(anyhow::anyhow!(
            "the app's configuration could not be read ({status}): {}",
            super::redact::text(&why_failed(&err, &out))
        )));
    }
    Ok(out)
}

/// Why the reader failed, in one line: the last line of its stderr, else
/// (an app that printed and exited while it booted: PHP's CLI also shows
/// its errors on stdout) the last line it printed on stdout, at most 300
/// characters, else that it said nothing.
fn why_failed(err: &[u8], out: &[u8]) -> String {
    let err = last_line(err);
    if !err.is_empty() {
        return err;
    }
    let out = last_line(out);
    if out.is_empty() {
        return "PHP printed nothing (an exit() while the app boots?)".to_string();
    }
    let line: String = out.chars().take(300).collect();
    format!("nothing on stderr; the last line printed on stdout: {line}")
}

/// Starts `php -- --app=DIR` in `dir`, its three streams piped.
fn spawn_php(dir: &Path) -> Result<std::process::Child, ReadError> {
    match Command::new("php")
        .arg("--")
        .arg(format!("--app={}", dir.display()))
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => Ok(child),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ReadError::NoPhp),
        Err(e) => Err(ReadError::Failed(
            anyhow::Error::new(e).context("cannot run php"),
        )),
    }
}

/// Runs `work` on a thread of its own; its result arrives on the receiver.
fn on_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    rx
}

/// What `rx` delivers by `deadline`, if anything.
fn receive<T>(rx: Option<mpsc::Receiver<T>>, deadline: Instant) -> Option<T> {
    rx?.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .ok()
}

/// Kills the reader and reaps it.
fn stop(child: &mut std::process::Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The first `limit` bytes of `stream` (read until then, or its end).
fn head(stream: impl Read, limit: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = stream.take(limit).read_to_end(&mut out);
    out
}

/// The last `keep` bytes of `stream`, read to its end.
fn tail(mut stream: impl Read, keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&chunk[..n]);
        if kept.len() > 2 * keep {
            kept.drain(..kept.len() - keep);
        }
    }
    let start = kept.len().saturating_sub(keep);
    kept.split_off(start)
}

/// The last line of `err` that is not blank, trimmed.
fn last_line(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// A scalar of the answer as text: strings as they are, numbers and
/// booleans as PHP would print them, null and arrays as `None`.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(true) => Some("1".into()),
        Value::Bool(false) => Some(String::new()),
        _ => None,
    }
}

/// `retry_after` / `block_for`: null, or whole seconds (PHP may give a
/// number or a numeric string).
fn nullable(v: &Value, what: &str) -> anyhow::Result<Option<Nullable>> {
    match v {
        Value::Null => Ok(Some(Nullable::Null)),
        other => match text(other).and_then(|t| Nullable::parse(&t)) {
            Some(n) => Ok(Some(n)),
            None => bail!("the app's {what} = {other} is neither seconds nor null"),
        },
    }
}

/// A Redis connection's URL from its config array (`url`, or `host`,
/// `port`, `username`, `password`, `database`, `scheme`), built the way
/// the environment's `REDIS_*` variables build one. The second value:
/// `scheme` asks for TLS.
fn redis_url(conn: &Value) -> anyhow::Result<(Option<String>, Option<String>)> {
    let get = |k: &str| text(&conn[k]);
    let mut scheme = get("scheme").filter(|s| !s.is_empty());
    if let Some(url) = get("url").filter(|u| !u.is_empty()) {
        return Ok((Some(url), scheme));
    }
    let mut host = get("host");
    // phpredis takes `tls://host` as a host.
    if let Some(rest) = host.as_deref().and_then(|h| h.strip_prefix("tls://")) {
        host = Some(rest.to_string());
        scheme = Some("tls".into());
    }
    let vars: HashMap<&str, String> = [
        ("REDIS_HOST", host),
        ("REDIS_PORT", get("port")),
        ("REDIS_USERNAME", get("username")),
        ("REDIS_PASSWORD", get("password")),
        ("REDIS_DB", get("database")),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect();
    let layer =
        super::env::layer(|k| vars.get(k).cloned()).context("the app's Redis connection")?;
    Ok((layer.redis.url, scheme))
}

/// A database connection's URL (the failed store, the database cache
/// store, the database queue), from its config array as the app resolved
/// it: its `url` merged over its parts, a relative SQLite file the app's
/// (see [`DbConnection::url`]).
///
/// # Errors
/// A `url` Laravel refuses as malformed (see [`DbConnection::url`]).
fn database_url(conn: &Value, app: &Path) -> anyhow::Result<Option<String>> {
    db_connection(conn).url(Some(app))
}

/// A `database.connections.X` array of the answer as a [`DbConnection`];
/// empty strings are unset, as `DB_*` variables are.
fn db_connection(conn: &Value) -> DbConnection {
    let get = |k: &str| text(&conn[k]).filter(|s| !s.is_empty());
    DbConnection {
        driver: get("driver"),
        url: get("url"),
        host: get("host"),
        port: get("port"),
        database: get("database"),
        username: get("username"),
        password: get("password"),
        socket: get("unix_socket"),
    }
}

/// The Redis key prefix of a connection: its own `options.prefix`, else
/// the global `options.prefix`; none at all means no prefix (Laravel).
fn redis_prefix(answer: &Value, conn: &Value) -> String {
    text(&conn["options_prefix"])
        .or_else(|| text(&answer["redis"]["prefix"]))
        .unwrap_or_default()
}

/// Maps the reader's answer onto a layer (see the module docs): every key
/// it sets is one of [`APP_KEYS`].
///
/// # Errors
/// Values the worker cannot use (a `retry_after` that is not seconds, a
/// port that is not a number).
pub fn layer_from_answer(answer: &Value, app: &Path) -> anyhow::Result<Layer> {
    layer_for_connection(answer, app, None)
}

/// As [`layer_from_answer`], for the queue connection `wanted` (the
/// `work` command's connection argument, or `[queue] connection`) when
/// the app defines it; else the app's default connection.
///
/// # Errors
/// As [`layer_from_answer`]; and `wanted` naming a connection whose
/// driver the worker does not run.
pub fn layer_for_connection(
    answer: &Value,
    app: &Path,
    wanted: Option<&str>,
) -> anyhow::Result<Layer> {
    let mut layer = Layer::default();
    layer.app.path = Some(app.to_path_buf());
    let version = text(&answer["version"]).and_then(|v| LaravelVersion::parse(&v));
    if let Some(v) = version {
        layer.app.laravel = Some(format!("{}.{}", v.major, v.minor));
    }
    let redis_conn_name = queue_connection(answer, wanted, app, &mut layer)?;
    redis_connection(answer, &redis_conn_name, &mut layer)?;
    cache_store(answer, version, app, &mut layer)?;
    failed_store(answer, app, &mut layer)?;
    bookkeeping(answer, app, &mut layer)?;
    horizon_from_answer(answer, &redis_conn_name, &mut layer)?;
    pulse_from_answer(answer, &redis_conn_name, app, &mut layer)?;
    Ok(layer)
}

/// The queue connection: `wanted` when the app defines it, else the
/// default one when its driver is `redis` or `database`, else one named
/// `redis`, else the first Redis one. Its name, driver, queue,
/// `retry_after` and `block_for` go into `layer`, and for a database
/// connection its database and table. Returns the Redis connection it
/// names (`default` when there is none, or it is a database connection:
/// the app's `default` Redis connection then stays `[redis]`, for a Redis
/// cache store that does not name its own).
///
/// # Errors
/// `wanted` names a connection of another driver (`sqs`, `sync`…);
/// a `retry_after` or `block_for` that is not seconds.
fn queue_connection(
    answer: &Value,
    wanted: Option<&str>,
    app: &Path,
    layer: &mut Layer,
) -> anyhow::Result<String> {
    let connections = answer["queue"]["connections"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let driver_of = |name: &str| connections.get(name).and_then(|c| text(&c["driver"]));
    let runs = |name: &str| driver_of(name).as_deref().and_then(Driver::named).is_some();
    let default = text(&answer["queue"]["default"]).unwrap_or_default();
    if let Some(wanted) = wanted.filter(|w| connections.contains_key(*w) && !runs(w)) {
        let unserved = QueueDriverSettings::Unserved {
            connection: wanted.to_string(),
            driver: driver_of(wanted).unwrap_or_default(),
            members: failover_members(&connections, wanted),
        };
        bail!("{}", unserved.refusal().unwrap_or_default());
    }
    if let Some(wanted) = wanted.filter(|w| !connections.contains_key(*w)) {
        tracing::warn!(
            connection = %wanted,
            "the app defines no queue connection of this name (queue.connections); \
             the app's default connection's settings are used under this name"
        );
    }
    if wanted.is_none() && connections.contains_key(&default) && !runs(&default) {
        mark_unserved(layer, &default, driver_of(&default));
        layer.queue.members = failover_members(&connections, &default);
        return Ok("default".to_string());
    }
    let chosen = if let Some(wanted) = wanted.filter(|w| runs(w)) {
        Some(wanted.to_string())
    } else if runs(&default) {
        Some(default.clone())
    } else if driver_of("redis").as_deref() == Some("redis") {
        Some("redis".to_string())
    } else {
        connections
            .iter()
            .find(|(_, c)| c["driver"] == "redis")
            .map(|(n, _)| n.clone())
    };
    let Some(name) = chosen else {
        tracing::warn!(
            default = %default,
            "the app has no Redis or database queue connection \
             (queue.connections.*.driver = \"redis\" or \"database\"); \
             the worker uses its own settings"
        );
        return Ok("default".to_string());
    };
    let conn = &connections[&name];
    layer.queue.connection = Some(name.clone());
    layer.queue.driver = driver_of(&name);
    layer.queue.queue = text(&conn["queue"]).filter(|q| !q.is_empty());
    if conn.get("retry_after").is_some() {
        layer.queue.retry_after = nullable(&conn["retry_after"], "retry_after")?;
    }
    if driver_of(&name).as_deref() == Some("sqs") {
        sqs_connection(conn, text(&answer["cache"]["default"]), layer);
        return Ok("default".to_string());
    }
    if driver_of(&name).as_deref() == Some("beanstalkd") {
        beanstalkd_connection(conn, layer);
    }
    if driver_of(&name).as_deref() == Some("database") {
        layer.database.url = database_url(&conn["db"], app)?;
        layer.database.table = text(&conn["table"]).filter(|t| !t.is_empty());
        return Ok("default".to_string());
    }
    if conn.get("block_for").is_some() {
        layer.queue.block_for = nullable(&conn["block_for"], "block_for")?;
    }
    Ok(text(&conn["connection"]).unwrap_or_else(|| "default".into()))
}

/// The members of the app's connection `name` when its driver is
/// `failover` (`queue.connections.NAME.connections`, each with its own
/// driver); `None` for any other connection.
fn failover_members(
    connections: &serde_json::Map<String, Value>,
    name: &str,
) -> Option<Vec<FailoverMember>> {
    let conn = connections.get(name)?;
    if text(&conn["driver"]).as_deref() != Some("failover") {
        return None;
    }
    let listed = conn["connections"].as_array()?;
    Some(
        listed
            .iter()
            .filter_map(text)
            .map(|member| FailoverMember {
                driver: connections.get(&member).and_then(|c| text(&c["driver"])),
                connection: member,
            })
            .collect(),
    )
}

/// Names the app's default connection `name`, of a `driver` the worker
/// does not run (`sync`, `failover`, `deferred`…), in `layer`, marked
/// to be refused by the commands that open the queue, never served as
/// Redis.
fn mark_unserved(layer: &mut Layer, name: &str, driver: Option<String>) {
    layer.queue.connection = Some(name.to_string());
    layer.queue.driver = driver;
    layer.queue.unserved = Some(true);
}

/// An `sqs` queue connection's keys, as `SqsConnector` reads them;
/// `endpoint` is what a local or compatible SQS is given as (every other
/// key goes to the `SqsClient`). Its `overflow.enabled` (13.9+; absent
/// before, so off) decides whether pointer bodies are followed; its
/// `overflow.store` counts only
/// when it is not the app's default cache store `cache_default` (`null`
/// is that store), which the worker reads as `[cache]`.
fn sqs_connection(conn: &Value, cache_default: Option<String>, layer: &mut Layer) {
    let key = |k: &str| text(&conn[k]).filter(|v| !v.is_empty());
    layer.sqs.prefix = key("prefix");
    layer.sqs.suffix = key("suffix");
    layer.sqs.region = key("region");
    layer.sqs.key = key("key");
    layer.sqs.secret = key("secret").map(crate::redact::Secret::from);
    layer.sqs.token = key("token").map(crate::redact::Secret::from);
    layer.sqs.endpoint = key("endpoint");
    let overflow = &conn["overflow"];
    // `enabled` as PHP tests it: a boolean, or what `env()` left there.
    layer.sqs.overflow_enabled = Some(match &overflow["enabled"] {
        Value::Bool(b) => *b,
        Value::Null => false,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !(s.is_empty() || s == "0"),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    });
    layer.sqs.overflow_store = text(&overflow["store"])
        .filter(|store| !store.is_empty() && Some(store) != cache_default.as_ref());
    layer.sqs.overflow_delete_after_processing = overflow["delete_after_processing"].as_bool();
}

/// A `beanstalkd` queue connection's `host` and `port` (absent from the
/// skeleton, default 11300), as `BeanstalkdConnector` reads them.
fn beanstalkd_connection(conn: &Value, layer: &mut Layer) {
    layer.queue.host = text(&conn["host"]).filter(|h| !h.is_empty());
    layer.queue.port = match &conn["port"] {
        Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Value::String(p) => p.trim().parse().ok(),
        _ => None,
    };
}

/// The Redis connection `name` behind the queue: a connection of that name
/// wins over a cluster of that name, as in Laravel's RedisManager.
fn redis_connection(answer: &Value, name: &str, layer: &mut Layer) -> anyhow::Result<()> {
    let redis = &answer["redis"];
    let conn = &redis["connections"][name];
    if conn.is_object() {
        let (url, scheme) = redis_url(conn)?;
        layer.redis.url = url;
        layer.redis.scheme = scheme;
        layer.redis.prefix = Some(redis_prefix(answer, conn));
        layer.redis.cluster = Some(false);
    } else if let Some(nodes) = redis["clusters"][name].as_array() {
        let mut urls = Vec::new();
        for node in nodes {
            let (url, scheme) = redis_url(node)?;
            urls.extend(url);
            layer.redis.scheme = layer.redis.scheme.take().or(scheme);
        }
        let mut urls = urls.into_iter();
        layer.redis.url = urls.next();
        let rest: Vec<String> = urls.collect();
        layer.redis.nodes = (!rest.is_empty()).then_some(rest);
        layer.redis.cluster = Some(true);
        layer.redis.prefix = Some(text(&redis["prefix"]).unwrap_or_default());
    } else {
        tracing::warn!(
            connection = %name,
            "the app's queue names a Redis connection that database.redis does not define"
        );
    }
    Ok(())
}

/// The cache store: Redis (its connection and prefixes, the colon from the
/// framework `version`), file or database; any other is none.
fn cache_store(
    answer: &Value,
    version: Option<LaravelVersion>,
    app: &Path,
    layer: &mut Layer,
) -> anyhow::Result<()> {
    let cache = &answer["cache"];
    let store = &cache["store"];
    let prefix = || {
        text(&store["prefix"])
            .or_else(|| text(&cache["prefix"]))
            .unwrap_or_default()
    };
    match text(&store["driver"]).unwrap_or_default().as_str() {
        "redis" => {
            layer.cache.store = Some("redis".into());
            let name = text(&store["connection"]).unwrap_or_else(|| "default".into());
            let conn = &answer["redis"]["connections"][&name];
            if conn.is_object() {
                let (url, _) = redis_url(conn)?;
                layer.cache.url = url;
                layer.cache.redis_prefix = Some(redis_prefix(answer, conn));
            }
            layer.cache.prefix = Some(prefix());
            layer.cache.colon = version.map(|v| v.major <= 10);
        }
        "file" => {
            layer.cache.store = Some("file".into());
            layer.cache.path = text(&store["path"]).map(PathBuf::from);
        }
        "database" => {
            layer.cache.store = Some("database".into());
            layer.cache.url = database_url(&cache["database"], app)?;
            layer.cache.table = text(&store["table"]).filter(|t| !t.is_empty());
            layer.cache.prefix = Some(prefix());
        }
        other => {
            tracing::warn!(
                store = %text(&cache["default"]).unwrap_or_default(),
                driver = other,
                "the app's cache store is not supported (redis, database and file are): \
                 restart and pause signals will not be seen and maxExceptions is not counted"
            );
            layer.cache.store = Some("none".into());
        }
    }
    Ok(())
}

/// Where the bookkeeping writes (`[bookkeeping]`): the name of the app's
/// default cache store and its lock connection (Redis) or locks table
/// (database), and the batches table (`queue.batching`) and its database.
///
/// # Errors
/// A lock connection whose URL Laravel would refuse.
fn bookkeeping(answer: &Value, app: &Path, layer: &mut Layer) -> anyhow::Result<()> {
    let cache = &answer["cache"];
    let store = &cache["store"];
    let b = &mut layer.bookkeeping;
    match text(&store["driver"]).as_deref() {
        Some("redis") => {
            b.lock_store = text(&cache["default"]);
            let lock = text(&store["lock_connection"])
                .or_else(|| text(&store["connection"]))
                .unwrap_or_else(|| "default".into());
            let conn = &answer["redis"]["connections"][&lock];
            if conn.is_object() {
                b.lock_url = redis_url(conn)?.0;
            }
        }
        Some("database") => {
            b.lock_store = text(&cache["default"]);
            b.lock_table = text(&store["lock_table"]).filter(|t| !t.is_empty());
        }
        _ => {}
    }
    let batching = &answer["batching"];
    if batching["db"].is_object() {
        // A batches database the worker cannot name is left to the
        // defaults (and named at start): it must not stop the app's
        // settings from being read.
        b.batches_url = database_url(&batching["db"], app).ok().flatten();
    }
    b.batches_table = text(&batching["table"]).filter(|t| !t.is_empty());
    Ok(())
}

/// The failed-jobs store: `database-uuids` (its database and table) or
/// `null`; another driver is left to the config file.
fn failed_store(answer: &Value, app: &Path, layer: &mut Layer) -> anyhow::Result<()> {
    let failed = &answer["failed"];
    match text(&failed["driver"]).as_deref() {
        Some("database-uuids") => {
            layer.failed.driver = Some("database-uuids".into());
            layer.failed.url = database_url(&answer["failed_database"], app)?;
            layer.failed.table = text(&failed["table"]).filter(|t| !t.is_empty());
        }
        Some("null") => layer.failed.driver = Some("null".into()),
        Some(other) => tracing::warn!(
            driver = other,
            "the app's failed-jobs driver is not supported (database-uuids and null are): \
             set [failed] in the config file"
        ),
        None => {}
    }
    Ok(())
}

/// A key's value in a layer, as the start-up lines show it; `None`: unset.
pub type Show = fn(&Layer) -> Option<String>;

/// One key of the config file that the app's answer can set.
pub struct AppKey {
    /// `[section] key`.
    pub key: &'static str,
    /// Its name in the start-up lines that say where a setting came from,
    /// and its value as shown there; `None`: not shown.
    pub shown: Option<(&'static str, Show)>,
    /// Whether a layer sets it.
    pub is_set: fn(&Layer) -> bool,
    /// Unsets it in a layer.
    pub unset: fn(&mut Layer),
}

/// An [`AppKey`] for `section.field`, with its start-up name and how its
/// value is shown when it is shown.
macro_rules! app_key {
    ($section:ident . $field:ident) => {
        AppKey {
            key: concat!("[", stringify!($section), "] ", stringify!($field)),
            shown: None,
            is_set: |l| l.$section.$field.is_some(),
            unset: |l| l.$section.$field = None,
        }
    };
    ($section:ident . $field:ident, $name:literal, $show:expr) => {
        AppKey {
            shown: Some((
                $name,
                (|l: &Layer| l.$section.$field.as_ref().map(|v| $show(v))) as Show,
            )),
            ..app_key!($section.$field)
        }
    };
}

/// Every key the app's answer can set ([`layer_from_answer`]), in the order
/// the start-up lines show them. From this one table: the keys the
/// environment yields to the app ([`without_app_settings`]), the start-up
/// lines ([`describe_sources`]), and the list in the book's Configuration
/// chapter (checked by `tests/docs.rs`).
pub const APP_KEYS: &[AppKey] = &[
    app_key!(redis.url, "redis url", super::redact::url),
    app_key!(redis.prefix, "redis prefix", quoted),
    app_key!(redis.cluster, "redis cluster", bool::to_string),
    app_key!(redis.nodes),
    app_key!(redis.scheme),
    app_key!(queue.connection, "queue connection", String::clone),
    app_key!(queue.driver, "queue driver", String::clone),
    app_key!(queue.queue, "queue", String::clone),
    app_key!(queue.retry_after, "retry_after", show_nullable),
    app_key!(queue.block_for, "block_for", show_nullable),
    app_key!(queue.host, "beanstalkd host", String::clone),
    app_key!(queue.port, "beanstalkd port", u16::to_string),
    app_key!(database.url, "database url", super::redact::url),
    app_key!(database.table, "jobs table", String::clone),
    app_key!(cache.store, "cache store", String::clone),
    app_key!(cache.path),
    app_key!(cache.url),
    app_key!(cache.table),
    app_key!(cache.redis_prefix),
    app_key!(cache.prefix, "cache prefix", quoted),
    app_key!(cache.colon, "cache colon", bool::to_string),
    app_key!(bookkeeping.lock_store, "lock store", String::clone),
    app_key!(bookkeeping.lock_url, "lock url", super::redact::url),
    app_key!(bookkeeping.lock_table, "lock table", String::clone),
    app_key!(bookkeeping.batches_url, "batches url", super::redact::url),
    app_key!(bookkeeping.batches_table, "batches table", String::clone),
    app_key!(failed.driver, "failed driver", String::clone),
    app_key!(failed.url, "failed url", super::redact::url),
    app_key!(failed.table, "failed table", String::clone),
    app_key!(app.path),
    app_key!(app.laravel, "laravel", String::clone),
    app_key!(horizon.enabled, "horizon", bool::to_string),
    app_key!(horizon.prefix, "horizon prefix", quoted),
    app_key!(horizon.url, "horizon url", super::redact::url),
    app_key!(horizon.trim_recent),
    app_key!(horizon.trim_pending),
    app_key!(horizon.trim_completed),
    app_key!(horizon.trim_recent_failed),
    app_key!(horizon.trim_failed),
    app_key!(horizon.trim_monitored),
    app_key!(pulse.enabled),
    app_key!(pulse.ingest, "pulse ingest", String::clone),
    app_key!(pulse.url, "pulse url", super::redact::url),
    app_key!(pulse.redis_url, "pulse redis url", super::redact::url),
    app_key!(pulse.queues),
    app_key!(pulse.queues_sample_rate),
    app_key!(pulse.slow_jobs),
    app_key!(pulse.slow_jobs_sample_rate),
    app_key!(pulse.slow_jobs_threshold),
    app_key!(pulse.slow_jobs_thresholds),
    app_key!(pulse.queues_ignore),
    app_key!(pulse.slow_jobs_ignore),
];

/// Horizon's config (`config/horizon.php`), when the app has one: the
/// records are then on by default (`[horizon] enabled = false` turns them
/// off), under `horizon.prefix` (`'horizon:'` when empty, as Horizon
/// reads it), on the `horizon.use` connection when it is not the queue's
/// (`queue_connection`), with `horizon.trim`.
///
/// # Errors
/// A `use` connection whose port is not a number.
fn horizon_from_answer(
    answer: &Value,
    queue_connection: &str,
    layer: &mut Layer,
) -> anyhow::Result<()> {
    let horizon = &answer["horizon"];
    if !horizon.is_object() {
        return Ok(());
    }
    layer.horizon.enabled = Some(true);
    layer.horizon.prefix = Some(
        text(&horizon["prefix"])
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "horizon:".into()),
    );
    let used = text(&horizon["use"]).unwrap_or_else(|| "default".into());
    let redis = &answer["redis"];
    let conn = &redis["connections"][&used];
    let node = redis["clusters"][&used].as_array().and_then(|n| n.first());
    if used != queue_connection {
        match (conn.is_object(), node) {
            (true, _) => layer.horizon.url = redis_url(conn)?.0,
            (false, Some(node)) => layer.horizon.url = redis_url(node)?.0,
            (false, None) => tracing::warn!(
                connection = %used,
                "horizon.use names a Redis connection that database.redis does not define; \
                 Horizon's records go to the queue's Redis"
            ),
        }
    }
    let minutes = |k: &str| text(&horizon["trim"][k]).and_then(|t| t.parse().ok());
    layer.horizon.trim_recent = minutes("recent");
    layer.horizon.trim_pending = minutes("pending");
    layer.horizon.trim_completed = minutes("completed");
    layer.horizon.trim_recent_failed = minutes("recent_failed");
    layer.horizon.trim_failed = minutes("failed");
    layer.horizon.trim_monitored = minutes("monitored");
    Ok(())
}

/// Laravel Pulse's config (`config/pulse.php`), when the app has Pulse:
/// `pulse.enabled` false turns the feed off; the ingest driver, the
/// storage database (`pulse.storage.database.connection`, else the
/// default connection), the ingest's Redis when `pulse.ingest.redis.
/// connection` is not the queue's (`queue_connection`), and the `Queues`
/// and `SlowJobs` recorders (off when left out of `recorders`; a
/// threshold map's `default`).
///
/// # Errors
/// A connection's `url` Laravel refuses, or a Redis port that is not a
/// number.
fn pulse_from_answer(
    answer: &Value,
    queue_connection: &str,
    app: &Path,
    layer: &mut Layer,
) -> anyhow::Result<()> {
    let pulse = &answer["pulse"];
    if !pulse.is_object() {
        return Ok(());
    }
    if pulse["enabled"] == Value::Bool(false) {
        layer.pulse.enabled = Some(false);
    }
    layer.pulse.ingest = text(&pulse["ingest"]);
    layer.pulse.url = database_url(&pulse["database"], app)?;
    let used = text(&pulse["redis_connection"]).unwrap_or_else(|| "default".into());
    let conn = &answer["redis"]["connections"][&used];
    if used != queue_connection && conn.is_object() {
        layer.pulse.redis_url = redis_url(conn)?.0;
    }
    let number = |v: &Value| text(v).and_then(|t| t.parse::<f64>().ok());
    let (queues, slow) = (&pulse["queues"], &pulse["slow_jobs"]);
    layer.pulse.queues = queues["enabled"].as_bool();
    layer.pulse.queues_sample_rate = number(&queues["sample_rate"]);
    layer.pulse.slow_jobs = slow["enabled"].as_bool();
    layer.pulse.slow_jobs_sample_rate = number(&slow["sample_rate"]);
    let ms = |v: &Value| number(v).filter(|ms| *ms >= 0.0).map(|ms| ms as u64);
    layer.pulse.slow_jobs_threshold = ms(&slow["threshold"]);
    layer.pulse.slow_jobs_thresholds = slow["thresholds"].as_array().map(|pairs| {
        pairs
            .iter()
            .filter_map(|pair| {
                Some(ThresholdEntry {
                    pattern: pair[0].as_str()?.to_string(),
                    ms: ms(&pair[1])?,
                })
            })
            .collect()
    });
    layer.pulse.queues_ignore = ignore_list(&queues["ignore"]);
    layer.pulse.slow_jobs_ignore = ignore_list(&slow["ignore"]);
    Ok(())
}

/// A recorder's `ignore` list as the app's answer gives it (strings).
fn ignore_list(list: &Value) -> Option<Vec<String>> {
    list.as_array().map(|l| {
        l.iter()
            .filter_map(|p| p.as_str().map(str::to_string))
            .collect()
    })
}

/// `env` without what `app` sets: the app's answer already reflects the
/// environment PHP ran in (the worker's own), and where the app's
/// `config/*.php` ignores or transforms a variable, the app is right.
pub fn without_app_settings(mut env: Layer, app: &Layer) -> Layer {
    for key in APP_KEYS {
        if (key.is_set)(app) {
            (key.unset)(&mut env);
        }
    }
    // The cache's own URL names its database (`REDIS_CACHE_DB` yields).
    if app.cache.url.is_some() {
        env.cache.database = None;
    }
    // `DB_QUEUE` and `DB_QUEUE_RETRY_AFTER` (and beanstalkd's
    // `BEANSTALKD_QUEUE`, `BEANSTALKD_QUEUE_RETRY_AFTER`) yield as `REDIS_QUEUE` and
    // `REDIS_QUEUE_RETRY_AFTER` do: the app's connection already read
    // them, or chose not to.
    if app.queue.queue.is_some() {
        env.database.queue = None;
        env.queue.beanstalkd_queue = None;
    }
    if app.queue.retry_after.is_some() {
        env.database.retry_after = None;
        env.queue.beanstalkd_retry_after = None;
    }
    env
}

/// One line per setting the app's sources decide, naming the source that
/// won: `layers` from lowest to highest precedence, each with its name.
/// URLs are shown without passwords.
pub fn describe_sources(layers: &[(&str, &Layer)]) -> Vec<String> {
    APP_KEYS
        .iter()
        .filter_map(|key| key.shown)
        .map(|(name, show)| {
            match layers
                .iter()
                .rev()
                .find_map(|(source, l)| show(l).map(|v| (source, v)))
            {
                Some((source, value)) => format!("{name} = {value} ({source})"),
                None => format!("{name}: built-in default"),
            }
        })
        .collect()
}

/// A prefix as the start-up lines show it: quoted, so an empty one shows.
fn quoted(text: &str) -> String {
    format!("{text:?}")
}

fn show_nullable(n: &Nullable) -> String {
    match n {
        Nullable::Null => "null".into(),
        Nullable::Seconds(s) => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer_l12() -> Value {
        json!({
            "version": "12.67.0",
            "queue": {"default": "database", "connections": {
                "database": {"driver": "database", "queue": "default", "retry_after": 90},
                "redis": {"driver": "redis", "connection": "default", "queue": "emails",
                          "retry_after": "120", "block_for": null}
            }},
            "redis": {"client": "phpredis", "prefix": "shop-database-", "cluster": "redis",
                "connections": {
                    "default": {"host": "r.internal", "port": "6380", "username": null,
                                "password": "s3cret", "database": "0"},
                    "cache": {"host": "tls://r.internal", "port": 6380, "password": null,
                              "database": "1"}
                }, "clusters": {}},
            "cache": {"default": "redis", "prefix": "shop-cache-",
                      "store": {"driver": "redis", "connection": "cache"}},
            "failed": {"driver": "database-uuids", "database": "sqlite", "table": "failed_jobs"},
            "failed_database": {"driver": "sqlite", "database": "database/database.sqlite"}
        })
    }

    #[test]
    fn the_bookkeeping_s_stores_from_the_answer() {
        let mut a = answer_l12();
        a["cache"]["store"]["lock_connection"] = json!("default");
        a["batching"] = json!({"table": "job_batches",
            "db": {"driver": "sqlite", "database": "database/batches.sqlite"}});
        let l = layer_for_connection(&a, Path::new("/srv/app"), Some("redis")).unwrap();
        let b = &l.bookkeeping;
        assert_eq!(b.lock_store.as_deref(), Some("redis"));
        assert_eq!(
            b.lock_url.as_deref(),
            Some("redis://:s3cret@r.internal:6380/0"),
            "the store's lock connection, not its cache connection"
        );
        assert_eq!(
            b.batches_url.as_deref(),
            Some("sqlite:///srv/app/database/batches.sqlite")
        );
        assert_eq!(b.batches_table.as_deref(), Some("job_batches"));
        a["cache"] = json!({"default": "db", "prefix": "p-",
            "store": {"driver": "database", "table": "cache", "lock_table": "locks"}});
        let l = layer_for_connection(&a, Path::new("/srv/app"), Some("redis")).unwrap();
        assert_eq!(l.bookkeeping.lock_store.as_deref(), Some("db"));
        assert_eq!(l.bookkeeping.lock_table.as_deref(), Some("locks"));
    }

    #[test]
    fn a_laravel_12_answer() {
        let l = layer_for_connection(&answer_l12(), Path::new("/srv/app"), Some("redis")).unwrap();
        assert_eq!(l.queue.driver.as_deref(), Some("redis"));
        assert_eq!(l.queue.connection.as_deref(), Some("redis"));
        assert_eq!(l.queue.queue.as_deref(), Some("emails"));
        assert_eq!(l.queue.retry_after, Some(Nullable::Seconds(120)));
        assert_eq!(l.queue.block_for, Some(Nullable::Null));
        assert_eq!(
            l.redis.url.as_deref(),
            Some("redis://:s3cret@r.internal:6380/0")
        );
        assert_eq!(l.redis.prefix.as_deref(), Some("shop-database-"));
        assert_eq!(l.cache.url.as_deref(), Some("redis://r.internal:6380/1"));
        assert_eq!(l.cache.prefix.as_deref(), Some("shop-cache-"));
        assert_eq!(l.cache.colon, Some(false));
        assert_eq!(l.app.laravel.as_deref(), Some("12.67"));
        assert_eq!(
            l.failed.url.as_deref(),
            Some("sqlite:///srv/app/database/database.sqlite")
        );
        let lines = describe_sources(&[("app config", &l)]);
        assert!(
            lines.iter().all(|line| !line.contains("s3cret")),
            "{lines:?}"
        );
        assert!(lines.contains(&"redis prefix = \"shop-database-\" (app config)".to_string()));
    }

    #[test]
    fn no_prefix_and_unsupported_stores() {
        let mut a = answer_l12();
        a["redis"]["prefix"] = Value::Null;
        a["cache"]["store"] = json!({"driver": "memcached"});
        a["version"] = json!("8.83.26");
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.redis.prefix.as_deref(), Some(""));
        assert_eq!(l.cache.store.as_deref(), Some("none"));
        a["cache"]["store"] = json!({"driver": "database", "table": "cache"});
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.cache.store.as_deref(), Some("database"));
        assert_eq!(l.cache.table.as_deref(), Some("cache"));
        assert_eq!(l.app.laravel.as_deref(), Some("8.83"));
        a["queue"]["connections"]["redis"]["retry_after"] = json!("soon");
        assert!(layer_for_connection(&a, Path::new("/srv/app"), Some("redis")).is_err());
    }

    /// Every key a rich answer sets (each store kind in turn) is in
    /// [`APP_KEYS`].
    #[test]
    fn the_table_holds_every_key_the_answer_sets() {
        let mut answers = vec![answer_l12()];
        for store in [
            json!({"driver": "file", "path": "/srv/app/cache"}),
            json!({"driver": "database", "table": "cache", "prefix": "p"}),
        ] {
            let mut a = answer_l12();
            a["cache"]["store"] = store;
            a["cache"]["database"] = json!({"driver": "sqlite", "database": "c.sqlite"});
            answers.push(a);
        }
        let mut database = answer_l12();
        database["queue"]["connections"]["database"] = json!({"driver": "database",
            "table": "jobs", "queue": "default", "retry_after": 90,
            "db": {"driver": "pgsql", "url": null, "host": "pg", "database": "app"}});
        answers.push(database);
        let mut cluster = answer_l12();
        cluster["redis"]["connections"] = json!({});
        cluster["redis"]["clusters"] = json!({"default": [
            {"host": "tls://a", "port": 7000}, {"host": "b", "port": 7001}]});
        answers.push(cluster);
        for answer in &answers {
            let mut layer = layer_from_answer(answer, Path::new("/srv/app")).unwrap();
            for key in APP_KEYS {
                (key.unset)(&mut layer);
            }
            assert_eq!(
                layer,
                Layer::default(),
                "a key the answer sets is not in APP_KEYS"
            );
        }
    }

    /// The 11+ default connection `database`: the database queue, its
    /// database from the connection it names (else the default one), the
    /// app's table, queue and retry_after; `work redis` still gets Redis.
    #[test]
    fn the_default_database_connection_is_the_database_queue() {
        let mut a = answer_l12();
        a["queue"]["connections"]["database"] = json!({"driver": "database",
            "connection": null, "table": "queue_jobs", "queue": "mail", "retry_after": null,
            "db": {"driver": "sqlite", "url": null, "database": "/srv/app/database/database.sqlite"}});
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.queue.connection.as_deref(), Some("database"));
        assert_eq!(l.queue.driver.as_deref(), Some("database"));
        assert_eq!(
            l.database.url.as_deref(),
            Some("sqlite:///srv/app/database/database.sqlite")
        );
        assert_eq!(l.database.table.as_deref(), Some("queue_jobs"));
        assert_eq!(l.queue.queue.as_deref(), Some("mail"));
        assert_eq!(
            l.queue.retry_after,
            Some(Nullable::Null),
            "60 s on this driver"
        );

        // A connection of any name with the database driver, on MySQL by DB_URL.
        a["queue"]["connections"]["jobs-db"] = json!({"driver": "database",
            "connection": "mysql", "retry_after": 300,
            "db": {"driver": "mysql", "url": "mysql://app:pw@db.internal/shop",
                   "host": "127.0.0.1", "port": "3306", "database": "laravel"}});
        let l = layer_for_connection(&a, Path::new("/srv/app"), Some("jobs-db")).unwrap();
        assert_eq!(l.queue.connection.as_deref(), Some("jobs-db"));
        assert_eq!(l.queue.driver.as_deref(), Some("database"));
        assert_eq!(
            l.database.url.as_deref(),
            Some("mysql://app:pw@db.internal:3306/shop")
        );
        assert_eq!(l.queue.retry_after, Some(Nullable::Seconds(300)));

        // A connection the worker does not run is refused, naming it.
        a["queue"]["connections"]["beans"] = json!({"driver": "rabbitmq"});
        let e = layer_for_connection(&a, Path::new("/srv/app"), Some("beans"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"beans\" has driver \"rabbitmq\""), "{e}");
        // The default `sync` is named and marked, to be refused by the
        // commands that open the queue (it was served as Redis before).
        a["queue"]["connections"]["sync"] = json!({"driver": "sync"});
        a["queue"]["default"] = json!("sync");
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.queue.connection.as_deref(), Some("sync"));
        assert_eq!(l.queue.driver.as_deref(), Some("sync"));
        assert_eq!(l.queue.unserved, Some(true));
    }

    #[test]
    fn horizons_config_turns_the_records_on() {
        let mut a = answer_l12();
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.horizon.enabled, None, "no config/horizon.php");
        a["horizon"] = json!({"prefix": "shop_horizon:", "use": "default",
                              "trim": {"recent": 30, "failed": "20160"}});
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.horizon.enabled, Some(true));
        assert_eq!(l.horizon.prefix.as_deref(), Some("shop_horizon:"));
        assert_eq!(l.horizon.url, None, "the queue's connection");
        assert_eq!(
            (l.horizon.trim_recent, l.horizon.trim_failed),
            (Some(30), Some(20160))
        );
        assert_eq!(l.horizon.trim_pending, None);
        a["horizon"] = json!({"prefix": null, "use": "cache"});
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(l.horizon.prefix.as_deref(), Some("horizon:"));
        assert_eq!(l.horizon.url.as_deref(), Some("redis://r.internal:6380/1"));
    }

    #[test]
    fn pulses_config_names_its_ingest_and_recorders() {
        let mut a = answer_l12();
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(
            l.pulse,
            super::super::file::PulseLayer::default(),
            "no config/pulse.php"
        );
        a["pulse"] = json!({"enabled": true, "ingest": "redis", "redis_connection": "cache",
            "database": {"driver": "sqlite", "database": "/srv/pulse.sqlite"},
            "queues": {"enabled": true, "sample_rate": 0.5, "threshold": null},
            "slow_jobs": {"enabled": true, "sample_rate": "1", "threshold": 2500}});
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(
            l.pulse.enabled, None,
            "on: left to the tables and the ingest"
        );
        assert_eq!(l.pulse.ingest.as_deref(), Some("redis"));
        assert_eq!(
            l.pulse.redis_url.as_deref(),
            Some("redis://r.internal:6380/1")
        );
        assert_eq!(l.pulse.url.as_deref(), Some("sqlite:///srv/pulse.sqlite"));
        assert_eq!(l.pulse.queues_sample_rate, Some(0.5));
        assert_eq!(l.pulse.slow_jobs_sample_rate, Some(1.0));
        assert_eq!(l.pulse.slow_jobs_threshold, Some(2500));
        a["pulse"]["enabled"] = json!(false);
        a["pulse"]["slow_jobs"] = json!({"enabled": false});
        let l = layer_from_answer(&a, Path::new("/srv/app")).unwrap();
        assert_eq!(
            (l.pulse.enabled, l.pulse.slow_jobs),
            (Some(false), Some(false))
        );
    }

    #[test]
    fn the_environment_yields_to_the_app() {
        let app = layer_from_answer(&answer_l12(), Path::new("/srv/app")).unwrap();
        let env = super::super::env::layer(|k| match k {
            "APP_NAME" => Some("Other".into()),
            "REDIS_SENTINEL_SERVICE" => Some("m".into()),
            _ => None,
        })
        .unwrap();
        let env = without_app_settings(env, &app);
        assert_eq!(
            env.horizon.prefix.as_deref(),
            Some("other_horizon:"),
            "no Horizon config"
        );
        assert_eq!(env.redis.prefix, None);
        assert_eq!(env.cache.prefix, None);
        assert_eq!(env.redis.service.as_deref(), Some("m"));

        let env = super::super::env::layer(|k| match k {
            "DB_QUEUE" | "BEANSTALKD_QUEUE" => Some("from-env".into()),
            "DB_QUEUE_RETRY_AFTER" | "BEANSTALKD_QUEUE_RETRY_AFTER" => Some("5".into()),
            _ => None,
        })
        .unwrap();
        let mut app = app;
        app.queue.retry_after = None;
        let kept = without_app_settings(env.clone(), &app);
        assert_eq!(kept.database.queue, None, "the app's queue");
        assert_eq!(kept.queue.beanstalkd_queue, None, "the app's queue");
        assert_eq!(kept.database.retry_after, Some(Nullable::Seconds(5)));
        assert_eq!(
            kept.queue.beanstalkd_retry_after,
            Some(Nullable::Seconds(5))
        );
        app.queue.retry_after = Some(Nullable::Seconds(120));
        let yielded = without_app_settings(env, &app);
        assert_eq!(yielded.queue.beanstalkd_retry_after, None, "the app's");
    }
}
