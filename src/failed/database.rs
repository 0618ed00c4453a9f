//! Laravel's `failed_jobs` table (`database-uuids` driver).
//!
//! Schema (8.x–13.x migration): `id` bigint PK, `uuid` string unique,
//! `connection` text, `queue` text, `payload` longText, `exception`
//! longText, `failed_at` timestamp. The daemon only inserts; the app's
//! migration owns the table.

use anyhow::Context;
use sqlx::{MySqlPool, PgPool, SqlitePool};

use super::{FailedJob, format_failed_at};

/// A pool for one of the databases Laravel supports.
pub enum Pool {
    /// `sqlite://path` (`DB_CONNECTION=sqlite`).
    Sqlite(SqlitePool),
    /// `mysql://` (MySQL and MariaDB).
    MySql(MySqlPool),
    /// `postgres://` or `pgsql://`.
    Postgres(PgPool),
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

    /// The pool, for commands that read the table.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Inserts one row.
    ///
    /// # Errors
    /// The database could not be reached or refused the insert.
    pub async fn log(&self, job: &FailedJob) -> anyhow::Result<()> {
        let failed_at = format_failed_at(&job.failed_at);
        let columns = "(uuid, connection, queue, payload, exception, failed_at)";
        let t = &self.table;
        // The table name was checked to be a plain identifier in `new`; every
        // value is bound.
        let sql = |marks: &str| {
            sqlx::AssertSqlSafe(format!("INSERT INTO {t} {columns} VALUES ({marks})"))
        };
        let values = [
            &job.uuid,
            &job.connection,
            &job.queue,
            &job.payload,
            &job.exception,
            &failed_at,
        ];
        let done = match &self.pool {
            Pool::Sqlite(pool) => {
                let mut q = sqlx::query(sql("?, ?, ?, ?, ?, ?"));
                for v in values {
                    q = q.bind(v);
                }
                q.execute(pool).await.map(|_| ())
            }
            Pool::MySql(pool) => {
                let mut q = sqlx::query(sql("?, ?, ?, ?, ?, ?"));
                for v in values {
                    q = q.bind(v);
                }
                q.execute(pool).await.map(|_| ())
            }
            Pool::Postgres(pool) => {
                let mut q = sqlx::query(sql("$1, $2, $3, $4, $5, $6"));
                for v in values {
                    q = q.bind(v);
                }
                q.execute(pool).await.map(|_| ())
            }
        };
        done.with_context(|| format!("insert into the failed jobs table {t}"))
    }
}
