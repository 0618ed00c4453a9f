//! One warm process of a persistent handler: started with an answer pipe
//! on its file descriptor 3, sent requests on its stdin (one at a time, or
//! one more behind the call in flight in a [pipelined](super::pipeline)
//! pool), its answers read from fd 3 in order and its stdout and stderr
//! logged line by line (see [`super::persistent`] for the protocol). A
//! [`Census`] counts the processes of a [`Pool`](super::pool::Pool): alive
//! until reaped, and members of the pool until retired.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::BufReader;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use super::call_permits::CallPermit;
use super::capture::{Keep, Tail, next_line, shown};
use super::child::{ANSWER_LIMIT, describe, env_value};
use super::input::{Input, Sent};
use super::metadata;
use super::pipeline::Lead;
use super::process_group::{self, Environment};
use super::request_line::Request;
use super::scheduling::Scheduling;
use crate::memory::MemoryProbe;

/// Bytes of an offending line quoted in a protocol error.
const SHOWN_LIMIT: usize = 1024;

/// How long an answer may take to come through fd 3 after its process
/// has exited.
const PIPE_DRAIN: Duration = Duration::from_millis(500);

/// How long a process that closed fd 3 without answering gets to exit
/// before its group is killed.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// How a warm process is started.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// What the processes see of the daemon's environment.
    pub environment: Environment,
    /// The scheduling policy they run under.
    pub scheduling: Scheduling,
    /// Bytes kept of one stdout or stderr line, and of the stderr tail
    /// quoted in a failure (`[worker] output_limit`).
    pub output_limit: usize,
    /// The queue connection's name (`redis`), in `LARAVEL_WORKER_CONNECTION`.
    pub connection: String,
}

/// How many processes of one pool there are.
#[derive(Debug, Default)]
pub struct Census {
    /// Started and not yet reaped (retiring ones included).
    alive: AtomicUsize,
    /// Idle or in a call: the processes the pool's size counts.
    members: AtomicUsize,
}

impl Census {
    /// Processes started and not yet ended (a retiring process counts
    /// until it has exited).
    pub fn alive(&self) -> usize {
        self.alive.load(Ordering::SeqCst)
    }

    /// Processes idle or in a call (retiring ones not counted).
    pub fn members(&self) -> usize {
        self.members.load(Ordering::SeqCst)
    }
}

/// One process's place in its [`Census`], given up when dropped.
#[derive(Debug)]
struct Counted {
    census: Arc<Census>,
    member: bool,
}

impl Counted {
    fn new(census: &Arc<Census>) -> Self {
        census.alive.fetch_add(1, Ordering::SeqCst);
        census.members.fetch_add(1, Ordering::SeqCst);
        Counted {
            census: Arc::clone(census),
            member: true,
        }
    }

