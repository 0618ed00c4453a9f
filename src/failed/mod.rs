//! Where failed jobs are recorded (`queue.failed.driver`, protocol §8).
//!
//! - `database-uuids`: Laravel's `failed_jobs` table, on SQLite, MySQL/MariaDB
//!   or PostgreSQL, so `php artisan queue:failed` and friends see our rows.
//! - `redis`: for setups with no database; a hash and an index in Redis.
//! - `null`: discards (as Laravel's `null` driver).

pub mod database;
pub mod redis_store;

use chrono::{DateTime, Utc};

pub use database::DatabaseStore;
pub use redis_store::RedisFailedStore;

/// One failed job, as `FailedJobProviderInterface::log` receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedJob {
    /// The payload's `uuid`; a fresh v4 uuid when the payload has none
    /// (Laravel's insert would fail there and lose the record).
    pub uuid: String,
    /// Queue connection name (`redis`).
    pub connection: String,
    /// Plain queue name (`default`).
    pub queue: String,
    /// The original raw body of the failing attempt.
    pub payload: String,
    /// The exception text (see [`crate::exception::JobException`]).
    pub exception: String,
    /// When it failed.
    pub failed_at: DateTime<Utc>,
}

/// A configured failed-job store.
pub enum FailedJobStore {
    /// Laravel's `failed_jobs` table (`database-uuids` driver).
    Database(DatabaseStore),
    /// A Redis hash plus a time index.
    Redis(RedisFailedStore),
    /// Nothing is kept.
    Null,
}

impl FailedJobStore {
    /// Records `job`.
    ///
    /// # Errors
    /// The store could not be written; the caller must then keep the job
    /// (it stays reserved and is reclaimed), so nothing is lost.
    pub async fn log(&self, job: &FailedJob) -> anyhow::Result<()> {
        match self {
            FailedJobStore::Database(db) => db.log(job).await,
            FailedJobStore::Redis(r) => r.log(job).await,
            FailedJobStore::Null => Ok(()),
        }
    }

    /// A short name for logs.
    pub fn describe(&self) -> &'static str {
        match self {
            FailedJobStore::Database(_) => "database-uuids",
            FailedJobStore::Redis(_) => "redis",
            FailedJobStore::Null => "null",
        }
    }
}

/// `failed_at` as Laravel writes it: `Y-m-d H:i:s`.
pub fn format_failed_at(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}
