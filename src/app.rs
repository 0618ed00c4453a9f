//! Opening what a command works on, from the [`Settings`]: the queue, the
//! cache, the failed-job store, the handlers' router and the heartbeat
//! file. Every command opens them here, so each rule (retries at start,
//! which handler transport an entry means) lives in one place.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cache::{CacheStore, DatabaseCache, FileCache, RedisCache};
use crate::config::QueueDriverSettings;
use crate::config::{
    CacheSettings, CommandSpec, FailedSettings, HandlerSpec, HttpSpec, PoolSpec, Settings,
    TransportSpec,
};
use crate::failed::{DatabaseStore, FailedJobStore, Fallback, RedisFailedStore};
use crate::handler::warm::Spawn;
use crate::handler::{
    Handler, HttpHandler, HttpOptions, PersistentHandler, PersistentOptions, PoolSettings, Route,
    Router, Secret, SubprocessHandler,
};
use crate::horizon::{Horizon, HorizonSettings};
use crate::lifecycle::Heartbeat;
use crate::metrics::Metrics;
use crate::queue::database::{DatabaseQueue, DatabaseQueueSpec};
use crate::queue::redis_queue::queue::QueueOptions;
use crate::queue::{Queue, RedisQueue};
use crate::signals::Control;
use crate::worker::events::LateListener;
use crate::worker::{JobEvents, WorkerOptions};

/// Connection attempts at start before the worker gives up (exit 1).
const CONNECT_TRIES: u32 = 5;

/// Opens the queue the settings' driver names (Redis, or the database
/// queue's table), retrying a few times at start.
///
/// # Errors
/// The queue unreachable after [`CONNECT_TRIES`] tries, or refused (a
/// missing table, credentials refused).
pub async fn open_queue(settings: &Settings) -> anyhow::Result<Queue> {
    match &settings.driver {
        QueueDriverSettings::Redis => open_redis_queue(settings).await,
        QueueDriverSettings::Database(spec) => open_database_queue(spec).await,
        // No call at open: the first receive tells whether SQS answers (the
        // loop logs and backs off while it does not). A profile the
        // credential chain would miss is named first.
        QueueDriverSettings::Sqs(spec) => {
            crate::config::sqs::check_profile(spec, |var| std::env::var(var).ok())?;
            Ok(crate::queue::sqs::SqsQueue::open(spec).await.into())
        }
        // No call at open, as SQS: the first reserve or push connects.
        QueueDriverSettings::Beanstalkd(spec) => {
            Ok(crate::queue::beanstalkd::BeanstalkdQueue::open(spec).into())
        }
        unserved @ QueueDriverSettings::Unserved { .. } => {
            anyhow::bail!("{}", unserved.refusal().unwrap_or_default())
        }
    }
}

/// Opens the database queue, retrying a few times at start while the
/// database cannot be reached; a table the database refuses fails at once.
///
/// # Errors
/// The table is missing or wrong, or the database is unreachable after
/// [`CONNECT_TRIES`] tries.
async fn open_database_queue(spec: &DatabaseQueueSpec) -> anyhow::Result<Queue> {
    let mut pause = Duration::from_millis(500);
    for attempt in 1..=CONNECT_TRIES {
        match DatabaseQueue::open(spec).await {
            Ok(queue) => {
                if let Some(warning) = queue.lock_warning() {
                    tracing::warn!("{warning}");
                }
                return Ok(queue.into());
            }
            Err(e) if attempt < CONNECT_TRIES && e.is_unavailable() => {
                tracing::warn!(attempt, "cannot open the database queue: {e}");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) if e.is_unavailable() => {
                anyhow::bail!("the database queue is unreachable after {CONNECT_TRIES} tries: {e}")
            }
            Err(e) => anyhow::bail!("{e}"),
        }
    }
    unreachable!("the loop returns on its last try")
}

