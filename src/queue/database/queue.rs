//! [`DatabaseQueue`]: one `jobs` table, opened once, shared by the worker's
//! tasks (cheap to clone).

use std::sync::{Arc, RwLock};

use sqlx::{AssertSqlSafe, Row};

use super::engine::{self, Engine};
use super::error::{DatabaseQueueError, ErrorKind, Result};
use super::pool::{self, Pool, SQLITE_BUSY_TIMEOUT, on_pool};
use super::server::{self, AttemptsColumn, Server};
use super::spec::DatabaseQueueSpec;

/// Laravel's `jobs` table on SQLite, MySQL/MariaDB or PostgreSQL, with
/// the statements the worker runs on it (reserve, renew, delete, release,
/// hand back, push, sizes, clear).
///
/// Rows keep Laravel's shapes, so `php artisan queue:work database`
/// workers on the same table see nothing unusual. What the worker adds:
/// every write after a reserve is guarded by the reservation's
/// [`ReservationHandle`] (`id` and `attempts`), so a worker whose row was
/// taken by another (after `retry_after`) cannot touch it.
#[derive(Clone)]
pub struct DatabaseQueue {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    url: String,
    /// The task that deletes finished jobs in batches, started by the
    /// first delete (see `deletes.rs`).
    deletes: std::sync::OnceLock<tokio::sync::mpsc::Sender<super::deletes::Pending>>,
    /// Replaced by a fresh pool after an error that may have left broken
    /// connections (a SQLite file opened while read-only stays read-only).
    pool: RwLock<Pool>,
    server: Server,
    /// The table name as configured, and as the SQL writes it.
    table: String,
    quoted: String,
    retry_after: i64,
    attempts: AttemptsColumn,
    /// Where the database is, for messages (never a password).
    place: String,
}

/// The longest a statement on a server database may take (see
/// [`DatabaseQueue::bounded`]), as a Redis command's timeout: 30 s, above
/// any wait a healthy server makes a reserve take (a plain `FOR UPDATE`
/// waits for other workers' reserves, which take milliseconds).
pub const STATEMENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One reservation of a row: its `id` and the `attempts` this reserve
/// wrote. Every later write matches both, so it touches the row only while
/// this reservation holds it: another reserve (by this worker after
/// `retry_after`, or by a PHP worker) raises `attempts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservationHandle {
    /// The row's `id`.
    pub id: i64,
    /// The row's `attempts` as this reserve left it: the attempt number
    /// of this run (Laravel's `$job->attempts()`).
    pub attempts: i64,
    /// Whether this reserve counted the attempt (`attempts` + 1); false for
    /// a row already at the column's limit (see
    /// [`DatabaseReservation::at_attempts_limit`]).
    pub counted: bool,
}

/// A reserved row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseReservation {
    /// The guard of every later write.
    pub handle: ReservationHandle,
    /// The `queue` column.
    pub queue: String,
    /// The `payload` column, bytes as stored (the worker never rewrites
    /// them; database payloads have no `id` nor `attempts` key), UTF-8 or
    /// not; empty for a NULL.
    pub payload: bytes::Bytes,
    /// The row's `attempts` was already the largest its column holds (255
    /// for a MySQL `tinyint unsigned`): it was reserved without counting,
    /// and the worker must fail it rather than run it, as Laravel 12.54+
    /// does when the count overflows (see
    /// [`DatabaseQueue::attempts_limit_exception`]).
    pub at_attempts_limit: bool,
}

/// How many jobs of a queue are where (Laravel 12.19's `pendingSize`,
/// `delayedSize`, `reservedSize`, `creationTimeOfOldestPendingJob`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueSizes {
    /// Rows not reserved and available now.
    pub pending: u64,
    /// Rows not reserved and available later.
    pub delayed: u64,
    /// Reserved rows, expired reservations included (as Laravel counts).
    pub reserved: u64,
    /// The smallest `available_at` (UNIX seconds) of the pending rows.
    pub oldest_pending_available_at: Option<i64>,
}

