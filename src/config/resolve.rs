//! The sections of a merged [`Layer`](super::Layer) that need more than a
//! default, resolved into the typed values and specs of
//! [`Settings`](super::Settings): policies (named with the code that
//! follows them), the failed store, the breaker, Horizon.

use std::time::Duration;

use anyhow::{Context, bail};

use super::FailedSettings;
use super::MAX_SECONDS;
use super::file::{FailedLayer, HorizonLayer, PulseLayer};
use crate::exception::LaravelVersion;
use crate::handler::{BreakerSettings, Unmatched};
use crate::horizon::Trim;
use crate::pulse_feed::pattern::PhpPattern;
use crate::worker::lease::OnLeaseLost;
use crate::worker::tripped::OnHandlerTripped;

/// `[horizon]`, resolved: what to write where. The app turns it into
/// Horizon's settings, the prefix braced on a cluster as Horizon does.
#[derive(Debug, Clone)]
pub struct HorizonSpec {
    /// Horizon's own Redis (`[horizon] url`, from `horizon.use`); `None`:
    /// the queue's.
    pub redis: Option<crate::redis::RedisTarget>,
    /// `[horizon] prefix`; `None`: Horizon's default.
    pub prefix: Option<String>,
    /// Take metric snapshots and trim the job lists.
    pub snapshot: bool,
    /// `horizon.trim`: how long records live.
    pub trim: Trim,
}

/// `[failed]`: `database-uuids` (the default; needs a database), `redis`
/// or `null`.
///
/// # Errors
/// An unknown driver, or `database-uuids` without a database.
pub(super) fn failed(layer: FailedLayer) -> anyhow::Result<FailedSettings> {
    Ok(match layer.driver.as_deref().unwrap_or("database-uuids") {
        "database-uuids" => FailedSettings::Database {
            url: layer.url.context(
                "[failed] driver = \"database-uuids\" needs a database: set [failed] url \
                 (sqlite://, mysql://, postgres://) or DB_CONNECTION and DB_*, \
                 or choose driver = \"redis\" or \"null\"",
            )?,
            table: layer.table.unwrap_or_else(|| "failed_jobs".into()),
        },
        "redis" => FailedSettings::Redis,
        "null" => FailedSettings::Null,
        other => {
            bail!("[failed] driver = {other:?}: expected \"database-uuids\", \"redis\" or \"null\"")
        }
    })
}

/// `[queue] unmatched`: `fail` (the default) or `release`, after
/// `unmatched_release_delay` seconds (default 60).
///
/// # Errors
/// Another value.
pub(super) fn unmatched(value: Option<&str>, delay: Option<u64>) -> anyhow::Result<Unmatched> {
    match value.unwrap_or("fail") {
        "fail" => Ok(Unmatched::Fail),
        "release" => Ok(Unmatched::Release {
            delay: delay.unwrap_or(60),
        }),
        other => bail!("[queue] unmatched = {other:?}: expected \"fail\" or \"release\""),
    }
}

/// `[worker] on_lease_lost`: `kill` (the default) or `keep`.
///
/// # Errors
/// Another value.
pub(super) fn on_lease_lost(value: Option<&str>) -> anyhow::Result<OnLeaseLost> {
    match value {
        None | Some("kill") => Ok(OnLeaseLost::Kill),
        Some("keep") => Ok(OnLeaseLost::Keep),
        Some(other) => bail!("[worker] on_lease_lost = {other:?}: expected \"kill\" or \"keep\""),
    }
}

/// `[worker] on_handler_tripped`: `release` (the default) or `exit`.
///
/// # Errors
/// Another value.
pub(super) fn on_handler_tripped(value: Option<&str>) -> anyhow::Result<OnHandlerTripped> {
    match value {
        None | Some("release") => Ok(OnHandlerTripped::Release),
        Some("exit") => Ok(OnHandlerTripped::Exit),
        Some(other) => {
            bail!("[worker] on_handler_tripped = {other:?}: expected \"release\" or \"exit\"")
        }
    }
}

