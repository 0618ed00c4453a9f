//! Carrying out a [`Verdict`]: the last step of every job.
//!
//! Every reserved job ends deleted, released or failed here; if the queue
//! cannot be written, the job is left reserved, and is reclaimed after
//! `retry_after`. Nothing is dropped. A failure the failed-job store cannot
//! record (the store is down) is kept in the queue instead where the driver
//! parks failures (Redis: the queue's `:unrecorded`), and recorded when the
//! store is back ([`super::unrecorded`]): the job is not run again, and its
//! real exception is what gets recorded.
//!
//! A queue write is tried again, with growing pauses (100 ms doubling, at
//! most 2 s), for as long as the reservation is surely this worker's (its
//! [`Lease`](crate::queue::job::Lease)): giving up sooner would re-run the
//! job after any outage longer than a few seconds, going on longer could
//! settle a job another worker has reclaimed meanwhile.

use std::future::Future;
use std::time::Duration;

use chrono::Utc;

use super::Services;
use super::assignment::Assignment;
use super::finish::finish;
use super::invocation::invocation;
use super::slot::Slot;
use super::starts::Ticket;
use super::verdict::Verdict;
use crate::exception::JobException;
use crate::failed::{FailedJob, Logged};
use crate::handler::{Mode, Route};
use crate::queue::ReservedJob;
use crate::queue::companion::Ending as QueueEnding;
use crate::whole::{Books, Ending};

/// The longest pause between two tries of a queue write.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// What the queue (and the failed store) did with a job's last step, as
/// [`settle`] returns it and the [`settled`](super::events::JobEvents::settled)
/// event reports it: a listener that mirrors the queue elsewhere (Horizon's
/// job records) writes only what actually happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The job was deleted (Laravel's `JobProcessed`).
    Done,
    /// The job went back to the queue, available in `delay` seconds
    /// (a release, or an uncounted hand-back).
    Released {
        /// Seconds.
        delay: u64,
    },
    /// The job failed and left the queue. `recorded`: its record is in
    /// the failed-job store (or its fallback); false when the store was
    /// down and the record is parked in the queue (Redis's `:unrecorded`), to be
    /// written when the store is back.
    Failed {
        /// The record reached the store.
        recorded: bool,
    },
    /// The queue answered that the reservation was gone. `after_failure`: an
    /// earlier try had failed, so that try most likely went through and
    /// only its answer was lost; otherwise the job was reclaimed by
    /// another worker, which settles it.
    Gone {
        /// An earlier try failed before this answer.
        after_failure: bool,
    },
    /// No write reached the queue before the lease ran out: the job stays
    /// reserved and is reclaimed after `retry_after`.
    LeftReserved,
    /// The reservation was lost while the handler ran: nothing was written.
    LeaseLost,
}

/// How a settle write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// The reservation was removed by the first try that reached the queue.
    Done,
    /// The queue answered that the reservation was gone. `after_failure`: an
    /// earlier try had failed, so it most likely went through and only its
    /// answer was lost.
    Gone {
        /// An earlier try failed before this answer.
        after_failure: bool,
    },
    /// No try reached the queue before the lease ran out (or the failed store
    /// was down): the job stays reserved.
    LeftReserved,
}

/// Applies `verdict` to `job`; `route` is the job's handler, called in
/// failed mode when the verdict asks for the `failed()` hook. Returns what
/// the queue did. `settled` is dropped once the job's fate is in the queue (and the
/// failed store), before that hook: a hook the drain deadline cuts short
/// leaves nothing reserved. `slot`: the job's slot, taken back when a
/// delete it gave it back for fails once ([`Slot::reclaim`]). `reserved_at`:
/// when the job's run started, for the record a companion writes with the
/// delete.
pub async fn settle(
    job: &ReservedJob,
    assigned: Assignment<'_>,
    verdict: &Verdict,
    services: &Services,
    settled: Ticket,
    slot: &mut Slot,
    reserved_at: std::time::SystemTime,
) -> Settled {
    let queue = &services.queue;
    let route = assigned.route;
    // Laravel's order: the bookkeeping before the delete or the failure
    // reaches the queue, whatever the driver. Its future is made (and
    // boxed) only for a job that has some: most jobs have none.
    if has_books(job, assigned.books, verdict, services) {
        Box::pin(keep_books(job, assigned, verdict, services)).await;
    }
    let (done, landed, hook) = match verdict {
        Verdict::Delete => (
            retry("delete", job, Some(slot), || {
                queue.delete(job, QueueEnding::Completed { reserved_at })
            })
            .await,
            Settled::Done,
            None,
        ),
        Verdict::Release { delay, .. } => (
            retry("release", job, None, || queue.release(job, *delay)).await,
            Settled::Released { delay: *delay },
            None,
        ),
        Verdict::HandBack { delay, .. } => (
            retry("hand back", job, None, || queue.hand_back(job, *delay)).await,
            Settled::Released { delay: *delay },
            None,
        ),
        // Not ours any more: whoever reclaims it settles it.
        Verdict::LeaseLost => return Settled::LeaseLost,
        Verdict::Fail {
            exception,
            failed_hook,
        } => {
            // Boxed, as the failed hook below: a failure's futures (the
            // failed store's, a handler call's) are most of this one's
            // size, and every job's settlement would carry them unboxed.
            let (written, hook_may_run, recorded) = Box::pin(fail(job, exception, services)).await;
            let hook = failed_hook
                .then_some(route)
                .flatten()
                .filter(|_| hook_may_run);
            (
                written,
                Settled::Failed { recorded },
                hook.map(|route| (route, exception)),
            )
        }
    };
    drop(settled);
    report(job, done);
    if let Some((route, exception)) = hook {
        Box::pin(call_failed_hook(
            job,
            route,
            &exception.to_string(),
            services,
        ))
        .await;
    }
    match done {
        Written::Done => landed,
        Written::Gone { after_failure } => Settled::Gone { after_failure },
        Written::LeftReserved => Settled::LeftReserved,
    }
}

