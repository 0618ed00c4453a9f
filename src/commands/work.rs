//! `work`: `php artisan queue:work`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cache::{CacheStore, FileCache, RedisCache};
use crate::cli::WorkArgs;
use crate::config::{CacheSettings, FailedSettings, Settings};
use crate::failed::{DatabaseStore, FailedJobStore, RedisFailedStore};
use crate::handler::{
    Handler, PersistentHandler, PersistentOptions, Route, Router, SubprocessHandler,
};
use crate::lifecycle::{Heartbeat, Notifier, Pulse};
use crate::metrics::Metrics;
use crate::output::Reporter;
use crate::queue::RedisQueue;
use crate::queue::payload::parse_backoff;
use crate::queue::redis_queue::QueueOptions;
use crate::worker::{Daemon, Services, WorkerOptions};

/// Connection attempts at start before the worker gives up (exit 1).
const CONNECT_TRIES: u32 = 5;

/// Runs the worker until it stops; returns its exit status.
///
/// # Errors
/// Settings that cannot work, or a Redis that stays unreachable at start.
pub async fn run(mut settings: Settings, args: WorkArgs) -> anyhow::Result<u8> {
    if let Some(connection) = &args.connection {
        settings.connection = connection.clone();
    }
    let options = worker_options(&args, &settings)?;
    let heartbeat = open_heartbeat(&args, &settings)?;
    let queue = open_queue(&settings).await?;
    let cache = open_cache(&settings).await?;
    let failed = open_failed_store(&settings).await?;
    let router = build_router(&settings)?;
    let control = crate::signals::listen().context("cannot install signal handlers")?;

    tracing::info!(
        failed = failed.describe(),
        retry_after = ?settings.retry_after,
        block_for = ?settings.block_for,
        "worker configured"
    );
    let metrics = Arc::new(Metrics::new());
    if let Some(listen) = &settings.metrics_listen {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on [metrics] listen = {listen:?}"))?;
        let address = listener
            .local_addr()
            .map_or_else(|_| listen.clone(), |a| a.to_string());
        tracing::info!(%address, "metrics endpoint listening (/metrics, /healthz, /readyz)");
        tokio::spawn(crate::metrics::serve(listener, Arc::clone(&metrics)));
    }
    let (hand_back, hand_back_rx) = tokio::sync::watch::channel(false);
    let services = Services {
        queue,
        connection: settings.connection.clone(),
        cache,
        failed,
        router,
        reporter: Reporter::new(options.json, settings.connection.clone()),
        down_file: match (&settings.app_path, options.force) {
            (Some(app), false) => Some(app.join("storage/framework/down")),
            _ => None,
        },
        hand_back: hand_back_rx,
        laravel: settings.laravel,
        metrics,
        options,
    };
    let pulse = Pulse::new(Notifier::from_env(), heartbeat);
    let fetch_limit = fetch_limit(settings.block_for, services.options.queues.len());
    let reason = Daemon::new(services, control)
        .with_pulse(pulse, fetch_limit)
        .with_error_interval(settings.error_summary_interval)
        .with_drain_timeout(settings.drain_timeout, hand_back)
        .run()
        .await;
    tracing::info!(reason = reason.as_str(), "worker stopped");
    Ok(reason.exit_code())
}

/// The heartbeat file (`--heartbeat-file`, else `[worker] heartbeat_file`),
/// checked writable at start so a wrong path fails at once rather than as a
/// container that never turns healthy.
///
/// # Errors
/// The file cannot be written (missing directory, no permission).
pub fn open_heartbeat(args: &WorkArgs, settings: &Settings) -> anyhow::Result<Option<Heartbeat>> {
    let Some(path) = args
        .heartbeat_file
        .clone()
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

/// The longest one fetch can legitimately take, after which the loop counts
/// as stuck (no more watchdog pings): every queue polled before and after
/// the wait, each pop within the command timeout, plus the BLPOP
/// (`block_for` seconds and the 10 s its connection allows on top).
/// `None` for `block_for = 0`, which waits for a job for ever.
pub fn fetch_limit(block_for: Option<u64>, queues: usize) -> Option<Duration> {
    use crate::queue::connect::COMMAND_TIMEOUT;
    match block_for {
        Some(0) => None,
        block => {
            let polls = u32::try_from(queues.saturating_mul(2)).unwrap_or(u32::MAX);
            Some(
                COMMAND_TIMEOUT.saturating_mul(polls)
                    + Duration::from_secs(block.unwrap_or(0).saturating_add(10)),
            )
        }
    }
}

/// `queue:work`'s flags, with the queue list defaulting to the connection's
/// `queue` setting.
///
/// # Errors
/// Values out of range (a negative `--sleep`...).
pub fn worker_options(args: &WorkArgs, settings: &Settings) -> anyhow::Result<WorkerOptions> {
    let queue_list = args
        .queue
        .clone()
        .unwrap_or_else(|| settings.default_queue.clone());
    let seconds = |name: &str, v: f64| {
        anyhow::ensure!(
            v.is_finite() && v >= 0.0,
            "--{name} must be a number of seconds >= 0"
        );
        Ok(Duration::from_secs_f64(v))
    };
    let mut backoff = parse_backoff(&args.backoff);
    // `--delay` is the deprecated spelling: Laravel takes the larger one.
    if args.delay > 0 && backoff.iter().all(|&b| b < args.delay) {
        backoff = vec![args.delay];
    }
    Ok(WorkerOptions {
        name: args.name.clone(),
        queues: queue_list.split(',').map(str::to_string).collect(),
        once: args.once,
        stop_when_empty: args.stop_when_empty,
        backoff,
        max_jobs: args.max_jobs,
        max_time: Duration::from_secs(args.max_time),
        force: args.force,
        memory_mb: args.memory.max(0) as u64,
        sleep: seconds("sleep", args.sleep)?,
        rest: seconds("rest", args.rest)?,
        timeout: args.timeout,
        tries: args.tries,
        json: args.json,
        concurrency: args.concurrency as usize,
    })
}

/// Connects to the queue Redis, retrying a few times at start.
///
/// # Errors
/// Redis unreachable after [`CONNECT_TRIES`] tries.
pub async fn open_queue(settings: &Settings) -> anyhow::Result<RedisQueue> {
    let options = QueueOptions {
        prefix: settings.redis_prefix.clone(),
        cluster: settings.cluster,
        retry_after: settings.retry_after,
        block_for: settings.block_for,
        migration_batch_size: settings.migration_batch_size,
    };
    let mut pause = Duration::from_millis(500);
    for attempt in 1..=CONNECT_TRIES {
        match RedisQueue::connect(&settings.redis, options.clone()).await {
            Ok(queue) => return Ok(queue),
            Err(e) if attempt < CONNECT_TRIES => {
                tracing::warn!(attempt, "cannot connect to the queue Redis: {e}");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("the queue Redis is unreachable after {CONNECT_TRIES} tries")
                });
            }
        }
    }
    unreachable!("the loop returns on its last try")
}

