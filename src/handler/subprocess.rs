//! The subprocess transport: one process per call.
//!
//! No shell is involved: `command[0]` is executed with the rest as its
//! arguments. The payload (the reserved JSON, attempts already counted) is
//! written to stdin; the call's metadata ([`super::metadata`]) is in
//! environment variables, with the daemon's own additions:
//!
//! | variable                     | value                                    |
//! |------------------------------|------------------------------------------|
//! | `LARAVEL_WORKER_MODE`        | `run`, `failed` (failed hook), `finish`, `finish-failed` |
//! | `LARAVEL_WORKER_JOB_ID`      | payload `id`                             |
//! | `LARAVEL_WORKER_JOB_UUID`    | payload `uuid` (empty when none)         |
//! | `LARAVEL_WORKER_JOB_NAME`    | displayName                              |
//! | `LARAVEL_WORKER_QUEUE`       | queue name (`default`)                   |
//! | `LARAVEL_WORKER_CONNECTION`  | queue connection name (`redis`)          |
//! | `LARAVEL_WORKER_ATTEMPT`     | this attempt's number, from 1            |
//! | `LARAVEL_WORKER_MAX_TRIES`   | attempts allowed, 0 = unlimited          |
//! | `LARAVEL_WORKER_TIMEOUT`     | seconds, 0 = none                        |
//! | `LARAVEL_WORKER_RESULT`      | file for a request ([`super::request`])  |
//! | `LARAVEL_WORKER_EXCEPTION`   | failed and finish-failed modes: the recorded failure |
//! | `LARAVEL_WORKER_COMMAND_FILE` | a file holding `data.command` as JSON, when it is a plain PHP-serialized object ([`crate::queue::command`]) |
//! | `LARAVEL_WORKER_VERSION`     | the daemon's version ([`super::child::VERSION_ENV`]) |
//!
//! Every value is made fit for the environment: NULs become U+FFFD and it
//! is cut to [`ENV_VALUE_LIMIT`](super::child::ENV_VALUE_LIMIT) bytes; stdin has the payload in full. The
//! program sees the daemon's environment as its [`Environment`] says
//! (`[[handlers]] env`, `env_clear`, and never the config's secrets).
//!
//! Exit 0 is done, anything else an exception. A program that cannot be
//! started is an exception and a fault of the handler for its
//! [`breaker`](super::breaker); an exit status never is. The process gets its own
//! process group; on timeout the whole group gets SIGTERM, then SIGKILL after
//! the grace period, and the daemon carries on. If the daemon itself dies,
//! the kernel sends the handler SIGKILL (`PR_SET_PDEATHSIG`), so no job keeps
//! running unowned while another worker reclaims it.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Child;

use super::capture::{Tail, read_tail};
use super::child::{ANSWER_LIMIT, describe, detail, env_value};
use super::metadata::CallMetadata;
use super::process_group::Environment;
use super::scheduling::Scheduling;
use super::{FaultKind, Invocation, Reply, child, process_group, request};
use crate::exception::{HANDLER_FAILED, JobException};

/// Bytes of a result file read (as of an answer line of a persistent
/// handler).
pub const RESULT_LIMIT: usize = ANSWER_LIMIT;

/// How long to wait for the output pipes to close after the process exits.
const PIPE_DRAIN: Duration = Duration::from_millis(500);

/// A handler that runs a program per call.
#[derive(Debug)]
pub struct SubprocessHandler {
    command: Vec<String>,
    kill_grace: Duration,
    output_limit: usize,
    result_dir: Arc<tempfile::TempDir>,
    environment: Environment,
    calls: AtomicU64,
    /// Write `data.command`, decoded to JSON, to a command file per call.
    decode_command: bool,
    /// The scheduling policy of its processes.
    scheduling: Scheduling,
}

/// A command file, created at its first write: readable by the daemon's
/// user only (the job's data may be private).
struct CommandFile {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl std::io::Write for CommandFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&self.path)?,
            ),
        };
        file.write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), std::io::Write::flush)
    }
}

