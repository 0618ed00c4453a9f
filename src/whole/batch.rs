//! A batch's counters in `job_batches`, exactly as Laravel's
//! `DatabaseBatchRepository` moves them (8.x–13.x alike):
//!
//! - success (`Batch::recordSuccessfulJob` → `decrementPendingJobs`): in
//!   one transaction, read the row locked (`FOR UPDATE`; SQLite: the write
//!   lock is taken first, `BEGIN IMMEDIATE`), write `pending_jobs` − 1,
//!   `failed_jobs` as read, `failed_job_ids` without the job's uuid; then,
//!   when `pending_jobs` reached 0, `finished_at` = now (`markAsFinished`);
//! - failure (`recordFailedJob` → `incrementFailedJobs`): the same with
//!   `failed_jobs` + 1 and the uuid added (once); then, when
//!   `failed_jobs` became 1 and the batch's `options` do not allow
//!   failures, `cancelled_at` = `finished_at` = now (`cancel`).
//!
//! A batch that is not in the table is left alone, as Laravel does. The
//! callbacks (`then`, `catch`, `finally`, `progress`) and batch events are
//! PHP's: not run here.

use anyhow::Context;
use sqlx::{AssertSqlSafe, Row};

use crate::queue::now;
use crate::sql::{Pool, on_pool};

/// What a job's end did to its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// `pending_jobs` after the update.
    pub pending_jobs: i64,
    /// `failed_jobs` after the update.
    pub failed_jobs: i64,
    /// The update finished the batch (`finished_at` set).
    pub finished: bool,
    /// The update cancelled the batch (its first failure without
    /// `allowFailures`).
    pub cancelled: bool,
}

/// The app's batches table.
#[derive(Clone)]
pub struct Batches {
    pool: Pool,
    table: String,
}

/// One row as read under the lock.
struct Row_ {
    pending: i64,
    failed: i64,
    failed_ids: Vec<String>,
    options: String,
}

impl Batches {
    /// The table `table` of the database at `url`; nothing connects until
    /// the first use.
    ///
    /// # Errors
    /// A URL the drivers cannot parse, or a table name that is not a plain
    /// identifier.
    pub fn new(url: &str, table: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !table.is_empty()
                && table
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'),
            "batches table name {table:?} is not a plain identifier"
        );
        Ok(Batches {
            pool: Pool::lazy(url).context("the batches database")?,
            table: table.to_string(),
        })
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    fn mark(&self, n: usize) -> String {
        match self.pool {
            Pool::Postgres(_) => format!("${n}"),
            Pool::Sqlite(_) | Pool::MySql(_) => "?".into(),
        }
    }

    fn int(&self, column: &str) -> String {
        match self.pool {
            Pool::Sqlite(_) => column.to_string(),
            Pool::MySql(_) => format!("CAST({column} AS SIGNED)"),
            Pool::Postgres(_) => format!("CAST({column} AS BIGINT)"),
        }
    }

    /// Records the success of job `uuid` in batch `id`. `None` when the
    /// batch is not in the table.
    ///
    /// # Errors
    /// Any database error; nothing was changed.
    pub async fn record_success(&self, id: &str, uuid: &str) -> anyhow::Result<Option<Counts>> {
        self.update(id, uuid, false).await
    }

    /// Records the failure of job `uuid` in batch `id`. `None` when the
    /// batch is not in the table.
    ///
    /// # Errors
    /// Any database error; nothing was changed.
    pub async fn record_failure(&self, id: &str, uuid: &str) -> anyhow::Result<Option<Counts>> {
        self.update(id, uuid, true).await
    }

    /// Whether batch `id` was cancelled (`cancelled_at` set); false when it
    /// is not in the table.
    ///
    /// # Errors
    /// Any database error.
    pub async fn cancelled(&self, id: &str) -> anyhow::Result<bool> {
        let sql = format!(
            "SELECT {c} FROM {t} WHERE id = {m}",
            c = self.int("cancelled_at"),
            t = self.table,
            m = self.mark(1)
        );
        let at: Option<Option<i64>> = on_pool!(&self.pool, |p| {
            sqlx::query(AssertSqlSafe(sql))
                .bind(id)
                .fetch_optional(p)
                .await
                .with_context(|| format!("cannot read the batch {id} in {}", self.table))?
                .map(|r| r.try_get(0))
                .transpose()?
        });
        Ok(at.flatten().is_some())
    }

    /// Checks that the table can be read, for the start-up warning.
    ///
    /// # Errors
    /// The database cannot be reached or the table read.
    pub async fn check(&self) -> anyhow::Result<()> {
        let sql = format!("SELECT COUNT(*) FROM {} WHERE 1 = 0", self.table);
        on_pool!(&self.pool, |p| {
            sqlx::query(AssertSqlSafe(sql))
                .execute(p)
                .await
                .with_context(|| format!("cannot read the batches table {}", self.table))?;
        });
        Ok(())
    }

