//! Horizon's dashboard for the jobs this daemon runs (`[horizon]`).
//!
//! Opt-in (`[horizon] enabled = true`). On the queue connection's Redis,
//! under Horizon's prefix ([`keys`]), the daemon writes what Horizon's PHP
//! workers and master would:
//! - [`records`], [`writer`] and [`script`]: the job records (`P{id}`
//!   hashes and the recent, pending, completed, silenced, failed and
//!   monitored lists, failed and monitored tags, the retried job's
//!   `retried_by`), written after Redis did each step, behind a
//!   [`Decoupled`] listener, on a thread and a connection of their own,
//!   one script call per batch, never holding up a job;
//! - [`companion`]: a job's completed or failed record also written by the
//!   script that deletes it, when the records live on the queue's Redis,
//!   so a worker killed between the two leaves it right;
//! - [`metrics`]: per class and per queue throughput and runtime;
//! - [`late`]: the final state of a finished job put back when the
//!   producer's `pending` record (or a retry's `retried_by` entry) lands
//!   after it, checked at each heartbeat;
//! - [`retried`]: the record of a failed job `retry` pushes back, reset as
//!   Horizon's connector resets it for `queue:retry`;
//! - [`heartbeat`]: a master and its supervisor, every second, and the
//!   commands Horizon queues for them;
//! - [`snapshot`] (`[horizon] snapshot = true`): `horizon:snapshot` and the
//!   trimming of the job lists, for deployments with no PHP Horizon left.

pub mod companion;
pub mod heartbeat;
pub mod keys;
pub mod late;
pub mod metrics;
pub mod ops;
pub mod records;
pub mod retried;
pub mod script;
pub mod snapshot;
pub mod stamp;
pub mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::queue::Queue;
use crate::redis::{Purpose, RedisConn, RedisTarget};
use crate::signals::Control;
use crate::worker::decoupled::{Decoupled, Finished};
use crate::worker::{JobEvents, Listeners, WorkerOptions};

/// `[horizon]`, resolved.
#[derive(Debug, Clone)]
pub struct HorizonSettings {
    /// The prefix of every Horizon key, braced on a cluster.
    pub prefix: String,
    /// Horizon's own Redis (`horizon.use` naming another connection than
    /// the queue's); `None`: the queue's.
    pub redis: Option<RedisTarget>,
    /// Take metric snapshots and trim the job lists.
    pub snapshot: bool,
    /// `horizon.trim`: how long records live.
    pub trim: Trim,
}

/// `horizon.trim`, in minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trim {
    /// The recent jobs list (60).
    pub recent: u64,
    /// The recent failed jobs list (10080).
    pub recent_failed: u64,
    /// The monitored jobs list (10080).
    pub monitored: u64,
    /// Expiry of a job record the daemon creates at reservation (60).
    pub pending: u64,
    /// Expiry of a completed job's record (60).
    pub completed: u64,
    /// Expiry of a failed job's record and of its `failed:{tag}` sets (10080).
    pub failed: u64,
}

impl Default for Trim {
    fn default() -> Self {
        Trim {
            recent: 60,
            recent_failed: 10080,
            monitored: 10080,
            pending: 60,
            completed: 60,
            failed: 10080,
        }
    }
}

/// How long a stopping worker waits at most for the records still queued
/// to be written (a Redis that hangs); an idle writer ends at once.
pub const EXIT_WAIT: Duration = Duration::from_secs(5);

/// The running Horizon bookkeeping: the writer and heartbeat tasks.
pub struct Horizon {
    listener: Arc<Decoupled>,
    /// The slots per queue a balanced worker reports, for the heartbeat.
    slots: Arc<heartbeat::LiveSlots>,
    writer: Finished,
    heartbeat: JoinHandle<()>,
    snapshots: Option<JoinHandle<()>>,
    keys: keys::Keys,
    me: heartbeat::Identity,
    conn: RedisConn,
    dropped: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl Horizon {
    /// Connects to `target` (the queue's Redis, unless `settings` names
    /// Horizon's own) and starts the writer on a thread of its own, the
    /// heartbeat (and the snapshots when asked) for a worker on `queue`
    /// (connection `connection`) with `options`; `control` tells whether
    /// the worker is paused.
    ///
    /// # Errors
    /// The Redis connection cannot be opened.
    pub async fn start(
        settings: &HorizonSettings,
        target: &RedisTarget,
        queue: &Queue,
        connection: &str,
        options: &WorkerOptions,
        control: watch::Receiver<Control>,
    ) -> anyhow::Result<Self> {
        let on_queue_redis = settings.redis.is_none() && !target.is_cluster();
        let target = settings.redis.as_ref().unwrap_or(target);
        let conn = crate::redis::open(target, Purpose::Commands).await?;
        let keys = keys::Keys::new(settings.prefix.clone());
        // Only the first companion installed on the queue is kept: the
        // writer relies on it only when it is this one.
        let companion = on_queue_redis
            && queue.set_companion(Arc::new(companion::Companion {
                keys: keys.clone(),
                connection: connection.to_string(),
                trim: settings.trim,
            }));
        let refused = Arc::new(AtomicU64::new(0));
        let late = Arc::new(late::Late::default());
        let writer = {
            let (keys, target, refused) = (keys.clone(), target.clone(), Arc::clone(&refused));
            let late = Arc::clone(&late);
            let (connection, settings) = (connection.to_string(), settings.clone());
            move || async move {
                Ok(writer::Writer {
                    conn: crate::redis::open(&target, Purpose::Commands).await?,
                    keys,
                    connection,
                    settings,
                    refused,
                    script: redis::Script::new(script::RECORDS),
                    limiter: crate::log_limit::RepeatLimiter::new(
                        crate::log_limit::DEFAULT_INTERVAL,
                    ),
                    quiet_until: None,
                    late,
                    companion,
                })
            }
        };
        let (listener, writer) = Decoupled::on_thread("horizon", writer::BUFFER, writer).await?;
        let me = identity(connection, options);
        tracing::info!(master = %me.master, prefix = %settings.prefix, redis = %target.describe(),
            "writing Horizon's records");
        let slots = Arc::new(heartbeat::LiveSlots::default());
        let heartbeat = tokio::spawn(heartbeat::run(
            keys.clone(),
            me.clone(),
            Arc::clone(&slots),
            late,
            conn.clone(),
            control,
        ));
        let snapshots = settings.snapshot.then(|| {
            let snapshots = snapshot::Snapshots {
                keys: keys.clone(),
                prefix: settings.prefix.clone(),
                queue: queue.clone(),
                trim: settings.trim,
                processes: me.concurrency,
            };
            tokio::spawn(snapshots.run(conn.clone()))
        });
        Ok(Horizon {
            snapshots,
            dropped: listener.dropped(),
            listener: Arc::new(listener),
            slots,
            writer,
            heartbeat,
            keys,
            me,
            conn,
            refused,
        })
    }

    /// The job events listener that hands the events to the writer.
    pub fn listener(&self) -> Arc<dyn JobEvents> {
        let both = Listeners::new()
            .with(Arc::clone(&self.listener) as Arc<dyn JobEvents>)
            .with(Arc::clone(&self.slots) as Arc<dyn JobEvents>);
        Arc::new(both)
    }

    /// The events dropped because the writer fell behind (for the
    /// `events_dropped` metric).
    pub fn dropped(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.dropped)
    }

