//! Where failed jobs are recorded (`queue.failed.driver`, protocol §8).
//!
//! - `database-uuids`: Laravel's `failed_jobs` table, on SQLite, MySQL/MariaDB
//!   or PostgreSQL, so `php artisan queue:failed` and friends see our rows.
//!   A record the database refuses for good (see [`Logged`]) goes to the
//!   Redis store under the queue connection's prefix instead, its
//!   *fallback*; the commands read both.
//! - `redis`: for setups with no database; a hash and an index in Redis.
//! - `null`: discards (as Laravel's `null` driver).

pub mod database;
pub mod php_json;
pub mod redis_store;
pub mod unrecorded_record;

use chrono::{DateTime, Utc};
use tokio::sync::OnceCell;

pub use database::{DatabaseStore, ErrorClass};
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
    /// The original raw body of the failing attempt, shared with the job
    /// rather than copied.
    pub payload: SharedText,
    /// The exception text (see [`crate::exception::JobException`]).
    pub exception: String,
    /// When it failed.
    pub failed_at: DateTime<Utc>,
}

/// UTF-8 text held in shared bytes: a failure record's payload is the
/// job's own bytes, not a copy of them (for a job of megabytes the copy
/// would be held while the store writes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedText(bytes::Bytes);

impl SharedText {
    /// `bytes` as text: shared when they are UTF-8; otherwise a copy with
    /// each invalid sequence replaced by U+FFFD, as PHP's strings would be
    /// by the JSON the failed store writes.
    pub fn lossy(bytes: &bytes::Bytes) -> Self {
        match String::from_utf8_lossy(bytes) {
            std::borrow::Cow::Borrowed(_) => SharedText(bytes.clone()),
            std::borrow::Cow::Owned(text) => SharedText(text.into()),
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // UTF-8 by construction; checked again rather than assumed.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl From<String> for SharedText {
    fn from(text: String) -> Self {
        SharedText(text.into())
    }
}

impl From<&str> for SharedText {
    fn from(text: &str) -> Self {
        SharedText(bytes::Bytes::copy_from_slice(text.as_bytes()))
    }
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
    /// A record of the Redis store (the `redis` driver, or the table's
    /// fallback), under this key of its hash.
    Redis(String),
}

/// What became of a failed job given to [`FailedJobStore::log`]: the
/// settle step removes the job from `:reserved` after the first two, and
/// leaves it there (reclaimed after `retry_after`) after the third.
#[must_use]
#[derive(Debug)]
pub enum Logged {
    /// In the configured store.
    Recorded,
    /// The database refused the record for a reason retrying cannot fix
    /// (a duplicate uuid, a value too long for its column, a byte the
    /// encoding does not allow, a record over the packet size...); it was
    /// written to the fallback, the Redis store under the queue
    /// connection's prefix, where `failed`, `retry`, `forget` and `flush`
    /// see it.
    RecordedInFallback {
        /// The database's answer.
        refusal: String,
        /// The fallback's hash key and the record's key in it.
        fallback: String,
    },
    /// Written nowhere: the store is down (connection refused, timeout,
    /// read-only, too many connections...), or it refused the record and
    /// the fallback could not be written either. Retry later: the job stays
    /// reserved.
    StoreDown(anyhow::Error),
}

/// A configured failed-job store.
pub enum FailedJobStore {
    /// Laravel's `failed_jobs` table (`database-uuids` driver).
    Database {
        /// The table.
        table: DatabaseStore,
        /// Where the records it refuses go.
        fallback: Box<Fallback>,
    },
    /// A Redis hash plus a time index.
    Redis(RedisFailedStore),
    /// Nothing is kept.
    Null,
}

impl FailedJobStore {
    /// Records `job`: in the configured store, else (the table refused it
    /// for good) in the fallback. See [`Logged`] for what the caller must
    /// do with the job.
    pub async fn log(&self, job: &FailedJob) -> Logged {
        match self {
            FailedJobStore::Database { table, fallback } => match table.log(job).await {
                Ok(()) => Logged::Recorded,
                Err(e) if e.class == ErrorClass::Down => Logged::StoreDown(e.error),
                Err(refused) => {
                    let refusal = format!("{:#}", refused.error);
                    match fallback.log(job).await {
                        Ok(fallback) => Logged::RecordedInFallback { refusal, fallback },
                        Err(e) => Logged::StoreDown(e.context(format!(
                            "the failed jobs table refused the record ({refusal}), \
                             and it cannot be kept in a fallback either"
                        ))),
                    }
                }
            },
            FailedJobStore::Redis(r) => match r.log(job).await {
                Ok(_) => Logged::Recorded,
                Err(e) => Logged::StoreDown(e),
            },
            FailedJobStore::Null => Logged::Recorded,
        }
    }

    /// Every failed job, newest first (`FailedJobProviderInterface::all`):
    /// by descending `id` in the table, by descending time of failure in
    /// Redis (jobs failed in the same second in descending key order). The
    /// table's fallback records are merged in by time of failure; when the
    /// fallback cannot be read, a warning says so and the table's rows are
    /// listed alone.
    ///
    /// # Errors
    /// The store cannot be read.
    pub async fn all(&self) -> anyhow::Result<Vec<StoredJob>> {
        match self {
            FailedJobStore::Database { table, fallback } => {
                let rows = table.all().await?;
                let records = fallback.read(|r| r.all()).await;
                Ok(newest_first(rows, records.unwrap_or_default()))
            }
            FailedJobStore::Redis(r) => r.all().await,
            FailedJobStore::Null => Ok(Vec::new()),
        }
    }

    /// Every failed job with uuid `id`, newest first: the table holds one at
    /// most (plus any its fallback holds); the Redis store keeps every
    /// record of a uuid.
    ///
    /// # Errors
    /// The store cannot be read.
    pub async fn find_all(&self, id: &str) -> anyhow::Result<Vec<StoredJob>> {
        match self {
            FailedJobStore::Database { table, fallback } => {
                let rows = table.find(id).await?.into_iter().collect();
                let records = fallback.read(|r| r.find_all(id)).await;
                Ok(newest_first(rows, records.unwrap_or_default()))
            }
            FailedJobStore::Redis(r) => r.find_all(id).await,
            FailedJobStore::Null => Ok(Vec::new()),
        }
    }

    /// Deletes every failed job with uuid `id` (as Laravel's `file` driver
    /// deletes every entry of an id; the table's fallback too); whether one
    /// was deleted. The `null` store answers `true`, as Laravel's
    /// `NullFailedJobProvider`.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn forget(&self, id: &str) -> anyhow::Result<bool> {
        match self {
            FailedJobStore::Database { table, fallback } => {
                let row = table.forget(id).await?;
                let records = fallback.read(|r| r.forget(id)).await;
                Ok(row || records.unwrap_or(false))
            }
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
            (FailedJobStore::Database { table, .. }, Place::Table) => table.forget(&job.id).await,
            (FailedJobStore::Database { fallback, .. }, Place::Redis(key)) => {
                fallback.store().await?.delete(key).await
            }
            (FailedJobStore::Redis(r), Place::Redis(key)) => r.delete(key).await,
            (FailedJobStore::Null, _) => Ok(true),
            (FailedJobStore::Redis(_), Place::Table) => {
                anyhow::bail!("the redis failed job store has no table")
            }
        }
    }

    /// Deletes every failed job (`older_than` = `None`), or those that failed
    /// at or before `older_than` (whole seconds, UTC), the table's fallback
    /// records included; returns how many were deleted.
    ///
    /// # Errors
    /// The store cannot be written.
    pub async fn flush(&self, older_than: Option<DateTime<Utc>>) -> anyhow::Result<u64> {
        match self {
            FailedJobStore::Database { table, fallback } => {
                let rows = table.flush(older_than).await?;
                let records = fallback.read(|r| r.flush(older_than)).await;
                Ok(rows + records.unwrap_or(0))
            }
            FailedJobStore::Redis(r) => r.flush(older_than).await,
            FailedJobStore::Null => Ok(0),
        }
    }

    /// A short name for logs.
    pub fn describe(&self) -> &'static str {
        match self {
            FailedJobStore::Database { .. } => "database-uuids",
            FailedJobStore::Redis(_) => "redis",
            FailedJobStore::Null => "null",
        }
    }
}

