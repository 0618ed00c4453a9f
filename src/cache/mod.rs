//! The cache store the worker shares with the app (protocol §7).
//!
//! It holds the signals artisan's commands leave for workers:
//!
//! | key                                         | written by            | effect                 |
//! |---------------------------------------------|-----------------------|------------------------|
//! | `illuminate:queue:restart`                  | `queue:restart`       | stop after current job |
//! | `illuminate:queue:paused:{connection}:{q}`  | `queue:pause c:q`     | skip queue `q`         |
//! | `illuminate:queues:paused`                  | `queue:pause --all`   | skip every queue       |
//! | `job-exceptions:{uuid}`                     | the worker            | maxExceptions counter  |
//! | `laravel:sqs-payloads:{uuid}`               | `SqsQueue` (13.9+)    | an SQS job's payload   |
//!
//! The last is read only: the payload an SQS message's overflow pointer
//! names (see [`crate::worker::overflow`]), forgotten once the job is
//! deleted.
//!
//! Three stores: Laravel's Redis store ([`redis`]), its file store
//! ([`file`]), for an app on the same machine whose `CACHE_DRIVER` is
//! `file` (the 8.x default), and its database store ([`database`], the
//! `cache` table, the 11+ default). Laravel's other stores (memcached,
//! dynamodb, array, octane) are not supported: with them the worker sees
//! no restart or pause signal and counts no maxExceptions.

pub mod database;
pub mod file;
mod payloads;
pub mod php;
pub mod redis;

pub use self::database::DatabaseCache;
pub use self::file::FileCache;
pub use self::redis::RedisCache;

use crate::queue::redis_queue::elsewhere::RestartElsewhere;

/// The cache key of the restart signal.
pub const RESTART_KEY: &str = "illuminate:queue:restart";

/// The cache key that pauses every queue (Laravel 13.25+).
pub const ALL_PAUSED_KEY: &str = "illuminate:queues:paused";

/// Seconds a `job-exceptions:{uuid}` counter lives (one day, as Laravel).
pub const EXCEPTIONS_TTL: u64 = 86_400;

/// The cache key that pauses `queue` on `connection` (Laravel 12.40+).
pub fn paused_key(connection: &str, queue: &str) -> String {
    format!("illuminate:queue:paused:{connection}:{queue}")
}

fn exceptions_key(uuid: &str) -> String {
    format!("job-exceptions:{uuid}")
}

/// A cache store the worker can read signals from.
#[derive(Clone)]
pub enum CacheStore {
    /// Laravel's Redis cache store.
    Redis(RedisCache),
    /// Laravel's file cache store.
    File(FileCache),
    /// Laravel's database cache store (the `cache` table).
    Database(DatabaseCache),
    /// No cache: no restart or pause signals, no maxExceptions counting (as
    /// Laravel without a cache).
    None,
}

/// What the worker reads from the cache once per loop iteration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signals {
    /// The restart marker as stored (compared as a string with the one read
    /// at start; any change means restart).
    pub restart: Option<String>,
    /// For each queue asked about, whether it is paused (its own key, or
    /// the global one).
    pub paused: Vec<bool>,
}

impl CacheStore {
    /// Raw values of `keys` (`None` for missing or expired), in one round
    /// trip where the store allows.
    ///
    /// # Errors
    /// Any store error.
    pub async fn many(&self, keys: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        match self {
            CacheStore::Redis(c) => c.many(keys).await,
            CacheStore::File(c) => c.many(keys).await,
            CacheStore::Database(c) => c.many(keys).await,
            CacheStore::None => Ok(vec![None; keys.len()]),
        }
    }

    /// The raw value of `key` (`None` when missing or expired): the
    /// PHP-serialized text Laravel stored (see [`php`]).
    ///
    /// # Errors
    /// Any store error.
    pub async fn get(&self, key: &str) -> anyhow::Result<Option<String>> {
        Ok(self.many(&[key.to_string()]).await?.pop().flatten())
    }

