//! Deciding a reserved job's fate (`Worker::process` and friends,
//! protocol §6.4–§6.7).
//!
//! 1. A job already past its tries or `retryUntil` fails without running.
//! 2. The handler chosen by displayName runs, under the job's time limit,
//!    while the reservation is renewed; unless its breaker is tripped, when
//!    the job is handed back uncounted ([`crate::handler::breaker`]).
//!    The handler's faults go to its breaker.
//! 3. Its outcome becomes a [`Verdict`]: delete, release, or fail. An
//!    exception or a timeout fails the job when it was the last try,
//!    `retryUntil` has passed, `maxExceptions` is reached, or (timeouts
//!    only) `failOnTimeout` is set; otherwise it is released with backoff.
//!
//! Unlike `queue:work`, a timeout kills only the handler. Laravel's worker
//! kills itself and leaves the job reserved until `retry_after`; here the
//! job is released with backoff at once (the attempt still counts).

use super::starts::Ticket;
use std::time::Instant;

use super::assignment::Assignment;
use super::finish::finish;
use super::invocation::invocation;
use super::lease::Held;
use super::verdict::Verdict;
use super::{Services, backoff, lease};
use crate::exception::{INVALID_PAYLOAD, JobException, NO_HANDLER};
use crate::handler::breaker::Admit;
use crate::handler::{Mode, Reply, Route, Unmatched};
use crate::queue::now;
use crate::queue::{Payload, ReservedJob};
use crate::whole::Books;

/// The attempt limits of one job, from its payload and the worker flags.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `maxTries` or `--tries`; 0 = unlimited.
    pub max_tries: u64,
    /// `retryUntil`, UNIX seconds.
    pub retry_until: Option<i64>,
    /// This attempt's number.
    pub attempt: u64,
}

impl Limits {
    fn of(payload: &Payload, job: &ReservedJob, tries: u64) -> Self {
        Limits {
            max_tries: payload.max_tries().unwrap_or(tries),
            retry_until: payload.retry_until(),
            attempt: job.attempt(),
        }
    }

    /// `markJobAsFailedIfAlreadyExceedsMaxAttempts`: true when the job must
    /// fail before it runs.
    pub fn already_exceeded(&self, now: i64) -> bool {
        match self.retry_until {
            Some(until) => now > until,
            None => self.max_tries > 0 && self.attempt > self.max_tries,
        }
    }

    /// `markJobAsFailedIfWillExceedMaxAttempts`: true when a failure of this
    /// attempt must fail the job.
    pub fn will_exceed(&self, now: i64) -> bool {
        match self.retry_until {
            Some(until) => until <= now,
            None => self.max_tries > 0 && self.attempt >= self.max_tries,
        }
    }
}

/// `job`'s payload, or the failure of a job that cannot run: a job its
/// queue refuses (a database row at its `attempts` column's limit, failed
/// with Laravel 12.54's QueryException; an SQS overflow pointer the worker
/// cannot follow), or a payload that cannot be read or names no job
/// (neither `job` nor `displayName`: Laravel's `fire` finds no class to
/// call, and no handler is matched for it, not even a catch-all).
fn runnable<'a>(job: &'a ReservedJob, services: &Services) -> Result<&'a Payload, Verdict> {
    if let Some(refusal) = services.queue.refusal(job) {
        return Err(Verdict::Fail {
            exception: JobException::new(refusal.class, refusal.message),
            failed_hook: refusal.failed_hook,
        });
    }
    let invalid = |why: &dyn std::fmt::Display| Verdict::Fail {
        exception: JobException::new(INVALID_PAYLOAD, format!("Unable to run the job: {why}.")),
        failed_hook: false,
    };
    let payload = job.payload.as_ref().map_err(|e| invalid(e))?;
    if payload.display_name().is_none() {
        return Err(invalid(
            &"the payload names no job (neither job nor displayName)",
        ));
    }
    Ok(payload)
}

/// Runs `job` through its handler (`assigned.route`, the one its
/// displayName and queue matched, if any) and decides its fate. `ticket`
/// is dropped as the handler call begins, or with the verdict when there
/// is none.
pub async fn decide(
    job: &ReservedJob,
    assigned: Assignment<'_>,
    services: &Services,
    ticket: Ticket,
) -> Verdict {
    let payload = match runnable(job, services) {
        Ok(payload) => payload,
        Err(verdict) => return verdict,
    };
    let name = job.display_name();
    let options = &services.options;
    let limits = Limits::of(payload, job, options.tries);
    if limits.already_exceeded(now()) {
        return Verdict::Fail {
            exception: JobException::max_attempts_exceeded(name, services.laravel),
            failed_hook: true,
        };
    }

    let Some(route) = assigned.route else {
        return match services.router.unmatched {
            Unmatched::Fail => Verdict::Fail {
                exception: JobException::new(
                    NO_HANDLER,
                    format!("No handler is configured for {name}."),
                ),
                failed_hook: false,
            },
            Unmatched::Release { delay } => Verdict::HandBack {
                delay,
                tripped: false,
            },
        };
    };

    let outcome = match call_handler(job, route, assigned.books, services, ticket).await {
        Ok(outcome) => outcome,
        Err(verdict) => return verdict,
    };

    match outcome {
        Reply::Done | Reply::Delete => match assigned.books {
            Books::Finish(finisher) => finished(job, payload, limits, finisher, services).await,
            // Most jobs: no finish future is made.
            _ => Verdict::Delete,
        },
        Reply::Release { delay } => Verdict::Release {
            delay,
            exception: None,
        },
        Reply::Fail(exception) => Verdict::Fail {
            exception,
            failed_hook: false,
        },
        Reply::Refused(exception) => Verdict::Fail {
            exception,
            failed_hook: true,
        },
        Reply::Exception(e) => {
            Box::pin(after_exception(job, payload, limits, e, false, services)).await
        }
        Reply::TimedOut(e) => {
            let e = e.for_version(services.laravel, name);
            Box::pin(after_exception(job, payload, limits, e, true, services)).await
        }
        // Never: `into_parts` took the fault off. Released as a protocol
        // error would be, should it ever come.
        Reply::Fault { .. } => Verdict::Release {
            delay: 0,
            exception: None,
        },
    }
}