/// Whether [`keep_books`] has anything to do for `job` and `verdict`.
fn has_books(job: &ReservedJob, books: Books<'_>, verdict: &Verdict, services: &Services) -> bool {
    let failed = match verdict {
        Verdict::Delete => false,
        Verdict::Fail { .. } => true,
        Verdict::Release { .. } | Verdict::HandBack { .. } | Verdict::LeaseLost => return false,
    };
    match books {
        Books::Laravel | Books::Nothing => false,
        Books::Finish(_) => failed,
        Books::Worker | Books::NoBridge(_) => services.bookkeeping.has_work(job, books),
    }
}

/// `job`'s bookkeeping for `verdict` (a delete or a failure), by whoever
/// keeps its books ([`crate::whole::Bookkeeping::books`]): nothing for
/// the bridge's jobs, the bridge's finish mode for a failed job that
/// needs PHP (a successful one was finished before its verdict, in
/// [`super::process`]), else the worker's own writes.
async fn keep_books(
    job: &ReservedJob,
    assigned: Assignment<'_>,
    verdict: &Verdict,
    services: &Services,
) {
    let (ending, failure) = match verdict {
        Verdict::Delete => (Ending::Success, None),
        Verdict::Fail { exception, .. } => (Ending::Failure, Some(exception.to_string())),
        Verdict::Release { .. } | Verdict::HandBack { .. } | Verdict::LeaseLost => return,
    };
    match assigned.books {
        Books::Laravel | Books::Nothing => {}
        // A successful run's finish came before its verdict (`process`).
        Books::Finish(_) if failure.is_none() => {}
        Books::Finish(finisher) => {
            // A failure's finish that fails is logged: the job fails all
            // the same, without its chain's catch callbacks.
            let _ = Box::pin(finish(job, finisher, failure.as_deref(), services)).await;
        }
        Books::Worker | Books::NoBridge(_) => {
            Box::pin(
                services
                    .bookkeeping
                    .before_settle(job, assigned.route, ending),
            )
            .await;
        }
    }
}

/// Logs how the write that settled `job` went, when it did not simply land.
fn report(job: &ReservedJob, done: Written) {
    match done {
        Written::Done => {}
        Written::Gone {
            after_failure: true,
        } => tracing::info!(
            job = job.display_name(),
            id = %job.id(),
            "the reservation was already gone when a retry arrived: the earlier \
             try most likely went through and only its answer was lost"
        ),
        Written::Gone {
            after_failure: false,
        } => tracing::warn!(
            job = job.display_name(),
            id = %job.id(),
            "the reservation was already gone when the job was settled; \
             it was reclaimed (is retry_after shorter than the job?)"
        ),
        Written::LeftReserved => tracing::error!(
            job = job.display_name(),
            id = %job.id(),
            "the job could not be settled; it stays reserved and is reclaimed after retry_after"
        ),
    }
}

/// `Job::fail`: record, then ZREM.
///
/// The record is written first. If the store is down, the reservation is
/// replaced, atomically, by the record in the queue's `:unrecorded`, to be
/// written to the store when it is back; if the queue cannot take that either,
/// the job stays reserved (and comes back after `retry_after`) rather than
/// vanish. Returns how the write went, whether the app's `failed()` hook
/// may run now (the failure landed somewhere), and whether the record
/// reached the store (false: it is kept in `:unrecorded`).
async fn fail(
    job: &ReservedJob,
    exception: &JobException,
    services: &Services,
) -> (Written, bool, bool) {
    let text = exception.to_string();
    // The record (and, when parked, its encoded copy) is dropped before the
    // hook runs, which may take long.
    if let Some(parked) = record_failure(job, &text, services).await {
        let landed = matches!(
            parked,
            Written::Done
                | Written::Gone {
                    after_failure: true
                }
        );
        return (parked, landed, false);
    }
    let ended = QueueEnding::Failed { exception: &text };
    (
        retry("delete", job, None, || services.queue.delete(job, ended)).await,
        true,
        true,
    )
}

