//! The persistent transport: warm processes, one call at a time each.
//!
//! A process is started once (for a PHP bridge: the app is booted once) and
//! then serves many calls: requests go to its stdin as one JSON object per
//! line (a `call` number, the call's metadata of [`super::metadata`] under
//! its `key` names, the payload and the decoded command); answers come back
//! on its file descriptor 3, one JSON object per line, with the actions of
//! [`super::request`] and the request's `call` number echoed unchanged. Its
//! stdout and stderr stay free for the job's own output and are logged line
//! by line, each line cut to `output_limit` bytes (its end kept, as process
//! mode keeps the end of a call's output).
//!
//! Answers are matched by `call`, not by order. A line on fd 3 that is not
//! the answer to the request in flight (another call number, none, not
//! JSON, longer than [`ANSWER_LIMIT`](super::child::ANSWER_LIMIT)), or any line while no request is in
//! flight, is a protocol error: the process group is killed and a new
//! process takes later calls. The job in flight is released at once with
//! its attempt counted ([`Reply::Release`] with no delay), not failed: its
//! handler broke the protocol, the job did not necessarily fail, and the
//! answer that came cannot be trusted to be this job's. The outcome carries
//! the fault (the line escaped and cut) to the handler's
//! [`breaker`](super::breaker), which logs it, rate-limited; so does a
//! program that cannot start, and a process that ends before answering
//! its first request.
//!
//! A process found dead (or broken) when a call takes it from the pool is
//! replaced before the request is written. A process that dies after the
//! request was written but before reading any of it (the request's bytes
//! are all still in its stdin pipe) never saw the job: the call goes to a
//! new process and costs no attempt. A process that dies after reading it
//! is an exception for that job, with its exit status and stderr tail.
//!
//! In a pipelined pool (`pipeline = true`, [`super::pipeline`]) a call
//! that finds every process busy writes its request behind one's call in
//! flight and takes the process over when that call's answer is in; its
//! time limit runs from then.
//!
//! A process is also replaced when a call times out (its group is killed),
//! after `max_jobs` calls, or when its resident memory passes `max_memory`
//! MB after a call. End of stdin tells it to exit. How many processes run,
//! and when idle ones are stopped, is the [`Pool`]'s business; one
//! process's pipes are [`super::warm`]'s.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::call_permits::{CallPermit, Waiting};
use super::capture::Tail;
use super::child::detail;
use super::pipeline::{AheadEnded, Behind};
use super::pool::{Pool, PoolSettings, Taken};
use super::request_line::Request;
use super::warm::{CallError, Handoff, Process, Spawn};
use super::{FaultKind, Invocation, Reply, process_group, request};
use crate::exception::{HANDLER_FAILED, JobException};

/// Processes a call is offered to when each one dies before reading the
/// request; after that the call is an exception (the handler cannot start).
const DELIVERY_TRIES: usize = 3;

/// A call whose request reached a process: the process, the permit it
/// holds, and the answer or why there is none.
struct Exchanged {
    process: Process,
    permit: CallPermit,
    answer: Result<Vec<u8>, CallError>,
}

/// Why a call has no process to settle with.
enum Unsent {
    /// Its outcome is known already (the handler cannot start, or the
    /// process it was written behind read it and ended).
    Reply(Reply),
    /// The request never reached a process: try another.
    Retry,
}

/// `exchange` with `limit` as its time limit (none when `None`).
async fn within<T>(
    limit: Option<Duration>,
    exchange: impl Future<Output = Result<T, CallError>>,
) -> Result<T, CallError> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or(Err(CallError::TimedOut)),
        None => exchange.await,
    }
}

/// Settings of a persistent handler.
#[derive(Debug, Clone)]
pub struct PersistentOptions {
    /// How its processes are started (command, environment, output limit,
    /// connection name).
    pub spawn: Spawn,
    /// How many processes run, and when they are replaced or stopped.
    pub pool: PoolSettings,
    /// Whether requests carry `data.command` decoded to JSON (`command`).
    pub decode_command: bool,
}

