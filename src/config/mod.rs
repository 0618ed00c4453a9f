//! Configuration: where the queue, cache and failed store are, and which
//! handler runs which job.
//!
//! Precedence, highest first (see [`Settings::load`]): command-line flag >
//! environment (Laravel's variable names, [`env`]; a setting the app's own
//! answer gives is left to that answer, which already read the environment
//! as PHP does) > `--config` TOML file ([`file`]) > the app's own answer
//! (`--app`, or the app found beside `--env-file`: [`app_config`]) > the
//! app's `.env` given with `--env-file` ([`dotenv`]) > built-in defaults.
//! The defaults are those of the current Laravel skeleton (13.x):
//! Redis on `127.0.0.1:6379` DB 0 with prefix `laravel-database-`, cache DB 1
//! with prefix `laravel-cache-` and no colon, connection `redis`, queue
//! `default`, `retry_after` 90, `block_for` null, failed driver
//! `database-uuids`. Prefixes are never guessed from a framework version:
//! set them for apps made before Laravel 12.

pub mod app_config;
pub mod bookkeeping;
mod check;
pub mod database;
pub mod dotenv;
pub mod driver;
pub mod env;
pub mod failover;
pub mod file;
pub mod handlers;
pub mod known_keys;
pub mod phpdotenv;
pub use crate::redact;
mod resolve;
pub mod retry_after;
pub mod sqs;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

pub use driver::QueueDriverSettings;
pub use file::{HandlerEntry, Layer, Transport};
pub use handlers::{CommandSpec, HandlerSpec, HttpSpec, PoolSpec, TransportSpec};

use crate::redis::{RedisTarget, SentinelOptions, TlsOptions, Topology};

use crate::exception::LaravelVersion;
use crate::handler::Unmatched;
use crate::metrics::listener::Limits;
use crate::worker::balance::spec::BalanceSettings;
use crate::worker::lease::OnLeaseLost;
pub use crate::worker::options::MAX_SECONDS;
use crate::worker::tripped::OnHandlerTripped;
pub use resolve::HorizonSpec;

/// Default Redis URL (Laravel's `REDIS_HOST`/`REDIS_PORT`/`REDIS_DB`).
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/0";

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The Laravel app's root on this machine (maintenance mode, file cache).
    pub app_path: Option<PathBuf>,
    /// The queue driver: Redis (the fields below) or the database's jobs
    /// table.
    pub driver: QueueDriverSettings,
    /// The queue Redis: URL, TLS and topology (one server, Sentinel,
    /// Cluster).
    pub redis: RedisTarget,
    /// The queue connection's key prefix.
    pub redis_prefix: String,
    /// Queue connection name, as written into failed_jobs.
    pub connection: String,
    /// Queue used when `--queue` is not given.
    pub default_queue: String,
    /// Seconds a reservation lasts; `None`: never reclaimed (Redis only;
    /// on the database driver always set, `null` being 60 s).
    pub retry_after: Option<u64>,
    /// Seconds to BLPOP when idle; `None`: never block (always on the
    /// database driver).
    pub block_for: Option<u64>,
    /// Most jobs per migrate call; -1 for all.
    pub migration_batch_size: i64,
    /// Policy for jobs no handler matches.
    pub unmatched: Unmatched,
    /// Cache store for restart and maxExceptions keys.
    pub cache: CacheSettings,
    /// `[bookkeeping]`: unique locks and batches of jobs Laravel's code
    /// does not run.
    pub bookkeeping: bookkeeping::BookkeepingSettings,
    /// Failed job store.
    pub failed: FailedSettings,
    /// SIGTERM → SIGKILL grace for timed-out handlers.
    pub kill_grace: Duration,
    /// How long the jobs in flight may run on after a stop before they are
    /// released; `None` waits for them all.
    pub drain_timeout: Option<Duration>,
    /// What to do with a running handler whose reservation is lost.
    pub on_lease_lost: OnLeaseLost,
    /// What a handler's trip does to the worker.
    pub on_handler_tripped: OnHandlerTripped,
    /// `[worker] balance` and its companions: slots per queue.
    pub balance: BalanceSettings,
    /// Address of the metrics and health endpoint; `None`: off.
    pub metrics_listen: Option<String>,
    /// How often the queue backlog gauges are read (`[metrics]
    /// backlog_interval`, seconds, default 5); `None`: never.
    pub backlog_interval: Option<Duration>,
    /// Time limits and connection cap of the metrics endpoint.
    pub metrics_limits: Limits,
    /// `[horizon]`: Horizon's records; `None`: not written.
    pub horizon: Option<HorizonSpec>,
    /// `[pulse]`: Laravel Pulse's entries for the jobs Laravel does not
    /// run; `None`: off (turned off, or nothing says where Pulse ingests).
    pub pulse: Option<crate::pulse_feed::PulseSettings>,
    /// The app's Laravel version (wording of recorded exceptions).
    pub laravel: LaravelVersion,
    /// Bytes of stdout/stderr kept per handler call.
    pub output_limit: usize,
    /// The heartbeat file the loop rewrites (`health`), if any.
    pub heartbeat_file: Option<PathBuf>,
    /// Time between two log lines of one repeated error (zero: no limit).
    pub error_summary_interval: Duration,
    /// `[[handlers]]` in match order.
    pub handlers: Vec<HandlerSpec>,
    /// Where these settings came from, lowest precedence first
    /// (`defaults`, `--env-file PATH`, `--config PATH`, `environment`);
    /// filled by [`Settings::load`], for the start-up banner.
    pub sources: Vec<String>,
    /// The queue connection the app's own settings name (`QUEUE_CONNECTION`
    /// in its `.env` or the environment, its default with `--app`) when
    /// the command line or the config file chose another; for the hint of a
    /// queue that cannot be reached (`work redis` on a database app).
    pub app_connection: Option<String>,
}

