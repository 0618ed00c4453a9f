//! The jobs a queue received for this worker that no turn took when the
//! loop stopped: on SQS, the messages of the long polls an idle worker
//! keeps in flight on each queue (see `queue::sqs::receive`). SQS goes on
//! with a poll whose client has gone, so a message sent meanwhile would be
//! taken for nobody and come back only after its visibility timeout, with
//! a receive counted: at `--tries=1` it would then fail without ever
//! running. So the worker waits for its polls to end and, as `queue:work`
//! runs the job its pop returned whatever came meanwhile, runs what they
//! bring; after a stop that counts jobs (`--once`, `--max-jobs`) or a
//! tripped handler, it hands them back instead, visible again at once (SQS
//! still counts the receive). Redis and the database hold nothing between
//! pops: there this costs nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::stop::StopReason;
use crate::queue::{Queue, QueueHandle, ReservedJob};

/// The longest a stop waits for the queue's receives in flight: SQS's
/// longest poll (20 s) and a round trip.
pub const WAIT: Duration = Duration::from_secs(21);

/// Takes what `queue` holds for `queues` once its receives in flight have
/// ended (at most `limit`, the drain deadline, and at most [`WAIT`]),
/// hands back what must not run after `reason` or finds no free slot in
/// `permits`, and returns the rest with their slots, to be run.
pub async fn take(
    queue: &Queue,
    queues: &[Arc<QueueHandle>],
    permits: &Arc<Semaphore>,
    limit: Option<Duration>,
    reason: StopReason,
) -> Vec<(ReservedJob, OwnedSemaphorePermit)> {
    let within = limit.unwrap_or(WAIT).min(WAIT);
    let mut runs = Vec::new();
    for job in queue.take_received(queues, within).await {
        let permit = Arc::clone(permits).try_acquire_owned().ok();
        match permit.filter(|_| runs_after(reason)) {
            Some(permit) => runs.push((job, permit)),
            None => hand_back(queue, &job).await,
        }
    }
    runs
}

/// Whether a job received as the worker stopped for `reason` is run: not
/// after `--once` or `--max-jobs` (it would be one more than asked), nor
/// after a handler tripped.
fn runs_after(reason: StopReason) -> bool {
    !matches!(
        reason,
        StopReason::Once | StopReason::MaxJobs | StopReason::HandlerTripped
    )
}

/// Makes `job` visible again at once, unrun; logs the outcome.
pub async fn hand_back(queue: &Queue, job: &ReservedJob) {
    match queue.hand_back(job, 0).await {
        Ok(_) => tracing::info!(
            job = job.display_name(),
            id = %job.id(),
            "received while stopping: handed back unrun (its receive stays counted)"
        ),
        Err(e) => tracing::warn!(
            job = job.display_name(),
            id = %job.id(),
            "received while stopping and not handed back ({e}): the queue shows it \
             again after its visibility timeout"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stops_that_count_jobs_or_a_trip_hand_the_received_back() {
        for reason in [
            StopReason::Once,
            StopReason::MaxJobs,
            StopReason::HandlerTripped,
        ] {
            assert!(!runs_after(reason), "{reason:?}");
        }
        for reason in [
            StopReason::Interrupted,
            StopReason::Memory,
            StopReason::Restart,
            StopReason::Empty,
            StopReason::EmptyFor,
            StopReason::QueueUnreachable,
            StopReason::MaxTime,
        ] {
            assert!(runs_after(reason), "{reason:?}");
        }
    }
}
