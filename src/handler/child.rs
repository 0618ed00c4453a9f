//! What the command transports ([`super::subprocess`], one process per
//! call, and [`super::persistent`], warm processes) share about a handler
//! process: how it is started, what its environment values may hold, how
//! its end is told in a failure, and how large an answer may be. Neither
//! transport imports the other; both import this.

use std::borrow::Cow;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use tokio::process::Command;

use super::capture::Tail;
use super::process_group::{self, Environment};
use super::scheduling::Scheduling;

/// Bytes of one answer of a handler: a persistent process's answer line on
/// fd 3, or a process handler's result file. A longer one is never held
/// whole.
pub const ANSWER_LIMIT: usize = 1024 * 1024;

/// Bytes of a metadata value passed in an environment variable (the
/// failure text in `LARAVEL_WORKER_EXCEPTION`, but also a displayName or
/// an id, which a job may make as long as it likes). Linux refuses to
/// start a program with one environment string over 128 KiB.
pub const ENV_VALUE_LIMIT: usize = 16 * 1024;

/// The variable holding the daemon's version (`0.1.0`, Cargo.toml's) in
/// every handler process, so that a handler (the PHP bridge) can tell
/// whether it goes with this daemon.
pub const VERSION_ENV: &str = "LARAVEL_WORKER_VERSION";

/// The command for a handler process: `program[0]` run with the rest as
/// its arguments (no shell), in its own process group tied to the daemon
/// ([`process_group::isolate`]), seeing what `environment` lets through,
/// under the `scheduling` policy, with stdin, stdout and stderr piped, and
/// [`VERSION_ENV`] set.
///
/// # Panics
/// Never; an empty `program` is refused by the config loader.
pub fn command(program: &[String], environment: &Environment, scheduling: Scheduling) -> Command {
    let mut cmd = Command::new(&program[0]);
    cmd.args(&program[1..]);
    // First: it may clear the environment.
    process_group::isolate(&mut cmd, environment);
    // After the environment: a cleared one keeps it, and `env` cannot hide it.
    cmd.env(VERSION_ENV, env!("CARGO_PKG_VERSION"));
    scheduling.apply(&mut cmd);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// How a handler process ended, in words.
pub fn describe(status: Option<ExitStatus>) -> String {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            _ => "ended abnormally".to_string(),
        },
        None => "could not be waited for".to_string(),
    }
}

/// The detail lines of a handler failure: how it ended and its stderr tail.
pub fn detail(how: &str, stderr: &Tail) -> String {
    let err = stderr.text();
    if err.is_empty() {
        format!("Handler {how}.")
    } else {
        format!("Handler {how}. Its stderr ended with:\n{err}")
    }
}

/// `text` made fit for an environment variable, which cannot hold a NUL
/// and, on Linux, not more than 128 KiB: each NUL becomes U+FFFD and the
/// text is cut to its first [`ENV_VALUE_LIMIT`] bytes (at a character
/// boundary). The payload on stdin still holds every value in full.
pub fn env_value(text: &str) -> Cow<'_, str> {
    let cut = &text[..text.floor_char_boundary(ENV_VALUE_LIMIT)];
    if cut.contains('\0') {
        Cow::Owned(cut.replace('\0', "\u{fffd}"))
    } else {
        Cow::Borrowed(cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_hold_no_nul_and_are_bounded() {
        assert_eq!(env_value("App\\Jobs\\X"), "App\\Jobs\\X");
        assert_eq!(env_value("a\0b"), "a\u{fffd}b");
        let long = "é".repeat(ENV_VALUE_LIMIT);
        let cut = env_value(&long);
        assert!(cut.len() <= ENV_VALUE_LIMIT && cut.len() >= ENV_VALUE_LIMIT - 1);
        assert!(long.starts_with(cut.as_ref()));
    }
}