impl DatabaseQueue {
    /// Connects to the database of `spec`, learns the engine and version
    /// (and so the lock a reserve takes), reads the `attempts` column's
    /// limit, and checks the table has Laravel's columns.
    ///
    /// # Errors
    /// [`ErrorKind::Refused`]: a URL that cannot be read, a table name that
    /// is not a plain identifier, a table that does not exist or lacks
    /// a column. [`ErrorKind::Unavailable`]: the database cannot be
    /// reached (try again later).
    pub async fn open(spec: &DatabaseQueueSpec) -> Result<Self> {
        if !engine::plain_table_name(&spec.table) {
            return Err(DatabaseQueueError::new(
                ErrorKind::Refused,
                format!(
                    "the queue table name {:?} is not a plain identifier (DB_QUEUE_TABLE)",
                    spec.table
                ),
            ));
        }
        let place = pool::place(&spec.url);
        let pool =
            pool::lazy(&spec.url).map_err(|e| DatabaseQueueError::new(ErrorKind::Refused, e))?;
        let failed = |e: sqlx::Error| {
            DatabaseQueueError::from_sqlx(
                &e,
                &format!("open the queue table {}", spec.table),
                &place,
            )
        };
        // One plain connect first: a server that refuses (nobody on the
        // port, a wrong password) is named at once, where the pool would
        // only say that its wait for a connection ran out.
        Pool::connect_once(&spec.url).await.map_err(failed)?;
        let server = server::identify(&pool).await.map_err(failed)?;
        let attempts = server::attempts_column(&pool, &spec.table)
            .await
            .map_err(failed)?
            .ok_or_else(|| {
                DatabaseQueueError::new(
                    ErrorKind::Refused,
                    format!(
                        "the queue table {} in {place} does not exist or has no attempts \
                         column: create it with Laravel's migration (php artisan queue:table, \
                         or make:queue-table since 11.x, then migrate) and check DB_QUEUE_TABLE",
                        spec.table
                    ),
                )
            })?;
        if !server::id_is_primary_key(&pool, &spec.table)
            .await
            .map_err(failed)?
        {
            return Err(DatabaseQueueError::new(
                ErrorKind::Refused,
                format!(
                    "the queue table {} in {place} has no primary key on its id column \
                     (or is a view; Laravel's migration makes id the table's only key): a \
                     row without an id, or two rows with one, cannot be reserved or deleted \
                     alone and would run again and again; make id the primary key, or \
                     recreate the table with php artisan queue:table (make:queue-table \
                     since 11.x)",
                    spec.table
                ),
            ));
        }
        let queue = DatabaseQueue {
            inner: Arc::new(Inner {
                deletes: std::sync::OnceLock::new(),
                url: spec.url.clone(),
                pool: RwLock::new(pool),
                quoted: engine::quote_table(server.engine, &spec.table),
                server,
                table: spec.table.clone(),
                retry_after: i64::try_from(spec.retry_after).unwrap_or(i64::MAX / 4),
                attempts,
                place,
            }),
        };
        queue.check_columns().await?;
        Ok(queue)
    }

    /// Selects every column Laravel's migration makes, from no row: a
    /// missing one is refused now rather than at the first job.
    async fn check_columns(&self) -> Result<()> {
        let sql = format!(
            "SELECT id, queue, payload, attempts, reserved_at, available_at, created_at \
             FROM {} WHERE 1 = 0",
            self.inner.quoted
        );
        let done = on_pool!(&self.pool(), |p| sqlx::query(AssertSqlSafe(sql))
            .fetch_all(p)
            .await
            .map(|_| ()));
        done.map_err(|e| self.error(&e, "read the queue table"))
    }

    /// The batch deletes' sender, started by `start` on first use.
    pub(super) fn deletes(
        &self,
        start: impl FnOnce(std::sync::Weak<Inner>) -> tokio::sync::mpsc::Sender<super::deletes::Pending>,
    ) -> tokio::sync::mpsc::Sender<super::deletes::Pending> {
        let inner = &self.inner;
        inner
            .deletes
            .get_or_init(|| start(Arc::downgrade(inner)))
            .clone()
    }

    /// The queue `inner` points at, while it is alive.
    pub(super) fn upgrade(inner: &std::sync::Weak<Inner>) -> Option<DatabaseQueue> {
        inner.upgrade().map(|inner| DatabaseQueue { inner })
    }

