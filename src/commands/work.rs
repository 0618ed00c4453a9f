//! `work`: `php artisan queue:work`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::app;
use crate::cli::WorkArgs;
use crate::config::Settings;
use crate::lifecycle::{Notifier, Pulse};
use crate::metrics::Metrics;
use crate::output::Reporter;
use crate::pulse_feed::PulseFeed;
use crate::pulse_feed::laravel_ran::BridgeRoutes;
use crate::worker::balance::spec::BalanceSettings;
use crate::worker::{Daemon, JobEvents, Listeners, Services, WorkerOptions};

/// Runs the worker until it stops; returns its exit status. `app_default`:
/// the settings of the app's own queue connection when the command line or
/// the config file chose another (its jobs are counted at start, for the
/// warning of [`super::hints::unserved_default`]).
///
/// # Errors
/// Settings that cannot work, or a Redis that stays unreachable at start.
pub async fn run(
    mut settings: Settings,
    app_default: Option<Settings>,
    args: WorkArgs,
) -> anyhow::Result<u8> {
    if let Some(connection) = &args.connection {
        settings.connection = connection.clone();
    }
    let options = worker_options(&args, &settings)?;
    crate::memory::give_back_large_blocks();
    let heartbeat = app::open_heartbeat(args.heartbeat_file.as_deref(), &settings)?;
    let (queue, cache, failed) = open_queue_and_stores(&settings, &options).await?;
    let router = app::build_router(&settings)?;
    let control = crate::signals::listen().context("cannot install signal handlers")?;
    resize_on_signals(router.pools())?;

    let heartbeat_path = heartbeat.as_ref().map(|h| h.path().to_path_buf());
    super::banner::Banner::new(&settings, &queue, &options, heartbeat_path.as_deref())
        .emit(options.json);
    warn_wrong_place(
        &settings,
        app_default.as_ref(),
        &queue,
        &cache,
        &options.queues,
    )
    .await;
    let metrics_handle = start_metrics(&settings, &options, &queue, &router).await?;
    let mut events = output_and_metrics(&settings, &options, &metrics_handle);
    let horizon = app::start_horizon(
        &settings,
        &queue,
        &options,
        control.clone(),
        &metrics_handle,
    )
    .await?;
    if let Some(horizon) = &horizon {
        events = events.with(horizon.listener());
    }
    let (events, pulse_feed) = with_pulse_feed(events, &settings, &metrics_handle).await?;
    let (drain_deadline, drain_deadline_rx) = tokio::sync::watch::channel(false);
    let services = Services {
        queue,
        connection: settings.connection.clone(),
        cache,
        failed,
        router,
        events,
        down_file: match (&settings.app_path, options.force) {
            (Some(app), false) => Some(app.join("storage/framework/down")),
            _ => None,
        },
        drain_deadline: drain_deadline_rx,
        on_lease_lost: settings.on_lease_lost,
        laravel: settings.laravel,
        on_tripped: crate::worker::tripped::TripPolicy::new(settings.on_handler_tripped),
        bookkeeping: app::open_bookkeeping(&settings).await,
        options,
    };
    let pulse = Pulse::new(Notifier::from_env(), heartbeat);
    let reason = Daemon::new(services, control)
        .with_pulse(pulse)
        .with_error_interval(settings.error_summary_interval)
        .with_drain_timeout(settings.drain_timeout, drain_deadline)
        .run()
        .await;
    if let Some(horizon) = horizon {
        horizon.finish().await;
    }
    finish_pulse_feed(pulse_feed).await;
    tracing::info!(reason = reason.as_str(), "worker stopped");
    Ok(reason.exit_code())
}

