//! The listener that turns the worker's job events into Horizon job
//! records, without ever slowing the loop.
//!
//! Horizon's own listeners (`MarkJobAsReserved`, `MarkJobAsReleased`,
//! `MarkJobAsComplete`, `UpdateJobMetrics`, `MarkJobAsFailed`,
//! `StoreTagsForFailedJob`) write as each step happens. Here an event only
//! becomes a [`Record`] (the job's reserved copy, shared, not copied) pushed
//! into a bounded channel; [`super::writer`] drains it on a task and a
//! connection of its own. When the channel is full the record is dropped
//! and counted: the dashboard misses a line, no job waits for it.
//!
//! A record is written only for what Redis did: a settle that Redis refused
//! (the reservation gone, left reserved, the lease lost) writes nothing,
//! and a failure kept in `:unrecorded` is still a failed job.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::queue::ReservedJob;
use crate::worker::{JobEvents, Settled, Verdict};

/// Records waiting for the writer before new ones are dropped.
pub const CAPACITY: usize = 10_000;

/// One step of one job, for Horizon.
#[derive(Debug, Clone)]
pub struct Record {
    /// The queue's name (`default`).
    pub queue: String,
    /// The job's reserved copy (what Horizon stores as `payload`).
    pub payload: Bytes,
    /// When it happened: `microtime(true)`.
    pub at: f64,
    /// What happened.
    pub step: Step,
}

/// The job steps Horizon records.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Reserved and about to run (`JobReserved`).
    Reserved,
    /// Back on the queue, to run again (`JobReleased`).
    Released,
    /// Deleted after it ran (`JobDeleted`); `runtime_ms` from reservation,
    /// rounded to 0.01 ms as Horizon's `Stopwatch` gives it.
    Completed {
        /// Milliseconds.
        runtime_ms: f64,
    },
    /// Failed (`JobFailed`), with the exception text `failed_jobs` gets.
    Failed {
        /// The recorded exception.
        exception: String,
    },
}

/// The listener: hands records to the writer and counts those it drops.
pub struct Recorder {
    sender: mpsc::Sender<Record>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    /// A recorder feeding `sender`; `dropped` counts the records lost to a
    /// full channel.
    pub fn new(sender: mpsc::Sender<Record>, dropped: Arc<AtomicU64>) -> Self {
        Recorder { sender, dropped }
    }

    fn send(&self, job: &ReservedJob, step: Step) {
        let record = Record {
            queue: job.queue.name.clone(),
            payload: job.reserved.clone(),
            at: microtime(),
            step,
        };
        if self.sender.try_send(record).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped,
                    "Horizon records are written slower than jobs run: records dropped"
                );
            }
        }
    }
}

impl JobEvents for Recorder {
    fn reserved(&self, job: &ReservedJob) {
        self.send(job, Step::Reserved);
    }

    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        let step = match (settled, verdict) {
            (Settled::Done, _) => Step::Completed {
                runtime_ms: (took.as_secs_f64() * 100_000.0).round() / 100.0,
            },
            (Settled::Released { .. }, _) => Step::Released,
            (Settled::Failed { .. }, Verdict::Fail { exception, .. }) => Step::Failed {
                exception: exception.to_string(),
            },
            _ => return,
        };
        self.send(job, step);
    }
}

/// `microtime(true)`: seconds since the epoch, with microseconds.
pub fn microtime() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_micros() as f64 / 1e6)
}
