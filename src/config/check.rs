//! Checks of `[[handlers]]` entries: each names one transport, only with
//! the keys that transport reads.

use anyhow::{Context, bail};

use super::{HandlerEntry, Transport};
use crate::handler::scheduling::Scheduling;
use crate::worker::options::{MAX_MEMORY_MB, MAX_PROCESSES};

/// Checks every entry (see [`transport`]) and its `mode`.
///
/// # Errors
/// The first problem found, naming the entry and the key.
pub(super) fn handlers(handlers: &[HandlerEntry]) -> anyhow::Result<()> {
    for h in handlers {
        transport(h)?;
        match h.mode.as_deref() {
            None | Some("process" | "persistent") => {}
            Some(other) => bail!(
                "[[handlers]] match = {:?}: mode = {other:?}: expected \"process\" or \"persistent\"",
                h.pattern
            ),
        }
        match h.bookkeeping.as_deref() {
            None | Some("laravel" | "worker") => {}
            Some(other) => bail!(
                "[[handlers]] match = {:?}: bookkeeping = {other:?}: expected \"laravel\" (the PHP bridge) or \"worker\"",
                h.pattern
            ),
        }
    }
    Ok(())
}

/// Checks that `[bookkeeping] finish_with`, when set, is the `match` of a
/// `[[handlers]]` entry.
///
/// # Errors
/// No entry has that `match`.
pub(super) fn finish_with(name: Option<&str>, handlers: &[HandlerEntry]) -> anyhow::Result<()> {
    match name {
        Some(name) if !handlers.iter().any(|h| h.pattern == name) => bail!(
            "[bookkeeping] finish_with = {name:?}: no [[handlers]] entry has match = {name:?} \
             (name the PHP bridge's entry by its match)"
        ),
        _ => Ok(()),
    }
}

/// Checks that a `[[handlers]]` entry names exactly one transport
/// (`command` or `url`), only with the keys that transport reads, and a
/// usable `queues` list.
///
/// # Errors
/// The first problem found, naming the entry and the key.
fn transport(h: &HandlerEntry) -> anyhow::Result<()> {
    let name = &h.pattern;
    match (&h.command, &h.url) {
        (Some(_), Some(_)) => bail!("[[handlers]] match = {name:?}: set command or url, not both"),
        (None, None) => bail!(
            "[[handlers]] match = {name:?}: needs a command (a program to run) or a url (an HTTP endpoint)"
        ),
        (Some(cmd), None) => command(h, cmd)?,
        (None, Some(url)) => http(h, url)?,
    }
    if let Some(queues) = &h.queues
        && (queues.is_empty() || queues.iter().any(String::is_empty))
    {
        bail!("[[handlers]] match = {name:?}: queues must list one or more queue names");
    }
    Ok(())
}

/// A command handler's keys: a program, a pool's keys only when persistent, usable
/// `env` entries, and none of the HTTP keys.
fn command(h: &HandlerEntry, cmd: &[String]) -> anyhow::Result<()> {
    let name = &h.pattern;
    if cmd.is_empty() || cmd[0].is_empty() {
        bail!("[[handlers]] match = {name:?}: command is empty");
    }
    if h.transport() == Transport::Persistent {
        pool_keys(h)?;
    } else {
        no_pool_keys(h)?;
    }
    if let Some(policy) = &h.scheduling
        && Scheduling::from_name(policy).is_none()
    {
        bail!(
            "[[handlers]] match = {name:?}: scheduling = {policy:?}: expected one of {}",
            Scheduling::NAMES.map(|n| format!("{n:?}")).join(", ")
        );
    }
    for (var, value) in h.env.iter().flatten() {
        if var.is_empty() || var.contains(['=', '\0']) {
            bail!("[[handlers]] match = {name:?}: env: {var:?} is not a variable name");
        }
        if value.contains('\0') {
            bail!("[[handlers]] match = {name:?}: env: the value of {var} holds a NUL");
        }
    }
    for (key, set) in [
        ("connect_timeout", h.connect_timeout.is_some()),
        ("token_env", h.token_env.is_some()),
        ("secret_env", h.secret_env.is_some()),
    ] {
        if set {
            bail!("[[handlers]] match = {name:?}: {key} applies to url handlers only");
        }
    }
    Ok(())
}