/// Connects to the queue Redis, retrying a few times at start.
///
/// # Errors
/// Redis unreachable after [`CONNECT_TRIES`] tries.
async fn open_redis_queue(settings: &Settings) -> anyhow::Result<Queue> {
    let options = QueueOptions {
        prefix: settings.redis_prefix.clone(),
        retry_after: settings.retry_after,
        block_for: settings.block_for,
        migration_batch_size: settings.migration_batch_size,
        // Only Horizon's records read the migrated payloads.
        migrated_payloads: if settings.horizon.is_some() {
            crate::queue::migrated::REPLY_BUDGET
        } else {
            0
        },
    };
    let mut pause = Duration::from_millis(500);
    for attempt in 1..=CONNECT_TRIES {
        match RedisQueue::connect(&settings.redis, options.clone()).await {
            Ok(queue) => return Ok(queue.into()),
            Err(e) if attempt < CONNECT_TRIES && !crate::redis::is_permanent(&e) => {
                tracing::warn!(
                    attempt,
                    redis = %settings.redis.describe(),
                    "cannot connect to the queue Redis: {e}"
                );
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                let target = settings.redis.describe();
                if crate::redis::speaks_no_redis(&e) {
                    anyhow::bail!(
                        "the queue Redis ({target}) answered, but not in the Redis protocol: \
                         is another service (an HTTP server?) on that port? Check [redis] url, \
                         or REDIS_HOST and REDIS_PORT"
                    );
                }
                let hint = match &settings.app_connection {
                    Some(app) => format!(
                        "; the app's own queue connection is {app:?} (QUEUE_CONNECTION), not \
                         {:?}: to serve it, run laravel-worker work without a connection, or \
                         work {app}",
                        settings.connection
                    ),
                    None => String::new(),
                };
                return Err(e).with_context(|| {
                    if attempt < CONNECT_TRIES {
                        format!("cannot connect to the queue Redis ({target}){hint}")
                    } else {
                        format!(
                            "the queue Redis is unreachable after {CONNECT_TRIES} tries \
                             ({target}){hint}"
                        )
                    }
                });
            }
        }
    }
    unreachable!("the loop returns on its last try")
}

/// Opens the bookkeeping's stores (`[bookkeeping]`) and names at start,
/// as warnings, those it cannot use. Never fails: a store that cannot be
/// opened is left out, and its jobs' locks or batches are not written.
pub async fn open_bookkeeping(settings: &Settings) -> crate::whole::Bookkeeping {
    use crate::config::bookkeeping::LockSettings;
    let b = &settings.bookkeeping;
    if !b.enabled {
        return crate::whole::Bookkeeping::off();
    }
    let (lock, kind) = match &b.lock {
        LockSettings::Redis { connection, prefix } => {
            match crate::redis::open(connection, crate::redis::Purpose::Commands).await {
                Ok(conn) => (
                    Some(crate::whole::LockStore::Redis {
                        conn,
                        prefix: prefix.clone(),
                    }),
                    "redis",
                ),
                Err(e) => {
                    tracing::warn!(
                        "cannot connect to the unique locks' Redis ({}): locks of jobs not run \
                         by the PHP bridge are not released: {e}",
                        connection.describe()
                    );
                    (None, "redis")
                }
            }
        }
        LockSettings::Database { url, table, prefix } => match crate::sql::Pool::lazy(url) {
            Ok(pool) => (
                Some(crate::whole::LockStore::Database {
                    pool,
                    table: table.clone(),
                    prefix: prefix.clone(),
                }),
                "database",
            ),
            Err(e) => {
                tracing::warn!("cannot open the unique locks' database: {e}");
                (None, "database")
            }
        },
        LockSettings::Unsupported(kind) => (None, *kind),
    };
    let batches = b.batches.as_ref().and_then(|(url, table)| {
        crate::whole::Batches::new(url, table)
            .inspect_err(|e| tracing::warn!("cannot open the batches database: {e}"))
            .ok()
    });
    let bookkeeping = crate::whole::Bookkeeping::new(crate::whole::Parts {
        until_processing: b.until_processing.clone(),
        unique: b.unique.clone(),
        laravel: settings.laravel,
        lock_name: b.lock_name.clone(),
        lock,
        lock_kind: kind.to_string(),
        batches,
        finish_with: b.finish_with.clone(),
    });
    bookkeeping.check().await;
    bookkeeping
}

