//! Checks made once at start, so that a handler that cannot run stops the
//! worker with a clear error instead of sending every job to `failed_jobs`.
//!
//! - No `[[handlers]]` at all is an error: every job would fail (or, with
//!   `unmatched = "release"`, go round for ever).
//! - A program given as a path (it holds a `/`) must exist, be a file and
//!   be executable by the worker's user. A relative path in a config file
//!   was already made absolute against the config file's directory when the
//!   file was read ([`crate::config::Layer::resolve_handler_paths`]), so this
//!   check and the `exec` of a job see the same program. A relative path that
//!   reaches this check anyway (settings built without a file) is resolved
//!   against the working directory, as `exec` would resolve it.
//! - A bare program name (`php`) is looked up in the `PATH` the handler
//!   will have (its `env`, else none with `env_clear`, else the worker's).
//!   Not finding it there is only a warning: that `PATH` is the system's
//!   business and may change before the first job.
//! - An argument that is an absolute path (`/srv/app/laravel-worker-bridge.php`)
//!   and names nothing is a warning: most often the script the program runs,
//!   copied from an example without its path changed. It is not refused, as
//!   an argument may name a file the handler creates.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::bail;

use super::process_group::Environment;

/// The search path `execvp` uses when a program's environment has no
/// `PATH` (glibc's default).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Refuses a configuration without handlers.
///
/// # Errors
/// `count` is 0.
pub fn require_handlers(count: usize) -> anyhow::Result<()> {
    if count == 0 {
        bail!(
            "no [[handlers]] are configured: every job would fail with \
             LaravelWorker\\NoHandlerException; add a [[handlers]] entry with a \
             command or a url (README, \"Handlers\")"
        );
    }
    Ok(())
}

/// Checks that `command[0]` of the handler matching `pattern`, started
/// with `environment`, can be run (see the module doc).
///
/// # Errors
/// A path that does not exist, is not a file, or is not executable; the
/// message names the handler, the program and, for a relative path, the
/// directory it was resolved against.
pub fn check_program(
    pattern: &str,
    command: &[String],
    environment: &Environment,
) -> anyhow::Result<()> {
    let Some(program) = command.first() else {
        bail!("[[handlers]] match = {pattern:?}: command is empty");
    };
    warn_missing_arguments(pattern, &command[1..]);
    if program.contains('/') {
        let path = Path::new(program);
        let (resolved, against) = if path.is_absolute() {
            (path.to_path_buf(), String::new())
        } else {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            let note = format!(
                " (a relative path, resolved against the working directory {})",
                cwd.display()
            );
            (cwd.join(path), note)
        };
        if let Err(why) = runnable(&resolved) {
            bail!("[[handlers]] match = {pattern:?}: command program {program:?}{against} {why}");
        }
        return Ok(());
    }
    let search = handler_path(environment);
    let found = std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .find(|candidate| runnable(candidate).is_ok());
    if found.is_none() {
        tracing::warn!(
            handler = pattern,
            program = program.as_str(),
            "the handler's program is not found as an executable file in its PATH ({search}); \
             its jobs will fail unless it appears there"
        );
    }
    Ok(())
}

/// Warns about each argument that is an absolute path to nothing.
fn warn_missing_arguments(pattern: &str, arguments: &[String]) {
    for argument in arguments {
        if argument.starts_with('/') && !Path::new(argument).exists() {
            tracing::warn!(
                handler = pattern,
                argument = argument.as_str(),
                "a handler argument names a path that does not exist; if it is the script \
                 the program runs (the PHP bridge, say), every job of this handler will fail"
            );
        }
    }
}

/// The `PATH` a handler with `environment` gets.
fn handler_path(environment: &Environment) -> String {
    if let Some((_, path)) = environment.set.iter().rev().find(|(var, _)| var == "PATH") {
        return path.clone();
    }
    if environment.clear {
        return DEFAULT_PATH.to_string();
    }
    std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.to_string())
}

/// `Ok` when `path` is a file this process may execute; else why not.
fn runnable(path: &Path) -> Result<(), &'static str> {
    match std::fs::metadata(path) {
        Err(_) => Err("does not exist"),
        Ok(meta) if !meta.is_file() => Err("is not a file"),
        Ok(_) if !executable(path) => Err(
            "is not executable (chmod +x, or run it through its interpreter: command = [\"php\", \"…\"])",
        ),
        Ok(_) => Ok(()),
    }
}

/// Whether this process may execute `path` (`access(X_OK)`, which also
/// knows about root, ACLs and `noexec` mounts).
fn executable(path: &Path) -> bool {
    let Ok(path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a NUL-terminated string that outlives the call;
    // access() only reads it.
    unsafe { nix::libc::access(path.as_ptr(), nix::libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_runnable_and_bare_names_only_warn() {
        let env = Environment::default();
        let check = |program: &str| check_program("App\\*", &[program.to_string()], &env);
        assert!(check("/bin/sh").is_ok());
        let e = check("/nonexistent/handler.sh").unwrap_err().to_string();
        assert!(
            e.contains("match = \"App\\\\*\"")
                && e.contains("\"/nonexistent/handler.sh\"")
                && e.contains("does not exist"),
            "{e}"
        );
        let e = check("/etc").unwrap_err().to_string();
        assert!(e.contains("is not a file"), "{e}");
        let e = check("nonexistent-dir/handler.sh").unwrap_err().to_string();
        assert!(e.contains("resolved against the working directory"), "{e}");
        assert!(
            check("surely-not-a-program-on-this-path").is_ok(),
            "a warning only"
        );
        assert!(require_handlers(0).is_err());
        assert!(require_handlers(1).is_ok());
    }

    #[test]
    fn the_handlers_own_path_is_searched() {
        let set = |path: &str| Environment {
            set: vec![("PATH".into(), path.into())],
            ..Environment::default()
        };
        assert_eq!(handler_path(&set("/opt/bin")), "/opt/bin");
        let cleared = Environment {
            clear: true,
            ..Environment::default()
        };
        assert_eq!(handler_path(&cleared), DEFAULT_PATH);
    }
}