/// Every handler's breaker: `[worker] trip_after` and `trip_backoff`
/// (seconds), the handler's defaults where unset.
pub(super) fn breaker(trip_after: Option<u32>, backoff: Option<u64>) -> BreakerSettings {
    let defaults = BreakerSettings::default();
    BreakerSettings {
        trip_after: trip_after.unwrap_or(defaults.trip_after),
        backoff: backoff.map_or(defaults.backoff, Duration::from_secs),
    }
}

/// `[horizon]`, resolved: `None` unless `enabled`.
pub(super) fn horizon(layer: &HorizonLayer) -> Option<HorizonSpec> {
    let defaults = Trim::default();
    layer.enabled.unwrap_or(false).then(|| HorizonSpec {
        redis: None,
        prefix: layer.prefix.as_deref().map(horizon_prefix),
        snapshot: layer.snapshot.unwrap_or(false),
        trim: Trim {
            recent: layer.trim_recent.unwrap_or(defaults.recent),
            pending: layer.trim_pending.unwrap_or(defaults.pending),
            completed: layer.trim_completed.unwrap_or(defaults.completed),
            recent_failed: layer.trim_recent_failed.unwrap_or(defaults.recent_failed),
            failed: layer.trim_failed.unwrap_or(defaults.failed),
            monitored: layer.trim_monitored.unwrap_or(defaults.monitored),
        },
    })
}

/// `[pulse]`, resolved: `None` when turned off, or when nothing says where
/// the app's Pulse ingests (no `redis` ingest and no database). Required
/// (a start error when it cannot be used) only with `enabled = true`.
///
/// # Errors
/// An unknown `ingest`, a rate outside 0–1, a `redis_url` that does not
/// parse, or `enabled = true` with nowhere to write.
pub(super) fn pulse(
    layer: &PulseLayer,
    connection: &str,
    redis: &crate::redis::RedisTarget,
    redis_prefix: &str,
) -> anyhow::Result<Option<crate::pulse_feed::PulseSettings>> {
    use crate::pulse_feed::{PulseIngest, PulseSettings, record::Recorders};
    if layer.enabled == Some(false) {
        return Ok(None);
    }
    let required = layer.enabled == Some(true);
    let ingest = match layer.ingest.as_deref().unwrap_or("storage") {
        "redis" => PulseIngest::Redis {
            target: match &layer.redis_url {
                Some(url) => {
                    Box::new(super::cache_target(url, redis).context("[pulse] redis_url")?)
                }
                None => Box::new(redis.clone()),
            },
            prefix: redis_prefix.to_string(),
        },
        "storage" => match &layer.url {
            Some(url) => PulseIngest::Storage { url: url.clone() },
            None if required => bail!(
                "[pulse] enabled = true needs Pulse's database: set [pulse] url, or \
                 PULSE_DB_CONNECTION / DB_CONNECTION, or ingest = \"redis\""
            ),
            None => return Ok(None),
        },
        other => bail!("[pulse] ingest = {other:?}: expected \"storage\" or \"redis\""),
    };
    let rate = |key: &str, value: Option<f64>| match value {
        Some(r) if !(0.0..=1.0).contains(&r) => bail!("[pulse] {key} = {r}: expected 0 to 1"),
        r => Ok(r.unwrap_or(1.0)),
    };
    Ok(Some(PulseSettings {
        ingest,
        recorders: Recorders {
            connection: connection.to_string(),
            queues: layer.queues.unwrap_or(true),
            queues_sample_rate: rate("queues_sample_rate", layer.queues_sample_rate)?,
            slow_jobs: layer.slow_jobs.unwrap_or(true),
            slow_jobs_sample_rate: rate("slow_jobs_sample_rate", layer.slow_jobs_sample_rate)?,
            slow_jobs_threshold_ms: layer.slow_jobs_threshold.unwrap_or(1000),
            slow_jobs_thresholds: layer
                .slow_jobs_thresholds
                .iter()
                .flatten()
                .filter_map(|t| pattern("slow_jobs_thresholds", &t.pattern).map(|p| (p, t.ms)))
                .collect(),
            queues_ignore: patterns("queues_ignore", &layer.queues_ignore),
            slow_jobs_ignore: patterns("slow_jobs_ignore", &layer.slow_jobs_ignore),
        },
        required,
    }))
}