/// Opens the cache store.
///
/// # Errors
/// The cache Redis is unreachable, or the cache database URL or table name
/// cannot be used.
pub async fn open_cache(settings: &Settings) -> anyhow::Result<CacheStore> {
    Ok(match &settings.cache {
        CacheSettings::Redis {
            connection,
            key_prefix,
        } => {
            let conn = crate::redis::open(connection, crate::redis::Purpose::Commands)
                .await
                .with_context(|| {
                    format!(
                        "cannot connect to the cache Redis ({}){}",
                        connection.describe(),
                        cache_store_hint(&settings.driver)
                    )
                })?;
            CacheStore::Redis(RedisCache::new(
                conn,
                key_prefix.clone(),
                connection.describe(),
            ))
        }
        CacheSettings::File { dir } => CacheStore::File(FileCache::new(dir.clone())),
        CacheSettings::Database { url, table, prefix } => {
            CacheStore::Database(DatabaseCache::new(url, table, prefix.clone())?)
        }
        CacheSettings::None => CacheStore::None,
    })
}

/// What to add to a refused cache Redis's error when the queue itself is
/// not on Redis. There the cache store is most often Redis only because
/// nothing named another (`[cache] store` is `redis` by default, where
/// Laravel's own default is the `database` store since 11 and `file`
/// before), so the operator of a database or SQS queue learns which key
/// picks the app's store.
fn cache_store_hint(driver: &QueueDriverSettings) -> &'static str {
    if driver.queue_on_redis() {
        ""
    } else {
        "; the queue is not on Redis, but the cache store is: set [cache] store \
         (the app's CACHE_STORE) to \"database\", \"file\" or \"none\", or give \
         --env-file or --app to read it from the app"
    }
}

/// Opens the failed-job store `settings` name (`[failed]`). The database
/// is connected on first use, so a database that is down at start does not
/// stop the worker; its fallback for records it refuses for good (the Redis
/// store under the queue connection's prefix, see [`FailedJobStore`]; only
/// where the queue is on Redis) too.
/// The `redis` driver connects now.
///
/// # Errors
/// A database URL that cannot be used, or an unreachable Redis.
pub async fn open_failed_store(settings: &Settings) -> anyhow::Result<FailedJobStore> {
    Ok(match &settings.failed {
        FailedSettings::Database { url, table } => FailedJobStore::Database {
            table: DatabaseStore::new(url, table)
                .with_context(|| format!("[failed] url = {:?}", crate::config::redact::url(url)))?,
            // Only an app whose queue is on Redis has a Redis to keep
            // the records the table refuses; the others' commands never
            // touch one.
            fallback: Box::new(if settings.driver.queue_on_redis() {
                Fallback::new(settings.redis.clone(), &settings.redis_prefix)
            } else {
                Fallback::none()
            }),
        },
        FailedSettings::Redis => FailedJobStore::Redis(
            RedisFailedStore::connect(
                &settings.redis,
                &settings.redis_prefix,
                "the failed job store",
            )
            .await?,
        ),
        FailedSettings::Null => FailedJobStore::Null,
    })
}