/// Where the cache keys live.
#[derive(Debug, Clone)]
pub enum CacheSettings {
    /// Redis cache store.
    Redis {
        /// The cache Redis (by default the queue Redis on DB 1).
        connection: Box<RedisTarget>,
        /// Everything before the cache key: Redis prefix + cache prefix (+ `:`).
        key_prefix: String,
    },
    /// Laravel's file store.
    File {
        /// The store's directory (`storage/framework/cache/data`).
        dir: PathBuf,
    },
    /// Laravel's database store (the `cache` table).
    Database {
        /// `sqlite://`, `mysql://` or `postgres://` URL (by default the
        /// failed store's database, as Laravel's default connection).
        url: String,
        /// Table name (`cache`).
        table: String,
        /// The cache prefix; no `:` is added in any Laravel version.
        prefix: String,
    },
    /// No cache.
    None,
}

/// Where failed jobs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailedSettings {
    /// Laravel's `failed_jobs` table.
    Database {
        /// `sqlite://`, `mysql://` or `postgres://` URL.
        url: String,
        /// Table name.
        table: String,
    },
    /// A Redis hash on the queue connection.
    Redis,
    /// Discard.
    Null,
}

impl Settings {
    /// Loads the settings: the app's `.env` (`env_file`), what the app
    /// itself resolves (`app`, see [`app_config`]), the file at `config`,
    /// and the process environment, resolved against the defaults.
    ///
    /// The app's answer wins over the `.env` rules and over the process
    /// environment (PHP already saw that environment), and yields to the
    /// config file. Logs, at start, where each setting came from.
    ///
    /// # Errors
    /// An unreadable or invalid file, an unusable variable, settings that
    /// do not fit together, or an `--app` that cannot be read while PHP is
    /// there; each message names the setting.
    pub fn load(
        config: Option<&Path>,
        env_file: Option<&Path>,
        app: Option<&Path>,
    ) -> anyhow::Result<Settings> {
        Settings::load_connection(config, env_file, app, None)
    }

    /// As [`Settings::load`], for the queue connection `connection` names
    /// (`work database`, `work redis`: the command's connection argument),
    /// as `queue:work NAME` chooses it: that connection's driver and
    /// settings instead of the default connection's. `None`: `[queue]
    /// connection`, else the app's `QUEUE_CONNECTION`.
    ///
    /// # Errors
    /// As [`Settings::load`]; and a connection the app defines with a
    /// driver the worker does not run.
    pub fn load_connection(
        config: Option<&Path>,
        env_file: Option<&Path>,
        app: Option<&Path>,
        connection: Option<&str>,
    ) -> anyhow::Result<Settings> {
        let source = app_config::AppSource::choose(app, env_file);
        let app_env_file = match &source {
            app_config::AppSource::Explicit(dir) if env_file.is_none() => {
                Some(dir.join(".env")).filter(|p| p.is_file())
            }
            _ => None,
        };
        let env_file = env_file.or(app_env_file.as_deref());
        let dotenv = match env_file {
            Some(path) => dotenv::layer(path)?,
            None => Layer::default(),
        };
        let file = match config {
            Some(path) => read_file(path)?,
            None => Layer::default(),
        };
        let wanted = connection.or(file.queue.connection.as_deref());
        let app_layer = ask_app(&source, wanted)?;
        if let (None, Some(env_file)) = (&app_layer, env_file) {
            app_config::warn_if_config_cached(env_file);
        }
        let environment = environment(env_file, app_layer.as_ref())?;
        let mut sources = vec!["defaults".to_string()];
        sources.extend(env_file.map(|path| format!("--env-file {}", path.display())));
        sources.extend(app_layer.as_ref().map(|_| "app config (php)".to_string()));
        sources.extend(config.map(|path| format!("--config {}", path.display())));
        if environment != Layer::default() {
            sources.push("environment".to_string());
        }
        let app_layer = app_layer.unwrap_or_default();
        if env_file.is_some() || !matches!(source, app_config::AppSource::None) {
            for line in app_config::describe_sources(&[
                (".env", &dotenv),
                ("app config", &app_layer),
                ("config file", &file),
                ("environment", &environment),
            ]) {
                tracing::info!("setting {line}");
            }
        }
        let app_named = [&environment, &app_layer, &dotenv]
            .iter()
            .find_map(|layer| layer.queue.connection.clone());
        let merged = merge_sources(connection, dotenv, app_layer, file, environment)?;
        let mut settings = Settings::resolve(merged)?;
        settings.sources = sources;
        settings.app_connection = app_named.filter(|named| *named != settings.connection);
        Ok(settings)
    }

