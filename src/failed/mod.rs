//! Where failed jobs are recorded (`queue.failed.driver`, protocol §8).
//!
//! - `database-uuids`: Laravel's `failed_jobs` table, on SQLite, MySQL/MariaDB
//!   or PostgreSQL, so `php artisan queue:failed` and friends see our rows.
//! - `redis`: for setups with no database; a hash and an index in Redis.
//! - `null`: discards (as Laravel's `null` driver).

pub mod database;
pub mod php_json;
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

/// A failed job as a store holds it: what `queue:failed` lists and
/// `queue:retry` pushes back (Laravel's row with `id` = the uuid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredJob {
    /// The id the commands take: the uuid.
    pub id: String,
    /// Queue connection name the job failed on.
    pub connection: String,
    /// Plain queue name.
    pub queue: String,
    /// The raw body of the failing attempt.
    pub payload: String,
    /// The recorded exception text.
    pub exception: String,
    /// `Y-m-d H:i:s` as stored: UTC when this worker wrote it, the app's
    /// timezone when Laravel did.
    pub failed_at: String,
    /// Where this record is, so that exactly it can be deleted.
    pub place: Place,
}

/// Where one stored failed job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A row of the `failed_jobs` table (one per uuid: the column is unique).
    Table,
    /// A record of the Redis store, under this key of its hash.
    Redis(String),
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
            FailedJobStore::Redis(r) => r.log(job).await.map(drop),
            FailedJobStore::Null => Ok(()),
        }
    }

    /// Every failed job, newest first (`FailedJobProviderInterface::all`):
    /// by descending `id` in the table, by descending time of failure in
    /// Redis (jobs failed in the same second in descending uuid order).
    ///
    /// # Errors
    /// The store cannot be read.
    pub async fn all(&self) -> anyhow::Result<Vec<StoredJob>> {
        match self {
            FailedJobStore::Database(db) => db.all().await,
            FailedJobStore::Redis(r) => r.all().await,
            FailedJobStore::Null => Ok(Vec::new()),
        }
    }

    /// Every failed job with uuid `id`, newest first. The table holds one
    /// at most; the Redis store keeps every record of a uuid (it never
    /// overwrites one).
    ///
    /// # Errors
    /// The store cannot be read.
    pub async fn find_all(&self, id: &str) -> anyhow::Result<Vec<StoredJob>> {
        match self {
            FailedJobStore::Database(db) => Ok(db.find(id).await?.into_iter().collect()),
            FailedJobStore::Redis(r) => r.find_all(id).await,
            FailedJobStore::Null => Ok(Vec::new()),
        }
    }

    /// Deletes every failed job with uuid `id` (as Laravel's `file` driver
    /// deletes every entry of an id); whether one was deleted. The `null`
    /// store answers `true`, as Laravel's `NullFailedJobProvider`.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn forget(&self, id: &str) -> anyhow::Result<bool> {
        match self {
            FailedJobStore::Database(db) => db.forget(id).await,
            FailedJobStore::Redis(r) => r.forget(id).await,
            FailedJobStore::Null => Ok(true),
        }
    }

    /// Deletes exactly `job` (one of [`FailedJobStore::all`] or
    /// [`FailedJobStore::find_all`]), leaving other records of its uuid;
    /// whether it was still there.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn delete(&self, job: &StoredJob) -> anyhow::Result<bool> {
        match (self, &job.place) {
            (FailedJobStore::Database(db), Place::Table) => db.forget(&job.id).await,
            (FailedJobStore::Redis(r), Place::Redis(key)) => r.delete(key).await,
            (FailedJobStore::Null, _) => Ok(true),
            (_, place) => anyhow::bail!("this store holds no record at {place:?}"),
        }
    }

    /// Deletes every failed job (`older_than` = `None`), or those that failed
    /// at or before `older_than` (whole seconds, UTC); returns how many were
    /// deleted.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn flush(&self, older_than: Option<DateTime<Utc>>) -> anyhow::Result<u64> {
        match self {
            FailedJobStore::Database(db) => db.flush(older_than).await,
            FailedJobStore::Redis(r) => r.flush(older_than).await,
            FailedJobStore::Null => Ok(0),
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