/// Builds the router from `[[handlers]]`.
///
/// # Errors
/// No handlers, or a command handler's program that cannot run
/// ([`crate::handler::preflight`]); the temporary directory for handler
/// results cannot be made; an HTTP handler's `token_env` or `secret_env`
/// variable is unset or empty, or its client cannot be set up.
pub fn build_router(settings: &Settings) -> anyhow::Result<Router> {
    crate::handler::preflight::require_handlers(settings.handlers.len())?;
    let result_dir = Arc::new(
        crate::handler::subprocess::result_dir()
            .context("cannot create a directory for handler results")?,
    );
    // Secrets named in the config are kept from every handler process.
    let secrets: Vec<String> = settings
        .handlers
        .iter()
        .filter_map(HandlerSpec::http)
        .flat_map(|h| [h.token_env.clone(), h.secret_env.clone()])
        .flatten()
        .collect();
    let routes = settings
        .handlers
        .iter()
        .map(|spec| -> anyhow::Result<Route> {
            let handler = match &spec.transport {
                TransportSpec::Http(http) => Handler::Http(http_handler(&spec.pattern, http)?),
                TransportSpec::Process(command) => {
                    command_handler(spec, command, None, settings, &result_dir, &secrets)?
                }
                TransportSpec::Persistent(command, pool) => {
                    command_handler(spec, command, Some(pool), settings, &result_dir, &secrets)?
                }
            };
            let route = Route::new(&spec.pattern, Arc::new(handler), spec.timeout)
                .with_breaker(spec.breaker, settings.error_summary_interval)
                .with_keeper(spec.keeper);
            Ok(match &spec.queues {
                Some(queues) => route.with_queues(queues.clone()),
                None => route,
            })
        })
        .collect::<anyhow::Result<Vec<Route>>>()?;
    let router = Router::new(routes, settings.unmatched);
    // Each pool's keeper starts its minimum and stops idle processes.
    for (_, pool) in router.pools() {
        pool.start();
    }
    Ok(router)
}

/// The handler of a command `[[handlers]]` entry, its program checked
/// first: one process per job, or (with `pool`) warm processes; `secrets`
/// (variable names) are kept from its environment.
///
/// # Errors
/// The program cannot run ([`crate::handler::preflight`]).
fn command_handler(
    spec: &HandlerSpec,
    command: &CommandSpec,
    pool: Option<&PoolSpec>,
    settings: &Settings,
    result_dir: &Arc<tempfile::TempDir>,
    secrets: &[String],
) -> anyhow::Result<Handler> {
    let environment = crate::handler::process_group::Environment {
        clear: command.env_clear,
        set: command.env.clone().into_iter().collect(),
        remove: secrets.to_vec(),
    };
    crate::handler::preflight::check_program(&spec.pattern, &command.command, &environment)?;
    Ok(match pool {
        Some(pool) => Handler::Persistent(PersistentHandler::new(PersistentOptions {
            spawn: Spawn {
                command: command.command.clone(),
                environment,
                scheduling: command.scheduling,
                output_limit: settings.output_limit,
                connection: settings.connection.clone(),
            },
            pool: PoolSettings {
                size: pool.processes,
                min: pool.min_processes,
                idle_timeout: pool.idle_timeout,
                max_jobs: pool.max_jobs,
                max_memory_mb: pool.max_memory_mb,
                kill_grace: settings.kill_grace,
                reserve_ahead: pool.reserve_ahead,
                pipeline: pool.pipeline,
            },
            decode_command: command.decode_command,
        })),
        None => Handler::Subprocess(
            SubprocessHandler::new(
                command.command.clone(),
                settings.kill_grace,
                settings.output_limit,
                Arc::clone(result_dir),
                environment,
            )
            .decoding_command(command.decode_command)
            .scheduled(command.scheduling),
        ),
    })
}

/// The HTTP handler of entry `pattern`.
///
/// # Errors
/// As [`build_router`].
fn http_handler(pattern: &str, spec: &HttpSpec) -> anyhow::Result<HttpHandler> {
    let secret = |key, var: &Option<String>| {
        var.as_deref()
            .map(|var| Secret::from_env(pattern, key, var))
            .transpose()
    };
    let url = &spec.url;
    HttpHandler::new(HttpOptions {
        url: reqwest::Url::parse(url).with_context(|| format!("[[handlers]] url = {url:?}"))?,
        connect_timeout: spec.connect_timeout,
        token: secret("token_env", &spec.token_env)?,
        secret: secret("secret_env", &spec.secret_env)?,
    })
    .with_context(|| format!("[[handlers]] match = {pattern:?}"))
}