    /// Applies the defaults to a merged layer and checks it.
    ///
    /// # Errors
    /// As [`Settings::load`].
    pub fn resolve(layer: Layer) -> anyhow::Result<Settings> {
        check::bounds(&layer)?;
        let (driver, retry_after, block_for) = driver::resolve_driver(&layer)?;
        let connection = layer
            .queue
            .connection
            .clone()
            .unwrap_or_else(|| driver.default_connection().into());
        check_reservation(retry_after, block_for)?;
        let redis_url = layer
            .redis
            .url
            .clone()
            .unwrap_or_else(|| DEFAULT_REDIS_URL.into());
        let redis = redis_target(&redis_url, &layer.redis)?;
        let redis_prefix = layer
            .redis
            .prefix
            .clone()
            .unwrap_or_else(|| "laravel-database-".into());
        let cache = cache_settings(&layer, &redis, &redis_prefix)?;
        let bookkeeping = bookkeeping::resolve(&layer, &cache, &redis)?;
        let entries = layer.handlers.unwrap_or_default();
        check::handlers(&entries)?;
        let breaker = resolve::breaker(layer.worker.trip_after, layer.worker.trip_backoff);
        let handlers = entries
            .into_iter()
            .map(|entry| HandlerSpec::new(entry, breaker))
            .collect();
        let worker = &layer.worker;
        let horizon = horizon_spec(&layer.horizon, &redis)?;
        let pulse = resolve::pulse(&layer.pulse, &connection, &redis, &redis_prefix)?;
        Ok(Settings {
            app_path: layer.app.path,
            driver,
            redis,
            redis_prefix,
            connection,
            default_queue: layer.queue.queue.unwrap_or_else(|| "default".into()),
            retry_after,
            block_for,
            migration_batch_size: layer.queue.migration_batch_size.unwrap_or(-1),
            unmatched: resolve::unmatched(
                layer.queue.unmatched.as_deref(),
                layer.queue.unmatched_release_delay,
            )?,
            cache,
            bookkeeping,
            failed: resolve::failed(layer.failed)?,
            kill_grace: Duration::from_secs(worker.kill_grace.unwrap_or(10)),
            drain_timeout: worker.drain_timeout.map(Duration::from_secs),
            on_lease_lost: resolve::on_lease_lost(worker.on_lease_lost.as_deref())?,
            metrics_limits: Limits::new(
                layer.metrics.header_timeout,
                layer.metrics.idle_timeout,
                layer.metrics.max_connections,
            )?,
            on_handler_tripped: resolve::on_handler_tripped(worker.on_handler_tripped.as_deref())?,
            balance: resolve::balance(worker)?,
            metrics_listen: layer.metrics.listen,
            backlog_interval: resolve::backlog_interval(layer.metrics.backlog_interval)?,
            horizon,
            pulse,
            laravel: resolve::laravel(layer.app.laravel.as_deref())?,
            output_limit: worker.output_limit.unwrap_or(16 * 1024),
            heartbeat_file: worker.heartbeat_file.clone(),
            error_summary_interval: worker
                .error_summary_interval
                .map_or(crate::log_limit::DEFAULT_INTERVAL, Duration::from_secs),
            handlers,
            sources: vec!["defaults".to_string()],
            app_connection: None,
        })
    }
}

/// `[horizon]`, resolved: off, or Horizon's settings with their Redis
/// (`[horizon] url`, else the queue's).
///
/// # Errors
/// A `[horizon] url` that is not a Redis URL.
fn horizon_spec(
    layer: &file::HorizonLayer,
    redis: &RedisTarget,
) -> anyhow::Result<Option<HorizonSpec>> {
    let Some(mut spec) = resolve::horizon(layer) else {
        return Ok(None);
    };
    if let Some(url) = &layer.url {
        spec.redis = Some(cache_target(url, redis).context("[horizon] url")?);
    }
    Ok(Some(spec))
}

/// `[cache]`, resolved: the Redis store (by default the queue Redis on DB
/// 1), the file store (by default below `[app] path`), the database store
/// (by default the failed store's database) or none.
///
/// # Errors
/// An unknown store, or a file or database store with nowhere to be.
fn cache_settings(
    layer: &Layer,
    redis: &RedisTarget,
    redis_prefix: &str,
) -> anyhow::Result<CacheSettings> {
    let cache = &layer.cache;
    let prefix = || {
        cache
            .prefix
            .clone()
            .unwrap_or_else(|| "laravel-cache-".into())
    };
    Ok(match cache.store.as_deref().unwrap_or("redis") {
        "redis" => {
            let connection = match &cache.url {
                Some(url) => Box::new(cache_target(url, redis)?),
                None => Box::new(redis.with_db(cache.database.unwrap_or(1))),
            };
            let mut prefix = prefix();
            if cache.colon.unwrap_or(false) && !prefix.is_empty() {
                prefix.push(':');
            }
            let redis_prefix = cache.redis_prefix.as_deref().unwrap_or(redis_prefix);
            CacheSettings::Redis {
                connection,
                key_prefix: format!("{redis_prefix}{prefix}"),
            }
        }
        "file" => CacheSettings::File {
            dir: match (&cache.path, &layer.app.path) {
                (Some(dir), _) => dir.clone(),
                (None, Some(app)) => app.join("storage/framework/cache/data"),
                (None, None) => bail!(
                    "[cache] store = \"file\" needs [cache] path or [app] path (or --env-file)"
                ),
            },
        },
        "database" => CacheSettings::Database {
            url: cache
                .url
                .clone()
                .or_else(|| layer.failed.url.clone())
                .context(
                    "[cache] store = \"database\" needs a database: set [cache] url or \
                 [failed] url (sqlite://, mysql://, postgres://), or DB_CONNECTION and DB_*",
                )?,
            table: cache.table.clone().unwrap_or_else(|| "cache".into()),
            prefix: prefix(),
        },
        "none" | "null" => CacheSettings::None,
        other => bail!(
            "[cache] store = {other:?}: expected \"redis\", \"file\", \"database\" or \"none\""
        ),
    })
}