/// An HTTP handler's keys: an `http(s)://` URL without credentials, a
/// connect timeout of a second or more, variable names for the secrets,
/// and none of the command keys.
fn http(h: &HandlerEntry, url: &str) -> anyhow::Result<()> {
    let name = &h.pattern;
    let parsed = reqwest::Url::parse(url)
        .with_context(|| format!("[[handlers]] match = {name:?}: url = {url:?}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        bail!("[[handlers]] match = {name:?}: url must start with http:// or https://");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        bail!(
            "[[handlers]] match = {name:?}: url must not hold credentials; \
             use token_env (bearer token) or secret_env (signature)"
        );
    }
    let mode = h.mode.is_some().then_some("mode");
    let others = [
        ("env", h.env.is_some()),
        ("env_clear", h.env_clear.is_some()),
        ("decode_command", h.decode_command.is_some()),
        ("scheduling", h.scheduling.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key));
    if let Some(key) = mode
        .into_iter()
        .chain(pool_keys_set(h))
        .chain(others)
        .next()
    {
        bail!("[[handlers]] match = {name:?}: {key} applies to command handlers only");
    }
    if h.connect_timeout == Some(0) {
        bail!("[[handlers]] match = {name:?}: connect_timeout must be at least 1 second");
    }
    for (key, var) in [("token_env", &h.token_env), ("secret_env", &h.secret_env)] {
        if var
            .as_deref()
            .is_some_and(|v| v.is_empty() || v.contains(['=', '\0']))
        {
            bail!("[[handlers]] match = {name:?}: {key} must name an environment variable");
        }
    }
    Ok(())
}

/// A command handler without `mode = "persistent"` runs one process per
/// job: the pool's keys would mean nothing there, so an entry that sets
/// one is refused rather than quietly run another way than it says.
///
/// # Errors
/// The first pool key set, naming the entry.
fn no_pool_keys(h: &HandlerEntry) -> anyhow::Result<()> {
    if let Some(key) = pool_keys_set(h).next() {
        bail!(
            "[[handlers]] match = {:?}: {key} applies to mode = \"persistent\" only \
             (this entry runs one process per job)",
            h.pattern
        );
    }
    Ok(())
}