/// How often Horizon's records try their Redis again when it was
/// unreachable at start.
const HORIZON_RETRY: Duration = Duration::from_secs(5);

/// Horizon's records, an observer of the worker: started with it, or, when
/// Horizon's Redis cannot be reached at start, started later by a task that
/// tries again every [`HORIZON_RETRY`], the worker running meanwhile (the
/// records of the jobs that ran before are not written).
pub struct HorizonRecords {
    listener: Arc<LateListener>,
    running: Arc<tokio::sync::Mutex<Option<Horizon>>>,
    retrying: Option<tokio::task::JoinHandle<()>>,
}

impl HorizonRecords {
    /// The job events listener that writes the records once they run.
    pub fn listener(&self) -> Arc<dyn JobEvents> {
        Arc::clone(&self.listener) as Arc<dyn JobEvents>
    }

    /// Once the worker stopped: stops trying, or finishes the records
    /// (see [`Horizon::finish`]).
    pub async fn finish(self) {
        if let Some(retrying) = self.retrying {
            retrying.abort();
        }
        if let Some(horizon) = self.running.lock().await.take() {
            horizon.finish().await;
        }
    }
}

/// Hands a started `horizon` its listener slot and its drop counter.
async fn run_horizon(
    horizon: Horizon,
    listener: &LateListener,
    running: &tokio::sync::Mutex<Option<Horizon>>,
    metrics: &Metrics,
) {
    listener.join(horizon.listener());
    metrics.watch_dropped("horizon", horizon.dropped());
    *running.lock().await = Some(horizon);
}

