//! Reserving rows: Laravel's pop (`DatabaseQueue::getNextAvailableJob` and
//! `markJobAsReserved`) for up to `max` rows in one round trip where the
//! database allows it.
//!
//! A row is a candidate when it is available (`reserved_at IS NULL AND
//! available_at <= now`) or its reservation expired (`reserved_at <= now -
//! retry_after`, whatever its `available_at`); the oldest `id` first. Each
//! reserved row gets `reserved_at = now` and `attempts + 1`, except a row
//! whose `attempts` is already the column's limit: it is reserved without
//! counting and returned flagged, so the worker fails it (an overflow would
//! roll the reserve back and leave the row first in line forever, as
//! before Laravel 12.54).
//!
//! Columns are read as PHP's PDO reads them, so that no row can stop the
//! queue by being unreadable: `attempts` cast to an integer (a NULL counts
//! as 0, a SQLite text `'abc'` as 0, `1.5` as 1) and written back as one;
//! `payload` taken as the bytes stored, whatever the column's type (a BLOB,
//! MariaDB's `LONGBLOB`) and whether or not they are UTF-8. A payload that
//! is no job (NULL, not JSON) is then failed by the worker like any
//! malformed payload, with the reason, and the rows behind it run.
//!
//! - PostgreSQL: one statement, `WITH picked AS (SELECT … FOR UPDATE SKIP
//!   LOCKED) UPDATE … FROM picked RETURNING` (the CTE keeps the count read,
//!   to tell a counted attempt from one at the limit).
//! - MySQL/MariaDB: in one transaction, `SELECT … FOR UPDATE SKIP LOCKED`
//!   then one `UPDATE … WHERE id IN (…)` (MariaDB refuses `LIMIT` inside
//!   `IN (subquery)`, MySQL has no `UPDATE … RETURNING`).
//! - SQLite: the same in a `BEGIN IMMEDIATE` transaction, which takes the
//!   database's write lock before reading (a deferred transaction's
//!   upgrade fails at once with "database is locked" when another
//!   connection wrote in between; the busy timeout does not help there).

use bytes::Bytes;
use sqlx::{AssertSqlSafe, Row};

use super::engine::{self, Engine};
use super::error::Result;
use super::pool::on_pool;
use super::queue::{DatabaseQueue, DatabaseReservation, ReservationHandle};

/// A row picked by a reserve: `id`, `attempts` before the reserve, payload.
type Picked = (i64, i64, Bytes);

/// The picked row `r` (`id`, `attempts`, `payload` in that order). The
/// payload is read as bytes without sqlx's type check, which would refuse
/// a BLOB or non-UTF-8 text (and with it every row behind this one); a
/// NULL payload is empty, which the worker fails as a malformed payload.
fn picked<R: Row>(r: &R) -> std::result::Result<Picked, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<Vec<u8>>: for<'r> sqlx::Decode<'r, R::Database>,
{
    let payload: Option<Vec<u8>> = r.try_get_unchecked(2)?;
    Ok((
        r.try_get(0)?,
        r.try_get(1)?,
        Bytes::from(payload.unwrap_or_default()),
    ))
}