    /// `updateAtomicValues` then `markAsFinished` / `cancel`.
    async fn update(&self, id: &str, uuid: &str, failed: bool) -> anyhow::Result<Option<Counts>> {
        let lock = match self.pool {
            Pool::Sqlite(_) => "",
            Pool::MySql(_) | Pool::Postgres(_) => " FOR UPDATE",
        };
        let select = format!(
            "SELECT {p}, {f}, failed_job_ids, options FROM {t} WHERE id = {m}{lock}",
            p = self.int("pending_jobs"),
            f = self.int("failed_jobs"),
            t = self.table,
            m = self.mark(1)
        );
        let update = format!(
            "UPDATE {t} SET pending_jobs = {a}, failed_jobs = {b}, failed_job_ids = {c} WHERE id = {d}",
            t = self.table,
            a = self.mark(1),
            b = self.mark(2),
            c = self.mark(3),
            d = self.mark(4)
        );
        let context = || format!("cannot update the batch {id} in {}", self.table);
        let read = on_pool!(&self.pool, |p| {
            let mut tx = match self.pool {
                Pool::Sqlite(_) => p.begin_with("BEGIN IMMEDIATE").await,
                _ => p.begin().await,
            }
            .with_context(context)?;
            let row = sqlx::query(AssertSqlSafe(select))
                .bind(id)
                .fetch_optional(&mut *tx)
                .await
                .with_context(context)?;
            let Some(row) = row else {
                tx.rollback().await.with_context(context)?;
                return Ok(None);
            };
            let mut read = Row_ {
                pending: row.try_get::<i64, _>(0).with_context(context)?,
                failed: row.try_get::<i64, _>(1).with_context(context)?,
                failed_ids: ids(row.try_get::<Option<String>, _>(2).with_context(context)?),
                options: row
                    .try_get::<Option<String>, _>(3)
                    .with_context(context)?
                    .unwrap_or_default(),
            };
            if failed {
                read.failed += 1;
                if !read.failed_ids.iter().any(|u| u == uuid) {
                    read.failed_ids.push(uuid.to_string());
                }
            } else {
                read.pending -= 1;
                read.failed_ids.retain(|u| u != uuid);
            }
            let ids_json = serde_json::to_string(&read.failed_ids)?;
            sqlx::query(AssertSqlSafe(update))
                .bind(read.pending)
                .bind(read.failed)
                .bind(ids_json)
                .bind(id)
                .execute(&mut *tx)
                .await
                .with_context(context)?;
            tx.commit().await.with_context(context)?;
            read
        });
        let finished = !failed && read.pending == 0;
        let cancelled = failed && read.failed == 1 && !allows_failures(&read.options);
        if finished || cancelled {
            self.stamp(id, cancelled).await?;
        }
        Ok(Some(Counts {
            pending_jobs: read.pending,
            failed_jobs: read.failed,
            finished,
            cancelled,
        }))
    }

    /// `markAsFinished` (`finished_at` = now) or, with `cancel`,
    /// `markAsCancelled` (`cancelled_at` = `finished_at` = now).
    async fn stamp(&self, id: &str, cancel: bool) -> anyhow::Result<()> {
        let set = if cancel {
            format!(
                "cancelled_at = {}, finished_at = {}",
                self.mark(1),
                self.mark(2)
            )
        } else {
            format!("finished_at = {}", self.mark(1))
        };
        let at = if cancel { 3 } else { 2 };
        let sql = format!(
            "UPDATE {} SET {set} WHERE id = {}",
            self.table,
            self.mark(at)
        );
        let now = now();
        on_pool!(&self.pool, |p| {
            let mut q = sqlx::query(AssertSqlSafe(sql)).bind(now);
            if cancel {
                q = q.bind(now);
            }
            q.bind(id)
                .execute(p)
                .await
                .with_context(|| format!("cannot mark the batch {id} in {}", self.table))?;
        });
        Ok(())
    }
}

/// `failed_job_ids` as a list (`(array) json_decode(…)`: anything that is
/// not a list of strings counts as empty).
fn ids(text: Option<String>) -> Vec<String> {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Whether the PHP-serialized `options` (base64 on PostgreSQL, told by
/// the absence of `:` and `;`, as `unserialize` there) set
/// `allowFailures` to true.
pub fn allows_failures(options: &str) -> bool {
    use base64::Engine as _;
    let decoded;
    let text = if !options.contains(':') && !options.contains(';') {
        decoded = base64::engine::general_purpose::STANDARD
            .decode(options.trim())
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        decoded.as_str()
    } else {
        options
    };
    text.contains("s:13:\"allowFailures\";b:1;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_failures_in_either_encoding() {
        let plain = "a:2:{s:13:\"allowFailures\";b:1;s:5:\"queue\";N;}";
        assert!(allows_failures(plain));
        assert!(!allows_failures("a:1:{s:13:\"allowFailures\";b:0;}"));
        assert!(!allows_failures("a:0:{}"));
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(plain);
        assert!(allows_failures(&b64));
        assert!(!allows_failures(""));
    }
}
