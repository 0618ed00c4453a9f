//! `health`: is a worker on this machine alive? For Docker's `HEALTHCHECK`
//! and other probes that run a command.
//!
//! Reads the heartbeat file the worker loop rewrites every few seconds
//! (see [`crate::lifecycle::heartbeat_file`]) and exits 0 when it is at most
//! `--max-age` seconds old, 1 when it is older, missing or unreadable. It
//! talks to no Redis: a worker that cannot reach Redis but keeps retrying
//! is alive, and its log says why it does nothing.

use super::stdout::say;
use std::path::Path;

use anyhow::Context;

use crate::cli::HealthArgs;
use crate::config::Settings;
use crate::lifecycle::heartbeat_file;

/// Checks the heartbeat; returns the exit status (0 healthy, 1 not).
/// The file is `--file` (or `LARAVEL_WORKER_HEARTBEAT_FILE`), else the
/// config's `[worker] heartbeat_file`.
///
/// # Errors
/// No file given anywhere, or a config that does not load (exit 1 too).
pub fn run(
    args: &HealthArgs,
    config: Option<&Path>,
    env_file: Option<&Path>,
) -> anyhow::Result<u8> {
    const NO_FILE: &str = "no heartbeat file to check: give --file (or \
         LARAVEL_WORKER_HEARTBEAT_FILE), or --config with [worker] heartbeat_file";
    let path = match &args.file {
        Some(path) => path.clone(),
        // Without a config there is nothing to read the file's name from:
        // settings resolved from defaults alone would only fail on a
        // store `health` never touches.
        None if config.is_none() && env_file.is_none() => anyhow::bail!(NO_FILE),
        // The heartbeat file is ours: no need to ask the app (PHP).
        None => Settings::load(config, env_file, Some(Path::new("none")))
            .context("cannot read [worker] heartbeat_file from the configuration")?
            .heartbeat_file
            .context(NO_FILE)?,
    };
    match heartbeat_file::check(&path, args.max_age) {
        Ok(age) => {
            let content = std::fs::read_to_string(&path).unwrap_or_default();
            say!(
                "healthy: {} written {} s ago: {}",
                path.display(),
                age.as_secs(),
                content.trim()
            );
            Ok(0)
        }
        Err(unhealthy) => {
            eprintln!("unhealthy: {unhealthy}");
            Ok(1)
        }
    }
}