impl DatabaseQueue {
    /// Reserves up to `max` rows of `queue` at `now` (UNIX seconds), oldest
    /// `id` first, and returns them in `id` order. Never more than `max`
    /// rows, and nothing held beyond the rows returned.
    ///
    /// # Errors
    /// The database could not be reached (nothing was reserved) or refused
    /// the statements.
    pub async fn reserve(
        &self,
        queue: &str,
        max: usize,
        now: i64,
    ) -> Result<Vec<DatabaseReservation>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let expired = now.saturating_sub(self.retry_after());
        let picked = self
            .bounded(async {
                match self.engine() {
                    Engine::Postgres => self.reserve_postgres(queue, max, now, expired).await,
                    _ => self.reserve_in_transaction(queue, max, now, expired).await,
                }
            })
            .await;
        let mut picked = match picked {
            Ok(picked) => picked,
            Err(e) => return Err(self.explained(e, "reserve from").await),
        };
        picked.sort_by_key(|(id, _, _)| *id);
        let limit = self.attempts_limit();
        Ok(picked
            .into_iter()
            .map(|(id, before, payload)| {
                let at_limit = before >= limit;
                DatabaseReservation {
                    handle: ReservationHandle {
                        id,
                        attempts: if at_limit { before } else { before + 1 },
                        counted: !at_limit,
                    },
                    queue: queue.to_string(),
                    payload,
                    at_attempts_limit: at_limit,
                }
            })
            .collect())
    }

    /// The candidate rows' condition, binding queue, now and the expiry
    /// time to marks `first`, `first + 1`, `first + 2`.
    fn candidates(&self, first: usize) -> String {
        format!(
            "queue = {} AND ((reserved_at IS NULL AND available_at <= {}) OR reserved_at <= {})",
            self.mark(first),
            self.mark(first + 1),
            self.mark(first + 2)
        )
    }

    /// `count` + 1, or as it is at the column's limit (bound to `mark`):
    /// the `attempts` a reserve writes, `count` being the row's count as
    /// read ([`engine::attempts_count`]).
    fn counted_attempts(count: &str, mark: &str) -> String {
        format!("CASE WHEN {count} >= {mark} THEN {count} ELSE {count} + 1 END")
    }

    /// PostgreSQL's reserve: one statement.
    async fn reserve_postgres(
        &self,
        queue: &str,
        max: usize,
        now: i64,
        expired: i64,
    ) -> std::result::Result<Vec<Picked>, sqlx::Error> {
        let super::pool::Pool::Postgres(pool) = self.pool() else {
            return Ok(Vec::new());
        };
        let t = self.quoted();
        let sql = format!(
            "WITH picked AS (SELECT id, {count} AS attempts FROM {t} WHERE {candidates} \
             ORDER BY id LIMIT {max}{lock}) \
             UPDATE {t} AS j SET reserved_at = $1, attempts = {attempts} \
             FROM picked WHERE j.id = picked.id \
             RETURNING CAST(j.id AS BIGINT), CAST(picked.attempts AS BIGINT), j.payload",
            candidates = self.candidates(3),
            lock = self.lock(),
            count = engine::attempts_count(Engine::Postgres, "attempts"),
            attempts = Self::counted_attempts("picked.attempts", "$2"),
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(now)
            .bind(self.attempts_limit())
            .bind(queue)
            .bind(now)
            .bind(expired)
            .fetch_all(&pool)
            .await?
            .iter()
            .map(picked)
            .collect()
    }

    /// MySQL/MariaDB's and SQLite's reserve: select, then update, in one
    /// transaction.
    async fn reserve_in_transaction(
        &self,
        queue: &str,
        max: usize,
        now: i64,
        expired: i64,
    ) -> std::result::Result<Vec<Picked>, sqlx::Error> {
        let t = self.quoted();
        let select = format!(
            "SELECT {id}, {attempts}, payload FROM {t} WHERE {candidates} \
             ORDER BY id LIMIT {max}{lock}",
            id = self.int("id"),
            attempts = engine::attempts_count(self.engine(), "attempts"),
            candidates = self.candidates(1),
            lock = self.lock(),
        );
        let sqlite = self.engine() == Engine::Sqlite;
        let limit = self.attempts_limit();
        on_pool!(&self.pool(), |p| {
            let mut tx = if sqlite {
                p.begin_with("BEGIN IMMEDIATE").await?
            } else {
                p.begin().await?
            };
            let picked: Vec<Picked> = sqlx::query(AssertSqlSafe(select))
                .bind(queue)
                .bind(now)
                .bind(expired)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(picked)
                .collect::<std::result::Result<_, sqlx::Error>>()?;
            if !picked.is_empty() {
                let update = self.mark_reserved_sql(picked.len());
                let mut q = sqlx::query(AssertSqlSafe(update)).bind(now).bind(limit);
                for (id, _, _) in &picked {
                    q = q.bind(*id);
                }
                q.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(picked)
        })
    }

    /// `UPDATE` of `n` picked rows (MySQL/MariaDB, SQLite: `?` marks).
    fn mark_reserved_sql(&self, n: usize) -> String {
        format!(
            "UPDATE {t} SET reserved_at = ?, attempts = {attempts} WHERE id IN ({ids})",
            t = self.quoted(),
            attempts =
                Self::counted_attempts(&engine::attempts_count(self.engine(), "attempts"), "?"),
            ids = vec!["?"; n].join(", ")
        )
    }
}
