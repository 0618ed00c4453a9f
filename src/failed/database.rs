//! Laravel's `failed_jobs` table (`database-uuids` driver).
//!
//! Schema (8.x–13.x migration): `id` bigint PK, `uuid` string unique,
//! `connection` text, `queue` text, `payload` longText, `exception`
//! longText, `failed_at` timestamp. The app's migration owns the table; the
//! daemon inserts rows, the `failed`/`retry`/`forget`/`flush` commands read
//! and delete them as `DatabaseUuidFailedJobProvider` does (by `uuid`,
//! newest `id` first).
//!
//! `failed_at` is written and compared as `Y-m-d H:i:s` in UTC, Laravel's
//! default app timezone.

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, ColumnIndex, Decode, MySqlPool, PgPool, Row, SqlitePool, Type};

use super::{FailedJob, Place, StoredJob, format_failed_at};

/// A pool for one of the databases Laravel supports.
pub enum Pool {
    /// `sqlite://path` (`DB_CONNECTION=sqlite`).
    Sqlite(SqlitePool),
    /// `mysql://` (MySQL and MariaDB).
    MySql(MySqlPool),
    /// `postgres://` or `pgsql://`.
    Postgres(PgPool),
}

/// Runs `$body` with `$p` bound to whichever pool `$pool` holds; the body
/// must have the same type for every database.
macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            Pool::Sqlite($p) => $body,
            Pool::MySql($p) => $body,
            Pool::Postgres($p) => $body,
        }
    };
}

/// The `failed_jobs` table of one database.
pub struct DatabaseStore {
    pool: Pool,
    table: String,
}

