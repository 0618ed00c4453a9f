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
//!
//! An insert that fails is classed ([`ErrorClass`]): refused for good (the
//! record itself is the problem: retrying gives the same answer) or down
//! (retrying later can work). After a "down" error the pool is replaced by
//! a fresh one, so connections opened while the database could not be
//! written (SQLite opens a read-only file read-only and keeps it so) are
//! not used again.

use std::sync::RwLock;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::{AssertSqlSafe, ColumnIndex, Decode, MySqlPool, Row, Type};

use super::{FailedJob, Place, StoredJob, format_failed_at};
use crate::sql::{Pool, on_pool};

/// Whether retrying an insert that failed can work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The database answered and refused the record itself: an integrity
    /// constraint (a duplicate uuid), a value its column cannot hold (a uuid
    /// over 255 characters, a NUL byte in PostgreSQL text), a record over
    /// the server's limits (MariaDB's `max_allowed_packet`). The same insert
    /// gets the same answer however often it is tried.
    Refused,
    /// Anything else: no answer (connection refused, reset, timeout, no
    /// free connection), or a state of the server that passes or that an
    /// operator fixes (read-only, too many connections, disk full, locked,
    /// deadlock, shutting down, no such table, permission denied).
    Down,
}

/// An insert into the table that failed.
#[derive(Debug)]
pub struct InsertError {
    /// Whether retrying can work.
    pub class: ErrorClass,
    /// What the database or the driver said.
    pub error: anyhow::Error,
}

