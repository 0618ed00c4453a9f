//! The persistent transport: warm processes, one call at a time each.
//!
//! A process is started once (for a PHP bridge: the app is booted once) and
//! then serves many calls: requests go to its stdin as one JSON object per
//! line (the call's metadata of [`super::metadata`] under its `key` names,
//! the payload and the decoded command), responses come back on its file descriptor 3, one JSON object per
//! line (the actions of [`super::request`]). Its stdout and stderr stay free
//! for the job's own output and are logged line by line.
//!
//! A process is replaced when it dies, when a call times out (its group is
//! killed), after `max_jobs` calls, or when its resident memory passes
//! `max_memory` MB after a call. End of stdin tells it to exit.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use serde::Serialize;
use serde::ser::SerializeMap;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::Semaphore;

use super::capture::Tail;
use super::metadata::{self, CallMetadata, Value};
use super::subprocess::{describe, detail};
use super::{Invocation, Outcome, process_group, request};
use crate::exception::{HANDLER_FAILED, JobException};
use crate::memory::MemoryProbe;

/// Lines of stderr kept per process for failure reports.
const STDERR_LINES: usize = 40;

/// Bytes of the failure text sent in a failed-mode request.
const EXCEPTION_LIMIT: usize = 64 * 1024;

/// How many times a call is retried on a fresh process when the request
/// could not even be written (the old process had died while idle).
const DELIVERY_TRIES: usize = 2;

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
}

/// A pool of warm processes running one command.
#[derive(Debug)]
pub struct PersistentHandler {
    options: PersistentOptions,
    slots: Semaphore,
    idle: Mutex<Vec<Process>>,
}

/// One warm process.
#[derive(Debug)]
struct Process {
    child: Child,
    group: Option<Pid>,
    stdin: ChildStdin,
    responses: Lines<BufReader<pipe::Receiver>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    calls: u64,
    /// Kills the group when the process is dropped: abandoned mid-call
    /// (drain deadline) or left idle in the pool when the worker exits.
    guard: process_group::GroupKill,
}

/// One request line: the call's metadata under its [`Field::key`] names,
/// the payload as a string, and `data.command` as JSON when it is a plain
/// PHP-serialized object.
struct RequestLine<'a> {
    metadata: &'a CallMetadata<'a>,
    payload: &'a str,
    command: Option<serde_json::Value>,
}

impl Serialize for RequestLine<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (field, value) in self.metadata.fields() {
            match value {
                None => {}
                Some(Value::Number(n)) => map.serialize_entry(field.key, &n)?,
                Some(Value::Text(text)) if field == metadata::EXCEPTION => map.serialize_entry(
                    field.key,
                    &text[..text.floor_char_boundary(EXCEPTION_LIMIT)],
                )?,
                Some(Value::Text(text)) => map.serialize_entry(field.key, &text)?,
            }
        }
        map.serialize_entry("payload", self.payload)?;
        if let Some(command) = &self.command {
            map.serialize_entry("command", command)?;
        }
        map.end()
    }
}

/// Why a call did not produce an outcome from the process.
enum CallError {
    /// The request could not be written: the job never reached the process.
    NotDelivered(std::io::Error),
    /// The process ended (or broke the protocol) after getting the request.
    Died(String),
    /// The time limit passed.
    TimedOut,
}

impl PersistentHandler {
    /// A pool for `options` (processes start on first use).
    pub fn new(options: PersistentOptions) -> Self {
        PersistentHandler {
            slots: Semaphore::new(options.processes.max(1)),
            idle: Mutex::new(Vec::new()),
            options,
        }
    }

    /// Runs one call on a warm process (starting one if none is idle).
    pub async fn call(&self, inv: &Invocation<'_>) -> Outcome {
        let Ok(_slot) = self.slots.acquire().await else {
            return Outcome::Exception(JobException::new(HANDLER_FAILED, "handler pool closed"));
        };
        let line = match request_line(inv) {
            Ok(line) => line,
            Err(e) => {
                return Outcome::Exception(JobException::new(
                    HANDLER_FAILED,
                    format!("cannot encode the request: {e}"),
                ));
            }
        };
        for _ in 0..DELIVERY_TRIES {
            let mut process = match self.checkout(inv) {
                Ok(p) => p,
                Err(e) => {
                    return Outcome::Exception(JobException::new(
                        HANDLER_FAILED,
                        format!("cannot start handler {:?}: {e}", self.options.command[0]),
                    ));
                }
            };
            match process.exchange(&line, inv.timeout).await {
                Ok(response) => {
                    process.calls += 1;
                    self.check_in(process);
                    return request::parse(response.as_bytes()).unwrap_or_else(|| {
                        Outcome::Exception(JobException::new(
                            HANDLER_FAILED,
                            "the handler answered with an empty line",
                        ))
                    });
                }
                Err(CallError::NotDelivered(e)) => {
                    tracing::warn!(
                        "handler process gone before the request was sent ({e}); starting a new one"
                    );
                    self.retire(process);
                }
                Err(CallError::TimedOut) => {
                    let seconds = inv.timeout.map_or(0, |t| t.as_secs());
                    let stderr = process.stderr_tail();
                    process_group::terminate(
                        &mut process.child,
                        process.group,
                        self.options.kill_grace,
                    )
                    .await;
                    return Outcome::TimedOut(
                        JobException::timed_out(inv.job.display_name())
                            .with_detail(detail(&format!("was killed after {seconds} s"), &stderr)),
                    );
                }
                Err(CallError::Died(why)) => {
                    let status = process.child.wait().await.ok();
                    process_group::kill_leftovers(process.group);
                    let how = format!("{why}; the process {}", describe(status));
                    return Outcome::Exception(
                        JobException::new(
                            HANDLER_FAILED,
                            format!("{} {how}", inv.job.display_name()),
                        )
                        .with_detail(detail(&how, &process.stderr_tail())),
                    );
                }
            }
        }
        Outcome::Exception(JobException::new(
            HANDLER_FAILED,
            "the handler process died before it could take the request",
        ))
    }

