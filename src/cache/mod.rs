//! The cache store the worker shares with the app (protocol §7).
//!
//! It holds `illuminate:queue:restart` (written by `queue:restart`) and
//! `job-exceptions:{uuid}` (the maxExceptions counter). In the Redis store a
//! cache key becomes `{redis prefix}{cache prefix}{key}`, where Laravel ≤ 10
//! puts a `:` after a non-empty cache prefix and 11+ does not; the caller
//! passes the whole prefix, already joined.

use redis::aio::ConnectionManager;

/// The cache key of the restart signal.
pub const RESTART_KEY: &str = "illuminate:queue:restart";

/// Seconds a `job-exceptions:{uuid}` counter lives (one day, as Laravel).
pub const EXCEPTIONS_TTL: u64 = 86_400;

/// A cache store the worker can read signals from.
#[derive(Clone)]
pub enum CacheStore {
    /// Laravel's Redis cache store.
    Redis(RedisCache),
    /// No cache: no restart signal, no maxExceptions counting (as Laravel
    /// without a cache).
    None,
}

/// The Redis cache store.
#[derive(Clone)]
pub struct RedisCache {
    conn: ConnectionManager,
    prefix: String,
}

impl RedisCache {
    /// A store on `conn` whose keys start with `prefix` (Redis connection
    /// prefix + cache prefix + the `:` of Laravel ≤ 10, when used).
    pub fn new(conn: ConnectionManager, prefix: impl Into<String>) -> Self {
        RedisCache {
            conn,
            prefix: prefix.into(),
        }
    }

    /// The full Redis key of cache key `key`.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

impl CacheStore {
    /// The restart marker, as the stored string (`None` when unset). The
    /// worker compares it with the value it read at start, as a string.
    ///
    /// # Errors
    /// Any store error.
    pub async fn restart_marker(&self) -> anyhow::Result<Option<String>> {
        match self {
            CacheStore::Redis(c) => Ok(redis::cmd("GET")
                .arg(c.key(RESTART_KEY))
                .query_async(&mut c.conn.clone())
                .await?),
            CacheStore::None => Ok(None),
        }
    }

    /// Writes a new restart marker (`queue:restart`): the current UNIX time,
    /// stored for ever as plain digits.
    ///
    /// # Errors
    /// Any store error, or no store configured.
    pub async fn write_restart(&self, now: i64) -> anyhow::Result<()> {
        match self {
            CacheStore::Redis(c) => Ok(redis::cmd("SET")
                .arg(c.key(RESTART_KEY))
                .arg(now)
                .query_async(&mut c.conn.clone())
                .await?),
            CacheStore::None => anyhow::bail!("no cache store is configured"),
        }
    }

    /// Counts one exception for job `uuid` and returns the new count, as
    /// `WillExceedMaxExceptions` does: create the key with 0 and a one-day
    /// TTL when it is missing, then increment it. `None` without a store.
    ///
    /// # Errors
    /// Any store error.
    pub async fn count_exception(&self, uuid: &str) -> anyhow::Result<Option<i64>> {
        let CacheStore::Redis(c) = self else {
            return Ok(None);
        };
        let key = c.key(&format!("job-exceptions:{uuid}"));
        let (count,): (i64,) = redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(0)
            .arg("EX")
            .arg(EXCEPTIONS_TTL)
            .arg("NX")
            .ignore()
            .cmd("INCRBY")
            .arg(&key)
            .arg(1)
            .query_async(&mut c.conn.clone())
            .await?;
        Ok(Some(count))
    }

    /// Deletes the exception counter of job `uuid` (when the job fails).
    ///
    /// # Errors
    /// Any store error.
    pub async fn forget_exceptions(&self, uuid: &str) -> anyhow::Result<()> {
        if let CacheStore::Redis(c) = self {
            redis::cmd("DEL")
                .arg(c.key(&format!("job-exceptions:{uuid}")))
                .query_async::<()>(&mut c.conn.clone())
                .await?;
        }
        Ok(())
    }
}