impl DatabaseStore {
    /// Prepares a lazy pool for `url`; nothing connects until the first
    /// failure is recorded, so a database that is down at start does not
    /// stop the worker.
    ///
    /// # Errors
    /// A URL of an unknown scheme, or one the driver cannot parse, or a table
    /// name that is not a plain identifier.
    pub fn new(url: &str, table: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !table.is_empty()
                && table
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'),
            "failed jobs table name {table:?} is not a plain identifier"
        );
        let pool = match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("sqlite") => Pool::Sqlite(SqlitePool::connect_lazy(url)?),
            Some("mysql" | "mariadb") => Pool::MySql(MySqlPool::connect_lazy(&url.replacen(
                "mariadb://",
                "mysql://",
                1,
            ))?),
            Some("postgres" | "postgresql" | "pgsql") => {
                let url = url.replacen("pgsql://", "postgres://", 1);
                Pool::Postgres(PgPool::connect_lazy(&url)?)
            }
            _ => anyhow::bail!(
                "failed jobs database URL must start with sqlite://, mysql:// or postgres://"
            ),
        };
        Ok(DatabaseStore {
            pool,
            table: table.to_string(),
        })
    }

    /// Bind mark number `n` (from 1) in this database's syntax.
    fn mark(&self, n: usize) -> String {
        match self.pool {
            Pool::Postgres(_) => format!("${n}"),
            Pool::Sqlite(_) | Pool::MySql(_) => "?".into(),
        }
    }

    /// A bound `Y-m-d H:i:s` text parameter as a timestamp: PostgreSQL will
    /// not assign or compare text to a `timestamp` column without a cast;
    /// the others convert it themselves.
    fn timestamp_mark(&self, n: usize) -> String {
        match self.pool {
            Pool::Postgres(_) => format!("CAST(${n} AS timestamp)"),
            Pool::Sqlite(_) | Pool::MySql(_) => "?".into(),
        }
    }

    /// A select expression giving `failed_at` as `Y-m-d H:i:s` text.
    fn failed_at_text(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "CAST(failed_at AS TEXT)",
            Pool::MySql(_) => "DATE_FORMAT(failed_at, '%Y-%m-%d %H:%i:%s')",
            Pool::Postgres(_) => "to_char(failed_at, 'YYYY-MM-DD HH24:MI:SS')",
        }
    }

    /// `SELECT` of the columns [`stored_job`] reads, with `rest` after the
    /// table name.
    fn select(&self, rest: &str) -> AssertSqlSafe<String> {
        // The table name was checked to be a plain identifier in `new`; every
        // value is bound.
        AssertSqlSafe(format!(
            "SELECT uuid, connection, queue, payload, exception, {} FROM {} {rest}",
            self.failed_at_text(),
            self.table
        ))
    }

    /// Inserts one row.
    ///
    /// # Errors
    /// The database could not be reached or refused the insert.
    pub async fn log(&self, job: &FailedJob) -> anyhow::Result<()> {
        let failed_at = format_failed_at(&job.failed_at);
        let t = &self.table;
        let marks = [
            self.mark(1),
            self.mark(2),
            self.mark(3),
            self.mark(4),
            self.mark(5),
            self.timestamp_mark(6),
        ]
        .join(", ");
        let values = [
            &job.uuid,
            &job.connection,
            &job.queue,
            &job.payload,
            &job.exception,
            &failed_at,
        ];
        let sql = AssertSqlSafe(format!(
            "INSERT INTO {t} (uuid, connection, queue, payload, exception, failed_at) VALUES ({marks})"
        ));
        let done = on_pool!(&self.pool, |pool| {
            let mut q = sqlx::query(sql);
            for v in values {
                q = q.bind(v);
            }
            q.execute(pool).await.map(|_| ())
        });
        done.with_context(|| format!("insert into the failed jobs table {t}"))
    }

    /// Every row, newest (highest `id`) first, `id` = the uuid.
    ///
    /// # Errors
    /// The database could not be reached or refused the query (no such
    /// table...).
    pub async fn all(&self) -> anyhow::Result<Vec<StoredJob>> {
        let sql = self.select("ORDER BY id DESC");
        let rows = on_pool!(&self.pool, |pool| {
            match sqlx::query(sql).fetch_all(pool).await {
                Ok(rows) => rows.iter().map(stored_job).collect(),
                Err(e) => Err(e),
            }
        });
        rows.with_context(|| format!("read the failed jobs table {}", self.table))
    }

    /// The row whose uuid is `id`.
    ///
    /// # Errors
    /// As [`DatabaseStore::all`].
    pub async fn find(&self, id: &str) -> anyhow::Result<Option<StoredJob>> {
        let sql = self.select(&format!("WHERE uuid = {}", self.mark(1)));
        let row = on_pool!(&self.pool, |pool| {
            match sqlx::query(sql).bind(id).fetch_optional(pool).await {
                Ok(row) => row.as_ref().map(stored_job).transpose(),
                Err(e) => Err(e),
            }
        });
        row.with_context(|| format!("read the failed jobs table {}", self.table))
    }

    /// Deletes the row whose uuid is `id`; whether there was one.
    ///
    /// # Errors
    /// The database could not be reached or refused the delete.
    pub async fn forget(&self, id: &str) -> anyhow::Result<bool> {
        let sql = AssertSqlSafe(format!(
            "DELETE FROM {} WHERE uuid = {}",
            self.table,
            self.mark(1)
        ));
        let deleted = on_pool!(&self.pool, |pool| {
            sqlx::query(sql)
                .bind(id)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        });
        let deleted =
            deleted.with_context(|| format!("delete from the failed jobs table {}", self.table))?;
        Ok(deleted > 0)
    }

    /// Deletes every row, or those with `failed_at <= older_than` (compared
    /// as UTC `Y-m-d H:i:s`); returns how many.
    ///
    /// # Errors
    /// The database could not be reached or refused the delete.
    pub async fn flush(&self, older_than: Option<DateTime<Utc>>) -> anyhow::Result<u64> {
        let t = &self.table;
        let deleted = match older_than {
            None => {
                let sql = AssertSqlSafe(format!("DELETE FROM {t}"));
                on_pool!(&self.pool, |pool| sqlx::query(sql)
                    .execute(pool)
                    .await
                    .map(|done| done.rows_affected()))
            }
            Some(at) => {
                let sql = AssertSqlSafe(format!(
                    "DELETE FROM {t} WHERE failed_at <= {}",
                    self.timestamp_mark(1)
                ));
                let at = format_failed_at(&at);
                on_pool!(&self.pool, |pool| sqlx::query(sql)
                    .bind(&at)
                    .execute(pool)
                    .await
                    .map(|done| done.rows_affected()))
            }
        };
        deleted.with_context(|| format!("delete from the failed jobs table {t}"))
    }
}

/// A row of the select built by `DatabaseStore::select`. NULLs read as
/// empty strings (no column of Laravel's table is nullable).
fn stored_job<R>(row: &R) -> Result<StoredJob, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> Option<String>: Decode<'r, R::Database> + Type<R::Database>,
{
    let text = |i: usize| -> Result<String, sqlx::Error> {
        Ok(row.try_get::<Option<String>, _>(i)?.unwrap_or_default())
    };
    Ok(StoredJob {
        id: text(0)?,
        connection: text(1)?,
        queue: text(2)?,
        payload: text(3)?,
        exception: text(4)?,
        failed_at: text(5)?,
        place: Place::Table,
    })
}