/// `WorkCommand::listenForEvents`: the output lines and the metrics hear
/// the worker's job events (Horizon's records and Pulse's feed are added
/// after them when asked).
fn output_and_metrics(
    settings: &Settings,
    options: &WorkerOptions,
    metrics: &Arc<Metrics>,
) -> Listeners {
    Listeners::new()
        .with(Arc::new(
            Reporter::new(options.json, settings.connection.clone())
                .with_laravel8_lines(settings.laravel.major < 9),
        ) as Arc<dyn JobEvents>)
        .with(Arc::clone(metrics) as Arc<dyn JobEvents>)
}

/// `events` with Laravel Pulse's feed ([`crate::pulse_feed`]) when
/// `[pulse]` resolved to one and some handler is not the bridge (whose
/// jobs Pulse already hears of), its drops counted in `metrics`; without,
/// no listener costs the jobs anything.
///
/// # Errors
/// `[pulse] enabled = true` and Pulse's ingest cannot be used.
async fn with_pulse_feed(
    events: Listeners,
    settings: &Settings,
    metrics: &Metrics,
) -> anyhow::Result<(Listeners, Option<PulseFeed>)> {
    let Some(pulse) = &settings.pulse else {
        return Ok((events, None));
    };
    let routes = BridgeRoutes::new(settings.handlers.iter().map(|h| {
        let laravel = h.keeper == crate::handler::router::Keeper::Laravel;
        (h.pattern.as_str(), h.queues.clone(), laravel)
    }));
    if !routes.has_other_handlers() {
        return Ok((events, None));
    }
    match PulseFeed::start(pulse, routes).await? {
        Some(feed) => {
            metrics.watch_dropped("pulse_feed", feed.dropped());
            Ok((events.with(feed.listener()), Some(feed)))
        }
        None => Ok((events, None)),
    }
}

/// Writes what Pulse's feed still holds, if it runs.
async fn finish_pulse_feed(feed: Option<PulseFeed>) {
    if let Some(feed) = feed {
        feed.finish().await;
    }
}

/// The metrics: the backlog sampled every `backlog_interval` when the
/// endpoint is on, the handler pools watched, the endpoint served.
///
/// # Errors
/// The metrics address cannot be listened on.
async fn start_metrics(
    settings: &Settings,
    options: &WorkerOptions,
    queue: &crate::queue::Queue,
    router: &crate::handler::Router,
) -> anyhow::Result<Arc<Metrics>> {
    let mut metrics = Metrics::new();
    if let (Some(_), Some(interval)) = (&settings.metrics_listen, settings.backlog_interval) {
        let watched = options.queues.iter().map(|q| queue.handle(q)).collect();
        tokio::spawn(metrics.backlog().sample(queue.clone(), watched, interval));
    }
    metrics.watch_pools(router.pools());
    let metrics = Arc::new(metrics);
    app::serve_metrics(settings, &metrics).await?;
    Ok(metrics)
}

/// Logs the start-up hints that the worker looks in the wrong place: its
/// queues empty under this prefix while another holds jobs, the restart key
/// under another name, the app's own connection (`app_default`) holding
/// jobs this worker does not serve.
async fn warn_wrong_place(
    settings: &Settings,
    app_default: Option<&Settings>,
    queue: &crate::queue::Queue,
    cache: &crate::cache::CacheStore,
    queues: &[String],
) {
    let mut hints = super::hints::wrong_place(queue, cache, queues).await;
    if let Some(app_default) = app_default {
        hints.extend(super::hints::unserved_default(settings, queue, app_default, queues).await);
    }
    for hint in hints {
        tracing::warn!("{hint}");
    }
}

