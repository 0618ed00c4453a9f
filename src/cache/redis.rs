//! Laravel's Redis cache store.
//!
//! A cache key becomes `{redis prefix}{cache prefix}{key}`, where Laravel
//! ≤ 10 puts a `:` after a non-empty cache prefix and 11+ does not; the
//! caller passes the whole prefix, already joined.
//!
//! On a Redis Cluster the keys read together (the restart key and the pause
//! keys) live in different slots; the cluster client splits the `MGET` by
//! slot and puts the answers back in the order asked.

use crate::queue::redis_queue::elsewhere::{self, RestartElsewhere};
use crate::redis::RedisConn;

use super::php;

/// The Redis cache store.
#[derive(Clone)]
pub struct RedisCache {
    conn: RedisConn,
    prefix: String,
    /// Where the cache Redis is (no credentials), for error messages.
    at: String,
}

impl RedisCache {
    /// A store on `conn` whose keys start with `prefix` (Redis connection
    /// prefix + cache prefix + the `:` of Laravel ≤ 10, when used). `at`
    /// says where `conn` goes, without credentials; errors name it.
    pub fn new(conn: RedisConn, prefix: impl Into<String>, at: impl Into<String>) -> Self {
        RedisCache {
            conn,
            prefix: prefix.into(),
            at: at.into(),
        }
    }

    /// Restart keys under other names, when the watched one is absent (see
    /// [`crate::queue::redis_queue::elsewhere`]).
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn restart_elsewhere(&self) -> anyhow::Result<Vec<RestartElsewhere>> {
        let watched = self.key(super::RESTART_KEY);
        elsewhere::restart_elsewhere(&self.conn, &watched, super::RESTART_KEY)
            .await
            .map_err(|e| self.located(e))
    }

    /// Names the server in a Redis error.
    fn located(&self, e: redis::RedisError) -> anyhow::Error {
        anyhow::Error::new(e).context(format!("cache Redis at {}", self.at))
    }

    /// The full Redis key of cache key `key`.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Where cache key `key` is, for messages: its full Redis key and the
    /// server (no credentials).
    pub fn locate(&self, key: &str) -> String {
        format!(
            "the key {:?} of the cache Redis at {}",
            self.key(key),
            self.at
        )
    }

    /// `MGET` of `keys`.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn many(&self, keys: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        let full: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        redis::cmd("MGET")
            .arg(&full)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.located(e))
    }

    /// `forever`: SET with no TTL, numbers as digits.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn forever(&self, key: &str, value: &php::Value) -> anyhow::Result<()> {
        redis::cmd("SET")
            .arg(self.key(key))
            .arg(php::redis_encode(value))
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(|e| self.located(e))?;
        Ok(())
    }

    /// `forget`: DEL.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn forget(&self, key: &str) -> anyhow::Result<()> {
        redis::cmd("DEL")
            .arg(self.key(key))
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(|e| self.located(e))?;
        Ok(())
    }

    /// `put(key, 0, ttl)` when missing, then `increment`: SET NX EX + INCRBY
    /// in one round trip. Returns the new count.
    ///
    /// # Errors
    /// Any Redis error.
    pub async fn count(&self, key: &str, ttl_seconds: u64) -> anyhow::Result<i64> {
        let key = self.key(key);
        let (count,): (i64,) = redis::pipe()
            .cmd("SET")
            .arg(&key)
            .arg(0)
            .arg("EX")
            .arg(ttl_seconds)
            .arg("NX")
            .ignore()
            .cmd("INCRBY")
            .arg(&key)
            .arg(1)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| self.located(e))?;
        Ok(count)
    }
}