/// `key`'s PHP pattern `source`, or `None` with a warning naming it and
/// why, when it cannot be read (Pulse's own config works in PHP: such a
/// pattern is left out rather than stopping the worker).
fn pattern(key: &str, source: &str) -> Option<PhpPattern> {
    PhpPattern::parse(source)
        .inspect_err(|why| {
            tracing::warn!("[pulse] {key}: the pattern {source:?} is left out: {why}");
        })
        .ok()
}

/// `key`'s patterns that can be read (see [`pattern`]).
fn patterns(key: &str, sources: &Option<Vec<String>>) -> Vec<PhpPattern> {
    sources
        .iter()
        .flatten()
        .filter_map(|source| pattern(key, source))
        .collect()
}

/// Horizon's prefix as `Horizon::use` applies `horizon.prefix`:
/// `config('horizon.prefix') ?: 'horizon:'`, so a value PHP finds falsy
/// (empty, or `"0"`) is `horizon:`.
fn horizon_prefix(configured: &str) -> String {
    match configured {
        "" | "0" => "horizon:".to_string(),
        prefix => prefix.to_string(),
    }
}

/// `[metrics] backlog_interval`: seconds between two readings of the
/// backlog gauges, default 5; 0 turns them off (`None`).
///
/// # Errors
/// A value above [`MAX_SECONDS`].
pub(super) fn backlog_interval(seconds: Option<u64>) -> anyhow::Result<Option<Duration>> {
    match seconds.unwrap_or(5) {
        0 => Ok(None),
        s if s <= MAX_SECONDS => Ok(Some(Duration::from_secs(s))),
        s => bail!("[metrics] backlog_interval = {s}: at most {MAX_SECONDS} seconds (0: off)"),
    }
}

/// `[app] laravel`: a version like `"8.83"`; unset, the newest.
///
/// # Errors
/// Text that is not a version.
pub(super) fn laravel(text: Option<&str>) -> anyhow::Result<LaravelVersion> {
    match text {
        Some(text) => LaravelVersion::parse(text)
            .with_context(|| format!("[app] laravel = {text:?}: expected a version like \"8.83\"")),
        None => Ok(LaravelVersion::NEWEST),
    }
}

/// `[worker] balance` and its companions, parsed (checked against the
/// queues later, when `--queue` is known).
pub(super) fn balance(
    worker: &super::file::WorkerLayer,
) -> anyhow::Result<crate::worker::balance::spec::BalanceSettings> {
    fn parse<T>(key: &str, value: &Option<String>) -> anyhow::Result<Option<T>>
    where
        T: std::str::FromStr<Err = anyhow::Error>,
    {
        value
            .as_deref()
            .map(str::parse)
            .transpose()
            .with_context(|| format!("[worker] {key}"))
    }
    Ok(crate::worker::balance::spec::BalanceSettings {
        mode: parse("balance", &worker.balance)?,
        strategy: parse("auto_scaling_strategy", &worker.auto_scaling_strategy)?,
        min_processes: worker.min_processes,
        max_processes: worker.max_processes,
        max_shift: worker.balance_max_shift,
        cooldown: worker.balance_cooldown,
        queues: (worker.queues.clone().unwrap_or_default().into_iter())
            .map(|(name, q)| {
                let limits = crate::worker::balance::spec::QueueLimits {
                    min_processes: q.min_processes,
                    max_processes: q.max_processes,
                };
                (name, limits)
            })
            .collect(),
    })
}
