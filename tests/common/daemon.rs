//! The real laravel-worker binary, run as a subprocess. Its stdout and
//! stderr lines are collected by threads so tests can await them as events.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::WAIT;

/// A running (or exited) laravel-worker process.
pub struct Daemon {
    child: Child,
    /// The command line after the program name.
    args: Vec<String>,
    out: Receiver<String>,
    err: Receiver<String>,
    /// stdout lines seen so far (all of them after `wait_exit`).
    pub stdout: Vec<String>,
    /// stderr (log) lines seen so far, with their colours.
    pub stderr: Vec<String>,
    /// The exit status, once exited.
    pub status: Option<ExitStatus>,
}

/// Environment variables the daemon reads that must not leak in from the
/// machine running the tests.
const LARAVEL_VARS: &[&str] = &[
    "REDIS_URL",
    "REDIS_HOST",
    "REDIS_PORT",
    "REDIS_USERNAME",
    "REDIS_PASSWORD",
    "REDIS_DB",
    "REDIS_PREFIX",
    "REDIS_CACHE_DB",
    "CACHE_PREFIX",
    "APP_NAME",
    "QUEUE_CONNECTION",
    "REDIS_QUEUE",
    "REDIS_QUEUE_RETRY_AFTER",
    "DB_CONNECTION",
    "DB_HOST",
    "DB_PORT",
    "DB_DATABASE",
    "DB_USERNAME",
    "DB_PASSWORD",
    "DB_SOCKET",
    "DB_URL",
    "DATABASE_URL",
    "DB_QUEUE_CONNECTION",
    "DB_QUEUE_TABLE",
    "DB_QUEUE",
    "DB_QUEUE_RETRY_AFTER",
    "LARAVEL_WORKER_CONFIG",
    "PULSE_ENABLED",
    "PULSE_INGEST_DRIVER",
    "PULSE_DB_CONNECTION",
    "PULSE_QUEUES_ENABLED",
    "PULSE_QUEUES_SAMPLE_RATE",
    "PULSE_SLOW_JOBS_ENABLED",
    "PULSE_SLOW_JOBS_SAMPLE_RATE",
    "PULSE_SLOW_JOBS_THRESHOLD",
];