/// The names of the persistent pool's keys that an entry sets, in the
/// config reference's order.
fn pool_keys_set(h: &HandlerEntry) -> impl Iterator<Item = &'static str> {
    [
        ("processes", h.processes.is_some()),
        ("min_processes", h.min_processes.is_some()),
        ("idle_timeout", h.idle_timeout.is_some()),
        ("reserve_ahead", h.reserve_ahead.is_some()),
        ("pipeline", h.pipeline.is_some()),
        ("max_jobs", h.max_jobs.is_some()),
        ("max_memory", h.max_memory.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
}

/// Checks a persistent pool's `processes` (at least 1), `min_processes`
/// (at most `processes`) and `idle_timeout` (at least 1 second).
///
/// # Errors
/// The first problem found, naming the entry and the key.
fn pool_keys(h: &HandlerEntry) -> anyhow::Result<()> {
    let name = &h.pattern;
    if h.processes == Some(0) {
        bail!(
            "[[handlers]] match = {name:?}: processes = 0: a persistent handler needs \
             at least 1 process"
        );
    }
    let size = h.processes.unwrap_or(1);
    if let Some(min) = h.min_processes
        && min > size
    {
        bail!("[[handlers]] match = {name:?}: min_processes = {min} is above processes = {size}");
    }
    if h.idle_timeout == Some(0) {
        bail!(
            "[[handlers]] match = {name:?}: idle_timeout must be at least 1 second; \
             leave it out to keep idle processes"
        );
    }
    Ok(())
}

/// The most minutes a `[horizon] trim_*` takes: [`MAX_SECONDS`] in
/// minutes (35,791,394, 68 years), so the record's lifetime in seconds
/// (minutes × 60, Horizon's `EXPIRE`) neither overflows nor is refused by
/// Redis.
///
/// [`MAX_SECONDS`]: super::MAX_SECONDS
pub const MAX_TRIM_MINUTES: u64 = super::MAX_SECONDS / 60;

/// `key = value`, a number of seconds: at most [`super::MAX_SECONDS`], the
/// bound and message of every duration (`retry_after`, `--sleep`…).
///
/// # Errors
/// A larger value, naming `key`.
pub fn seconds_bound(key: &str, value: Option<u64>) -> anyhow::Result<()> {
    match value {
        Some(v) if v > super::MAX_SECONDS => {
            bail!("{key} = {v}: at most {} seconds", super::MAX_SECONDS)
        }
        _ => Ok(()),
    }
}

/// `key = value`, a number of processes: at most [`MAX_PROCESSES`].
///
/// # Errors
/// A larger value, naming `key`.
pub fn processes_bound(key: &str, value: Option<usize>) -> anyhow::Result<()> {
    match value {
        Some(n) if n > MAX_PROCESSES => {
            bail!("{key} = {n}: at most {MAX_PROCESSES} (as --concurrency)")
        }
        _ => Ok(()),
    }
}

/// Every duration, count and lifetime of a merged layer within its bound
/// (durations [`super::MAX_SECONDS`], processes [`MAX_PROCESSES`], memory
/// [`MAX_MEMORY_MB`],
/// Horizon's trims [`MAX_TRIM_MINUTES`]), so that no value near 2^63
/// overflows a timer, an `EXPIRE` or a process count later. Zero and the
/// other lower bounds are each key's own check.
///
/// # Errors
/// The first value out of bounds, naming its key.
pub(super) fn bounds(layer: &super::Layer) -> anyhow::Result<()> {
    let (w, m) = (&layer.worker, &layer.metrics);
    for (key, value) in [
        (
            "[queue] unmatched_release_delay",
            layer.queue.unmatched_release_delay,
        ),
        ("[worker] kill_grace", w.kill_grace),
        ("[worker] drain_timeout", w.drain_timeout),
        ("[worker] error_summary_interval", w.error_summary_interval),
        ("[worker] trip_backoff", w.trip_backoff),
        ("[worker] balance_cooldown", w.balance_cooldown),
        ("[metrics] header_timeout", m.header_timeout),
        ("[metrics] idle_timeout", m.idle_timeout),
    ] {
        seconds_bound(key, value)?;
    }
    processes_bound("[worker] min_processes", w.min_processes)?;
    processes_bound("[worker] max_processes", w.max_processes)?;
    for (name, q) in w.queues.iter().flatten() {
        processes_bound(
            &format!("[worker.queues.{name}] min_processes"),
            q.min_processes,
        )?;
        processes_bound(
            &format!("[worker.queues.{name}] max_processes"),
            q.max_processes,
        )?;
    }
    for h in layer.handlers.iter().flatten() {
        let key = |k: &str| format!("[[handlers]] match = {:?}: {k}", h.pattern);
        for (k, value) in [
            ("timeout", h.timeout),
            ("idle_timeout", h.idle_timeout),
            ("connect_timeout", h.connect_timeout),
        ] {
            seconds_bound(&key(k), value)?;
        }
        processes_bound(&key("processes"), h.processes)?;
        processes_bound(&key("min_processes"), h.min_processes)?;
        processes_bound(&key("reserve_ahead"), h.reserve_ahead)?;
        if let Some(mb) = h.max_memory.filter(|&mb| mb > MAX_MEMORY_MB) {
            bail!(
                "{} = {mb}: at most {MAX_MEMORY_MB} MB (as --memory)",
                key("max_memory")
            );
        }
    }
    let hz = &layer.horizon;
    for (key, value) in [
        ("trim_recent", hz.trim_recent),
        ("trim_pending", hz.trim_pending),
        ("trim_completed", hz.trim_completed),
        ("trim_recent_failed", hz.trim_recent_failed),
        ("trim_failed", hz.trim_failed),
        ("trim_monitored", hz.trim_monitored),
    ] {
        if let Some(v) = value.filter(|&v| v > MAX_TRIM_MINUTES) {
            bail!("[horizon] {key} = {v}: at most {MAX_TRIM_MINUTES} minutes (68 years)");
        }
    }
    Ok(())
}