/// A persistent handler: the call protocol over a [`Pool`] of warm
/// processes running one command.
#[derive(Debug)]
pub struct PersistentHandler {
    pool: Arc<Pool>,
    kill_grace: Duration,
    decode_command: bool,
    /// The next request's `call` number (from 1; 0 means "none in flight").
    next_call: AtomicU64,
}

/// Logs a request the process ended without reading. A process that
/// answered its calls and then exited with status 0 ended as it meant to
/// (one call per process, as the PHP bridge after a boot error): that is
/// news, not a warning. Any other end is a warning.
fn log_not_delivered(process: &Process, inv: &Invocation<'_>, why: &str) {
    let (pid, job, id) = (process.pid, inv.job.display_name(), inv.job.id());
    if process.calls > 0 && why == "exited with status 0" {
        tracing::info!(
            pid,
            job,
            %id,
            "the handler process exited after its last answer, before this request; \
             the job goes to a new process"
        );
    } else {
        tracing::warn!(
            pid,
            job,
            %id,
            "the handler process {why}, without reading the request; \
             the job goes to a new process"
        );
    }
}

impl PersistentHandler {
    /// A handler whose pool starts no process before [`Pool::start`] or
    /// its first call.
    pub fn new(options: PersistentOptions) -> Self {
        PersistentHandler {
            kill_grace: options.pool.kill_grace,
            pool: Arc::new(Pool::new(options.spawn, options.pool)),
            decode_command: options.decode_command,
            next_call: AtomicU64::new(1),
        }
    }

    /// Its pool of processes.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Runs one call on a warm process (starting one if none is idle), or
    /// behind a busy one in a pipelined pool.
    pub async fn call(&self, inv: &Invocation<'_>) -> Reply {
        self.pool.start();
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let request = match Request::new(call, inv, self.decode_command) {
            Ok(request) => request,
            Err(e) => {
                return Reply::Exception(JobException::new(
                    HANDLER_FAILED,
                    format!("cannot encode the request: {e}"),
                ));
            }
        };
        let mut last_stderr = Tail::default();
        for _ in 0..DELIVERY_TRIES {
            let exchanged = match self.pool.take().await {
                Taken::Free(permit) => self.exchange(permit, call, &request, inv).await,
                // Boxed: only a pipelined pool's calls take this way.
                Taken::Behind(behind, waiting) => {
                    Box::pin(self.exchange_behind(behind, waiting, call, &request, inv)).await
                }
            };
            let Exchanged {
                mut process,
                permit,
                answer,
            } = match exchanged {
                Ok(exchanged) => exchanged,
                Err(Unsent::Reply(outcome)) => return outcome,
                Err(Unsent::Retry) => continue,
            };
            match answer {
                Ok(answer) => {
                    process.calls += 1;
                    self.pool.finish(process, permit);
                    return request::parse(&answer).unwrap_or_else(|| {
                        Reply::Exception(JobException::new(
                            HANDLER_FAILED,
                            "the handler answered with an empty action",
                        ))
                    });
                }
                Err(CallError::NotDelivered(why)) => {
                    log_not_delivered(&process, inv, &why);
                    last_stderr = process.stderr_tail();
                    // Boxed, as the failure below: ending a process is
                    // rare, and its future would be in every call's.
                    Box::pin(self.pool.end(process)).await;
                }
                Err(error) => return Box::pin(self.failed(error, process, inv)).await,
            }
        }
        let (name, how) = (
            inv.job.display_name(),
            format!(
                "was started {DELIVERY_TRIES} times and each process ended before reading the request"
            ),
        );
        Reply::Exception(
            JobException::new(HANDLER_FAILED, format!("{name}: the handler {how}"))
                .with_detail(detail(&how, &last_stderr)),
        )
        .with_fault(FaultKind::Died, format!("the handler {how} (job {name})"))
    }