fn pump(stream: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Daemon {
    /// Starts `laravel-worker ARGS` with `env` (and `RUST_LOG=info`, and
    /// none of the machine's Laravel variables).
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_wrapped(&[], args, env)
    }

    /// Starts the daemon through `wrapper` (a program and its arguments, to
    /// which the binary's path and `args` are appended; it must exec them,
    /// so that [`Daemon::pid`] is the daemon's): e.g. `unshare` to run it
    /// in a mount namespace of its own.
    pub fn start_wrapped(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> Self {
        let bin = env!("CARGO_BIN_EXE_laravel-worker");
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(bin);
                cmd
            }
            None => Command::new(bin),
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in LARAVEL_VARS {
            cmd.env_remove(var);
        }
        cmd.env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start laravel-worker");
        let out = pump(child.stdout.take().unwrap());
        let err = pump(child.stderr.take().unwrap());
        Daemon {
            child,
            args: args.iter().map(|a| a.to_string()).collect(),
            out,
            err,
            stdout: vec![],
            stderr: vec![],
            status: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap();
    }

    fn wait_on(
        rx: &Receiver<String>,
        seen: &mut Vec<String>,
        what: &str,
        pred: &dyn Fn(&str) -> bool,
    ) -> String {
        match Self::wait_on_for(rx, seen, what, pred, WAIT) {
            Ok(line) => line,
            Err(why) => panic!("{why}"),
        }
    }

    /// As `wait_on` for at most `limit`; `Err` says what was seen.
    fn wait_on_for(
        rx: &Receiver<String>,
        seen: &mut Vec<String>,
        what: &str,
        pred: &dyn Fn(&str) -> bool,
        limit: std::time::Duration,
    ) -> Result<String, String> {
        if let Some(line) = seen.iter().find(|l| pred(l)) {
            return Ok(line.clone());
        }
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    seen.push(line.clone());
                    if pred(&line) {
                        return Ok(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "no {what} line matched in {limit:?}; saw:\n{}",
                        seen.join("\n")
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "{what} closed before a line matched; saw:\n{}",
                        seen.join("\n")
                    ));
                }
            }
        }
    }

    /// Waits at most `limit` for a stderr (log) line containing every one
    /// of `parts` (colours aside); returns it without colours, or what was
    /// seen instead.
    pub fn wait_log_for(
        &mut self,
        limit: std::time::Duration,
        parts: &[&str],
    ) -> Result<String, String> {
        let pred = |l: &str| {
            let p = plain(l);
            parts.iter().all(|part| p.contains(part))
        };
        Self::wait_on_for(&self.err, &mut self.stderr, "stderr", &pred, limit).map(|l| plain(&l))
    }

    /// Waits for a stdout line matching `pred` (lines seen before count too).
    pub fn wait_stdout(&mut self, pred: impl Fn(&str) -> bool) -> String {
        Self::wait_on(&self.out, &mut self.stdout, "stdout", &pred)
    }

    /// Waits for a stderr (log) line matching `pred`.
    pub fn wait_stderr(&mut self, pred: impl Fn(&str) -> bool) -> String {
        Self::wait_on(&self.err, &mut self.stderr, "stderr", &pred)
    }

    /// Waits for the metrics endpoint's start line (`[metrics] listen`)
    /// and returns the address it listens on.
    pub fn metrics_address(&mut self) -> String {
        let line = self.wait_stderr(|l| l.contains("metrics endpoint listening"));
        plain(&line)
            .split("address=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string()
    }

    /// Waits for a JSON event with `status` (requires `--json`).
    pub fn wait_event(&mut self, status: &str) -> serde_json::Value {
        let needle = format!("\"status\":\"{status}\"");
        let line = self.wait_stdout(|l| l.contains(&needle));
        serde_json::from_str(&line).unwrap()
    }

    /// Whether the process has exited (then its output is drained, as by
    /// [`Daemon::wait_exit`]); does not wait.
    pub fn exited(&mut self) -> bool {
        if self.status.is_none() && matches!(self.child.try_wait(), Ok(Some(_))) {
            self.wait_exit();
        }
        self.status.is_some()
    }

    /// Waits for the process to exit and drains its output.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.wait_exit_within(WAIT)
    }

    /// As [`Self::wait_exit`], for up to `wait` (a run that is slow by
    /// nature, as large jobs on a loaded machine).
    pub fn wait_exit_within(&mut self, wait: std::time::Duration) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let deadline = Instant::now() + wait;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("daemon did not exit in time; stderr:\n{}", self.drain_err());
            }
            // Keep the pipes flowing while we wait.
            while let Ok(l) = self.out.try_recv() {
                self.stdout.push(l);
            }
            while let Ok(l) = self.err.try_recv() {
                self.stderr.push(l);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        self.status = Some(status);
        for l in self.out.iter() {
            self.stdout.push(l);
        }
        for l in self.err.iter() {
            self.stderr.push(l);
        }
        status
    }

    fn drain_err(&mut self) -> String {
        while let Ok(l) = self.err.try_recv() {
            self.stderr.push(l);
        }
        self.stderr.join("\n")
    }

    /// Exit code after `wait_exit` (None when killed by a signal).
    pub fn code(&mut self) -> Option<i32> {
        self.wait_exit().code()
    }

    /// All JSON event lines seen on stdout.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.stdout
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The JSON events with `status` seen on stdout, in order.
    pub fn events_with(&self, status: &str) -> Vec<serde_json::Value> {
        self.events()
            .into_iter()
            .filter(|e| e["status"] == status)
            .collect()
    }

    /// The first JSON event with `status`; fails the test, showing stdout,
    /// when there is none.
    #[track_caller]
    pub fn event(&self, status: &str) -> serde_json::Value {
        self.events_with(status)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {status:?} event; stdout:\n{}", self.stdout.join("\n")))
    }

    /// Field `field` (a string) of every `status` event, in order: e.g. the
    /// queues jobs were reserved from, `("starting", "queue")`.
    pub fn event_fields(&self, status: &str, field: &str) -> Vec<String> {
        self.events_with(status)
            .iter()
            .map(|e| e[field].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Waits for the exit and asserts its status is `code`, showing the
    /// daemon's stderr when it is not.
    #[track_caller]
    pub fn expect_exit(&mut self, code: i32) -> &mut Self {
        let got = self.code();
        assert_eq!(
            got,
            Some(code),
            "exit status of laravel-worker {:?}; stdout:\n{}\nstderr:\n{}",
            self.args,
            self.stdout.join("\n"),
            self.stderr_text()
        );
        self
    }

    /// Runs `laravel-worker ARGS` with `env` to its end.
    pub fn run(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut d = Daemon::start(args, env);
        d.wait_exit();
        d
    }

    /// Starts `laravel-worker --config CONFIG work ARGS`.
    pub fn work(config: &std::path::Path, args: &[&str]) -> Self {
        let mut all = vec!["--config", config.to_str().unwrap(), "work"];
        all.extend_from_slice(args);
        Daemon::start(&all, &[])
    }

    /// Runs `laravel-worker --config CONFIG ARGS` to its end (a command
    /// such as `restart`, `retry` or `monitor`).
    pub fn cli(config: &std::path::Path, args: &[&str]) -> Self {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        Daemon::run(&all, &[])
    }

    /// Waits for a stderr (log) line containing every one of `parts`
    /// (colours aside); returns it without colours.
    pub fn wait_log(&mut self, parts: &[&str]) -> String {
        plain(&self.wait_stderr(|l| {
            let p = plain(l);
            parts.iter().all(|part| p.contains(part))
        }))
    }

    /// The first log line (seen so far) containing `needle`, asserted to
    /// contain each of `parts` too; returns it.
    #[track_caller]
    pub fn log_line(&self, needle: &str, parts: &[&str]) -> String {
        let log = self.stderr_text();
        let line = log
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} line in the log:\n{log}"));
        for part in parts {
            assert!(line.contains(part), "{part:?} missing from {line:?}");
        }
        line.to_string()
    }

    /// All of stderr seen so far, without colours.
    pub fn stderr_text(&self) -> String {
        self.stderr
            .iter()
            .map(|l| plain(l))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The `reason` of the "worker stopped" log line (after exit).
    #[track_caller]
    pub fn stop_reason(&self) -> String {
        let text = self.stderr_text();
        let line = text
            .lines()
            .find(|l| l.contains("worker stopped"))
            .unwrap_or_else(|| panic!("no 'worker stopped' line; stderr:\n{text}"));
        let at = line
            .find("reason=")
            .unwrap_or_else(|| panic!("no reason in {line:?}"))
            + "reason=".len();
        line[at..]
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .trim_matches('"')
            .to_string()
    }

    /// Asserts that the daemon stopped (it has exited) with `code` and the
    /// "worker stopped" line gave `reason`.
    #[track_caller]
    pub fn expect_stop(&mut self, code: i32, reason: &str) -> &mut Self {
        self.expect_exit(code);
        assert_eq!(
            self.stop_reason(),
            reason,
            "stop reason; stderr:\n{}",
            self.stderr_text()
        );
        self
    }
}

/// `line` without its ANSI colour codes.
pub fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
