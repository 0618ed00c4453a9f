//! Writing to the failed-job store the failures that waited for it.
//!
//! When the store is down as a job fails ([`super::settle`]) and the
//! queue's driver can park failures ([`crate::queue::driver::ParksFailures`]:
//! Redis, in the queue's `:unrecorded` zset), the job's failure record
//! replaces its reservation there. Laravel would instead delete the job first and lose the record,
//! and leaving the job reserved would run it again after `retry_after` and
//! then record `MaxAttemptsExceededException` in place of the real error.
//!
//! While the worker runs, a task looks at the parked failures of every
//! queue it works, at start and every [`RECORD_EVERY`], and writes what it
//! finds to the store, oldest first, removing each record once the store
//! has it. A record is removed only after the store accepted it: a worker
//! killed in between writes it again next time (a duplicate row, never a
//! lost one).

use std::sync::Arc;
use std::time::Duration;

use super::Services;
use crate::failed::{Logged, unrecorded_record};

/// How often the kept failures are offered to the store again.
pub const RECORD_EVERY: Duration = Duration::from_secs(5);

/// Records read from one queue per look.
const BATCH: usize = 100;

/// The recording task; it ends when this is dropped.
pub struct Recorder(tokio::task::JoinHandle<()>);

impl Drop for Recorder {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the task that writes kept failures to the failed-job store.
pub fn start(services: Arc<Services>) -> Recorder {
    Recorder(tokio::spawn(async move {
        loop {
            for name in &services.options.queues {
                record_kept(&services, name).await;
            }
            tokio::time::sleep(RECORD_EVERY).await;
        }
    }))
}

/// Writes the failures kept for queue `name` to the store, until the store
/// is down again or none is left (at most [`BATCH`] per call).
async fn record_kept(services: &Services, name: &str) {
    let Some(parking) = services.queue.parking() else {
        return;
    };
    let keys = services.queue.handle(name);
    let kept_at = parking.parked_at(&keys);
    let kept = match parking.unrecorded(&keys, BATCH).await {
        Ok(kept) => kept,
        Err(e) => {
            tracing::debug!(queue = %name, "cannot read the kept failures: {e}");
            return;
        }
    };
    for bytes in kept {
        let Some(record) = unrecorded_record::decode(&bytes) else {
            tracing::debug!(
                key = %kept_at,
                "a member of the kept failures is not a failure record; left as it is"
            );
            continue;
        };
        match services.failed.log(&record).await {
            Logged::Recorded | Logged::RecordedInFallback { .. } => {
                tracing::info!(
                    uuid = %record.uuid,
                    queue = %name,
                    "a failure kept while the failed job store was down is now recorded"
                );
                if let Err(e) = parking.forget_unrecorded(&keys, &bytes).await {
                    tracing::warn!(
                        uuid = %record.uuid,
                        key = %kept_at,
                        "recorded, but cannot remove it from the kept failures \
                         (it will be recorded again): {e}"
                    );
                }
            }
            Logged::StoreDown(e) => {
                tracing::debug!(
                    "the failed job store is still down: {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
                return;
            }
        }
    }
}