/// The `failed_jobs` table of one database.
pub struct DatabaseStore {
    url: String,
    pool: RwLock<Pool>,
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
        Ok(DatabaseStore {
            pool: RwLock::new(Pool::lazy(url)?),
            url: url.to_string(),
            table: table.to_string(),
        })
    }

    /// The current pool (a cheap handle).
    fn pool(&self) -> Pool {
        match self.pool.read() {
            Ok(pool) => pool.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the pool with a fresh lazy one: the next statement opens a
    /// new connection. The old pool's connections close as their last user
    /// lets go of them.
    fn reconnect(&self) {
        match Pool::lazy(&self.url) {
            Ok(fresh) => match self.pool.write() {
                Ok(mut pool) => *pool = fresh,
                Err(poisoned) => *poisoned.into_inner() = fresh,
            },
            Err(e) => tracing::warn!(
                "cannot reopen the failed jobs database: {}",
                crate::error_chain::error_chain(e.as_ref())
            ),
        }
    }

    /// Passes `result` on; after an error that retrying may cure, replaces
    /// the pool first (see [`DatabaseStore::reconnect`]).
    fn after<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        if let Err(e) = &result
            && classify(e) == ErrorClass::Down
        {
            self.reconnect();
        }
        result
    }

    /// Bind mark number `n` (from 1) in this database's syntax.
    fn mark(&self, n: usize) -> String {
        match self.pool() {
            Pool::Postgres(_) => format!("${n}"),
            Pool::Sqlite(_) | Pool::MySql(_) => "?".into(),
        }
    }

    /// A bound `Y-m-d H:i:s` text parameter as a timestamp: PostgreSQL will
    /// not assign or compare text to a `timestamp` column without a cast;
    /// the others convert it themselves.
    fn timestamp_mark(&self, n: usize) -> String {
        match self.pool() {
            Pool::Postgres(_) => format!("CAST(${n} AS timestamp)"),
            Pool::Sqlite(_) | Pool::MySql(_) => "?".into(),
        }
    }

    /// A select expression giving `failed_at` as `Y-m-d H:i:s` text.
    fn failed_at_text(&self) -> &'static str {
        match self.pool() {
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
    /// The database could not be reached or refused the insert, with the
    /// error's [`ErrorClass`].
    pub async fn log(&self, job: &FailedJob) -> Result<(), InsertError> {
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
            job.uuid.as_str(),
            &job.connection,
            &job.queue,
            job.payload.as_str(),
            &job.exception,
            &failed_at,
        ];
        let sql = AssertSqlSafe(format!(
            "INSERT INTO {t} (uuid, connection, queue, payload, exception, failed_at) VALUES ({marks})"
        ));
        let pool = self.pool();
        let failed = |e: sqlx::Error| InsertError {
            class: classify(&e),
            // sqlx's message already holds its source's: no chain.
            error: anyhow::Error::msg(e.to_string())
                .context(format!("insert into the failed jobs table {t}")),
        };
        if let Pool::MySql(pool) = &pool {
            let size = values.iter().map(|v| v.len()).sum();
            self.after(fits_mysql_packet(pool, size).await)
                .map_err(failed)?
                .map_err(|error| InsertError {
                    class: ErrorClass::Refused,
                    error: error.context(format!("insert into the failed jobs table {t}")),
                })?;
        }
        let done = on_pool!(&pool, |pool| {
            let mut q = sqlx::query(sql);
            for v in values {
                q = q.bind(v);
            }
            q.execute(pool).await.map(|_| ())
        });
        self.after(done).map_err(failed)
    }

    /// Checks at start that the table has the columns the worker writes,
    /// as the queue's own table is checked: a missing `failed_jobs` table
    /// would otherwise surface only at the first failure, which then came
    /// back every `retry_after` unrecorded. A database that cannot be
    /// reached now is no error here (the store's fallback keeps failures
    /// while it is down): it is logged, and the worker starts.
    ///
    /// # Errors
    /// The table or one of Laravel's columns is missing, with the commands
    /// that create it.
    pub async fn check_table(&self) -> anyhow::Result<()> {
        let sql = self.select("WHERE 1 = 0");
        let done = on_pool!(&self.pool(), |pool| sqlx::query(sql)
            .fetch_all(pool)
            .await
            .map(|_| ()));
        match self.after(done) {
            Ok(()) => Ok(()),
            Err(e) if missing_table(&e) => anyhow::bail!(
                "the failed jobs table {} does not exist or lacks a column Laravel's migration makes \
                 ({e}): create it with php artisan queue:failed-table (make:queue-failed-table \
                 since 11.x), then migrate, or set [failed] table (queue.failed.table)",
                self.table
            ),
            Err(e) => {
                tracing::warn!(
                    table = %self.table,
                    "cannot check the failed jobs table now ({e}); failures are kept until \
                     it can be written"
                );
                Ok(())
            }
        }
    }

    /// Every row, newest (highest `id`) first, `id` = the uuid.
    ///
    /// # Errors
    /// The database could not be reached or refused the query (no such
    /// table...).
    pub async fn all(&self) -> anyhow::Result<Vec<StoredJob>> {
        let sql = self.select("ORDER BY id DESC");
        let rows = on_pool!(&self.pool(), |pool| {
            match sqlx::query(sql).fetch_all(pool).await {
                Ok(rows) => rows.iter().map(stored_job).collect(),
                Err(e) => Err(e),
            }
        });
        self.after(rows)
            .with_context(|| format!("read the failed jobs table {}", self.table))
    }

    /// The row whose uuid is `id`.
    ///
    /// # Errors
    /// As [`DatabaseStore::all`].
    pub async fn find(&self, id: &str) -> anyhow::Result<Option<StoredJob>> {
        let sql = self.select(&format!("WHERE uuid = {}", self.mark(1)));
        let row = on_pool!(&self.pool(), |pool| {
            match sqlx::query(sql).bind(id).fetch_optional(pool).await {
                Ok(row) => row.as_ref().map(stored_job).transpose(),
                Err(e) => Err(e),
            }
        });
        self.after(row)
            .with_context(|| format!("read the failed jobs table {}", self.table))
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
        let deleted = on_pool!(&self.pool(), |pool| {
            sqlx::query(sql)
                .bind(id)
                .execute(pool)
                .await
                .map(|done| done.rows_affected())
        });
        let deleted = self
            .after(deleted)
            .with_context(|| format!("delete from the failed jobs table {}", self.table))?;
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
                on_pool!(&self.pool(), |pool| sqlx::query(sql)
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
                on_pool!(&self.pool(), |pool| sqlx::query(sql)
                    .bind(&at)
                    .execute(pool)
                    .await
                    .map(|done| done.rows_affected()))
            }
        };
        self.after(deleted)
            .with_context(|| format!("delete from the failed jobs table {t}"))
    }
}

/// Records up to this many bytes are sent to MySQL/MariaDB without looking
/// at `max_allowed_packet` first (its smallest allowed value is 1 KiB, its
/// default 16 MiB in MariaDB, 64 MiB in MySQL 8).
const SMALL_RECORD: usize = 1 << 20;

/// What an insert's packet holds beyond its values, counted generously.
const PACKET_OVERHEAD: usize = 64 << 10;

/// Checks that an insert of `size` bytes of values fits the server's
/// `max_allowed_packet`: the server answers a larger packet by closing the
/// connection, which looks like a network error (retrying would never end).
/// `Ok(Err(_))`: it does not fit.
///
/// # Errors
/// The server cannot be asked (the outer error).
async fn fits_mysql_packet(
    pool: &MySqlPool,
    size: usize,
) -> Result<anyhow::Result<()>, sqlx::Error> {
    if size <= SMALL_RECORD {
        return Ok(Ok(()));
    }
    let max: i64 = sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
        .fetch_one(pool)
        .await?;
    let max = usize::try_from(max).unwrap_or(0);
    if size.saturating_add(PACKET_OVERHEAD) > max {
        return Ok(Err(anyhow::anyhow!(
            "the record is {size} bytes, more than the server's max_allowed_packet \
             ({max} bytes) allows in one statement"
        )));
    }
    Ok(Ok(()))
}