    /// An idle process, or a new one.
    fn checkout(&self, inv: &Invocation<'_>) -> std::io::Result<Process> {
        let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match idle {
            Some(p) => Ok(p),
            None => Process::spawn(&self.options.command, inv.connection),
        }
    }

    /// Returns a process to the pool, or retires it when it is due.
    fn check_in(&self, process: Process) {
        let o = &self.options;
        let worn = o.max_jobs > 0 && process.calls >= o.max_jobs;
        let heavy = o.max_memory_mb > 0
            && process.child.id().is_some_and(|pid| {
                MemoryProbe::of(pid).rss_bytes() > o.max_memory_mb * 1024 * 1024
            });
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
}

impl Process {
    /// Starts the command with a response pipe on fd 3.
    fn spawn(command: &[String], connection: &str) -> std::io::Result<Process> {
        let (sender, receiver) = pipe::pipe()?;
        let write_end: OwnedFd = sender.into_blocking_fd()?;
        let write_fd = write_end.as_raw_fd();
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .env("LARAVEL_WORKER_PROTOCOL", "persistent")
            .env("LARAVEL_WORKER_CONNECTION", connection)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        process_group::isolate(&mut cmd);
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
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let pid = child.id().unwrap_or(0);
        if let Some(out) = child.stdout.take() {
            tokio::spawn(log_lines(out, pid, "stdout", None));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(log_lines(err, pid, "stderr", Some(Arc::clone(&stderr))));
        }
        tracing::debug!(pid, "handler process started");
        Ok(Process {
            child,
            group,
            stdin,
            responses: BufReader::new(receiver).lines(),
            stderr,
            calls: 0,
            guard: process_group::GroupKill::new(group),
        })
    }

    /// Sends one request and waits for its response line.
    async fn exchange(
        &mut self,
        line: &str,
        timeout: Option<Duration>,
    ) -> Result<String, CallError> {
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(CallError::NotDelivered)?;
        self.stdin.flush().await.map_err(CallError::NotDelivered)?;
        let response = self.responses.next_line();
        let answer = match timeout {
            Some(limit) => tokio::time::timeout(limit, response)
                .await
                .map_err(|_| CallError::TimedOut)?,
            None => response.await,
        };
        match answer {
            Ok(Some(line)) => Ok(line),
            Ok(None) => Err(CallError::Died("no response on fd 3".into())),
            Err(e) => Err(CallError::Died(format!("unreadable response ({e})"))),
        }
    }

    fn stderr_tail(&self) -> Tail {
        let lines = self
            .stderr
            .lock()
            .map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n"));
        let text = lines.unwrap_or_default();
        Tail {
            total: text.len() as u64,
            bytes: text.into_bytes(),
        }
    }
}

/// The request line for `inv`, newline included.
fn request_line(inv: &Invocation<'_>) -> serde_json::Result<String> {
    let job = inv.job;
    let payload = String::from_utf8_lossy(&job.reserved);
    let request = RequestLine {
        metadata: &CallMetadata::of(inv),
        payload: &payload,
        command: job.payload.as_ref().ok().and_then(|p| p.command_json()),
    };
    let mut line = serde_json::to_string(&request)?;
    line.push('\n');
    Ok(line)
}

/// Logs a process's output line by line, keeping the last lines of stderr.
async fn log_lines(
    stream: impl tokio::io::AsyncRead + Unpin,
    pid: u32,
    name: &'static str,
    keep: Option<Arc<Mutex<VecDeque<String>>>>,
) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(pid, stream = name, "{line}");
        if let Some(keep) = &keep
            && let Ok(mut kept) = keep.lock()
        {
            if kept.len() == STDERR_LINES {
                kept.pop_front();
            }
            kept.push_back(line);
        }
    }
}