/// Opens the queue (its queues checked, where the driver can tell they
/// exist: a missing SQS queue is refused here), then the cache and
/// failed-job stores. The cache is handed to the queue as the store SQS
/// overflow pointers lead to (Laravel 13.9+); a missing `failed_jobs`
/// table is refused at start, as a missing `jobs` table is.
///
/// # Errors
/// The queue or a store cannot be opened, a queue does not exist, or the
/// failed-jobs table is missing.
async fn open_queue_and_stores(
    settings: &Settings,
    options: &WorkerOptions,
) -> anyhow::Result<(
    crate::queue::Queue,
    crate::cache::CacheStore,
    crate::failed::FailedJobStore,
)> {
    let queue = app::open_queue(settings).await?;
    let served: Vec<_> = options.queues.iter().map(|q| queue.handle(q)).collect();
    queue.check_queues(&served).await?;
    let cache = app::open_cache(settings).await?;
    if !matches!(cache, crate::cache::CacheStore::None) {
        queue.set_payload_store(Arc::new(cache.clone()));
    }
    let failed = app::open_failed_store(settings).await?;
    if let crate::failed::FailedJobStore::Database { table, .. } = &failed {
        table.check_table().await?;
    }
    Ok((queue, cache, failed))
}

/// Called first thing by `work`: SIGTTIN and SIGTTOU no longer stop the
/// process while it starts (see [`crate::signals::absorb_resizes`]); a
/// failure is only a warning.
pub fn absorb_resize_signals() {
    if let Err(e) = crate::signals::absorb_resizes() {
        tracing::warn!("cannot take SIGTTIN and SIGTTOU during start-up: {e}");
    }
}

/// SIGTTIN and SIGTTOU: each persistent handler's pool one process
/// larger or smaller (never below 1), its calls in flight left to end.
///
/// # Errors
/// The signal handlers cannot be installed.
fn resize_on_signals(pools: Vec<(String, Arc<crate::handler::Pool>)>) -> anyhow::Result<()> {
    use crate::signals::Resize;
    crate::signals::resizes(move |change| {
        for (handler, pool) in &pools {
            let size = pool.stats().size;
            let size = match change {
                Resize::Grow => size.saturating_add(1),
                Resize::Shrink => size.saturating_sub(1).max(1),
            };
            tracing::info!(handler, size, "resizing the handler's pool");
            pool.resize(size);
        }
    })
    .context("cannot install the SIGTTIN and SIGTTOU handlers")
}

/// `queue:work`'s flags, with the queue list defaulting to the connection's
/// `queue` setting.
///
/// # Errors
/// Values out of range (see [`crate::worker::options`]).
pub fn worker_options(args: &WorkArgs, settings: &Settings) -> anyhow::Result<WorkerOptions> {
    use crate::worker::options::{backoff_seconds, memory_mb, queue_list, wait_seconds};
    let backoff = backoff_seconds(&args.backoff, args.delay)?;
    let queues = queue_list(args.queue.as_deref(), &settings.default_queue)?;
    let concurrency = args.concurrency as usize;
    let balance = settings
        .balance
        .clone()
        .overridden_by(balance_flags(args)?)
        .resolve(&queues, concurrency)?;
    Ok(WorkerOptions {
        name: args.name.clone(),
        queues,
        once: args.once,
        stop_when_empty: args.stop_when_empty,
        stop_when_empty_for: Duration::from_secs(args.stop_when_empty_for),
        backoff,
        max_jobs: args.max_jobs,
        max_time: Duration::from_secs(args.max_time),
        force: args.force,
        memory_mb: memory_mb(args.memory)?,
        sleep: wait_seconds("sleep", args.sleep)?,
        rest: wait_seconds("rest", args.rest)?,
        timeout: args.timeout,
        tries: args.tries,
        json: args.json,
        concurrency,
        balance,
    })
}

/// The balance flags (`--balance`, `--min-processes`…), which win over
/// `[worker]`'s keys.
fn balance_flags(args: &WorkArgs) -> anyhow::Result<BalanceSettings> {
    let args = &args.balance;
    Ok(BalanceSettings {
        mode: args.balance.as_deref().map(str::parse).transpose()?,
        strategy: (args.auto_scaling_strategy.as_deref().map(str::parse)).transpose()?,
        min_processes: args.min_processes,
        max_processes: args.max_processes,
        max_shift: args.balance_max_shift,
        cooldown: args.balance_cooldown,
        queues: Default::default(),
    })
}
