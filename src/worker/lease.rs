//! Keeping a reservation alive while its handler runs.
//!
//! Laravel reserves a job until now + `retry_after` and never extends it, so
//! a job that runs longer is reclaimed and run a second time. Here the score
//! in `:reserved` is pushed forward every `retry_after / 2` seconds while the
//! handler runs. Other workers, PHP ones included, then see a live
//! reservation; only a dead daemon's jobs are reclaimed.

use std::future::Future;
use std::time::Duration;

use crate::queue::{RedisQueue, ReservedJob};

/// Runs `work`, renewing `job`'s reservation until it completes.
pub async fn hold<F: Future>(queue: &RedisQueue, job: &ReservedJob, work: F) -> F::Output {
    let Some(retry_after) = queue.retry_after() else {
        return work.await;
    };
    let period = Duration::from_secs((retry_after / 2).max(1));
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