/// Tries `start` every [`HORIZON_RETRY`] until Horizon's Redis answers,
/// then runs the records.
async fn retry_horizon<F, Fut>(
    start: F,
    listener: Arc<LateListener>,
    running: Arc<tokio::sync::Mutex<Option<Horizon>>>,
    metrics: Arc<Metrics>,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Horizon>>,
{
    loop {
        tokio::time::sleep(HORIZON_RETRY).await;
        match start().await {
            Ok(started) => {
                tracing::info!("Horizon's Redis is back: writing Horizon's records");
                run_horizon(started, &listener, &running, &metrics).await;
                return;
            }
            Err(e) => tracing::debug!("Horizon's Redis still unreachable: {e:#}"),
        }
    }
}

/// The start-up error of Horizon's Redis refusing us for good, said as
/// what it is (a server that does not speak Redis is named as such).
fn horizon_refused(e: anyhow::Error, target: &crate::redis::RedisTarget) -> anyhow::Error {
    let redis = e
        .chain()
        .find_map(|c| c.downcast_ref::<redis::RedisError>());
    if redis.is_some_and(crate::redis::speaks_no_redis) {
        return anyhow::anyhow!(
            "the Redis of [horizon] ({}) answered, but not in the Redis protocol: is \
             another service (an HTTP server?) on that port? Check [horizon] url",
            target.describe()
        );
    }
    e.context("cannot connect to the Redis of [horizon]")
}

/// Whether `e` says Horizon's Redis cannot be reached now (worth trying
/// again), rather than refusing us for good.
fn horizon_unreachable(e: &anyhow::Error) -> bool {
    let redis = e
        .chain()
        .find_map(|c| c.downcast_ref::<redis::RedisError>());
    redis.is_some_and(|r| !crate::redis::is_permanent(r))
}

/// Starts writing Horizon's records when `[horizon]` is enabled: the
/// prefix braced on a cluster as Horizon does
/// ([`crate::horizon::keys::prefix`]), on `[horizon] url`'s Redis, else
/// the queue's. A Redis that cannot be reached is tried again in the
/// background (said once); records are an observer and never keep the
/// worker from starting.
///
/// # Errors
/// Horizon's Redis refused us for good: credentials, TLS, or a server that
/// does not speak Redis.
pub async fn start_horizon(
    settings: &Settings,
    queue: &Queue,
    options: &WorkerOptions,
    control: tokio::sync::watch::Receiver<Control>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<HorizonRecords>> {
    let Some(spec) = &settings.horizon else {
        return Ok(None);
    };
    let target = spec.redis.clone().unwrap_or_else(|| settings.redis.clone());
    let horizon = HorizonSettings {
        redis: spec.redis.clone(),
        prefix: crate::horizon::keys::prefix(spec.prefix.as_deref(), target.is_cluster()),
        snapshot: spec.snapshot,
        trim: spec.trim,
    };
    let mut records = HorizonRecords {
        listener: Arc::new(LateListener::default()),
        running: Arc::new(tokio::sync::Mutex::new(None)),
        retrying: None,
    };
    let (queue_redis, connection) = (settings.redis.clone(), settings.connection.clone());
    let start = {
        let (queue, options) = (queue.clone(), options.clone());
        move || {
            let (horizon, queue_redis, queue) =
                (horizon.clone(), queue_redis.clone(), queue.clone());
            let (connection, options, control) =
                (connection.clone(), options.clone(), control.clone());
            async move {
                Horizon::start(
                    &horizon,
                    &queue_redis,
                    &queue,
                    &connection,
                    &options,
                    control,
                )
                .await
            }
        }
    };
    match start().await {
        Ok(started) => run_horizon(started, &records.listener, &records.running, metrics).await,
        Err(e) if horizon_unreachable(&e) => {
            tracing::warn!(
                redis = %target.describe(),
                "Horizon's Redis cannot be reached ({}); the worker runs without Horizon's \
                 records and tries again every {} s",
                crate::error_chain::error_chain(e.as_ref()),
                HORIZON_RETRY.as_secs()
            );
            let (listener, running) = (Arc::clone(&records.listener), Arc::clone(&records.running));
            let retry = retry_horizon(start, listener, running, Arc::clone(metrics));
            records.retrying = Some(tokio::spawn(retry));
        }
        Err(e) => return Err(horizon_refused(e, &target)),
    }
    Ok(Some(records))
}

/// Binds the metrics endpoint of `[metrics] listen`, if any, and serves
/// `metrics` there (within `[metrics]`' limits) on a task of its own.
///
/// # Errors
/// The address cannot be listened on.
pub async fn serve_metrics(settings: &Settings, metrics: &Arc<Metrics>) -> anyhow::Result<()> {
    let Some(listen) = &settings.metrics_listen else {
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on [metrics] listen = {listen:?}"))?;
    let address = listener
        .local_addr()
        .map_or_else(|_| listen.clone(), |a| a.to_string());
    let limits = settings.metrics_limits;
    let cap = limits.cap(crate::metrics::listener::open_file_limit());
    tracing::info!(
        %address,
        max_connections = cap,
        "metrics endpoint listening (/metrics, /healthz, /readyz)"
    );
    tokio::spawn(crate::metrics::listener::serve(
        listener,
        Arc::clone(metrics),
        limits,
        cap,
    ));
    Ok(())
}

/// The heartbeat file (`--heartbeat-file`, else `[worker] heartbeat_file`),
/// checked writable at start so a wrong path fails at once rather than as a
/// container that never turns healthy.
///
/// # Errors
/// The file cannot be written (missing directory, no permission).
pub fn open_heartbeat(
    flag: Option<&std::path::Path>,
    settings: &Settings,
) -> anyhow::Result<Option<Heartbeat>> {
    let Some(path) = flag
        .map(std::path::Path::to_path_buf)
        .or_else(|| settings.heartbeat_file.clone())
    else {
        return Ok(None);
    };
    let heartbeat = Heartbeat::new(path);
    heartbeat.check_writable().with_context(|| {
        format!(
            "cannot write the heartbeat file {}",
            heartbeat.path().display()
        )
    })?;
    Ok(Some(heartbeat))
}