/// The sources merged by precedence (`.env` < the app's answer < the
/// config file < the process environment) for the queue connection
/// `connection` names (the command's argument; `None`: the sources'
/// own), each made to speak for that connection's driver: `DB_QUEUE` and
/// `DB_QUEUE_RETRY_AFTER` instead of `REDIS_QUEUE` and
/// `REDIS_QUEUE_RETRY_AFTER` on the database driver (from the `.env` and
/// the environment; the file's `[queue]` keys apply to either), and
/// Horizon's records off when only the app's `config/horizon.php` asked
/// for them on a database queue.
///
/// # Errors
/// A `[queue] driver` the worker does not run.
pub fn merge_sources(
    connection: Option<&str>,
    dotenv: Layer,
    app: Layer,
    file: Layer,
    environment: Layer,
) -> anyhow::Result<Layer> {
    let chosen = chosen_connection(connection, [&dotenv, &app, &file, &environment]);
    let driver = driver::Driver::of(&chosen)?;
    let dotenv = driver::for_driver(dotenv, driver);
    let environment = driver::for_driver(environment, driver);
    let app = without_apps_horizon(app, &file, driver);
    let mut merged = dotenv
        .overlaid_by(app)
        .overlaid_by(file)
        .overlaid_by(environment);
    merged.queue.connection = chosen.connection;
    merged.queue.driver = chosen.driver;
    merged.queue.unserved = chosen.unserved;
    merged.queue.members = chosen.members;
    Ok(merged)
}

/// The queue connection the worker serves, and its driver when a source
/// knows it: `cli` (the command's connection argument), else the name the
/// highest of `layers` (lowest precedence first) gives. A driver counts
/// only from a layer that names that same connection, the app's answer
/// first (it read `queue.connections.NAME.driver`); without one the
/// name decides (see [`driver::Driver::of`]).
fn chosen_connection(cli: Option<&str>, layers: [&Layer; 4]) -> file::QueueLayer {
    let connection = cli.map(str::to_string).or_else(|| {
        layers
            .iter()
            .rev()
            .find_map(|layer| layer.queue.connection.clone())
    });
    let [_, app, ..] = layers;
    let (driver, unserved, members) = std::iter::once(app)
        .chain(layers.iter().rev().copied())
        .filter(|layer| layer.queue.connection == connection || layer.queue.connection.is_none())
        .find_map(|layer| {
            let queue = &layer.queue;
            (queue.driver.clone()).map(|d| (Some(d), queue.unserved, queue.members.clone()))
        })
        .unwrap_or((None, None, None));
    file::QueueLayer {
        connection,
        driver,
        unserved,
        members,
        ..file::QueueLayer::default()
    }
}

/// The app's answer without Horizon's records when the driver is the
/// database's and only the app turned them on (it has
/// `config/horizon.php`, as many apps do beside a database queue): a
/// warning instead of a refusal. `[horizon] enabled = true` in the config
/// file is refused by [`driver::check_redis_only_keys`].
fn without_apps_horizon(mut app: Layer, file: &Layer, driver: driver::Driver) -> Layer {
    if driver != driver::Driver::Redis
        && app.horizon.enabled == Some(true)
        && file.horizon.enabled.is_none()
    {
        tracing::warn!(
            driver = ?driver,
            "the app has config/horizon.php, but this worker does not run a Redis queue: \
             Horizon reads only Redis, so no Horizon records are written"
        );
        app.horizon.enabled = None;
    }
    app
}

/// What the app at `source` resolves (see [`app_config`]) for the queue
/// connection `wanted` (else its default), if it can be asked.
///
/// # Errors
/// With `--app`: PHP is missing, or the app cannot be read. Found through
/// `--env-file`, either is a warning and `None`.
fn ask_app(source: &app_config::AppSource, wanted: Option<&str>) -> anyhow::Result<Option<Layer>> {
    let (app_config::AppSource::Explicit(dir) | app_config::AppSource::Detected(dir)) = source
    else {
        return Ok(None);
    };
    let explicit = matches!(source, app_config::AppSource::Explicit(_));
    match app_config::read_for(dir, wanted) {
        Ok(layer) => {
            tracing::info!(app = %dir.display(), "settings read from the app's own configuration (php)");
            Ok(Some(layer))
        }
        Err(app_config::ReadError::NoPhp) if explicit => bail!(
            "--app={}: php is not on the PATH, so the app's configuration \
             cannot be asked (install PHP's command line, or drop --app and \
             give --env-file)",
            dir.display()
        ),
        Err(app_config::ReadError::NoPhp) => {
            tracing::warn!(
                app = %dir.display(),
                "php is not on the PATH: the app's configuration cannot be asked; \
                 settings follow the .env rules"
            );
            Ok(None)
        }
        Err(app_config::ReadError::Failed(e)) if explicit => {
            Err(e.context(format!("--app={}", dir.display())))
        }
        Err(app_config::ReadError::Failed(e)) => {
            tracing::warn!(
                app = %dir.display(),
                "{}; settings follow the .env rules",
                redact::text(&format!("{e:#}"))
            );
            Ok(None)
        }
    }
}

/// The config file at `path`, its handler programs given as relative
/// paths made the file's neighbours (wherever the worker is started from).
///
/// # Errors
/// The file cannot be read, or is not a valid config.
fn read_file(path: &Path) -> anyhow::Result<Layer> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let mut layer = Layer::from_toml(&text)
        .with_context(|| format!("invalid config file {}", path.display()))?;
    layer.resolve_handler_paths(path.parent().unwrap_or(Path::new(".")));
    Ok(layer)
}

/// The process environment's layer, without what the app's answer sets.
/// With a `.env`, its layer has already applied the process environment's
/// `APP_NAME` with the app's own prefix conventions.
///
/// # Errors
/// A variable whose value cannot be used.
fn environment(env_file: Option<&Path>, app: Option<&Layer>) -> anyhow::Result<Layer> {
    let environment = match env_file {
        Some(_) => env::layer(|name| {
            (name != "APP_NAME")
                .then(|| std::env::var(name).ok())
                .flatten()
        })?,
        None => env::from_process()?,
    };
    Ok(match app {
        Some(app) => app_config::without_app_settings(environment, app),
        None => environment,
    })
}