/// A new private directory for result and command files: mode 0700 under
/// the system's temporary directory, removed when the last handler using
/// it is dropped.
///
/// # Errors
/// The directory cannot be created.
pub fn result_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("laravel-worker-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
}

impl SubprocessHandler {
    /// A handler running `command` (program and arguments, no shell).
    /// `kill_grace` is the time between SIGTERM and SIGKILL on timeout;
    /// result files are created in `result_dir` (see [`result_dir`]);
    /// `environment` is what the program sees of the daemon's environment.
    ///
    /// # Panics
    /// Never; an empty `command` is refused by the config loader.
    pub fn new(
        command: Vec<String>,
        kill_grace: Duration,
        output_limit: usize,
        result_dir: Arc<tempfile::TempDir>,
        environment: Environment,
    ) -> Self {
        SubprocessHandler {
            command,
            kill_grace,
            output_limit,
            result_dir,
            environment,
            calls: AtomicU64::new(0),
            decode_command: true,
            scheduling: Scheduling::default(),
        }
    }

    /// The scheduling policy its processes run under (default
    /// [`Scheduling::Batch`]).
    pub fn scheduled(mut self, scheduling: Scheduling) -> Self {
        self.scheduling = scheduling;
        self
    }

    /// Whether each call gets `data.command` decoded to JSON in a command
    /// file (the default) or no command file at all.
    pub fn decoding_command(mut self, decode: bool) -> Self {
        self.decode_command = decode;
        self
    }

    /// Runs one call to its end (or its time limit) and reports the outcome.
    pub async fn call(&self, inv: &Invocation<'_>) -> Reply {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let result_path = self.result_dir.path().join(format!("{n}.result"));
        let command_path = self.write_command(inv, n);
        let outcome = self
            .call_with(inv, &result_path, command_path.as_ref())
            .await;
        let _ = std::fs::remove_file(&result_path);
        if let Some(path) = command_path {
            let _ = std::fs::remove_file(path);
        }
        outcome
    }

    /// Writes the decoded `data.command` for call `n`, when there is one.
    fn write_command(&self, inv: &Invocation<'_>, n: u64) -> Option<PathBuf> {
        if !self.decode_command {
            return None;
        }
        let payload = inv.job.payload.as_ref().ok()?;
        let mut file = CommandFile {
            path: self.result_dir.path().join(format!("{n}.command.json")),
            file: None,
        };
        // Written as it is decoded, so the JSON is never held whole; the
        // file is made at the first byte, so a job without a command (or
        // with one that does not decode) costs no file.
        match payload.write_command_json(&mut file) {
            Ok(true) => Some(file.path),
            Ok(false) => None,
            Err(e) => {
                tracing::warn!("cannot write the decoded command for the handler: {e}");
                if file.file.is_some() {
                    let _ = std::fs::remove_file(&file.path);
                }
                None
            }
        }
    }

