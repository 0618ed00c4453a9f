//! Keeping a reservation alive while its handler runs.
//!
//! Laravel reserves a job until now + `retry_after` and never extends it, so
//! a job that runs longer is reclaimed and run a second time. Here the score
//! in `:reserved` is pushed forward every `retry_after / 2` seconds while the
//! handler runs. Other workers, PHP ones included, then see a live
//! reservation; only a dead daemon's jobs are reclaimed.
//!
//! Scores are whole seconds and a reservation is reclaimable once
//! `score <= now`, so a fresh one lasts between `retry_after - 1` and
//! `retry_after` seconds. Renewing every `(retry_after - 1) / 2` seconds
//! keeps it alive for any `retry_after >= 2`; with `retry_after = 1` the
//! reservation can expire within milliseconds and no renewal can help.

use std::future::Future;
use std::time::Duration;

use crate::queue::{RedisQueue, ReservedJob};

/// Runs `work`, renewing `job`'s reservation until it completes.
pub async fn hold<F: Future>(queue: &RedisQueue, job: &ReservedJob, work: F) -> F::Output {
    let Some(retry_after) = queue.retry_after() else {
        return work.await;
    };
    let period = renewal_period(retry_after);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tokio::pin!(work);
    loop {
        tokio::select! {
            output = &mut work => return output,
            _ = tick.tick() => match queue.renew(job).await {
                Ok(true) => tracing::trace!(id = %job.id(), "reservation renewed"),
                Ok(false) => tracing::warn!(
                    job = job.display_name(),
                    id = %job.id(),
                    "reservation lost: the job was reclaimed by another worker while it ran"
                ),
                Err(e) => tracing::warn!(id = %job.id(), "cannot renew reservation: {e}"),
            },
        }
    }
}

/// How often a reservation of `retry_after` seconds is renewed: half of its
/// guaranteed length (`retry_after - 1` s), and never more often than every
/// 250 ms.
pub fn renewal_period(retry_after: u64) -> Duration {
    Duration::from_secs_f64((retry_after.saturating_sub(1) as f64 / 2.0).max(0.25))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_well_before_the_reservation_can_expire() {
        assert_eq!(renewal_period(90), Duration::from_millis(44_500));
        assert_eq!(renewal_period(2), Duration::from_millis(500));
        assert_eq!(renewal_period(1), Duration::from_millis(250));
        assert_eq!(renewal_period(0), Duration::from_millis(250));
    }
}
