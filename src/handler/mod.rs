//! Handlers: what actually runs a job.
//!
//! The daemon owns reservation, attempts, backoff, timeouts, failure
//! recording and reclaiming; a handler only runs the job and reports an
//! [`Reply`]. Handlers are chosen by the job's displayName ([`router`]).
//! Transports: one process per job ([`subprocess`]), warm processes
//! ([`persistent`], over a [`pool`] of [`warm`] processes), an HTTP POST
//! per job ([`http`]); each encodes the same call metadata ([`metadata`]).
//! No transport imports another: what the command transports share (how a
//! process is started and described) is in [`child`]. [`preflight`] checks at start that the
//! configured handlers can run; each handler's [`breaker`] stops handing
//! jobs to a handler that keeps failing on its own.

pub mod breaker;
pub mod call_permits;
pub mod capture;
pub mod child;
pub mod child_exits;
pub mod http;
pub mod input;
pub mod metadata;
pub mod persistent;
pub mod pipeline;
pub mod pool;
pub mod preflight;
pub mod process_group;
pub mod request;
pub mod request_line;
pub mod router;
pub mod scheduling;
pub mod subprocess;
pub mod warm;

use std::time::Duration;

use crate::exception::JobException;
use crate::queue::ReservedJob;

pub use breaker::{BreakerSettings, Fault, FaultKind};
pub use http::{HttpHandler, HttpOptions, Secret};
pub use persistent::{PersistentHandler, PersistentOptions};
pub use pool::{Pool, PoolSettings};
pub use router::{Keeper, Route, Router, Unmatched};
pub use subprocess::SubprocessHandler;

/// Why the handler is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode<'a> {
    /// Run the job.
    Run,
    /// The daemon has failed the job; let the app run its `failed()` hook,
    /// release unique locks and record batch failures. `exception` is the
    /// text written to the failed store.
    Failed {
        /// The failure, as recorded.
        exception: &'a str,
    },
    /// Another handler ran the job; the PHP bridge does only Laravel's
    /// bookkeeping around it, without running `handle()`, as
    /// `CallQueuedHandler` does after a run: `failure` `None` (mode
    /// `finish`): unique lock, the chain's next job, the batch's success;
    /// `Some` (mode `finish-failed`, the recorded failure): unique lock,
    /// the batch's failure, the chain's `catch` callbacks (see
    /// `crate::whole`).
    Finish {
        /// The failure, as recorded, when the job failed.
        failure: Option<&'a str>,
    },
}

/// Everything a handler is told about one call.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    /// The reserved job (its `reserved` bytes are the payload handed over).
    pub job: &'a ReservedJob,
    /// The queue connection name (`redis`).
    pub connection: &'a str,
    /// Attempts allowed (`maxTries` or `--tries`); 0 means unlimited.
    pub max_tries: u64,
    /// The time limit of this call; `None` means none.
    pub timeout: Option<Duration>,
    /// Run or failed hook.
    pub mode: Mode<'a>,
    /// Whether the job's batch was cancelled (`SkipIfBatchCancelled`);
    /// `None` when it is in no batch, or its batch is Laravel's to read
    /// (the PHP bridge), or could not be read.
    pub batch_cancelled: Option<bool>,
}

/// What a handler reports back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The job ran; delete it.
    Done,
    /// The handler asked for the job to be deleted without running further.
    Delete,
    /// The handler asked to release the job, available after `delay` seconds.
    Release {
        /// Seconds.
        delay: u64,
    },
    /// The handler asked to fail the job now (`$this->fail($e)`); no retry.
    /// The exception is what gets recorded: the job's own when the handler
    /// sent one, else a `ManuallyFailedException` with the reason.
    Fail(JobException),
    /// The job cannot be run where the handler sent it (an HTTP redirect,
    /// which is not followed): failed now, no retry, and unlike
    /// [`Reply::Fail`] its failed hook is called, as for any failure
    /// the job did not ask for.
    Refused(JobException),
    /// The handler ended with an error: released with backoff, or failed
    /// when tries, `retryUntil` or `maxExceptions` say so.
    Exception(JobException),
    /// The time limit passed and the handler was killed.
    TimedOut(JobException),
    /// The handler itself is at fault, not the job (see [`breaker`]):
    /// `then` is what becomes of the job.
    Fault {
        /// The handler's fault.
        fault: Fault,
        /// The job's outcome.
        then: Box<Reply>,
    },
}

impl Reply {
    /// A request to fail with just a reason (Laravel's
    /// `ManuallyFailedException` with that message).
    pub fn fail(reason: impl Into<String>) -> Self {
        Reply::Fail(JobException::new(crate::exception::MANUALLY_FAILED, reason))
    }

    /// This outcome, marked as caused by a fault of the handler itself of
    /// `kind`; `what` says what happened.
    pub fn with_fault(self, kind: FaultKind, what: impl Into<String>) -> Self {
        Reply::Fault {
            fault: Fault {
                kind,
                what: what.into(),
            },
            then: Box::new(self),
        }
    }

    /// The job's outcome and the handler's fault, if any.
    pub fn into_parts(self) -> (Reply, Option<Fault>) {
        match self {
            Reply::Fault { fault, then } => (then.into_parts().0, Some(fault)),
            outcome => (outcome, None),
        }
    }
}

/// A configured handler.
#[derive(Debug)]
pub enum Handler {
    /// A process per job.
    Subprocess(SubprocessHandler),
    /// Warm processes, many jobs each.
    Persistent(PersistentHandler),
    /// An HTTP POST per job.
    Http(HttpHandler),
}

impl Handler {
    /// Runs one call. Never fails: every error becomes a [`Reply`].
    ///
    /// The process and HTTP calls are boxed: their futures are the largest,
    /// and unboxed every job's future would be as large, a warm process's
    /// included (the job's future is copied whole into its task). A process
    /// start or an HTTP request costs far more than the allocation.
    pub async fn call(&self, invocation: &Invocation<'_>) -> Reply {
        match self {
            Handler::Subprocess(h) => Box::pin(h.call(invocation)).await,
            Handler::Persistent(h) => h.call(invocation).await,
            Handler::Http(h) => Box::pin(h.call(invocation)).await,
        }
    }

    /// How many more calls it may be given now: for a persistent pool its
    /// free processes plus the calls still allowed to wait for one
    /// ([`Pool::room`]); unbounded for the others, which start every call
    /// at once.
    pub fn room(&self) -> usize {
        match self {
            Handler::Persistent(h) => h.pool().room(),
            Handler::Subprocess(_) | Handler::Http(_) => usize::MAX,
        }
    }

    /// Resolves once [`Self::room`] is above 0.
    pub async fn until_room(&self) {
        if let Handler::Persistent(h) = self {
            h.pool().until_room().await;
        }
    }

    /// Its pool of warm processes, for a persistent handler.
    pub fn pool(&self) -> Option<&std::sync::Arc<Pool>> {
        match self {
            Handler::Persistent(h) => Some(h.pool()),
            Handler::Subprocess(_) | Handler::Http(_) => None,
        }
    }
}
