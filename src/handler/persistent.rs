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
//! JSON, longer than [`ANSWER_LIMIT`]), or any line while no request is in
//! flight, is a protocol error: the process group is killed and a new
//! process takes later calls. The job in flight is released at once with
//! its attempt counted ([`Outcome::Release`] with no delay), not failed: its
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
//! A process is also replaced when a call times out (its group is killed),
//! after `max_jobs` calls, or when its resident memory passes `max_memory`
//! MB after a call. End of stdin tells it to exit.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::slots::Slots;

use super::capture::{Keep, Tail, next_line, shown};
use super::metadata;
use super::request_line::Request;
use super::subprocess::{describe, detail, env_value};
use super::{FaultKind, Invocation, Outcome, process_group, request};
use crate::exception::{HANDLER_FAILED, JobException};
use crate::memory::MemoryProbe;

/// Bytes of one answer line on fd 3. A longer line is a protocol error
/// (the process is replaced, the job released); it is never held whole.
pub const ANSWER_LIMIT: usize = 1024 * 1024;

/// Bytes of an offending line quoted in a protocol error.
const SHOWN_LIMIT: usize = 1024;

/// How long an answer may take to come through fd 3 after its process
/// has exited.
const PIPE_DRAIN: Duration = Duration::from_millis(500);

/// How long a process that closed fd 3 without answering gets to exit
/// before its group is killed.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Processes a call is offered to when each one dies before reading the
/// request; after that the call is an exception (the handler cannot start).
const DELIVERY_TRIES: usize = 3;

/// Settings of a persistent handler.
#[derive(Debug, Clone)]
pub struct PersistentOptions {
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// Most processes alive at once (and so calls in flight).
    pub processes: usize,
    /// Calls before a process is replaced; 0 = never.
    pub max_jobs: u64,
    /// Resident MB above which a process is replaced after a call; 0 = never.
    pub max_memory_mb: u64,
    /// Time between SIGTERM and SIGKILL when a process must go.
    pub kill_grace: Duration,
    /// Bytes kept of one stdout or stderr line, and of the stderr tail
    /// quoted in a failure (`[worker] output_limit`, as in process mode).
    pub output_limit: usize,
    /// What the processes see of the daemon's environment.
    pub environment: process_group::Environment,
    /// Whether requests carry `data.command` decoded to JSON (`command`).
    pub decode_command: bool,
}

/// A pool of warm processes running one command.
#[derive(Debug)]
pub struct PersistentHandler {
    options: PersistentOptions,
    slots: Slots,
    idle: Mutex<Vec<Process>>,
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

/// One warm process.
#[derive(Debug)]
struct Process {
    child: Child,
    pid: u32,
    group: Option<Pid>,
    stdin: ChildStdin,
    /// What its fd 3 reader passes on: lines read while a call was in
    /// flight, then the end of the stream.
    answers: mpsc::Receiver<Answer>,
    /// The `call` in flight, 0 when none; shared with the fd 3 reader.
    in_flight: Arc<AtomicU64>,
    /// Set by the fd 3 reader when the process broke the protocol while
    /// idle (it has killed the process group then).
    broken: Arc<AtomicBool>,
    /// The end of its stderr, at most `output_limit` bytes.
    stderr: Arc<Mutex<Tail>>,
    calls: u64,
    /// Kills the group when the process is dropped: abandoned mid-call
    /// (drain deadline) or left idle in the pool when the worker exits.
    guard: process_group::GroupKill,
}

/// One event of a process's fd 3.
#[derive(Debug)]
enum Answer {
    /// A line (without its newline), at most [`ANSWER_LIMIT`] bytes of it.
    Line(Tail),
    /// End of the stream (the process closed fd 3 or died), or a read error.
    End,
}

/// The part of an answer line the daemon matches on.
#[derive(Deserialize)]
struct Echo {
    #[serde(default)]
    call: Option<serde_json::Value>,
}

/// Why a call did not produce an outcome from the process.
enum CallError {
    /// The process never read the request (it could not be written, or all
    /// of it was still unread when the process ended): the job never
    /// reached it.
    NotDelivered(String),
    /// The process ended after reading the request, without answering.
    Died(String),
    /// The process wrote something other than the answer to this call.
    Protocol(String),
    /// The time limit passed.
    TimedOut,
}

impl PersistentHandler {
    /// A pool for `options` (processes start on first use).
    pub fn new(options: PersistentOptions) -> Self {
        PersistentHandler {
            slots: Slots::new(options.processes),
            idle: Mutex::new(Vec::new()),
            next_call: AtomicU64::new(1),
            options,
        }
    }

    /// How many processes are free to take a call now.
    pub fn free_processes(&self) -> usize {
        self.slots.free()
    }

