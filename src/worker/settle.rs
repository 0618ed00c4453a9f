//! Carrying out a [`Verdict`]: the last step of every job.
//!
//! Every reserved job ends deleted, released or failed here; if Redis or the
//! failed store cannot be written, the job is left in `:reserved`, where it
//! is reclaimed after `retry_after`. Nothing is dropped.

use std::future::Future;
use std::time::Duration;

use chrono::Utc;

use super::Services;
use super::process::invocation;
use super::verdict::Verdict;
use crate::exception::JobException;
use crate::failed::{FailedJob, Logged};
use crate::handler::{Mode, Route};
use crate::queue::ReservedJob;

/// Tries of a Redis write before the job is left for reclaiming.
const WRITE_TRIES: u32 = 5;

/// Applies `verdict` to `job`; `route` is the job's handler, called in
/// failed mode when the verdict asks for the `failed()` hook.
pub async fn settle(
    job: &ReservedJob,
    route: Option<&Route>,
    verdict: &Verdict,
    services: &Services,
) {
    let queue = &services.queue;
    let done = match verdict {
        Verdict::Delete => retry("delete", || queue.delete(job)).await,
        Verdict::Release { delay, .. } => retry("release", || queue.release(job, *delay)).await,
        Verdict::HandBack { delay } => retry("hand back", || queue.hand_back(job, *delay)).await,
        Verdict::Fail {
            exception,
            failed_hook,
        } => {
            fail(
                job,
                exception,
                failed_hook.then_some(route).flatten(),
                services,
            )
            .await
        }
    };
    match done {
        Some(true) => {}
        Some(false) => tracing::warn!(
            job = job.display_name(),
            id = %job.id(),
            "the reservation was already gone when the job was settled; \
             another worker reclaimed it (is retry_after shorter than the job?)"
        ),
        None => tracing::error!(
            job = job.display_name(),
            id = %job.id(),
            "the job could not be settled; it stays reserved and is reclaimed after retry_after"
        ),
    }
}

/// `Job::fail`: record, ZREM, then the app's `failed()` hook through
/// `hook` (the job's route, when the hook must run).
///
/// The record is written first: if the store is down the job stays
/// reserved (and comes back after `retry_after`) rather than vanish.
async fn fail(
    job: &ReservedJob,
    exception: &JobException,
    hook: Option<&Route>,
    services: &Services,
) -> Option<bool> {
    let text = exception.to_string();
    let record = FailedJob {
        uuid: job
            .uuid()
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string),
        connection: services.connection.clone(),
        queue: job.queue.name.clone(),
        payload: job.raw_text(),
        exception: text.clone(),
        failed_at: Utc::now(),
    };
    match services.failed.log(&record).await {
        Logged::Recorded => {}
        Logged::RecordedInFallback { refusal, fallback } => tracing::warn!(
            job = job.display_name(),
            id = %job.id(),
            store = services.failed.describe(),
            fallback,
            "the failed job store refused the record for good, so it was recorded in the \
             fallback instead (see `failed`): {refusal}"
        ),
        Logged::StoreDown(e) => {
            tracing::error!(
                job = job.display_name(),
                id = %job.id(),
                store = services.failed.describe(),
                "cannot record the failed job: {e:#}"
            );
            return None;
        }
    }
    let deleted = retry("delete", || services.queue.delete(job)).await;
    if let Some(route) = hook {
        call_failed_hook(job, route, &text, services).await;
    }
    deleted
}

/// Calls the job's handler in failed mode, so the app's `failed()` method,
/// unique-lock release and batch bookkeeping run.
async fn call_failed_hook(job: &ReservedJob, route: &Route, exception: &str, services: &Services) {
    let invocation = invocation(job, route, services, Mode::Failed { exception });
    let outcome = route.handler.call(&invocation).await;
    tracing::debug!(job = job.display_name(), id = %job.id(), ?outcome, "failed hook ran");
}

/// Runs a Redis write up to [`WRITE_TRIES`] times, 100 ms apart doubling.
/// `None` when every try failed.
async fn retry<F, Fut>(what: &str, mut write: F) -> Option<bool>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<bool>>,
{
    let mut pause = Duration::from_millis(100);
    for attempt in 1..=WRITE_TRIES {
        match write().await {
            Ok(done) => return Some(done),
            Err(e) => {
                tracing::warn!(attempt, "cannot {what} the job in Redis: {e}");
                if attempt < WRITE_TRIES {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
    None
}