/// Writes `job`'s failure record (`exception`: its text) to the failed
/// store. `None` when it was recorded (in the store or its fallback);
/// when the store is down, the record is parked in the queue's
/// `:unrecorded` in place of the reservation and the outcome of that
/// write is returned.
async fn record_failure(
    job: &ReservedJob,
    exception: &str,
    services: &Services,
) -> Option<Written> {
    let record = FailedJob {
        uuid: job
            .uuid()
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string),
        connection: services.connection.clone(),
        queue: services.queue.failed_queue_name(&job.queue),
        payload: crate::failed::SharedText::lossy(&job.raw),
        exception: exception.to_string(),
        failed_at: Utc::now(),
    };
    match services.failed.log(&record).await {
        Logged::Recorded => None,
        Logged::RecordedInFallback { refusal, fallback } => {
            tracing::warn!(
                job = job.display_name(),
                id = %job.id(),
                store = services.failed.describe(),
                fallback,
                "the failed job store refused the record for good, so it was recorded in the \
                 fallback instead (see `failed`): {refusal}"
            );
            None
        }
        Logged::StoreDown(e) => {
            let parking = services.queue.parking();
            let then = if parking.is_some() {
                "the record is kept in the queue and written to the store when it is back"
            } else {
                "the job stays reserved and comes back after retry_after, when the store \
                 may take its record"
            };
            tracing::error!(
                job = job.display_name(),
                id = %job.id(),
                store = services.failed.describe(),
                kept_at = parking.map(|p| p.parked_at(&job.queue)),
                "cannot record the failed job: {}; {then}",
                crate::error_chain::error_chain(e.as_ref())
            );
            let Some(parking) = parking else {
                return Some(Written::LeftReserved);
            };
            let kept = bytes::Bytes::from(crate::failed::unrecorded_record::encode(&record));
            let at = record.failed_at.timestamp();
            drop(record);
            Some(
                retry("keep the failure of", job, None, || {
                    parking.park_failure(job, kept.clone(), at)
                })
                .await,
            )
        }
    }
}

/// Calls the job's handler in failed mode, so the app's `failed()` method,
/// unique-lock release and batch bookkeeping run.
async fn call_failed_hook(job: &ReservedJob, route: &Route, exception: &str, services: &Services) {
    let invocation = invocation(job, route, services, Mode::Failed { exception });
    let outcome = route.handler.call(&invocation).await;
    tracing::debug!(job = job.display_name(), id = %job.id(), ?outcome, "failed hook ran");
}

/// Runs a queue write until it reaches the queue or `job`'s lease runs out,
/// pausing 100 ms, doubling up to [`MAX_PAUSE`], between tries. The first
/// failure is logged as a warning, the rest at debug level (the outcome is
/// logged by the caller). After the first failure the job asks for
/// `slot` back, if it gave it back, and holds the next slot given back,
/// while it goes on trying on schedule: while the queue refuses or cannot
/// be reached, the loop does not poll it in that slot.
async fn retry<F, Fut>(
    what: &str,
    job: &ReservedJob,
    mut slot: Option<&mut Slot>,
    mut write: F,
) -> Written
where
    F: FnMut() -> Fut,
    Fut: Future<Output = crate::queue::QueueResult<bool>>,
{
    let mut pause = Duration::from_millis(100);
    let mut failed = false;
    let mut reclaim = None;
    loop {
        match write().await {
            Ok(true) => return Written::Done,
            Ok(false) => {
                return Written::Gone {
                    after_failure: failed,
                };
            }
            Err(e) if e.is_refused() => {
                tracing::error!(
                    job = job.display_name(),
                    id = %job.id(),
                    "the queue refused to {what} the job, and would refuse every try: {e}; \
                     the job stays reserved and comes back after retry_after"
                );
                return Written::LeftReserved;
            }
            Err(e) if !failed => {
                tracing::warn!(
                    job = job.display_name(),
                    id = %job.id(),
                    "cannot {what} the job in the queue (trying again while the reservation lasts): {e}"
                );
                reclaim = slot.as_ref().and_then(|slot| slot.reclaim()).map(Box::pin);
            }
            Err(e) => tracing::debug!(id = %job.id(), "cannot {what} the job in the queue: {e}"),
        }
        failed = true;
        let left = job
            .lease
            .until()
            .map(|until| until.saturating_duration_since(std::time::Instant::now()));
        if left.is_some_and(|left| left.is_zero()) {
            return Written::LeftReserved;
        }
        let pause_over = tokio::time::sleep(left.map_or(pause, |left| left.min(pause)));
        tokio::pin!(pause_over);
        let mut paused = false;
        if let Some(waiting) = reclaim.as_mut() {
            tokio::select! {
                () = &mut pause_over => paused = true,
                permit = waiting => {
                    if let (Some(slot), Some(permit)) = (slot.as_mut(), permit) {
                        slot.hold(permit);
                    }
                    reclaim = None;
                }
            }
        }
        if !paused {
            pause_over.await;
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