    /// Resolves once a process is free to take a call.
    pub async fn until_free(&self) {
        self.slots.until_free().await;
    }

    /// Runs one call on a warm process (starting one if none is idle).
    pub async fn call(&self, inv: &Invocation<'_>) -> Outcome {
        let Some(_slot) = self.slots.acquire().await else {
            return Outcome::Exception(JobException::new(HANDLER_FAILED, "handler pool closed"));
        };
        let call = self.next_call.fetch_add(1, Ordering::Relaxed);
        let request = match Request::new(call, inv, self.options.decode_command) {
            Ok(request) => request,
            Err(e) => {
                return Outcome::Exception(JobException::new(
                    HANDLER_FAILED,
                    format!("cannot encode the request: {e}"),
                ));
            }
        };
        let name = inv.job.display_name();
        let mut last_stderr = Tail::default();
        for _ in 0..DELIVERY_TRIES {
            let mut process = match self.checkout(inv) {
                Ok(p) => p,
                Err(e) => {
                    let what = format!("{:?}: {e}", self.options.command[0]);
                    return Outcome::Exception(JobException::new(
                        HANDLER_FAILED,
                        format!("cannot start handler {what}"),
                    ))
                    .with_fault(FaultKind::CannotStart, what);
                }
            };
            let exchanged = match inv.timeout {
                Some(limit) => tokio::time::timeout(limit, process.exchange(call, &request))
                    .await
                    .unwrap_or(Err(CallError::TimedOut)),
                None => process.exchange(call, &request).await,
            };
            match exchanged {
                Ok(answer) => {
                    process.calls += 1;
                    self.check_in(process);
                    return request::parse(&answer).unwrap_or_else(|| {
                        Outcome::Exception(JobException::new(
                            HANDLER_FAILED,
                            "the handler answered with an empty action",
                        ))
                    });
                }
                Err(CallError::NotDelivered(why)) => {
                    log_not_delivered(&process, inv, &why);
                    last_stderr = process.stderr_tail();
                    self.end(process).await;
                }
                Err(CallError::TimedOut) => {
                    let seconds = inv.timeout.map_or(0, |t| t.as_secs());
                    let stderr = process.stderr_tail();
                    let signal = process_group::terminate(
                        &mut process.child,
                        process.group,
                        self.options.kill_grace,
                    )
                    .await;
                    process_group::log_timeout_kill(
                        name,
                        &inv.job.id(),
                        seconds,
                        Some(process.pid),
                        signal,
                    );
                    return Outcome::TimedOut(
                        JobException::timed_out(name)
                            .with_detail(detail(&format!("was killed after {seconds} s"), &stderr)),
                    );
                }
                Err(CallError::Protocol(what)) => {
                    let what = format!(
                        "{what} (pid {}, job {name} {}); the process is killed and replaced, \
                         the job is released",
                        process.pid,
                        inv.job.id()
                    );
                    self.end(process).await;
                    return Outcome::Release { delay: 0 }.with_fault(FaultKind::Protocol, what);
                }
                Err(CallError::Died(how)) => {
                    let outcome = Outcome::Exception(
                        JobException::new(HANDLER_FAILED, format!("{name} {how}"))
                            .with_detail(detail(&how, &process.stderr_tail())),
                    );
                    // A process that had answered before may have been
                    // killed by this job; a fresh one never worked.
                    if process.calls > 0 {
                        return outcome;
                    }
                    let what = format!("a new process {how} (pid {}, job {name})", process.pid);
                    return outcome.with_fault(FaultKind::Died, what);
                }
            }
        }
        let how = format!(
            "was started {DELIVERY_TRIES} times and each process ended before reading the request"
        );
        Outcome::Exception(
            JobException::new(HANDLER_FAILED, format!("{name}: the handler {how}"))
                .with_detail(detail(&how, &last_stderr)),
        )
        .with_fault(FaultKind::Died, format!("the handler {how} (job {name})"))
    }

    /// An idle process that is still alive and in step, or a new one. Idle
    /// processes found dead or broken are ended on the way.
    fn checkout(&self, inv: &Invocation<'_>) -> std::io::Result<Process> {
        loop {
            let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            let Some(mut process) = idle else {
                return Process::spawn(&self.options, inv.connection);
            };
            match process.unusable() {
                None => return Ok(process),
                Some(why) => {
                    tracing::info!(
                        pid = process.pid,
                        "idle handler process {why}; replacing it"
                    );
                    self.retire(process);
                }
            }
        }
    }