/// Calls `route`'s handler for `job` while the reservation is held, unless
/// it needs the PHP bridge and none is configured (failed, see
/// `crate::whole::Bookkeeping::refusal`) or its breaker refuses the job, and tells the breaker how the call went
/// (announcing a trip or a recovery). `Err` is the verdict of a job that
/// did not run to an outcome: handed back for a tripped handler, or its
/// reservation lost. `ticket` is dropped once the handler has the job.
async fn call_handler(
    job: &ReservedJob,
    route: &Route,
    books: Books<'_>,
    services: &Services,
    ticket: Ticket,
) -> Result<Reply, Verdict> {
    // A job that needs the PHP bridge where none is configured (a chain).
    if let Books::NoBridge(needs) = books
        && let Some(exception) = services.bookkeeping.refusal(job, needs)
    {
        return Err(Verdict::Fail {
            exception,
            failed_hook: false,
        });
    }
    if let Admit::Refuse { delay } = route.breaker.admit(Instant::now()) {
        return Err(Verdict::HandBack {
            delay,
            tripped: true,
        });
    }
    let mut invocation = invocation(job, route, services, Mode::Run);
    if services.bookkeeping.has_work(job, books) {
        invocation.batch_cancelled = Box::pin(services.bookkeeping.before_run(job, route)).await;
    }
    let call = route.handler.call(&invocation);
    // No await until the call is first polled (the runtime has one
    // thread), so the loop sees its handler taken when it wakes.
    drop(ticket);
    let outcome = match lease::hold(&services.queue, job, services.on_lease_lost, call).await {
        Held::Done(outcome) => outcome,
        Held::Lost => return Err(Verdict::LeaseLost),
    };
    let (outcome, fault) = outcome.into_parts();
    if let Some(change) = route.breaker.record(fault.as_ref(), Instant::now()) {
        services.on_tripped.announce(&change, &services.events);
    }
    Ok(outcome)
}

/// The verdict of a successful run of `job`, whose bookkeeping needs PHP
/// (a chain, see [`crate::whole::Books::Finish`]): the bridge `finisher`
/// finishes it before its delete. A finish that fails is the run's
/// exception, as one thrown by `dispatchNextJobInChain` is in
/// `CallQueuedHandler::call`: the job is released to run again (its
/// finish with it) or failed, never deleted with its chain's next job
/// lost.
async fn finished(
    job: &ReservedJob,
    payload: &Payload,
    limits: Limits,
    finisher: &Route,
    services: &Services,
) -> Verdict {
    match Box::pin(finish(job, finisher, None, services)).await {
        Ok(()) => Verdict::Delete,
        Err(e) => Box::pin(after_exception(job, payload, limits, e, false, services)).await,
    }
}

/// `handleJobException` (and, for timeouts, the SIGALRM handler's checks).
async fn after_exception(
    job: &ReservedJob,
    payload: &Payload,
    limits: Limits,
    exception: JobException,
    timed_out: bool,
    services: &Services,
) -> Verdict {
    let fail = |exception| Verdict::Fail {
        exception,
        failed_hook: true,
    };
    // Laravel counts the exception towards maxExceptions even when this
    // was the last try (`handleJobException` runs both checks).
    let out_of_tries = limits.will_exceed(now());
    if max_exceptions_reached(payload, services).await || out_of_tries {
        return fail(exception);
    }
    if timed_out && payload.fail_on_timeout() {
        return fail(exception);
    }
    let delay = backoff::delay_for(
        payload.backoff().as_deref(),
        &services.options.backoff,
        job.attempt(),
    );
    Verdict::Release {
        delay,
        exception: Some(exception),
    }
}

/// `markJobAsFailedIfWillExceedMaxExceptions`: counts this exception in the
/// cache (`job-exceptions:{uuid}`, shared with PHP workers) and says whether
/// the job has now had `maxExceptions` of them. Needs a cache, a uuid and
/// a `maxExceptions`, as in Laravel.
async fn max_exceptions_reached(payload: &Payload, services: &Services) -> bool {
    let (Some(max), Some(uuid)) = (payload.max_exceptions(), payload.uuid()) else {
        return false;
    };
    match services.cache.count_exception(uuid).await {
        Ok(Some(count)) if max as i64 <= count => {
            if let Err(e) = services.cache.forget_exceptions(uuid).await {
                tracing::warn!(uuid, "cannot delete the exception counter: {e}");
            }
            true
        }
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(uuid, "cannot count the exception for maxExceptions: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_limits_follow_laravel() {
        let l = |max_tries, attempt| Limits {
            max_tries,
            retry_until: None,
            attempt,
        };
        assert!(!l(3, 3).already_exceeded(0));
        assert!(l(3, 4).already_exceeded(0));
        assert!(l(3, 3).will_exceed(0));
        assert!(!l(3, 2).will_exceed(0));
        assert!(!l(0, 100).already_exceeded(0) && !l(0, 100).will_exceed(0));
        let until = Limits {
            max_tries: 1,
            retry_until: Some(100),
            attempt: 50,
        };
        assert!(!until.already_exceeded(100) && until.already_exceeded(101));
        assert!(!until.will_exceed(99) && until.will_exceed(100));
    }
}