    async fn call_with(
        &self,
        inv: &Invocation<'_>,
        result_path: &PathBuf,
        command_path: Option<&PathBuf>,
    ) -> Reply {
        let mut child = match self.spawn(inv, result_path, command_path) {
            Ok(child) => child,
            Err(e) => {
                let what = format!("{:?}: {e}", self.command[0]);
                return Reply::Exception(JobException::new(
                    HANDLER_FAILED,
                    format!("cannot start handler {:?}: {e}", self.command[0]),
                ))
                .with_fault(FaultKind::CannotStart, what);
            }
        };
        let group = process_group::group_of(&child);
        // Kills the group if this call is abandoned (drain deadline).
        let guard = process_group::GroupKill::new(group);

        // Feed stdin and drain both pipes while the process runs.
        let stdin = child.stdin.take();
        let payload = inv.job.reserved.clone();
        tokio::spawn(async move {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&payload).await;
            }
        });
        let limit = self.output_limit;
        let stdout = child
            .stdout
            .take()
            .map(|s| tokio::spawn(read_tail(s, limit)));
        let stderr = child
            .stderr
            .take()
            .map(|s| tokio::spawn(read_tail(s, limit)));

        let (status, timed_out) = self.wait(&mut child, group, inv).await;
        // Members of the group that outlived the leader would keep running
        // after the job is settled; end them.
        drop(guard);
        let stdout = collect(stdout).await;
        let stderr = collect(stderr).await;
        log_output(inv, &stdout, &stderr);

        if timed_out {
            let seconds = inv.timeout.map_or(0, |t| t.as_secs());
            return Reply::TimedOut(
                JobException::timed_out(inv.job.display_name())
                    .with_detail(detail(&format!("was killed after {seconds} s"), &stderr)),
            );
        }
        let requested = read_result(result_path);
        match (status, requested) {
            (_, Some(requested)) => requested,
            (Some(status), None) if status.success() => Reply::Done,
            (status, None) => {
                let how = describe(status);
                Reply::Exception(
                    JobException::new(HANDLER_FAILED, format!("{} {how}", inv.job.display_name()))
                        .with_detail(detail(&how, &stderr)),
                )
            }
        }
    }

    /// Waits for `child` to exit, or kills its group when the job's
    /// timeout passes (Laravel's `timeout`: SIGTERM, then SIGKILL after
    /// the kill grace). Returns the exit status (`None` when killed or
    /// unknown) and whether the timeout ended it.
    async fn wait(
        &self,
        child: &mut tokio::process::Child,
        group: Option<nix::unistd::Pid>,
        inv: &Invocation<'_>,
    ) -> (Option<std::process::ExitStatus>, bool) {
        let Some(limit) = inv.timeout else {
            return (child.wait().await.ok(), false);
        };
        match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => (status.ok(), false),
            Err(_) => {
                let pid = child.id();
                let signal = process_group::terminate(child, group, self.kill_grace).await;
                process_group::log_timeout_kill(
                    inv.job.display_name(),
                    &inv.job.id(),
                    limit.as_secs(),
                    pid,
                    signal,
                );
                (None, true)
            }
        }
    }

    fn spawn(
        &self,
        inv: &Invocation<'_>,
        result_path: &PathBuf,
        command_path: Option<&PathBuf>,
    ) -> std::io::Result<Child> {
        let mut cmd = child::command(&self.command, &self.environment, self.scheduling);
        for (field, value) in CallMetadata::of(inv).fields() {
            if let Some(value) = value {
                cmd.env(field.env, env_value(&value.text()).as_ref());
            }
        }
        cmd.env("LARAVEL_WORKER_RESULT", result_path);
        if let Some(path) = command_path {
            cmd.env("LARAVEL_WORKER_COMMAND_FILE", path);
        }
        cmd.spawn()
    }
}

/// The handler's request in its result file, if it wrote one. The file is
/// read to at most [`RESULT_LIMIT`] bytes: a longer one is an exception
/// that says so, not a read of whatever size the handler made it.
fn read_result(path: &Path) -> Option<Reply> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut contents = Vec::new();
    let limit = RESULT_LIMIT as u64;
    file.take(limit + 1).read_to_end(&mut contents).ok()?;
    if contents.len() as u64 > limit {
        return Some(Reply::Exception(JobException::new(
            HANDLER_FAILED,
            format!("the handler wrote a result file of more than {RESULT_LIMIT} bytes"),
        )));
    }
    request::parse(&contents)
}

/// Waits briefly for a capture task; a grandchild holding the pipe open
/// must not hold up the job.
async fn collect(task: Option<tokio::task::JoinHandle<Tail>>) -> Tail {
    let Some(mut task) = task else {
        return Tail::default();
    };
    match tokio::time::timeout(PIPE_DRAIN, &mut task).await {
        Ok(Ok(tail)) => tail,
        _ => {
            task.abort();
            Tail::default()
        }
    }
}

fn log_output(inv: &Invocation<'_>, stdout: &Tail, stderr: &Tail) {
    for (stream, tail) in [("stdout", stdout), ("stderr", stderr)] {
        if tail.total > 0 {
            tracing::info!(
                job = inv.job.display_name(),
                id = %inv.job.id(),
                stream,
                "{}",
                tail.text()
            );
        }
    }
}