    /// Returns a process to the pool, or retires it when it is due.
    fn check_in(&self, process: Process) {
        let o = &self.options;
        let worn = o.max_jobs > 0 && process.calls >= o.max_jobs;
        let heavy = o.max_memory_mb > 0
            && MemoryProbe::of(process.pid).rss_bytes() > o.max_memory_mb * 1024 * 1024;
        if worn || heavy {
            tracing::info!(
                calls = process.calls,
                worn,
                heavy,
                "recycling a handler process"
            );
            self.retire(process);
        } else if let Ok(mut idle) = self.idle.lock() {
            idle.push(process);
        }
    }

    /// Closes a process's stdin (its cue to exit) and, in the background,
    /// kills its group if it has not exited after the grace period.
    fn retire(&self, process: Process) {
        let grace = self.options.kill_grace;
        let Process {
            mut child,
            group,
            stdin,
            mut guard,
            ..
        } = process;
        // The task below ends the process; the guard must not kill it now.
        guard.disarm();
        drop(stdin);
        tokio::spawn(async move {
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                process_group::terminate(&mut child, group, Duration::ZERO).await;
            }
            process_group::kill_leftovers(group);
        });
    }

    /// Kills a process's whole group at once and waits for it.
    async fn end(&self, mut process: Process) {
        process_group::terminate(&mut process.child, process.group, Duration::ZERO).await;
        process_group::kill_leftovers(process.group);
    }
}