    /// Once the worker stopped: writes the records of the events still
    /// queued (for at most [`EXIT_WAIT`], and no longer than that takes),
    /// says how many were dropped if the wait ran out, and removes the
    /// master and supervisor records.
    pub async fn finish(self) {
        let Horizon {
            snapshots,
            listener,
            slots,
            writer,
            heartbeat,
            keys,
            me,
            mut conn,
            dropped,
            refused,
        } = self;
        heartbeat.abort();
        if let Some(snapshots) = snapshots {
            snapshots.abort();
        }
        drop((listener, slots));
        // Ends as soon as the events already queued are written, whoever
        // still holds the listener; gives up after `EXIT_WAIT`.
        let unwritten = writer.close(EXIT_WAIT).await;
        if unwritten > 0 {
            tracing::warn!(
                events = unwritten,
                wait_s = EXIT_WAIT.as_secs(),
                "Horizon records of {unwritten} job events still queued at exit were dropped"
            );
        }
        if let Err(e) = heartbeat::forget(&keys, &me, &mut conn).await {
            tracing::warn!("cannot remove Horizon's master record: {e}");
        }
        let (dropped, refused) = (
            dropped.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
        );
        if dropped + refused > 0 {
            tracing::warn!(
                dropped_events = dropped,
                refused_records = refused,
                "Horizon records lost"
            );
        }
    }
}

/// The master and supervisor this worker shows as.
fn identity(connection: &str, options: &WorkerOptions) -> heartbeat::Identity {
    let queue = options.queues.join(",");
    let balance = BalanceOptions::of(options);
    heartbeat::Identity {
        master: keys::master_name(),
        connection: connection.to_string(),
        queues: options.queues.clone(),
        concurrency: options.concurrency.max(1),
        options: serde_json::json!({
            "name": "laravel-worker",
            "connection": connection,
            "queue": queue,
            "balance": balance.mode,
            "autoScalingStrategy": balance.strategy,
            "maxProcesses": balance.max,
            "minProcesses": balance.min,
            "balanceMaxShift": balance.max_shift,
            "balanceCooldown": balance.cooldown,
            "timeout": options.timeout,
            "maxTries": options.tries,
            "maxJobs": options.max_jobs,
            "maxTime": options.max_time.as_secs(),
            "memory": options.memory_mb,
            "sleep": options.sleep.as_secs_f64(),
            "rest": options.rest.as_secs_f64(),
            "force": options.force,
        }),
    }
}

/// The balancing options a supervisor reports, as Horizon names them:
/// `balance` false (one pool over the queues), `"simple"` or `"auto"`;
/// `minProcesses` per queue, `maxProcesses` in all.
struct BalanceOptions {
    mode: serde_json::Value,
    strategy: &'static str,
    min: usize,
    max: usize,
    max_shift: usize,
    cooldown: u64,
}

impl BalanceOptions {
    fn of(options: &WorkerOptions) -> Self {
        let slots = options.concurrency.max(1);
        let Some(policy) = &options.balance else {
            return BalanceOptions {
                mode: serde_json::Value::Bool(false),
                strategy: "time",
                min: slots,
                max: slots,
                max_shift: 1,
                cooldown: 3,
            };
        };
        BalanceOptions {
            mode: match policy.mode {
                crate::worker::balance::Mode::Off => serde_json::Value::Bool(false),
                crate::worker::balance::Mode::Simple => serde_json::json!("simple"),
                crate::worker::balance::Mode::Auto => serde_json::json!("auto"),
            },
            strategy: match policy.strategy {
                crate::worker::balance::Strategy::Time => "time",
                crate::worker::balance::Strategy::Size => "size",
            },
            min: policy.bounds.iter().map(|b| b.min).min().unwrap_or(0),
            max: policy.total,
            max_shift: policy.max_shift,
            cooldown: policy.cooldown.as_secs(),
        }
    }
}
