//! Laravel Pulse's Queues and Slow Jobs cards fed for the jobs Laravel's
//! code does not run (`[pulse]`).
//!
//! This is [Laravel Pulse](https://github.com/laravel/pulse), the app's
//! monitoring dashboard, not the loop's own heartbeat
//! ([`crate::lifecycle::Pulse`]). A job the PHP bridge runs fires
//! Laravel's queue events in PHP, where the app's Pulse recorders hear
//! them. A job a process, persistent or HTTP handler runs fires none, so
//! the daemon records for it what Pulse's `Queues` and `SlowJobs`
//! recorders would ([`record`]): `processing` and then `processed`,
//! `released` or `failed` counts per `connection:queue`, and a `slow_job`
//! over the threshold, sampled as Pulse samples ([`sample`]). The entries
//! go where the app's Pulse ingests them: the Redis stream
//! (`PULSE_INGEST_DRIVER=redis`, [`ingest`]) or Pulse's tables
//! ([`storage`]).
//!
//! The writing happens behind a [`Decoupled`] listener, on a thread and
//! connection of its own; only the settled events of jobs Laravel did not
//! run ([`laravel_ran`]) are copied to it. With Pulse off (no `[pulse]`,
//! no `PULSE_*` setting and no Pulse tables) there is no listener at all.

pub mod aggregate;
pub mod entry;
pub mod ingest;
pub mod laravel_ran;
pub mod pattern;
pub mod record;
pub mod sample;
pub mod storage;
pub mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::queue::ReservedJob;
use crate::redis::{Purpose, RedisTarget};
use crate::worker::decoupled::{Decoupled, Finished};
use crate::worker::{JobEvents, Settled, Verdict};
pub use laravel_ran::BridgeRoutes;
use laravel_ran::laravel_ran_bookkeeping;
use record::Recorders;

/// Where the app's Pulse ingests its entries.
#[derive(Debug, Clone)]
pub enum PulseIngest {
    /// `PULSE_INGEST_DRIVER=redis`: the stream on this Redis, under the
    /// connection's key `prefix`.
    Redis {
        /// The Redis of `PULSE_REDIS_CONNECTION` (default: the queue's).
        target: Box<RedisTarget>,
        /// `database.redis.options.prefix` (`REDIS_PREFIX`).
        prefix: String,
    },
    /// `storage` (Pulse's default): its tables on this database
    /// (`PULSE_DB_CONNECTION`, else `DB_CONNECTION`).
    Storage {
        /// `sqlite://`, `mysql://` or `postgres://`.
        url: String,
    },
}

/// `[pulse]`, resolved.
#[derive(Debug, Clone)]
pub struct PulseSettings {
    /// Where the entries go.
    pub ingest: PulseIngest,
    /// What is recorded.
    pub recorders: Recorders,
    /// `[pulse] enabled = true`: Pulse's tables missing or its Redis
    /// unreachable stops the start. Otherwise (the app's settings name
    /// Pulse, or its tables may be there) the feed stays off, with a line
    /// in the log saying why.
    pub required: bool,
}

/// How long a stopping worker waits at most for the entries still
/// queued to be written.
pub const EXIT_WAIT: Duration = Duration::from_secs(5);

/// The running feed.
pub struct PulseFeed {
    listener: Arc<Feed>,
    writer: Finished,
    lost: Arc<AtomicU64>,
}

impl PulseFeed {
    /// Opens the ingest on a thread of its own (reading whether Pulse's
    /// tables are there, and how their `key_hash` is made) and returns the
    /// feed; `None` when Pulse is not required and its ingest cannot be
    /// used (the reason is logged).
    ///
    /// # Errors
    /// Pulse is required (`[pulse] enabled = true`) and its ingest cannot
    /// be used.
    pub async fn start(
        settings: &PulseSettings,
        routes: BridgeRoutes,
    ) -> anyhow::Result<Option<PulseFeed>> {
        let lost = Arc::new(AtomicU64::new(0));
        let build = {
            let (ingest, recorders, lost) = (
                settings.ingest.clone(),
                settings.recorders.clone(),
                Arc::clone(&lost),
            );
            move || async move {
                let sink = match ingest {
                    PulseIngest::Redis { target, prefix } => writer::Sink::Redis {
                        conn: crate::redis::open(&target, Purpose::Commands).await?,
                        key: ingest::stream_key(&prefix),
                    },
                    PulseIngest::Storage { url } => {
                        writer::Sink::Storage(storage::Storage::open(&url).await?)
                    }
                };
                Ok(writer::Writer {
                    sink,
                    recorders,
                    lost,
                    limiter: crate::log_limit::RepeatLimiter::new(
                        crate::log_limit::DEFAULT_INTERVAL,
                    ),
                })
            }
        };
        let (inner, writer) = match Decoupled::on_thread("pulse-feed", writer::BUFFER, build).await
        {
            Ok(started) => started,
            Err(e) if settings.required => {
                return Err(
                    e.context("[pulse] enabled = true, but Laravel Pulse's ingest cannot be used")
                );
            }
            Err(e) => {
                tracing::info!(
                    "Laravel Pulse's entries are not written for jobs Laravel does not run: {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
                return Ok(None);
            }
        };
        tracing::info!(ingest = %describe(&settings.ingest),
            "writing Laravel Pulse's queue entries for the jobs Laravel does not run");
        let listener = Arc::new(Feed { inner, routes });
        Ok(Some(PulseFeed {
            listener,
            writer,
            lost,
        }))
    }

    /// The job events listener.
    pub fn listener(&self) -> Arc<dyn JobEvents> {
        Arc::clone(&self.listener) as Arc<dyn JobEvents>
    }

    /// The events dropped because the writer fell behind (for the
    /// `events_dropped` metric).
    pub fn dropped(&self) -> Arc<AtomicU64> {
        self.listener.inner.dropped()
    }

    /// Once the worker stopped: writes what is still queued (for at most
    /// [`EXIT_WAIT`]) and says what was lost.
    pub async fn finish(self) {
        let PulseFeed {
            listener,
            writer,
            lost,
        } = self;
        let dropped = listener.inner.dropped();
        drop(listener);
        let unwritten = writer.close(EXIT_WAIT).await;
        let (dropped, lost) = (
            dropped.load(Ordering::Relaxed),
            lost.load(Ordering::Relaxed),
        );
        if unwritten + dropped + lost > 0 {
            tracing::warn!(
                unwritten_events = unwritten,
                dropped_events = dropped,
                lost_entries = lost,
                "Laravel Pulse entries lost"
            );
        }
    }
}

/// Where the entries go, for the log (no password).
fn describe(ingest: &PulseIngest) -> String {
    match ingest {
        PulseIngest::Redis { target, prefix } => {
            format!("redis {} {}", target.describe(), ingest::stream_key(prefix))
        }
        PulseIngest::Storage { url } => format!("storage {}", crate::sql::place(url)),
    }
}

/// The listener the loop calls: hands on the settled events of the jobs
/// Laravel did not run, nothing else.
struct Feed {
    inner: Decoupled,
    routes: BridgeRoutes,
}

impl JobEvents for Feed {
    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        if laravel_ran_bookkeeping(&self.routes, job, verdict) {
            return;
        }
        self.inner.settled(job, verdict, settled, took);
    }
}