/// Parses a Redis URL, accepting phpredis' `tls://` for `rediss://` and
/// applying `REDIS_SCHEME=tls`.
///
/// # Errors
/// A URL the client cannot use, naming `what`.
fn parse_redis_url(url: &str, scheme: Option<&str>, what: &str) -> anyhow::Result<ConnectionInfo> {
    let mut text = match url.strip_prefix("tls://") {
        Some(rest) => format!("rediss://{rest}"),
        None => url.to_string(),
    };
    if scheme.is_some_and(|s| s.eq_ignore_ascii_case("tls") || s.eq_ignore_ascii_case("rediss"))
        && let Some(rest) = text.strip_prefix("redis://")
    {
        text = format!("rediss://{rest}");
    }
    text.as_str()
        .into_connection_info()
        .with_context(|| format!("invalid {what} {:?}", redact::url(url)))
}

/// `service` and `sentinels` that cannot mean what they say: an empty
/// service name, or a service with an empty list of sentinels (which would
/// silently connect to `url` instead).
///
/// # Errors
/// Naming the key.
fn check_sentinel_keys(layer: &file::RedisLayer) -> anyhow::Result<()> {
    if let Some(service) = layer.service.as_deref().filter(|s| s.trim().is_empty()) {
        bail!(
            "[redis] service = {service:?}: name the master as the sentinels know it \
             (such as \"mymaster\"), or remove service and sentinels"
        );
    }
    if layer.service.is_some() && layer.sentinels.as_ref().is_some_and(Vec::is_empty) {
        bail!(
            "[redis] sentinels = [] with [redis] service: list the sentinels \
             (\"host:26379\"), or remove service to use [redis] url alone"
        );
    }
    Ok(())
}

/// The queue connection's target from `[redis]`: URL, TLS files, and one
/// of single server, Sentinel (`sentinels` + `service`) or Cluster
/// (`cluster = true`, seeded from `url` and `nodes`).
///
/// # Errors
/// A bad URL or node, half a client certificate, Sentinel and Cluster together, or Sentinel without its
/// service name.
fn redis_target(url: &str, layer: &file::RedisLayer) -> anyhow::Result<RedisTarget> {
    let scheme = layer.scheme.as_deref();
    let info = parse_redis_url(url, scheme, "Redis URL")?;
    let tls = TlsOptions {
        ca_file: layer.tls_ca_file.clone(),
        cert_file: layer.tls_cert_file.clone(),
        key_file: layer.tls_key_file.clone(),
        insecure: layer.tls_insecure.unwrap_or(false),
    };
    if layer.tls_cert_file.is_some() != layer.tls_key_file.is_some() {
        bail!(
            "[redis] tls_cert_file and tls_key_file go together (the client certificate and its key)"
        );
    }
    let cluster = layer.cluster.unwrap_or(false);
    check_sentinel_keys(layer)?;
    let sentinels = layer.sentinels.clone().unwrap_or_default();
    let topology = if !sentinels.is_empty() {
        if cluster {
            bail!("[redis] sentinels and cluster = true exclude each other: choose one");
        }
        let service = layer.service.clone().context(
            "[redis] sentinels needs [redis] service: the master's name in the sentinels' \
             configuration (such as \"mymaster\")",
        )?;
        let tls_default = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let sentinels = sentinels
            .iter()
            .map(|s| sentinel_addr(s, tls_default))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Topology::Sentinel(SentinelOptions {
            sentinels,
            service,
            password: layer.sentinel_password.clone(),
        })
    } else if cluster {
        let mut nodes = vec![info.clone()];
        for node in layer.nodes.iter().flatten() {
            nodes.push(parse_redis_url(node, scheme, "[redis] nodes entry")?);
        }
        if nodes
            .iter()
            .any(|n| matches!(n.addr(), ConnectionAddr::Unix(_)))
        {
            bail!(
                "[redis] cluster = true needs TCP addresses: a cluster names its nodes by host and port"
            );
        }
        Topology::Cluster { nodes }
    } else {
        if layer.nodes.is_some() {
            tracing::warn!("[redis] nodes is ignored: it seeds a cluster, and cluster is not true");
        }
        Topology::Single
    };
    let tls_files = tls.ca_file.is_some() || tls.cert_file.is_some() || tls.insecure;
    let uses_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. })
        || matches!(&topology, Topology::Sentinel(s)
            if s.sentinels.iter().any(|a| matches!(a, ConnectionAddr::TcpTls { .. })));
    if tls_files && !uses_tls {
        tracing::warn!(
            "[redis] tls_ca_file, tls_cert_file and tls_insecure are ignored: they apply to TLS \
             connections, and the URL is not rediss:// (set REDIS_SCHEME=tls or use rediss://)"
        );
    }
    Ok(RedisTarget {
        info,
        tls,
        topology,
    })
}

/// A sentinel's address: `host:port` (TLS when the Redis URL is
/// `rediss://`), or a full `redis://` / `rediss://` URL.
///
/// # Errors
/// An address that cannot be parsed.
fn sentinel_addr(text: &str, tls: bool) -> anyhow::Result<ConnectionAddr> {
    let url = if text.contains("://") {
        text.to_string()
    } else {
        format!("{}://{text}", if tls { "rediss" } else { "redis" })
    };
    let info = url
        .as_str()
        .into_connection_info()
        .with_context(|| format!("invalid [redis] sentinels entry {text:?}"))?;
    Ok(info.addr().clone())
}

/// The cache connection from its own `[cache] url`, arranged as the
/// queue's (see [`RedisTarget::with_url`]): a single server, the master
/// the same sentinels name, or the cluster seeded from it; TLS files as the
/// queue's.
///
/// # Errors
/// A bad URL.
pub(super) fn cache_target(url: &str, queue: &RedisTarget) -> anyhow::Result<RedisTarget> {
    let info = parse_redis_url(url, None, "cache Redis URL")?;
    Ok(queue.with_url(info))
}