/// Whether retrying the statement that failed with `e` can work (see
/// [`ErrorClass`]). Only an answer of the database that names the data is
/// [`ErrorClass::Refused`]; an error the driver met before sending (a value
/// it cannot encode) too.
pub fn classify(e: &sqlx::Error) -> ErrorClass {
    match e {
        sqlx::Error::Database(db) if refused(db.as_ref()) => ErrorClass::Refused,
        sqlx::Error::Encode(_) => ErrorClass::Refused,
        _ => ErrorClass::Down,
    }
}

/// Whether `e` says the table or a column of it does not exist
/// (PostgreSQL 42P01/42703, MySQL 1146/1054, SQLite's "no such …").
fn missing_table(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return matches!(mysql.number(), 1146 | 1054);
    }
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return db.message().starts_with("no such ");
    }
    matches!(db.code().as_deref(), Some("42P01" | "42703"))
}

/// Whether the database's error `db` refuses the record itself.
fn refused(db: &dyn DatabaseError) -> bool {
    if let Some(mysql) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return mysql_refused(mysql.number());
    }
    let code = db.code().unwrap_or_default();
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // Extended result code; the primary code is its low byte.
        return code
            .parse::<i32>()
            .is_ok_and(|extended| sqlite_refused(extended & 0xff));
    }
    postgres_refused(&code)
}

/// PostgreSQL SQLSTATE classes that name the data: 22 data exception
/// (22001 value too long, 22021 a byte the encoding refuses, NUL
/// included), 23 integrity constraint violation (23505 duplicate uuid), 54
/// program limit exceeded (a row too large for an index).
fn postgres_refused(sqlstate: &str) -> bool {
    matches!(sqlstate.get(..2), Some("22" | "23" | "54"))
}

/// SQLite primary result codes that name the data: CONSTRAINT (19, the
/// unique uuid), TOOBIG (18), MISMATCH (20), RANGE (25).
fn sqlite_refused(primary: i32) -> bool {
    matches!(primary, 18 | 19 | 20 | 25)
}

/// MySQL/MariaDB error numbers that name the data.
fn mysql_refused(number: u16) -> bool {
    matches!(
        number,
        1048 // column cannot be null
            | 1062 // duplicate entry (the unique uuid)
            | 1586 // duplicate entry for key
            | 1118 // row size too large
            | 1153 // packet bigger than max_allowed_packet
            | 1264 // out of range value
            | 1265 // data truncated
            | 1292 // incorrect datetime value
            | 1300 // invalid character string
            | 1301 // result larger than max_allowed_packet
            | 1364 // field has no default value
            | 1366 // incorrect string value
            | 1406 // data too long for column
            | 1451 | 1452 | 1216 | 1217 // foreign keys
            | 3819 | 4025 // check constraint
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_data_and_the_rest_is_down() {
        // PostgreSQL: duplicate, too long, NUL byte, index row too large.
        for code in ["23505", "22001", "22021", "54000"] {
            assert!(postgres_refused(code), "{code}");
        }
        // Connection, too many connections, read-only, deadlock, shutdown,
        // no such table, permission denied.
        for code in [
            "08006", "53300", "25006", "40P01", "57P01", "42P01", "42501", "",
        ] {
            assert!(!postgres_refused(code), "{code}");
        }
        // SQLite primary codes: CONSTRAINT, TOOBIG; not READONLY, BUSY,
        // CANTOPEN, IOERR, FULL, ERROR (no such table).
        assert!(sqlite_refused(2067 & 0xff) && sqlite_refused(18));
        for code in [8, 5, 14, 10, 13, 1] {
            assert!(!sqlite_refused(code), "{code}");
        }
        // MySQL/MariaDB: duplicate, data too long, incorrect string; not
        // too many connections (1040), read-only (1290, 1836), lock wait
        // (1205), deadlock (1213), no such table (1146).
        for n in [1062, 1406, 1366, 1153] {
            assert!(mysql_refused(n), "{n}");
        }
        for n in [1040, 1290, 1836, 1205, 1213, 1146, 1045] {
            assert!(!mysql_refused(n), "{n}");
        }
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), ErrorClass::Down);
        assert_eq!(
            classify(&sqlx::Error::Io(std::io::ErrorKind::BrokenPipe.into())),
            ErrorClass::Down
        );
    }
}
