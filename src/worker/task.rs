//! One job's task, start to end: run its handler and decide
//! ([`process`](super::process)), settle ([`settle`](super::settle)),
//! emit [`settled`](super::events::JobEvents::settled).
//!
//! The route and the job's books are decided once, here
//! ([`Assignment`]), and travel with the job to the run, the finish, the
//! settle and the failed hook.

use std::time::Instant;

use super::Services;
use super::assignment::Assignment;
use super::events::JobEvents;
use super::process::decide;
use super::settle::settle;
use super::slot::Slot;
use super::starts::Ticket;
use super::verdict::Verdict;
use crate::exception::{JobException, WORKER_STOPPED};
use crate::queue::{Queue, ReservedJob};

/// Runs `job` to its end: decide (runs the handler), settle, report.
/// `tickets`: dropped as the handler call begins, and once the job's fate
/// is in the queue. `slot`: the job's `--concurrency` slot, given back as the
/// settle write is sent when that write is all that is left to do (see
/// [`Slot`]), else returned, for the caller to give back after `--rest`.
///
/// If the drain deadline passes first, the handler call is abandoned (its
/// process group is killed as the call is dropped) and the job released at
/// once, the attempt counted, as a reclaim after a crash would count it.
pub async fn run_job(
    job: ReservedJob,
    services: &Services,
    tickets: [Ticket; 2],
    mut slot: Slot,
) -> Slot {
    let [ticket, settled] = tickets;
    let started = Instant::now();
    let reserved_at = std::time::SystemTime::now();
    let assigned = Assignment::of(&job, services);
    let verdict = tokio::select! {
        verdict = decide(&job, assigned, services, ticket) => verdict,
        () = drain_deadline(services) => Verdict::Release {
            delay: 0,
            exception: Some(JobException::new(
                WORKER_STOPPED,
                format!("{} was still running when the worker's drain deadline passed.", job.display_name()),
            )),
        },
    };
    if may_free_early(&job, &verdict, services) {
        slot.free_for_settling();
    }
    let outcome = settle(
        &job,
        assigned,
        &verdict,
        services,
        settled,
        &mut slot,
        reserved_at,
    )
    .await;
    services
        .events
        .settled(&job, &verdict, outcome, started.elapsed());
    after_job(job, &services.queue).await;
    slot
}

/// Whether `job` may give its slot back as its delete is sent (see
/// [`Slot`]): the verdict is a delete (a release must land before the next
/// poll, which may have to find the job again), `--rest` is zero, the
/// queue lets settles overlap ([`Queue::overlaps_settles`]: Redis), and the job is not large
/// (a second large job is not reserved while the first one's memory is
/// held).
fn may_free_early(job: &ReservedJob, verdict: &Verdict, services: &Services) -> bool {
    matches!(verdict, Verdict::Delete)
        && services.options.rest.is_zero()
        && services.queue.overlaps_settles()
        && !is_large(job)
}

/// At least [`LARGE_JOB`](crate::memory::LARGE_JOB) bytes, its copies
/// together.
fn is_large(job: &ReservedJob) -> bool {
    job.raw.len() + job.reserved.len() >= crate::memory::LARGE_JOB
}

/// Ends a job's life: drops it and, when it was large
/// ([`LARGE_JOB`](crate::memory::LARGE_JOB)), gives its memory back, so
/// that one big job does not leave the daemon near `--memory`: the queue
/// connection is reopened (a client may keep buffers as large as the
/// largest message it carried: Redis's does) and the allocator returns its free pages to
/// the system ([`trim`](crate::memory::trim)).
async fn after_job(job: ReservedJob, queue: &Queue) {
    let large = is_large(&job);
    drop(job);
    if large {
        queue.renew_connection().await;
        crate::memory::trim();
    }
}

/// Resolves when the drain deadline passes; never, when none can come.
async fn drain_deadline(services: &Services) {
    let mut deadline = services.drain_deadline.clone();
    if deadline.wait_for(|&passed| passed).await.is_err() {
        std::future::pending::<()>().await;
    }
}