    /// No longer one of the pool's members (it is on its way out).
    fn leave(&mut self) {
        if std::mem::take(&mut self.member) {
            self.census.members.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.leave();
        self.census.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One warm process.
#[derive(Debug)]
pub struct Process {
    child: Child,
    /// Its pid (0 if it could not be read).
    pub pid: u32,
    group: Option<Pid>,
    /// Its stdin, shared with a call written behind the one in flight.
    input: Arc<Input>,
    /// What its fd 3 reader passes on: lines read while a call was in
    /// flight, then the end of the stream.
    answers: mpsc::Receiver<Answer>,
    /// Set by the fd 3 reader when the process broke the protocol while
    /// idle (it has killed the process group then).
    broken: Arc<AtomicBool>,
    /// The end of its stderr, at most `output_limit` bytes.
    stderr: Arc<Mutex<Tail>>,
    /// Calls it has answered.
    pub calls: u64,
    /// Kills the group when the process is dropped: abandoned mid-call
    /// (drain deadline) or left idle in the pool when the worker exits.
    guard: process_group::GroupKill,
    /// Its offer of a place behind the call in flight (pipelined pools);
    /// after `guard`, so a dropped process is killed before the call
    /// behind hears of it.
    lead: Option<Lead<Handoff>>,
    /// Its place in its pool's census.
    counted: Counted,
    /// The SIGCHLD count when it was last seen alive (see
    /// [`super::child_exits`]).
    exits_seen: Option<u64>,
}

/// What a call whose answer is in hands to the call written behind it
/// (see [`super::pipeline`]): the process, and the call's permit.
#[derive(Debug)]
pub struct Handoff {
    /// The process, now the call behind's.
    pub process: Process,
    /// The permit of the call ahead, passed on.
    pub permit: CallPermit,
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
pub enum CallError {
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

impl Process {
    /// Starts `spawn`'s command with an answer pipe on fd 3, counted in
    /// `census`.
    ///
    /// # Errors
    /// The pipe cannot be made or the program cannot be started.
    pub fn spawn(spawn: &Spawn, census: &Arc<Census>) -> std::io::Result<Process> {
        let (sender, receiver) = pipe::pipe()?;
        let write_end: OwnedFd = sender.into_blocking_fd()?;
        let mut cmd = super::child::command(&spawn.command, &spawn.environment, spawn.scheduling);
        cmd.env("LARAVEL_WORKER_PROTOCOL", "persistent").env(
            metadata::CONNECTION.env,
            env_value(&spawn.connection).as_ref(),
        );
        answer_on_fd3(&mut cmd, write_end.as_raw_fd());
        let mut child = cmd.spawn()?;
        // The child has its copy; ours must close so EOF means "it died".
        drop(write_end);
        let group = process_group::group_of(&child);
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("no stdin"))?;
        let pid = child.id().unwrap_or(0);
        let stderr = log_output(&mut child, pid, spawn.output_limit);
        let outstanding = Arc::new(AtomicU64::new(0));
        let input = Arc::new(Input::new(stdin, Arc::clone(&outstanding)));
        let broken = Arc::new(AtomicBool::new(false));
        // Room for one line: a process that floods fd 3 waits on the pipe.
        let (sender, answers) = mpsc::channel(1);
        tokio::spawn(read_answers(
            receiver,
            pid,
            group,
            sender,
            outstanding,
            Arc::clone(&broken),
        ));
        tracing::debug!(pid, "handler process started");
        Ok(Process {
            child,
            pid,
            group,
            input,
            answers,
            broken,
            stderr,
            calls: 0,
            guard: process_group::GroupKill::new(group),
            lead: None,
            counted: Counted::new(census),
            exits_seen: super::child_exits::count(),
        })
    }

    /// Whether its resident memory is above `mb` MB (never when `mb` is 0).
    pub fn above_memory(&self, mb: u64) -> bool {
        mb > 0 && MemoryProbe::of(self.pid).rss_bytes() > mb * 1024 * 1024
    }

    /// Why this idle process cannot take a call: it has exited, broken the
    /// protocol, or written on fd 3 since its last answer. `None` when it
    /// can.
    pub fn unusable(&mut self) -> Option<String> {
        let (ask, now) = super::child_exits::since(self.exits_seen);
        if ask {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(describe(Some(status)));
            }
            self.exits_seen = now;
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
    /// Its stdin.
    pub fn input(&self) -> &Arc<Input> {
        &self.input
    }

    /// Keeps `lead`, its offer of a place behind the call in flight.
    pub fn set_lead(&mut self, lead: Lead<Handoff>) {
        self.lead = Some(lead);
    }

    /// Takes back its offer of a place behind the call in flight, if any;
    /// returns the call that took it.
    pub fn close_lead(&mut self) -> Option<oneshot::Sender<Handoff>> {
        self.lead.take().and_then(Lead::close)
    }

    /// Writes `request`; returns where it starts, for [`Self::answer`].
    ///
    /// # Errors
    /// `NotDelivered`: the pipe cannot be written.
    pub async fn send(&self, request: &Request<'_>) -> Result<Sent, CallError> {
        self.input
            .send(request)
            .await
            .map_err(|e| CallError::NotDelivered(format!("could not be sent the request ({e})")))
    }

    /// Waits for the answer to call `call`, the request `sent` (answers
    /// come in the order of the requests).
    pub async fn answer(&mut self, call: u64, sent: Sent) -> Result<Vec<u8>, CallError> {
        let answer = tokio::select! {
            answer = self.answers.recv() => answer,
            // Its fd 3 may outlive it (held by a process it started): an
            // answer written just before it exited still gets a moment to
            // come through.
            _ = self.child.wait() => tokio::time::timeout(PIPE_DRAIN, self.answers.recv())
                .await
                .unwrap_or(None),
        };
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
    /// had read any of the request `sent`.
    async fn ended_without_answer(&mut self, sent: Sent) -> CallError {
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
        if !self.input.was_read(sent) {
            CallError::NotDelivered(how)
        } else {
            CallError::Died(format!("sent no answer on fd 3; the process {how}"))
        }
    }

    /// The end of its stderr, at most `output_limit` bytes.
    pub fn stderr_tail(&self) -> Tail {
        self.stderr.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Stops it now for a call past its time limit: SIGTERM to its group,
    /// SIGKILL after `grace`; returns the last signal sent.
    pub async fn kill(mut self, grace: Duration) -> Signal {
        process_group::terminate(&mut self.child, self.group, grace).await
    }

    /// Kills its whole group at once and waits for it.
    pub async fn end(mut self) {
        process_group::terminate(&mut self.child, self.group, Duration::ZERO).await;
        process_group::kill_leftovers(self.group);
    }

    /// Closes its stdin (its cue to exit) and, in the background, kills its
    /// group if it has not exited after `grace`. It leaves its pool's
    /// members at once and the alive count once it has exited.
    pub fn retire(self, grace: Duration) {
        let Process {
            mut child,
            group,
            input,
            mut guard,
            mut counted,
            ..
        } = self;
        counted.leave();
        // The task below ends the process; the guard must not kill it now.
        guard.disarm();
        drop(input);
        tokio::spawn(async move {
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                process_group::terminate(&mut child, group, Duration::ZERO).await;
            }
            process_group::kill_leftovers(group);
            drop(counted);
        });
    }
}

/// Moves the answer pipe's write end (`write_fd`) to fd 3 in the child,
/// before exec.
fn answer_on_fd3(cmd: &mut Command, write_fd: i32) {
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
}

/// Logs the child's stdout and stderr line by line; returns where the
/// end of its stderr is kept.
fn log_output(child: &mut Child, pid: u32, limit: usize) -> Arc<Mutex<Tail>> {
    let stderr = Arc::new(Mutex::new(Tail::default()));
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
    stderr
}

/// Reads a process's fd 3: passes on each line read while a request is
/// outstanding (taking one off the count), and the end of the stream. A
/// line while none is outstanding is a protocol error: logged, the process
/// marked broken and its group killed.
async fn read_answers(
    receiver: pipe::Receiver,
    pid: u32,
    group: Option<Pid>,
    answers: mpsc::Sender<Answer>,
    outstanding: Arc<AtomicU64>,
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
        let answered =
            outstanding.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if answered.is_err() {
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