    /// The store's kind, as `[cache] store` names it: `redis`, `file`,
    /// `database` or `none`.
    pub fn kind(&self) -> &'static str {
        match self {
            CacheStore::Redis(_) => "redis",
            CacheStore::File(_) => "file",
            CacheStore::Database(_) => "database",
            CacheStore::None => "none",
        }
    }

    /// Where cache key `key` lives in the store, for messages: the full
    /// Redis key and the server, the `cache` table's row, or the file.
    pub fn locate(&self, key: &str) -> String {
        match self {
            CacheStore::Redis(c) => c.locate(key),
            CacheStore::File(c) => format!("the file {}", c.path(key).display()),
            CacheStore::Database(c) => c.locate(key),
            CacheStore::None => "no cache store".to_string(),
        }
    }

    /// The restart marker and the paused state of `queues` on `connection`,
    /// read together (one MGET on Redis).
    ///
    /// # Errors
    /// Any store error.
    pub async fn signals(&self, connection: &str, queues: &[String]) -> anyhow::Result<Signals> {
        let mut keys = vec![RESTART_KEY.to_string(), ALL_PAUSED_KEY.to_string()];
        keys.extend(queues.iter().map(|q| paused_key(connection, q)));
        let mut values = self.many(&keys).await?.into_iter();
        let restart = values.next().flatten();
        let all = values.next().flatten().is_some_and(|v| php::truthy(&v));
        let paused = values
            .map(|v| all || v.is_some_and(|v| php::truthy(&v)))
            .collect();
        Ok(Signals { restart, paused })
    }

    /// When the restart key the worker watches does not exist, restart keys
    /// under other names in the same store (another cache prefix, colon
    /// rule or Redis prefix): where `queue:restart` probably writes. Empty
    /// for the file store and without a store.
    ///
    /// # Errors
    /// Any store error.
    pub async fn restart_elsewhere(&self) -> anyhow::Result<Vec<RestartElsewhere>> {
        match self {
            CacheStore::Redis(c) => c.restart_elsewhere().await,
            CacheStore::Database(c) => {
                if self.restart_marker().await?.is_some() {
                    return Ok(Vec::new());
                }
                let watched = c.key(RESTART_KEY);
                Ok(c.keys_ending_with(RESTART_KEY, 3)
                    .await?
                    .into_iter()
                    .filter(|k| *k != watched)
                    .map(|found| RestartElsewhere {
                        watched: watched.clone(),
                        found,
                    })
                    .collect())
            }
            CacheStore::File(_) | CacheStore::None => Ok(Vec::new()),
        }
    }

    /// The restart marker alone.
    ///
    /// # Errors
    /// Any store error.
    pub async fn restart_marker(&self) -> anyhow::Result<Option<String>> {
        Ok(self.many(&[RESTART_KEY.to_string()]).await?.pop().flatten())
    }

    /// Writes a new restart marker (`queue:restart`): the current UNIX time,
    /// stored for ever.
    ///
    /// # Errors
    /// Any store error, or no store configured.
    pub async fn write_restart(&self, now: i64) -> anyhow::Result<()> {
        self.forever(RESTART_KEY, php::Value::Int(now)).await
    }

    /// Pauses (`true`) or resumes a queue, as `queue:pause` / `queue:resume`.
    ///
    /// # Errors
    /// Any store error, or no store configured.
    pub async fn set_paused(
        &self,
        connection: &str,
        queue: &str,
        paused: bool,
    ) -> anyhow::Result<()> {
        let key = paused_key(connection, queue);
        if paused {
            self.forever(&key, php::Value::Bool(true)).await
        } else {
            self.forget(&key).await
        }
    }

    /// Counts one exception for job `uuid` and returns the new count, as
    /// `WillExceedMaxExceptions` does: create the key with 0 and a one-day
    /// TTL when it is missing, then increment it. `None` without a store.
    ///
    /// # Errors
    /// Any store error.
    pub async fn count_exception(&self, uuid: &str) -> anyhow::Result<Option<i64>> {
        let key = exceptions_key(uuid);
        match self {
            CacheStore::Redis(c) => c.count(&key, EXCEPTIONS_TTL).await.map(Some),
            CacheStore::File(c) => c.count(&key, EXCEPTIONS_TTL).await.map(Some),
            CacheStore::Database(c) => c.count(&key, EXCEPTIONS_TTL).await.map(Some),
            CacheStore::None => Ok(None),
        }
    }

    /// Deletes the exception counter of job `uuid` (when the job fails).
    ///
    /// # Errors
    /// Any store error.
    pub async fn forget_exceptions(&self, uuid: &str) -> anyhow::Result<()> {
        match self {
            CacheStore::None => Ok(()),
            _ => self.forget(&exceptions_key(uuid)).await,
        }
    }

    async fn forever(&self, key: &str, value: php::Value) -> anyhow::Result<()> {
        match self {
            CacheStore::Redis(c) => c.forever(key, &value).await,
            CacheStore::File(c) => c.forever(key, &value).await,
            CacheStore::Database(c) => c.forever(key, &value).await,
            CacheStore::None => anyhow::bail!("no cache store is configured"),
        }
    }

    /// `forget`: deletes `key` from the store (Laravel's
    /// `Repository::forget`); nothing to do when it is missing.
    ///
    /// # Errors
    /// Any store error, or no store configured.
    pub async fn forget(&self, key: &str) -> anyhow::Result<()> {
        match self {
            CacheStore::Redis(c) => c.forget(key).await,
            CacheStore::File(c) => c.forget(key).await,
            CacheStore::Database(c) => c.forget(key).await,
            CacheStore::None => anyhow::bail!("no cache store is configured"),
        }
    }
}