/// `retry_after` and `block_for` (seconds; `None` is null): at most
/// [`MAX_SECONDS`].
///
/// # Errors
/// A value above the bound, naming the setting.
pub fn check_reservation(retry_after: Option<u64>, block_for: Option<u64>) -> anyhow::Result<()> {
    for (name, value) in [("retry_after", retry_after), ("block_for", block_for)] {
        if let Some(v) = value {
            anyhow::ensure!(
                v <= MAX_SECONDS,
                "[queue] {name} = {v}: at most {MAX_SECONDS} seconds (or null)"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_bounded() {
        assert!(check_reservation(Some(90), None).is_ok());
        assert!(
            check_reservation(Some(u64::MAX), None)
                .unwrap_err()
                .to_string()
                .contains("retry_after")
        );
        assert!(check_reservation(None, Some(1 << 40)).is_err());
    }

    #[test]
    fn on_handler_tripped_takes_release_or_exit() {
        assert_eq!(
            resolve::on_handler_tripped(None).unwrap(),
            OnHandlerTripped::Release
        );
        assert_eq!(
            resolve::on_handler_tripped(Some("release")).unwrap(),
            OnHandlerTripped::Release
        );
        assert_eq!(
            resolve::on_handler_tripped(Some("exit")).unwrap(),
            OnHandlerTripped::Exit
        );
        let e = resolve::on_handler_tripped(Some("stop"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("on_handler_tripped = \"stop\"") && e.contains("\"exit\""),
            "{e}"
        );
    }

    fn resolve(toml: &str) -> anyhow::Result<Settings> {
        Settings::resolve(Layer::from_toml(toml)?)
    }

    #[test]
    fn pulse_rules_keep_their_order_and_leave_out_what_cannot_be_read() {
        let settings = resolve(
            "[failed]\ndriver = \"null\"\n[pulse]\ningest = \"redis\"\n\
             slow_jobs_thresholds = [{ pattern = \"#Import$#\", ms = 9 }, \
             { pattern = \"/(?=x)/\", ms = 1 }, { pattern = \"#Im#\", ms = 5 }]\n\
             queues_ignore = [\"/^ping$/i\", \"no delimiter\"]\n",
        )
        .unwrap();
        let r = settings.pulse.expect("on").recorders;
        let rules: Vec<(&str, u64)> = r
            .slow_jobs_thresholds
            .iter()
            .map(|(p, ms)| (p.source.as_str(), *ms))
            .collect();
        assert_eq!(
            rules,
            [("#Import$#", 9), ("#Im#", 5)],
            "look-around left out"
        );
        assert_eq!(r.threshold_ms("DataImport"), 9);
        assert_eq!(r.threshold_ms("Imp"), 5);
        assert_eq!(r.queues_ignore.len(), 1);
        assert!(r.queues_ignore[0].matches("PING"));
    }

    #[test]
    fn pulse_resolves_to_an_ingest_or_stays_off() {
        let off = |extra: &str| resolve(&format!("[failed]\ndriver = \"null\"\n{extra}")).unwrap();
        assert!(off("").pulse.is_none(), "nothing says where Pulse ingests");
        assert!(
            off("[pulse]\ningest = \"redis\"\nenabled = false")
                .pulse
                .is_none()
        );
        let on = off("[pulse]\ningest = \"redis\"\nslow_jobs_threshold = 50");
        let pulse = on.pulse.expect("the redis ingest");
        assert!(!pulse.required);
        assert!(matches!(&pulse.ingest,
            crate::pulse_feed::PulseIngest::Redis { prefix, .. } if prefix == "laravel-database-"));
        assert_eq!(pulse.recorders.slow_jobs_threshold_ms, 50);
        assert_eq!(pulse.recorders.queues_sample_rate, 1.0);
        let stored = off("[pulse]\nenabled = true\nurl = \"sqlite:///p.sqlite\"");
        assert!(stored.pulse.is_some_and(|p| p.required));
        for (bad, says) in [
            ("[pulse]\nenabled = true", "needs Pulse's database"),
            ("[pulse]\ningest = \"kafka\"", "ingest = \"kafka\""),
            (
                "[pulse]\ningest = \"redis\"\nqueues_sample_rate = 2.0",
                "queues_sample_rate = 2",
            ),
        ] {
            let e = resolve(&format!("[failed]\ndriver = \"null\"\n{bad}")).unwrap_err();
            assert!(format!("{e:#}").contains(says), "{bad}: {e:#}");
        }
    }

    #[test]
    fn defaults_are_the_current_skeleton() {
        let s = resolve("[failed]\ndriver = \"null\"").unwrap();
        assert_eq!(s.redis_prefix, "laravel-database-");
        assert_eq!(s.retry_after, Some(90));
        assert_eq!(s.block_for, None);
        assert_eq!(s.connection, "redis");
        let CacheSettings::Redis {
            connection,
            key_prefix,
        } = s.cache
        else {
            panic!()
        };
        assert_eq!(connection.info.redis_settings().db(), 1);
        assert_eq!(key_prefix, "laravel-database-laravel-cache-");
    }

    #[test]
    fn laravel_8_cache_prefix_with_colon() {
        let s = resolve(
            "[redis]\nprefix = \"laravel_database_\"\n[cache]\nprefix = \"laravel_cache\"\ncolon = true\n[failed]\ndriver = \"null\"",
        )
        .unwrap();
        let CacheSettings::Redis { key_prefix, .. } = s.cache else {
            panic!()
        };
        assert_eq!(key_prefix, "laravel_database_laravel_cache:");
    }

    #[test]
    fn null_retry_after_and_block_for() {
        let s =
            resolve("[queue]\nretry_after = \"null\"\nblock_for = 0\n[failed]\ndriver = \"null\"")
                .unwrap();
        assert_eq!(s.retry_after, None);
        assert_eq!(s.block_for, Some(0));
    }

    #[test]
    fn production_redis_settings() {
        let base = "[failed]\ndriver = \"null\"\n[redis]\n";
        let s = resolve(&format!(
            "{base}url = \"rediss://u:p@r.example:6380/2\"\ntls_ca_file = \"/ca.pem\"\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\""
        ))
        .unwrap();
        assert!(matches!(s.redis.info.addr(), ConnectionAddr::TcpTls { .. }));
        assert_eq!(s.redis.tls.ca_file, Some("/ca.pem".into()));
        let CacheSettings::Redis { connection, .. } = &s.cache else {
            panic!()
        };
        assert_eq!(connection.tls, s.redis.tls);
        assert_eq!(connection.info.redis_settings().db(), 1);

        let s = resolve(&format!(
            "{base}url = \"redis://:p@x/0\"\nsentinels = [\"127.0.0.1:26379\", \"rediss://h:26380\"]\nservice = \"mymaster\""
        ))
        .unwrap();
        let Topology::Sentinel(sentinel) = &s.redis.topology else {
            panic!()
        };
        assert_eq!(sentinel.sentinels.len(), 2);
        assert!(!s.redis.is_cluster());

        let s = resolve(&format!(
            "{base}url = \"redis://127.0.0.1:7000\"\ncluster = true\nnodes = [\"redis://127.0.0.1:7001\"]"
        ))
        .unwrap();
        assert!(s.redis.is_cluster());
        let Topology::Cluster { nodes } = &s.redis.topology else {
            panic!()
        };
        assert_eq!(nodes.len(), 2);
        let CacheSettings::Redis { connection, .. } = &s.cache else {
            panic!()
        };
        assert!(connection.is_cluster());
        assert_eq!(connection.info.redis_settings().db(), 0);

        // REDIS_SCHEME=tls and phpredis' tls:// both mean rediss://.
        let mut layer = Layer::from_toml(&format!("{base}url = \"redis://h:6379\"")).unwrap();
        layer.redis.scheme = Some("tls".into());
        let s = Settings::resolve(layer).unwrap();
        assert!(matches!(s.redis.info.addr(), ConnectionAddr::TcpTls { .. }));
        let s = resolve(&format!("{base}url = \"tls://h:6379\"")).unwrap();
        assert!(matches!(s.redis.info.addr(), ConnectionAddr::TcpTls { .. }));

        for (keys, expected) in [
            (
                "url = \"rediss://h\"\ntls_cert_file = \"/c\"",
                "go together",
            ),
            ("sentinels = [\"h:1\"]", "needs [redis] service"),
            (
                "sentinels = [\"h:1\"]\nservice = \"m\"\ncluster = true",
                "exclude each other",
            ),
            ("url = \"unix:///tmp/r.sock\"\ncluster = true", "needs TCP"),
            ("service = \"\"", "[redis] service = \"\""),
            (
                "sentinels = [\"h:1\"]\nservice = \" \"",
                "[redis] service = \" \"",
            ),
            (
                "sentinels = []\nservice = \"m\"",
                "[redis] sentinels = [] with",
            ),
        ] {
            let e = resolve(&format!("{base}{keys}")).unwrap_err().to_string();
            assert!(e.contains(expected), "{keys}: {e}");
        }
    }

    #[test]
    fn clear_errors() {
        let e = resolve("").unwrap_err().to_string();
        assert!(e.contains("needs a database"), "{e}");
        assert!(resolve("[queue]\nretry_afte = 3").is_err());
        let e = resolve("[failed]\ndriver = \"null\"\n[[handlers]]\nmatch = \"*\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a command"), "{e}");
    }

    #[test]
    fn example_config_loads_with_and_without_its_http_example() {
        let text = include_str!("../../config/laravel-worker.toml");
        let s = resolve(text).unwrap();
        assert!(s.handlers.iter().all(|h| h.http().is_none()));
        // Uncomment the HTTP example (the block from its `# [[handlers]]`
        // to the next blank line): it must load too.
        let mut in_example = false;
        let uncommented: Vec<&str> = text
            .lines()
            .map(|line| {
                if line == "# [[handlers]]" {
                    in_example = true;
                } else if line.is_empty() {
                    in_example = false;
                }
                match line.strip_prefix("# ") {
                    Some(rest) if in_example => rest,
                    _ => line,
                }
            })
            .collect();
        let s = resolve(&uncommented.join("\n")).unwrap();
        let http: Vec<_> = s.handlers.iter().filter(|h| h.http().is_some()).collect();
        assert_eq!(http.len(), 1);
        assert_eq!(
            http[0].http().unwrap().secret_env.as_deref(),
            Some("QUEUE_HANDLER_SECRET")
        );
        assert_eq!(http[0].queues, Some(vec!["mail".to_string()]));
        // So does the persistent example that follows it.
        let pools: Vec<_> = s
            .handlers
            .iter()
            .filter_map(|h| match &h.transport {
                TransportSpec::Persistent(_, pool) => Some(pool),
                _ => None,
            })
            .collect();
        assert_eq!(pools.len(), 1);
        assert_eq!(pools[0].processes, 4);
    }

    /// The example config with every commented-out key and section header
    /// (`# key = …`, `# [section]`, `# [[handlers]]`) uncommented.
    fn example_with_every_key() -> String {
        let is_key = |rest: &str| {
            rest.split_once(" = ").is_some_and(|(key, _)| {
                !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
        };
        let is_header = |rest: &str| {
            let name = rest.split_whitespace().next().unwrap_or("");
            name.len() > 2
                && name.starts_with('[')
                && name.ends_with(']')
                && name
                    .trim_matches(['[', ']'])
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_')
        };
        include_str!("../../config/laravel-worker.toml")
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest) if is_key(rest) || is_header(rest) => rest,
                _ => line,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every key the example config sets or shows commented out is a
    /// setting, and every setting is set or shown there.
    #[test]
    fn example_config_shows_every_key() {
        let sections = known_keys::sections();
        // A new section must be added to `known_keys::sections` (and to the example).
        let mut names: Vec<&str> = sections.iter().map(|(name, _)| *name).collect();
        let mut top: Vec<&str> = known_keys::top_level().to_vec();
        names.sort_unstable();
        top.sort_unstable();
        assert_eq!(names, top);

        let every_key = example_with_every_key();
        for (what, text) in [
            ("set", include_str!("../../config/laravel-worker.toml")),
            ("set or shown", every_key.as_str()),
        ] {
            let table: toml::Table = toml::from_str(text).unwrap();
            let mut keys: Vec<(String, String)> = Vec::new();
            for (section, value) in &table {
                let entries: Vec<&toml::Table> = match value {
                    toml::Value::Table(t) => vec![t],
                    toml::Value::Array(items) => {
                        items.iter().filter_map(|i| i.as_table()).collect()
                    }
                    other => panic!("{section} = {other}: a key outside any section"),
                };
                for entry in entries {
                    keys.extend(entry.keys().map(|k| (section.clone(), k.clone())));
                }
            }
            for (section, key) in &keys {
                let known = sections
                    .iter()
                    .find(|(name, _)| name == section)
                    .is_some_and(|(_, fields)| fields.contains(&key.as_str()));
                assert!(known, "[{section}] {key} ({what}) is not a setting");
            }
            if what == "set or shown" {
                for (section, fields) in &sections {
                    for field in *fields {
                        assert!(
                            keys.iter().any(|(s, k)| s == section && k == field),
                            "[{section}] {field} is neither set nor shown in config/laravel-worker.toml"
                        );
                    }
                }
            }
            // And the file, as it is and with every key, loads.
            let settings = resolve(text).unwrap();
            assert!(!settings.handlers.is_empty());
        }
    }

    #[test]
    fn url_handlers_are_checked() {
        let handler = |keys: &str| {
            resolve(&format!(
                "[failed]\ndriver = \"null\"\n[[handlers]]\nmatch = \"*\"\n{keys}"
            ))
            .map(|s| s.handlers)
            .map_err(|e| e.to_string())
        };
        let ok = handler(
            "url = \"https://app.test/_queue\"\nconnect_timeout = 2\ntoken_env = \"T\"\nsecret_env = \"S\"\nqueues = [\"high\"]",
        )
        .unwrap();
        let http = ok[0].http().unwrap();
        assert_eq!(http.url, "https://app.test/_queue");
        assert_eq!(http.connect_timeout, Duration::from_secs(2));
        assert_eq!(ok[0].queues, Some(vec!["high".to_string()]));
        for (keys, expected) in [
            ("url = \"http://a/\"\ncommand = [\"x\"]", "not both"),
            ("url = \"ftp://a/\"", "http:// or https://"),
            ("url = \"not a url\"", "url = \"not a url\""),
            ("url = \"https://u:p@a/\"", "must not hold credentials"),
            (
                "url = \"http://a/\"\nmode = \"persistent\"",
                "mode applies to command",
            ),
            (
                "url = \"http://a/\"\nconnect_timeout = 0",
                "at least 1 second",
            ),
            (
                "url = \"http://a/\"\nsecret_env = \"\"",
                "secret_env must name",
            ),
            ("url = \"http://a/\"\nqueues = []", "queues must list"),
            (
                "command = [\"x\"]\ntoken_env = \"T\"",
                "token_env applies to url",
            ),
            ("command = [\"x\"]\nqueues = [\"\"]", "queues must list"),
            (
                "url = \"http://a/\"\nenv = { A = \"1\" }",
                "env applies to command",
            ),
            (
                "url = \"http://a/\"\nenv_clear = true",
                "env_clear applies to command",
            ),
            (
                "url = \"http://a/\"\nscheduling = \"batch\"",
                "scheduling applies to command",
            ),
            (
                "command = [\"x\"]\nscheduling = \"fifo\"",
                "scheduling = \"fifo\": expected one of \"batch\", \"other\", \"idle\"",
            ),
            (
                "command = [\"x\"]\nenv = { \"A=B\" = \"1\" }",
                "not a variable name",
            ),
        ] {
            let e = handler(keys).unwrap_err();
            assert!(e.contains(expected), "{keys}: {e}");
        }
    }

    #[test]
    fn pool_keys_need_persistent_mode() {
        let handler = |keys: &str| {
            resolve(&format!(
                "[failed]\ndriver = \"null\"\n[[handlers]]\nmatch = \"*\"\ncommand = [\"x\"]\n{keys}"
            ))
            .map_err(|e| e.to_string())
        };
        for key in [
            "processes = 4",
            "min_processes = 1",
            "idle_timeout = 60",
            "reserve_ahead = 2",
            "pipeline = true",
            "max_jobs = 500",
            "max_memory = 128",
        ] {
            let name = key.split(' ').next().unwrap_or_default();
            for mode in ["", "mode = \"process\"\n"] {
                let e = handler(&format!("{mode}{key}")).unwrap_err();
                assert!(
                    e.contains(&format!("{name} applies to mode = \"persistent\" only")),
                    "{mode}{key}: {e}"
                );
            }
            handler(&format!("mode = \"persistent\"\n{key}")).unwrap();
        }
        let e = handler("mode = \"persistent\"\nprocesses = 0").unwrap_err();
        assert!(e.contains("processes = 0"), "{e}");
    }
}