impl Process {
    /// Starts the command with an answer pipe on fd 3.
    fn spawn(options: &PersistentOptions, connection: &str) -> std::io::Result<Process> {
        let command = &options.command;
        let (sender, receiver) = pipe::pipe()?;
        let write_end: OwnedFd = sender.into_blocking_fd()?;
        let write_fd = write_end.as_raw_fd();
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..]);
        // First: it may clear the environment.
        process_group::isolate(&mut cmd, &options.environment);
        cmd.env("LARAVEL_WORKER_PROTOCOL", "persistent")
            .env(metadata::CONNECTION.env, env_value(connection).as_ref())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: dup2 and fcntl are async-signal-safe; the closure only
        // moves the pipe's write end to fd 3 in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                if write_fd == 3 {
                    // dup2 onto itself keeps close-on-exec: clear it by hand.
                    if nix::libc::fcntl(3, nix::libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if nix::libc::dup2(write_fd, 3) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        // The child has its copy; ours must close so EOF means "it died".
        drop(write_end);
        let group = process_group::group_of(&child);
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let pid = child.id().unwrap_or(0);
        let limit = options.output_limit;
        if let Some(out) = child.stdout.take() {
            tokio::spawn(log_lines(out, pid, "stdout", limit, None));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(log_lines(
                err,
                pid,
                "stderr",
                limit,
                Some(Arc::clone(&stderr)),
            ));
        }
        let in_flight = Arc::new(AtomicU64::new(0));
        let broken = Arc::new(AtomicBool::new(false));
        // Room for one line: a process that floods fd 3 waits on the pipe.
        let (sender, answers) = mpsc::channel(1);
        tokio::spawn(read_answers(
            receiver,
            pid,
            group,
            sender,
            Arc::clone(&in_flight),
            Arc::clone(&broken),
        ));
        tracing::debug!(pid, "handler process started");
        Ok(Process {
            child,
            pid,
            group,
            stdin,
            answers,
            in_flight,
            broken,
            stderr,
            calls: 0,
            guard: process_group::GroupKill::new(group),
        })
    }

    /// Why this idle process cannot take a call: it has exited, broken the
    /// protocol, or written on fd 3 since its last answer. `None` when it
    /// can.
    fn unusable(&mut self) -> Option<String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(describe(Some(status)));
        }
        if self.broken.load(Ordering::SeqCst) {
            return Some("broke the protocol".into());
        }
        match self.answers.try_recv() {
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) | Ok(Answer::End) => {
                Some("closed its answer pipe (fd 3)".into())
            }
            Ok(Answer::Line(line)) => {
                let shown = shown(&line.bytes, line.total, SHOWN_LIMIT);
                tracing::error!(
                    pid = self.pid,
                    "handler protocol error: it wrote a line on fd 3 after its answer, \
                     while no request was in flight: {shown}"
                );
                Some("broke the protocol".into())
            }
        }
    }

    /// Sends request `call` (the text `line`) and waits for its answer.
    async fn exchange(&mut self, call: u64, request: &Request<'_>) -> Result<Vec<u8>, CallError> {
        // Before the write: a quick answer must find its call in flight.
        self.in_flight.store(call, Ordering::SeqCst);
        let written = match request.write_to(&mut self.stdin).await {
            Ok(sent) => self.stdin.flush().await.map(|()| sent),
            Err(e) => Err(e),
        };
        let sent = match written {
            Ok(sent) => sent,
            Err(e) => {
                self.in_flight.store(0, Ordering::SeqCst);
                return Err(CallError::NotDelivered(format!(
                    "could not be sent the request ({e})"
                )));
            }
        };
        let answer = tokio::select! {
            answer = self.answers.recv() => answer,
            // Its fd 3 may outlive it (held by a process it started): an
            // answer written just before it exited still gets a moment to
            // come through.
            _ = self.child.wait() => tokio::time::timeout(PIPE_DRAIN, self.answers.recv())
                .await
                .unwrap_or(None),
        };
        self.in_flight.store(0, Ordering::SeqCst);
        let line = match answer {
            Some(Answer::Line(line)) => line,
            Some(Answer::End) | None => return Err(self.ended_without_answer(sent).await),
        };
        if line.total > line.bytes.len() as u64 {
            return Err(CallError::Protocol(format!(
                "an answer line longer than {ANSWER_LIMIT} bytes, where call {call} was expected: {}",
                shown(&line.bytes, line.total, SHOWN_LIMIT)
            )));
        }
        let echoed = serde_json::from_slice::<Echo>(&line.bytes)
            .ok()
            .and_then(|echo| echo.call)
            .and_then(|c| c.as_u64());
        if echoed != Some(call) {
            return Err(CallError::Protocol(format!(
                "the line on fd 3 is not the answer to call {call}: {}",
                shown(&line.bytes, line.total, SHOWN_LIMIT)
            )));
        }
        Ok(line.bytes)
    }

    /// fd 3 ended before an answer: waits for the process to end (killing
    /// it after the grace period's worth of waiting) and tells whether it
    /// had read any of the `sent` bytes of the request.
    async fn ended_without_answer(&mut self, sent: usize) -> CallError {
        // A process that closed fd 3 but lives on is of no further use.
        let status = match tokio::time::timeout(EXIT_WAIT, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                process_group::terminate(&mut self.child, self.group, Duration::ZERO).await;
                self.child.wait().await.ok()
            }
        };
        process_group::kill_leftovers(self.group);
        let how = describe(status);
        // The stdin pipe holds what nobody read; our request was written
        // last, so if that many bytes are left, none of it was read.
        if unread_bytes(&self.stdin).is_some_and(|n| n >= sent) {
            CallError::NotDelivered(how)
        } else {
            CallError::Died(format!("sent no answer on fd 3; the process {how}"))
        }
    }

    fn stderr_tail(&self) -> Tail {
        self.stderr.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// Bytes written to a pipe and not read yet (`FIONREAD`, which Linux
/// answers on either end of a pipe).
fn unread_bytes(stdin: &ChildStdin) -> Option<usize> {
    let mut n: nix::libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at
    // `n`; the descriptor is open for as long as `stdin` lives.
    let r = unsafe { nix::libc::ioctl(stdin.as_raw_fd(), nix::libc::FIONREAD, &mut n) };
    (r == 0).then(|| usize::try_from(n).unwrap_or(0))
}

/// Reads a process's fd 3: passes on each line read while a call is in
/// flight, and the end of the stream. A line while none is in flight is a
/// protocol error: logged, the process marked broken and its group killed.
async fn read_answers(
    receiver: pipe::Receiver,
    pid: u32,
    group: Option<Pid>,
    answers: mpsc::Sender<Answer>,
    in_flight: Arc<AtomicU64>,
    broken: Arc<AtomicBool>,
) {
    let mut reader = BufReader::new(receiver);
    loop {
        let line = match next_line(&mut reader, ANSWER_LIMIT, Keep::Head).await {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) => {
                let _ = answers.send(Answer::End).await;
                return;
            }
        };
        if in_flight.load(Ordering::SeqCst) == 0 {
            tracing::error!(
                pid,
                "handler protocol error: it wrote a line on fd 3 while no request was in flight: {}; \
                 the process is killed and replaced",
                shown(&line.bytes, line.total, SHOWN_LIMIT)
            );
            broken.store(true, Ordering::SeqCst);
            process_group::kill_leftovers(group);
            return;
        }
        if answers.send(Answer::Line(line)).await.is_err() {
            return;
        }
    }
}

/// Logs a process's output line by line, each line cut to its last `limit`
/// bytes, and keeps the last `limit` bytes of stderr for failure reports.
async fn log_lines(
    stream: impl tokio::io::AsyncRead + Unpin,
    pid: u32,
    name: &'static str,
    limit: usize,
    keep: Option<Arc<Mutex<Tail>>>,
) {
    let mut reader = BufReader::new(stream);
    while let Ok(Some(line)) = next_line(&mut reader, limit, Keep::Tail).await {
        tracing::info!(pid, stream = name, "{}", line.text());
        if let Some(keep) = &keep
            && let Ok(mut kept) = keep.lock()
        {
            kept.push_line(&line.bytes, line.total, limit);
        }
    }
}