/// The table's fallback: the Redis store under the queue connection's
/// prefix (the keys of the `redis` driver), connected on first use; none
/// where the queue is not on Redis (a database, SQS or beanstalkd app has
/// no Redis to keep records in, and its commands never touch one).
pub struct Fallback {
    /// Where the records go; `None`: no fallback.
    redis: Option<crate::redis::RedisTarget>,
    prefix: String,
    store: OnceCell<RedisFailedStore>,
}

impl Fallback {
    /// The Redis store at `redis` with keys under `prefix`; nothing is
    /// connected yet.
    pub fn new(redis: crate::redis::RedisTarget, prefix: &str) -> Self {
        Fallback {
            redis: Some(redis),
            prefix: prefix.to_string(),
            store: OnceCell::new(),
        }
    }

    /// No fallback: a record the table refuses for good is kept nowhere
    /// else (the job stays reserved and comes back after `retry_after`).
    pub fn none() -> Self {
        Fallback {
            redis: None,
            prefix: String::new(),
            store: OnceCell::new(),
        }
    }

    /// The store, connecting on first use (a failed connection is tried
    /// again next time).
    async fn store(&self) -> anyhow::Result<&RedisFailedStore> {
        let Some(redis) = &self.redis else {
            anyhow::bail!("there is no fallback: the queue is not on Redis");
        };
        self.store
            .get_or_try_init(|| {
                RedisFailedStore::connect(redis, &self.prefix, "the failed jobs fallback")
            })
            .await
    }