    /// The engine (MySQL and MariaDB told apart by the server's version).
    pub fn engine(&self) -> Engine {
        self.inner.server.engine
    }

    /// The table's name as configured.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// Seconds a reservation lasts before another worker may take the row.
    pub fn retry_after(&self) -> i64 {
        self.inner.retry_after
    }

    /// The `attempts` column's type and limit.
    pub fn attempts_column(&self) -> &AttemptsColumn {
        &self.inner.attempts
    }

    /// The lock a reserve takes, as the banner shows it.
    pub fn lock_clause(&self) -> String {
        match self.engine() {
            Engine::Sqlite => format!(
                "BEGIN IMMEDIATE, busy timeout {} s",
                SQLITE_BUSY_TIMEOUT.as_secs()
            ),
            _ => self.lock().trim().to_string(),
        }
    }

    /// One line for the start-up banner: engine and version, database,
    /// table, lock (never a password), e.g. `MariaDB 10.11.19, database app on
    /// localhost, table jobs, FOR UPDATE SKIP LOCKED`.
    pub fn describe(&self) -> String {
        let s = &self.inner.server;
        let place = match s.engine {
            Engine::Sqlite => self.inner.place.clone(),
            _ => {
                let host = server_host(&self.inner.place);
                format!("database {} on {host}", s.database)
            }
        };
        format!(
            "{} {}, {place}, table {}, {}",
            s.engine.name(),
            s.version,
            self.inner.table,
            self.lock_clause()
        )
    }

    /// What to log at start when the server has no `FOR UPDATE SKIP
    /// LOCKED` (MySQL < 8.0.1, MariaDB < 10.6, PostgreSQL < 9.5): reserves
    /// take a plain `FOR UPDATE`, as `queue:work` does there, so workers
    /// wait for each other's reserves. `None` where it is not needed.
    pub fn lock_warning(&self) -> Option<String> {
        let s = &self.inner.server;
        (s.engine != Engine::Sqlite && !s.skip_locked).then(|| {
            format!(
                "{} {} has no FOR UPDATE SKIP LOCKED (MySQL 8.0.1, MariaDB 10.6 and \
                 PostgreSQL 9.5 have it): reserves take a plain FOR UPDATE, as queue:work \
                 does on this server, so workers on the table wait for each other's \
                 reserves; upgrade the server to reserve concurrently",
                s.engine.name(),
                s.version
            )
        })
    }

    /// The exception text of a job failed because its `attempts` reached
    /// the column's limit (see [`DatabaseReservation::at_attempts_limit`]).
    pub fn attempts_limit_exception(&self) -> String {
        let a = &self.inner.attempts;
        format!(
            "The attempts column of the queue table {} ({}) cannot count past {}: the job \
             is failed instead of reserved again, as Laravel 12.54+ does when the count \
             overflows. Laravel 13.6's migration makes the column an unsigned smallint.",
            self.inner.table, a.column_type, a.limit
        )
    }