    /// Sends the request to a free process (or a new one) and waits for its
    /// answer, within the time limit; offers the place behind meanwhile.
    async fn exchange(
        &self,
        permit: CallPermit,
        call: u64,
        request: &Request<'_>,
        inv: &Invocation<'_>,
    ) -> Result<Exchanged, Unsent> {
        let mut process = match self.pool.checkout() {
            Ok(p) => p,
            Err(e) => {
                let what = format!("{:?}: {e}", self.pool.program());
                return Err(Unsent::Reply(
                    Reply::Exception(JobException::new(
                        HANDLER_FAILED,
                        format!("cannot start handler {what}"),
                    ))
                    .with_fault(FaultKind::CannotStart, what),
                ));
            }
        };
        let answer = within(inv.timeout, async {
            let sent = process.send(request).await?;
            self.pool.offer_place(&mut process);
            process.answer(call, sent).await
        })
        .await;
        Ok(Exchanged {
            process,
            permit,
            answer,
        })
    }

    /// Sends the request behind a busy process's call, waits for that call
    /// to end, then for this one's answer within the time limit.
    async fn exchange_behind(
        &self,
        behind: Behind<Handoff>,
        waiting: Waiting,
        call: u64,
        request: &Request<'_>,
        inv: &Invocation<'_>,
    ) -> Result<Exchanged, Unsent> {
        let (pid, job, id) = (behind.pid, inv.job.display_name(), inv.job.id());
        let handed = match behind.send(request).await {
            Ok(sent) => behind.handed(sent).await.map(|handoff| (handoff, sent)),
            Err(e) => {
                tracing::info!(
                    pid,
                    job,
                    %id,
                    "the handler process could not be sent the request behind its call ({e}); \
                     the job goes to another process"
                );
                return Err(Unsent::Retry);
            }
        };
        drop(waiting);
        let (handoff, sent) = match handed {
            Ok(handed) => handed,
            Err(AheadEnded::Unread) => {
                tracing::info!(
                    pid,
                    job,
                    %id,
                    "the handler process ended while the call before this one ran, \
                     without reading this request; the job goes to another process"
                );
                return Err(Unsent::Retry);
            }
            Err(AheadEnded::Read) => {
                let how = "read this request ahead, then ended while the call before it ran";
                return Err(Unsent::Reply(Reply::Exception(JobException::new(
                    HANDLER_FAILED,
                    format!("{job}: the handler process (pid {pid}) {how}"),
                ))));
            }
        };
        let mut process = handoff.process;
        self.pool.offer_place(&mut process);
        let answer = within(inv.timeout, process.answer(call, sent)).await;
        Ok(Exchanged {
            process,
            permit: handoff.permit,
            answer,
        })
    }

    /// The outcome of a call whose process timed out, broke the protocol
    /// or died after reading the request; the process is ended.
    async fn failed(&self, error: CallError, process: Process, inv: &Invocation<'_>) -> Reply {
        let name = inv.job.display_name();
        let (pid, calls, stderr) = (process.pid, process.calls, process.stderr_tail());
        match error {
            CallError::TimedOut => {
                let seconds = inv.timeout.map_or(0, |t| t.as_secs());
                let signal = self.pool.kill(process, self.kill_grace).await;
                process_group::log_timeout_kill(name, &inv.job.id(), seconds, Some(pid), signal);
                Reply::TimedOut(
                    JobException::timed_out(name)
                        .with_detail(detail(&format!("was killed after {seconds} s"), &stderr)),
                )
            }
            // (A request not delivered goes to another process: the
            // caller never sends it here.)
            CallError::Protocol(what) | CallError::NotDelivered(what) => {
                let what = format!(
                    "{what} (pid {pid}, job {name} {}); the process is killed and replaced, \
                     the job is released",
                    inv.job.id()
                );
                self.pool.end(process).await;
                Reply::Release { delay: 0 }.with_fault(FaultKind::Protocol, what)
            }
            CallError::Died(how) => {
                self.pool.end(process).await;
                let outcome = Reply::Exception(
                    JobException::new(HANDLER_FAILED, format!("{name} {how}"))
                        .with_detail(detail(&how, &stderr)),
                );
                // A process that had answered before may have been killed
                // by this job; a fresh one never worked.
                if calls > 0 {
                    return outcome;
                }
                let what = format!("a new process {how} (pid {pid}, job {name})");
                outcome.with_fault(FaultKind::Died, what)
            }
        }
    }
}
