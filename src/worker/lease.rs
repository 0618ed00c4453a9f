//! Keeping a reservation alive while its handler runs, and stopping the
//! handler when it cannot be kept.
//!
//! Laravel reserves a job until now + `retry_after` and never extends it, so
//! a job that runs longer is reclaimed and run a second time. Here the score
//! in `:reserved` is pushed forward every `(retry_after - 1) / 2` seconds
//! while the handler runs. Other workers, PHP ones included, then see a
//! live reservation; only a dead daemon's jobs are reclaimed.
//!
//! Scores are whole seconds and a reservation is reclaimable once
//! `score <= now`, so a fresh one lasts between `retry_after - 1` and
//! `retry_after` seconds. Renewing every `(retry_after - 1) / 2` seconds
//! keeps it alive for any `retry_after >= 2`; with `retry_after = 1` the
//! reservation can expire within milliseconds and no renewal can help.
//!
//! When renewals fail (the queue unreachable) until the reservation may have
//! expired, or a renewal finds it gone, another worker may already be
//! running the job. With `[worker] on_lease_lost = "kill"` (the default)
//! the handler is stopped then, so the job never runs twice at once while
//! this worker can tell; with `"keep"` it runs on and the loss is logged.

use std::future::Future;
use std::time::Duration;

use crate::queue::{Queue, ReservedJob};

/// What to do with a running handler whose reservation is lost
/// (`[worker] on_lease_lost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLeaseLost {
    /// Stop the handler (its process group is killed) and leave the job to
    /// whoever holds it now. The default.
    #[default]
    Kill,
    /// Let the handler finish; the loss is logged.
    Keep,
}

/// How a held call ended.
#[derive(Debug)]
pub enum Held<T> {
    /// The call finished with this output.
    Done(T),
    /// The reservation was lost and, under [`OnLeaseLost::Kill`], the call
    /// was dropped (which stops the handler).
    Lost,
}

/// Runs `work`, renewing `job`'s reservation until it completes; stops it
/// early when the reservation is lost and `policy` says so.
pub async fn hold<F: Future>(
    queue: &Queue,
    job: &ReservedJob,
    policy: OnLeaseLost,
    work: F,
) -> Held<F::Output> {
    let Some(retry_after) = queue.retry_after() else {
        return Held::Done(work.await);
    };
    let period = renewal_period(retry_after);
    let first = first_renewal(job.lease.confirmed(), period, std::time::Instant::now());
    let mut tick = tokio::time::interval_at(tokio::time::Instant::from_std(first), period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    // The renewal in flight, polled beside the handler and the expiry: a
    // hung queue holds a command for up to the command timeout (30 s), and
    // neither the handler's end nor the lease running out may wait for it.
    let mut renewal: Option<Renewal<'_>> = None;
    tokio::pin!(work);
    loop {
        let expiry = job.lease.until().map(tokio::time::Instant::from_std);
        let lost = tokio::select! {
            output = &mut work => return Held::Done(output),
            _ = tick.tick(), if renewal.is_none() => {
                renewal = Some(Box::pin(queue.renew(job)));
                false
            }
            renewed = in_flight(&mut renewal) => renewal_lost(job, renewed, &mut warned),
            () = sleep_until(expiry) => expired(job, retry_after),
        };
        if lost && policy == OnLeaseLost::Kill {
            tracing::warn!(
                job = job.display_name(),
                id = %job.id(),
                "stopping the handler: the job is no longer surely this worker's \
                 ([worker] on_lease_lost = \"kill\")"
            );
            return Held::Lost;
        }
        if lost {
            // Keep: say it once, then let the handler finish.
            return Held::Done(work.await);
        }
    }
}

/// A renewal command on its way.
/// Whether a renewal's answer means the reservation is lost: the queue says
/// so, or it cannot be reached and the lease has run out (`warned`: the
/// first failure to renew has been logged).
fn renewal_lost(
    job: &ReservedJob,
    renewed: crate::queue::QueueResult<bool>,
    warned: &mut bool,
) -> bool {
    match renewed {
        Ok(true) => {
            tracing::trace!(id = %job.id(), "reservation renewed");
            false
        }
        Ok(false) => {
            tracing::warn!(
                job = job.display_name(),
                id = %job.id(),
                "reservation lost: the job was reclaimed while it ran \
                 (another worker may be running it now)"
            );
            true
        }
        Err(e) => {
            if !*warned {
                tracing::warn!(
                    job = job.display_name(),
                    id = %job.id(),
                    "cannot renew the reservation (retrying until it would expire): {e}"
                );
                *warned = true;
            }
            job.lease.expired()
        }
    }
}

/// Whether the lease has run out now that its expiry time has come (a
/// renewal may have moved it on meanwhile).
fn expired(job: &ReservedJob, retry_after: u64) -> bool {
    if !job.lease.expired() {
        return false;
    }
    tracing::warn!(
        job = job.display_name(),
        id = %job.id(),
        retry_after,
        "reservation expired while the queue could not be reached: \
         another worker may reclaim the job"
    );
    true
}

type Renewal<'a> =
    std::pin::Pin<Box<dyn Future<Output = crate::queue::QueueResult<bool>> + Send + 'a>>;

/// The answer to the renewal in flight, which is then taken; never, when
/// none is.
async fn in_flight(renewal: &mut Option<Renewal<'_>>) -> crate::queue::QueueResult<bool> {
    let Some(pending) = renewal.as_mut() else {
        return std::future::pending().await;
    };
    let answer = pending.await;
    *renewal = None;
    answer
}

/// Sleeps until `at`; for ever when `None`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How often a reservation of `retry_after` seconds is renewed: half of its
/// guaranteed length (`retry_after - 1` s), and never more often than every
/// 250 ms.
pub fn renewal_period(retry_after: u64) -> Duration {
    Duration::from_secs_f64((retry_after.saturating_sub(1) as f64 / 2.0).max(0.25))
}

/// When the first renewal is due: `period` after the command that wrote
/// the reservation was sent (`confirmed`), not after the handler started,
/// since a reserve that waited (for a database's write lock, say) has used
/// part of the reservation already; at once (`now`) when that is past.
fn first_renewal(
    confirmed: std::time::Instant,
    period: Duration,
    now: std::time::Instant,
) -> std::time::Instant {
    (confirmed + period).max(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_renewal_counts_from_the_reservation_not_the_start() {
        let now = std::time::Instant::now();
        let period = renewal_period(6);
        // Reserved just now: one period on.
        assert_eq!(first_renewal(now, period, now), now + period);
        // Reserved 1 s before the handler started: 1 s sooner.
        let one = Duration::from_secs(1);
        assert_eq!(first_renewal(now - one, period, now), now + period - one);
        // The reserve waited 4 s for a lock: due already, so at once.
        let waited = now - Duration::from_secs(4);
        assert_eq!(first_renewal(waited, period, now), now);
    }

    #[test]
    fn renews_well_before_the_reservation_can_expire() {
        assert_eq!(renewal_period(90), Duration::from_millis(44_500));
        assert_eq!(renewal_period(2), Duration::from_millis(500));
        assert_eq!(renewal_period(1), Duration::from_millis(250));
        assert_eq!(renewal_period(0), Duration::from_millis(250));
    }
}