    /// The current pool (a cheap handle).
    pub(super) fn pool(&self) -> Pool {
        match self.inner.pool.read() {
            Ok(pool) => pool.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The quoted table name for SQL text (checked to be a plain
    /// identifier at open; every value is bound).
    pub(super) fn quoted(&self) -> &str {
        &self.inner.quoted
    }

    /// Bind mark `n` (from 1).
    pub(super) fn mark(&self, n: usize) -> String {
        engine::mark(self.engine(), n)
    }

    /// `column` as a signed 64-bit integer.
    pub(super) fn int(&self, column: &str) -> String {
        engine::int(self.engine(), column)
    }

    /// The lock clause of a reserve's select (with its leading space).
    pub(super) fn lock(&self) -> &'static str {
        match (self.engine(), self.inner.server.skip_locked) {
            (Engine::Sqlite, _) => "",
            (_, true) => " FOR UPDATE SKIP LOCKED",
            (_, false) => " FOR UPDATE",
        }
    }

    /// The largest count the `attempts` column holds.
    pub(super) fn attempts_limit(&self) -> i64 {
        self.inner.attempts.limit
    }

    /// The error of `doing` that `e` says. After an error that may have
    /// broken the pool's connections, the pool is replaced by a fresh one.
    pub(super) fn error(&self, e: &sqlx::Error, doing: &str) -> DatabaseQueueError {
        let error = DatabaseQueueError::from_sqlx(
            e,
            &format!("{doing} {}", self.inner.table),
            &self.inner.place,
        );
        if error.is_unavailable() {
            self.reconnect();
        }
        error
    }

    /// Runs `work` (statements on this queue's database), given up after
    /// [`STATEMENT_TIMEOUT`] on a server (MySQL/MariaDB, PostgreSQL): a
    /// server that stops answering (stopped, a network that drops packets)
    /// leaves a statement waiting for ever, and with it the worker's fetch,
    /// so that not even SIGTERM or `drain_timeout` ended the worker. The
    /// given-up statement's connection is dropped with its pool (the error
    /// is "unavailable"); what it did is safe to lose: a reserve's rows
    /// are rolled back or come back after `retry_after`, a settle write is
    /// tried again while the reservation lasts. SQLite waits as long as its
    /// busy timeout allows, on its own.
    pub(super) async fn bounded<T>(
        &self,
        work: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
    ) -> std::result::Result<T, sqlx::Error> {
        if self.engine() == Engine::Sqlite {
            return work.await;
        }
        match tokio::time::timeout(STATEMENT_TIMEOUT, work).await {
            Ok(done) => done,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the database did not answer within {} s (a hung server or network); \
                     the statement was given up",
                    STATEMENT_TIMEOUT.as_secs()
                ),
            ))),
        }
    }

    /// The error of `doing` that `e` says, as [`Self::error`]; a pool that
    /// found no connection in time is asked why, by one plain connect
    /// (see [`Pool::connect_once`]): "connection refused" or the server's
    /// own refusal is reported instead of the wait that ran out.
    pub(super) async fn explained(&self, e: sqlx::Error, doing: &str) -> DatabaseQueueError {
        let e = match e {
            sqlx::Error::PoolTimedOut => match Pool::connect_once(&self.inner.url).await {
                Err(cause) => cause,
                Ok(()) => e,
            },
            e => e,
        };
        self.error(&e, doing)
    }

    /// Replaces the pool with a fresh lazy one: the next statement opens a
    /// new connection; the old pool's connections close as their last
    /// user lets go of them.
    fn reconnect(&self) {
        if let Ok(fresh) = pool::lazy(&self.inner.url) {
            match self.inner.pool.write() {
                Ok(mut pool) => *pool = fresh,
                Err(poisoned) => *poisoned.into_inner() = fresh,
            }
        }
    }

    /// Adds a job to `queue`, available `delay_secs` after `now` (UNIX
    /// seconds), as Laravel's `pushToDatabase` writes it (`attempts` 0,
    /// not reserved, `created_at` now). Returns the new row's `id`.
    ///
    /// # Errors
    /// The database could not be reached or refused the insert.
    pub async fn push(&self, queue: &str, payload: &str, delay_secs: u64, now: i64) -> Result<i64> {
        let sql = self.insert_sql();
        let available_at = available_at(now, delay_secs);
        let id = match &self.pool() {
            Pool::Postgres(p) => {
                sqlx::query(AssertSqlSafe(format!("{sql} RETURNING CAST(id AS BIGINT)")))
                    .bind(queue)
                    .bind(0i64)
                    .bind(available_at)
                    .bind(now)
                    .bind(payload)
                    .fetch_one(p)
                    .await
                    .and_then(|row| row.try_get::<i64, _>(0))
            }
            Pool::MySql(p) => sqlx::query(AssertSqlSafe(sql))
                .bind(queue)
                .bind(0i64)
                .bind(available_at)
                .bind(now)
                .bind(payload)
                .execute(p)
                .await
                .map(|done| i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX)),
            Pool::Sqlite(p) => sqlx::query(AssertSqlSafe(sql))
                .bind(queue)
                .bind(0i64)
                .bind(available_at)
                .bind(now)
                .bind(payload)
                .execute(p)
                .await
                .map(|done| done.last_insert_rowid()),
        };
        id.map_err(|e| self.error(&e, "push onto"))
    }

    /// Laravel's insert: `queue, attempts, reserved_at, available_at,
    /// created_at, payload`, binding all but `reserved_at` (NULL).
    pub(super) fn insert_sql(&self) -> String {
        format!(
            "INSERT INTO {} (queue, attempts, reserved_at, available_at, created_at, payload) \
             VALUES ({}, {}, NULL, {}, {}, {})",
            self.quoted(),
            self.mark(1),
            self.mark(2),
            self.mark(3),
            self.mark(4),
            self.mark(5)
        )
    }

    /// How many rows of `queue` are pending, delayed and reserved at `now`
    /// (UNIX seconds), and the oldest pending row's `available_at`, in one
    /// query.
    ///
    /// # Errors
    /// The database could not be reached or refused the query.
    pub async fn sizes(&self, queue: &str, now: i64) -> Result<QueueSizes> {
        // Marks in the order of the text: now three times, then the queue.
        let (n1, n2, n3, q) = (self.mark(1), self.mark(2), self.mark(3), self.mark(4));
        let sql = format!(
            "SELECT COUNT(CASE WHEN reserved_at IS NULL AND available_at <= {n1} THEN 1 END), \
             COUNT(CASE WHEN reserved_at IS NULL AND available_at > {n2} THEN 1 END), \
             COUNT(reserved_at), \
             {oldest} FROM {t} WHERE queue = {q}",
            oldest = self.int(&format!(
                "MIN(CASE WHEN reserved_at IS NULL AND available_at <= {n3} THEN available_at END)"
            )),
            t = self.quoted(),
        );
        let row: std::result::Result<(i64, i64, i64, Option<i64>), sqlx::Error> =
            on_pool!(&self.pool(), |p| {
                match sqlx::query(AssertSqlSafe(sql))
                    .bind(now)
                    .bind(now)
                    .bind(now)
                    .bind(queue)
                    .fetch_one(p)
                    .await
                {
                    Ok(r) => {
                        (|| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))()
                    }
                    Err(e) => Err(e),
                }
            });
        let (pending, delayed, reserved, oldest) =
            row.map_err(|e| self.error(&e, "count the jobs of"))?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(QueueSizes {
            pending: count(pending),
            delayed: count(delayed),
            reserved: count(reserved),
            oldest_pending_available_at: oldest,
        })
    }

    /// Deletes every row of `queue`, reserved ones included (Laravel's
    /// `clear`); returns how many.
    ///
    /// # Errors
    /// The database could not be reached or refused the delete.
    pub async fn clear(&self, queue: &str) -> Result<u64> {
        let sql = format!(
            "DELETE FROM {} WHERE queue = {}",
            self.quoted(),
            self.mark(1)
        );
        let deleted = on_pool!(&self.pool(), |p| sqlx::query(AssertSqlSafe(sql))
            .bind(queue)
            .execute(p)
            .await
            .map(|done| done.rows_affected()));
        deleted.map_err(|e| self.error(&e, "clear"))
    }
}

/// The host part of a server's place (`host/database`, see
/// [`pool::place`]), where a unix socket's host is a path of its own.
fn server_host(place: &str) -> &str {
    place.rsplit_once('/').map_or(place, |(host, _)| host)
}

/// `available_at` of a job delayed `delay_secs` after `now`, held at the
/// largest time a PostgreSQL `integer` column holds (2038-01-19): a longer
/// delay is refused by no table.
pub(super) fn available_at(now: i64, delay_secs: u64) -> i64 {
    let delay = i64::try_from(delay_secs).unwrap_or(i64::MAX);
    now.saturating_add(delay).min(i64::from(i32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unix_socket_is_the_host_of_its_place() {
        assert_eq!(server_host("/run/postgresql/app"), "/run/postgresql");
        assert_eq!(server_host("db.internal:5432/app"), "db.internal:5432");
    }

    #[test]
    fn a_delay_past_2038_is_held_at_the_largest_integer_time() {
        assert_eq!(available_at(1_800_000_000, 30), 1_800_000_030);
        assert_eq!(available_at(1_800_000_000, u64::MAX), i64::from(i32::MAX));
    }
}