    /// Writes `job`; returns where (`hash key` / `record key`).
    async fn log(&self, job: &FailedJob) -> anyhow::Result<String> {
        let store = self.store().await?;
        let key = store.log(job).await?;
        Ok(format!("{} / {key}", store.key()))
    }

    /// Runs `op` on the store; on an error, logs a warning (the commands go
    /// on with the table alone) and returns `None`.
    async fn read<'a, T, F, Fut>(&'a self, op: F) -> Option<T>
    where
        F: FnOnce(&'a RedisFailedStore) -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        self.redis.as_ref()?;
        let result = match self.store().await {
            Ok(store) => op(store).await,
            Err(e) => Err(e),
        };
        result
            .inspect_err(|e| {
                tracing::warn!(
                    "the failed jobs fallback in Redis cannot be used, so only the table is: {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
            })
            .ok()
    }
}

/// Merges two newest-first lists by `failed_at` (`Y-m-d H:i:s` text, so
/// compared as text), `first`'s entries before `second`'s on a tie.
fn newest_first(first: Vec<StoredJob>, second: Vec<StoredJob>) -> Vec<StoredJob> {
    let mut merged = Vec::with_capacity(first.len() + second.len());
    let mut a = first.into_iter().peekable();
    let mut b = second.into_iter().peekable();
    loop {
        let take_b = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => y.failed_at > x.failed_at,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        match if take_b { b.next() } else { a.next() } {
            Some(job) => merged.push(job),
            None => return merged,
        }
    }
}

/// `failed_at` as Laravel writes it: `Y-m-d H:i:s`.
pub fn format_failed_at(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, at: &str) -> StoredJob {
        StoredJob {
            id: id.into(),
            connection: "redis".into(),
            queue: "default".into(),
            payload: "{}".into(),
            exception: String::new(),
            failed_at: at.into(),
            place: Place::Table,
        }
    }

    #[test]
    fn merge_keeps_both_orders_and_puts_the_newest_first() {
        let rows = vec![
            job("r3", "2026-01-01 00:00:03"),
            job("r1", "2026-01-01 00:00:01"),
        ];
        let records = vec![
            job("f3", "2026-01-01 00:00:03"),
            job("f2", "2026-01-01 00:00:02"),
            job("f0", "2026-01-01 00:00:00"),
        ];
        let ids: Vec<String> = newest_first(rows, records)
            .into_iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(ids, ["r3", "f3", "f2", "r1", "f0"]);
        assert!(newest_first(vec![], vec![]).is_empty());
    }
}