/// Opens the cache store.
///
/// # Errors
/// The cache Redis is unreachable.
pub async fn open_cache(settings: &Settings) -> anyhow::Result<CacheStore> {
    Ok(match &settings.cache {
        CacheSettings::Redis {
            connection,
            key_prefix,
        } => {
            let conn = crate::queue::connect::connect(
                connection.clone(),
                Some(crate::queue::connect::COMMAND_TIMEOUT),
            )
            .await
            .context("cannot connect to the cache Redis")?;
            CacheStore::Redis(RedisCache::new(conn, key_prefix.clone()))
        }
        CacheSettings::File { dir } => CacheStore::File(FileCache::new(dir.clone())),
        CacheSettings::None => CacheStore::None,
    })
}

/// Opens the failed-job store.
///
/// # Errors
/// A database URL that cannot be used, or an unreachable Redis.
pub async fn open_failed_store(settings: &Settings) -> anyhow::Result<FailedJobStore> {
    Ok(match &settings.failed {
        FailedSettings::Database { url, table } => {
            FailedJobStore::Database(DatabaseStore::new(url, table)?)
        }
        FailedSettings::Redis => {
            let conn = crate::queue::connect::connect(
                settings.redis.clone(),
                Some(crate::queue::connect::COMMAND_TIMEOUT),
            )
            .await
            .context("cannot connect to Redis for the failed job store")?;
            FailedJobStore::Redis(RedisFailedStore::new(conn, &settings.redis_prefix))
        }
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
    use crate::handler::http::DEFAULT_CONNECT_TIMEOUT;
    use crate::handler::{HttpHandler, HttpOptions, Secret};

    crate::handler::preflight::require_handlers(settings.handlers.len())?;
    let result_dir = Arc::new(
        crate::handler::subprocess::result_dir()
            .context("cannot create a directory for handler results")?,
    );
    // Secrets named in the config are kept from every handler process.
    let secrets: Vec<String> = settings
        .handlers
        .iter()
        .flat_map(|h| [h.token_env.clone(), h.secret_env.clone()])
        .flatten()
        .collect();
    let routes = settings
        .handlers
        .iter()
        .map(|entry| -> anyhow::Result<Route> {
            let command = entry.command.clone().unwrap_or_default();
            let environment = crate::handler::process_group::Environment {
                clear: entry.env_clear.unwrap_or(false),
                set: entry.env.clone().unwrap_or_default().into_iter().collect(),
                remove: secrets.clone(),
            };
            if entry.url.is_none() {
                crate::handler::preflight::check_program(&entry.pattern, &command, &environment)?;
            }
            let handler = if let Some(url) = &entry.url {
                let secret = |key, var: &Option<String>| {
                    var.as_deref()
                        .map(|var| Secret::from_env(&entry.pattern, key, var))
                        .transpose()
                };
                Handler::Http(
                    HttpHandler::new(HttpOptions {
                        url: reqwest::Url::parse(url)
                            .with_context(|| format!("[[handlers]] url = {url:?}"))?,
                        connect_timeout: entry
                            .connect_timeout
                            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs),
                        token: secret("token_env", &entry.token_env)?,
                        secret: secret("secret_env", &entry.secret_env)?,
                    })
                    .with_context(|| format!("[[handlers]] match = {:?}", entry.pattern))?,
                )
            } else if entry.mode.as_deref() == Some("persistent") {
                Handler::Persistent(PersistentHandler::new(PersistentOptions {
                    command,
                    processes: entry.processes.unwrap_or(1),
                    max_jobs: entry.max_jobs.unwrap_or(0),
                    max_memory_mb: entry.max_memory.unwrap_or(0),
                    kill_grace: settings.kill_grace,
                    output_limit: settings.output_limit,
                    environment,
                }))
            } else {
                Handler::Subprocess(SubprocessHandler::new(
                    command,
                    settings.kill_grace,
                    settings.output_limit,
                    Arc::clone(&result_dir),
                    environment,
                ))
            };
            let route = Route::new(&entry.pattern, Arc::new(handler), entry.timeout);
            Ok(match &entry.queues {
                Some(queues) => route.with_queues(queues.clone()),
                None => route,
            })
        })
        .collect::<anyhow::Result<Vec<Route>>>()?;
    Ok(Router::new(routes, settings.unmatched))
}
