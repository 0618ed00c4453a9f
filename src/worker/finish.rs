//! Finishing a job another handler ran, through the PHP bridge's finish
//! mode (see [`crate::whole::Books::Finish`]): Laravel's bookkeeping
//! after the run (`CallQueuedHandler`: the chain's next job, the batch,
//! the unique lock; on failure the chain's `catch` callbacks) done by the
//! app's own code, without running `handle()`, before the job's delete
//! or failure reaches the queue. At most once per job uuid
//! ([`crate::whole::marker`]).

use super::Services;
use super::process::invocation;
use crate::handler::{Mode, Reply, Route};
use crate::queue::ReservedJob;
use crate::whole::marker::Claim;

/// Calls `finisher` (the bridge) in finish mode for `job`: `failure`
/// `None` after a successful run (`finish`), else the recorded failure
/// (`finish-failed`). Never fails: a finish the bridge could not do is
/// logged as an error (with what the bridge answered) and the job is
/// settled all the same, as a native bookkeeping write would be.
pub async fn finish(
    job: &ReservedJob,
    finisher: &Route,
    failure: Option<&str>,
    services: &Services,
) {
    let retry_after = services.queue.retry_after().unwrap_or(0);
    let claim = match job.uuid() {
        Some(uuid) => services.bookkeeping.claim_finish(uuid, retry_after).await,
        None => Claim::Unmarked,
    };
    if claim == Claim::Done {
        tracing::info!(
            job = job.display_name(),
            id = %job.id(),
            "the job was finished before (the worker stopped before its delete): its chain's \
             next job is not dispatched again"
        );
        return;
    }
    let invocation = invocation(job, finisher, services, Mode::Finish { failure });
    let (reply, _) = finisher.handler.call(&invocation).await.into_parts();
    match reply {
        Reply::Done | Reply::Delete => tracing::debug!(
            job = job.display_name(),
            id = %job.id(),
            finisher = finisher.pattern(),
            "finished by the PHP bridge"
        ),
        other => {
            tracing::error!(
                job = job.display_name(),
                id = %job.id(),
                finisher = finisher.pattern(),
                answer = ?other,
                "the PHP bridge could not finish the job (its chain's next job, batch or \
                 catch callbacks); the job is settled all the same"
            );
            if let (Claim::First, Some(uuid)) = (claim, job.uuid()) {
                services.bookkeeping.unclaim_finish(uuid).await;
            }
        }
    }
}
