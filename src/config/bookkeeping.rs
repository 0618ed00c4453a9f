//! `[bookkeeping]`, resolved: where the worker releases unique locks and
//! records batches for jobs Laravel's own code does not run (see
//! `crate::whole`).

use super::file::Layer;
use super::{CacheSettings, cache_target};
use crate::redis::RedisTarget;

/// Where unique locks are released.
#[derive(Debug, Clone)]
pub enum LockSettings {
    /// Laravel's Redis store, on its lock connection.
    Redis {
        /// The lock connection (by default the `[redis]` connection, the
        /// skeleton's `default`).
        connection: Box<RedisTarget>,
        /// Redis prefix + cache prefix (+ `:` on Laravel ≤ 10).
        prefix: String,
    },
    /// Laravel's database store, its locks table.
    Database {
        /// The cache database's URL.
        url: String,
        /// `cache_locks`.
        table: String,
        /// The cache prefix.
        prefix: String,
    },
    /// A store the worker cannot release locks in (file, none): its kind.
    Unsupported(&'static str),
}

/// `[bookkeeping]`, resolved.
#[derive(Debug, Clone)]
pub struct BookkeepingSettings {
    /// Off: nothing is written (`enabled = false`).
    pub enabled: bool,
    /// `ShouldBeUniqueUntilProcessing` class patterns.
    pub until_processing: Vec<String>,
    /// `ShouldBeUnique` class patterns with a property `uniqueId` (for
    /// payloads before 11.39).
    pub unique: Vec<String>,
    /// The app's name of the lock store.
    pub lock_name: String,
    /// The lock store.
    pub lock: LockSettings,
    /// The batches database URL and table; `None` when no database is
    /// known.
    pub batches: Option<(String, String)>,
    /// The `match` of the handler that finishes jobs needing PHP; `None`:
    /// the first bridge configured.
    pub finish_with: Option<String>,
}

/// Resolves `[bookkeeping]` against the `[cache]` store `cache` and the
/// `[redis]` connection `redis`.
///
/// # Errors
/// A `lock_url` that is not a Redis URL; a `finish_with` that is no
/// `[[handlers]]` entry's `match`.
pub(super) fn resolve(
    layer: &Layer,
    cache: &CacheSettings,
    redis: &RedisTarget,
) -> anyhow::Result<BookkeepingSettings> {
    let b = &layer.bookkeeping;
    super::check::finish_with(
        b.finish_with.as_deref(),
        layer.handlers.as_deref().unwrap_or_default(),
    )?;
    let lock = match cache {
        CacheSettings::Redis { key_prefix, .. } => LockSettings::Redis {
            connection: Box::new(match &b.lock_url {
                Some(url) => cache_target(url, redis)?,
                None => redis.clone(),
            }),
            prefix: key_prefix.clone(),
        },
        CacheSettings::Database { url, prefix, .. } => LockSettings::Database {
            url: url.clone(),
            table: b.lock_table.clone().unwrap_or_else(|| "cache_locks".into()),
            prefix: prefix.clone(),
        },
        CacheSettings::File { .. } => LockSettings::Unsupported("file"),
        CacheSettings::None => LockSettings::Unsupported("none"),
    };
    let kind = match &lock {
        LockSettings::Redis { .. } => "redis",
        LockSettings::Database { .. } => "database",
        LockSettings::Unsupported(kind) => kind,
    };
    let batches = b
        .batches_url
        .clone()
        .or_else(|| layer.failed.url.clone())
        .or_else(|| layer.database.url.clone())
        .map(|url| {
            let table = b
                .batches_table
                .clone()
                .unwrap_or_else(|| "job_batches".into());
            (url, table)
        });
    Ok(BookkeepingSettings {
        enabled: b.enabled.unwrap_or(true),
        until_processing: b.until_processing.clone().unwrap_or_default(),
        unique: b.unique.clone().unwrap_or_default(),
        lock_name: b.lock_store.clone().unwrap_or_else(|| kind.to_string()),
        lock,
        batches,
        finish_with: b.finish_with.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Settings;
    use super::super::file::Layer;

    fn resolve(toml: &str) -> anyhow::Result<Settings> {
        Settings::resolve(Layer::from_toml(toml)?)
    }

    #[test]
    fn finish_with_names_a_handler_s_match() {
        let handlers = "[failed]\ndriver = \"null\"\n[[handlers]]\nmatch = \"App\\\\Py\\\\*\"\ncommand = [\"python3\", \"h.py\"]\n[[handlers]]\nmatch = \"Bridge\"\ncommand = [\"php\", \"laravel-worker-bridge.php\"]\n";
        let named = resolve(&format!(
            "{handlers}[bookkeeping]\nfinish_with = \"Bridge\""
        ))
        .unwrap();
        assert_eq!(named.bookkeeping.finish_with.as_deref(), Some("Bridge"));
        let default = resolve(handlers).unwrap();
        assert_eq!(default.bookkeeping.finish_with, None, "the first bridge");
        let e = resolve(&format!("{handlers}[bookkeeping]\nfinish_with = \"Nope\"")).unwrap_err();
        assert!(
            e.to_string()
                .contains("no [[handlers]] entry has match = \"Nope\""),
            "{e}"
        );
    }
}
