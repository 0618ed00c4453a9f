//! Finishing a job another handler ran, through the PHP bridge's finish
//! mode (see [`crate::whole::Books::Finish`]): Laravel's bookkeeping
//! after the run (`CallQueuedHandler`: the chain's next job, the batch,
//! the unique lock; on failure the chain's `catch` callbacks) done by the
//! app's own code, without running `handle()`, before the job's delete
//! or failure reaches the queue. At most once per job uuid
//! ([`crate::whole::marker`]).

use super::Services;
use super::invocation::invocation;
use crate::exception::{FINISH_FAILED, JobException};
use crate::handler::{Mode, Reply, Route};
use crate::queue::ReservedJob;
use crate::whole::marker::Claim;

/// Calls `finisher` (the bridge) in finish mode for `job`: `failure`
/// `None` after a successful run (`finish`), else the recorded failure
/// (`finish-failed`).
///
/// # Errors
/// The exception the bridge answered with (or a `FinishFailedException`
/// saying what it answered instead) when it could not finish the job (logged
/// here, the marker given back). After a successful run the caller
/// treats it as Laravel treats an exception thrown by
/// `dispatchNextJobInChain` inside `CallQueuedHandler::call`: the
/// attempt failed, and the job is released or failed
/// ([`super::process`]), so a chain is never dropped. After a failure
/// the job fails all the same.
pub async fn finish(
    job: &ReservedJob,
    finisher: &Route,
    failure: Option<&str>,
    services: &Services,
) -> Result<(), JobException> {
    let retry_after = services.queue.retry_after().unwrap_or(0);
    let claim = match job.uuid() {
        Some(uuid) => services.bookkeeping.claim_finish(uuid, retry_after).await,
        None => Claim::Unmarked,
    };
    if claim == Claim::Interrupted {
        tracing::warn!(
            job = job.display_name(),
            id = %job.id(),
            "a finish of this job started before and never answered (the worker stopped \
             during it): finishing again, its chain's next job may be dispatched twice"
        );
    }
    if !claim.to_finish() {
        tracing::info!(
            job = job.display_name(),
            id = %job.id(),
            "the job was finished before (the worker stopped before its delete): its chain's \
             next job is not dispatched again"
        );
        return Ok(());
    }
    let invocation = invocation(job, finisher, services, Mode::Finish { failure });
    let (reply, _) = finisher.handler.call(&invocation).await.into_parts();
    match reply {
        Reply::Done | Reply::Delete => {
            tracing::debug!(
                job = job.display_name(),
                id = %job.id(),
                finisher = finisher.pattern(),
                "finished by the PHP bridge"
            );
            if let (true, Some(uuid)) = (claim.marked(), job.uuid()) {
                services.bookkeeping.finished(uuid, retry_after).await;
            }
            Ok(())
        }
        other => {
            tracing::error!(
                job = job.display_name(),
                id = %job.id(),
                finisher = finisher.pattern(),
                answer = ?other,
                "the PHP bridge could not finish the job (its chain's next job, batch or \
                 catch callbacks)"
            );
            if let (true, Some(uuid)) = (claim.marked(), job.uuid()) {
                services.bookkeeping.unclaim_finish(uuid).await;
            }
            Err(match other {
                Reply::Exception(e) | Reply::Fail(e) | Reply::Refused(e) | Reply::TimedOut(e) => e,
                other => JobException::new(
                    FINISH_FAILED,
                    format!(
                        "The PHP bridge did not finish the job (its chain's next job, batch or \
                         catch callbacks): it answered {other:?}."
                    ),
                ),
            })
        }
    }
}
