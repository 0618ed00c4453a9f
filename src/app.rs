//! Opening what a command works on, from the [`Settings`]: the queue, the
//! cache, the failed-job store, the handlers' router and the heartbeat
//! file. Every command opens them here, so each rule (retries at start,
//! which handler transport an entry means) lives in one place.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cache::{CacheStore, DatabaseCache, FileCache, RedisCache};
use crate::config::{CacheSettings, Settings, Transport};
use crate::failed::FailedJobStore;
use crate::handler::{
    Handler, PersistentHandler, PersistentOptions, Route, Router, SubprocessHandler,
};
use crate::lifecycle::Heartbeat;
use crate::queue::RedisQueue;
use crate::queue::redis_queue::QueueOptions;

/// Connection attempts at start before the worker gives up (exit 1).
const CONNECT_TRIES: u32 = 5;

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
            Err(e) if attempt < CONNECT_TRIES && !crate::queue::connect::is_permanent(&e) => {
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
                if crate::queue::connect::speaks_no_redis(&e) {
                    anyhow::bail!(
                        "the queue Redis ({target}) answered, but not in the Redis protocol: \
                         is another service (an HTTP server?) on that port? Check [redis] url, \
                         or REDIS_HOST and REDIS_PORT"
                    );
                }
                return Err(e).with_context(|| {
                    if attempt < CONNECT_TRIES {
                        format!("cannot connect to the queue Redis ({target})")
                    } else {
                        format!(
                            "the queue Redis is unreachable after {CONNECT_TRIES} tries ({target})"
                        )
                    }
                });
            }
        }
    }
    unreachable!("the loop returns on its last try")
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
            let conn = crate::queue::connect::open(
                connection,
                Some(crate::queue::connect::COMMAND_TIMEOUT),
            )
            .await
            .with_context(|| {
                format!(
                    "cannot connect to the cache Redis ({})",
                    connection.describe()
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

/// Opens the failed-job store (with its fallback for records the store
/// refuses for good; see [`FailedJobStore::open`]).
///
/// # Errors
/// A database URL that cannot be used, or an unreachable Redis.
pub async fn open_failed_store(settings: &Settings) -> anyhow::Result<FailedJobStore> {
    FailedJobStore::open(settings).await
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
            let transport = entry.transport();
            if transport != Transport::Http {
                crate::handler::preflight::check_program(&entry.pattern, &command, &environment)?;
            }
            let handler = match (transport, &entry.url) {
                (Transport::Http, Some(url)) => {
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
                }
                (Transport::Persistent, _) => {
                    Handler::Persistent(PersistentHandler::new(PersistentOptions {
                        command,
                        processes: entry.processes.unwrap_or(1),
                        max_jobs: entry.max_jobs.unwrap_or(0),
                        max_memory_mb: entry.max_memory.unwrap_or(0),
                        kill_grace: settings.kill_grace,
                        output_limit: settings.output_limit,
                        environment,
                        decode_command: entry.decodes_command(),
                    }))
                }
                _ => Handler::Subprocess(
                    SubprocessHandler::new(
                        command,
                        settings.kill_grace,
                        settings.output_limit,
                        Arc::clone(&result_dir),
                        environment,
                    )
                    .decoding_command(entry.decodes_command()),
                ),
            };
            let breaker = crate::handler::BreakerSettings {
                trip_after: entry.trip_after.unwrap_or(settings.breaker.trip_after),
                ..settings.breaker
            };
            let route = Route::new(&entry.pattern, Arc::new(handler), entry.timeout)
                .with_breaker(breaker, settings.error_summary_interval);
            Ok(match &entry.queues {
                Some(queues) => route.with_queues(queues.clone()),
                None => route,
            })
        })
        .collect::<anyhow::Result<Vec<Route>>>()?;
    let mut routes = routes;
    routes.extend(horizon_jobs_route(settings, &routes, &result_dir, &secrets));
    Ok(Router::new(routes, settings.unmatched))
}

/// The jobs Horizon's dashboard dispatches onto the app's queue.
const HORIZON_JOBS: &str = "Laravel\\Horizon\\Jobs\\*";

/// With `[horizon]` on and the app's path known, Horizon's own jobs
/// (`RetryFailedJob` from the dashboard's Retry button, `MonitorTag`,
/// `StopMonitoringTag`) go to the PHP bridge, one PHP process per job,
/// unless a `[[handlers]]` entry already takes `RetryFailedJob`. The
/// bridge is the copy built into the binary, written beside the handler
/// results. `None` (and a warning) when `php` cannot run.
fn horizon_jobs_route(
    settings: &Settings,
    routes: &[Route],
    result_dir: &Arc<tempfile::TempDir>,
    secrets: &[String],
) -> Option<Route> {
    const RETRY: &str = "Laravel\\Horizon\\Jobs\\RetryFailedJob";
    let app = settings.app_path.as_ref()?;
    settings.horizon.as_ref()?;
    if routes
        .iter()
        .any(|r| r.matches(RETRY, &settings.default_queue))
    {
        return None;
    }
    let bridge = result_dir.path().join("laravel-worker-bridge.php");
    let command = vec![
        "php".to_string(),
        bridge.display().to_string(),
        format!("--app={}", app.display()),
    ];
    let environment = crate::handler::process_group::Environment {
        clear: false,
        set: Vec::new(),
        remove: secrets.to_vec(),
    };
    let ready = std::fs::write(&bridge, include_str!("../php/laravel-worker-bridge.php"))
        .map_err(anyhow::Error::from)
        .and_then(|()| {
            crate::handler::preflight::check_program(HORIZON_JOBS, &command, &environment)
        });
    if let Err(e) = ready {
        tracing::warn!(
            "Horizon's Retry button will not work: its jobs cannot go to the PHP bridge ({e:#}); \
             add a [[handlers]] entry for {HORIZON_JOBS}"
        );
        return None;
    }
    tracing::info!(app = %app.display(), "Horizon's own jobs ({HORIZON_JOBS}) go to the PHP bridge");
    let handler = SubprocessHandler::new(
        command,
        settings.kill_grace,
        settings.output_limit,
        Arc::clone(result_dir),
        environment,
    )
    .decoding_command(false);
    Some(Route::new(
        HORIZON_JOBS,
        Arc::new(Handler::Subprocess(handler)),
        None,
    ))
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
