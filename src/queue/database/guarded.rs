//! The writes after a reserve, each guarded by the reservation's handle
//! (`WHERE id = ? AND attempts = ?`): renew, delete, release, hand back.
//!
//! Laravel's own delete and release match the `id` alone, so a PHP worker
//! whose job outlived `retry_after` deletes (or releases, duplicating the
//! job) the row another worker has reserved since. Here such a write
//! changes nothing and says so (`false`): the row is the other worker's.

use std::collections::HashSet;

use sqlx::{AssertSqlSafe, Row};

use super::engine::Engine;
use super::error::Result;
use super::pool::on_pool;
use super::queue::{DatabaseQueue, DatabaseReservation, ReservationHandle, available_at};

/// At most this many handles in one batched delete (bounds the statement).
const DELETE_CHUNK: usize = 200;

impl DatabaseQueue {
    /// `WHERE` clause of one handle, binding `id` and `attempts` to marks
    /// `first` and `first + 1`.
    fn guard(&self, first: usize) -> String {
        format!(
            "id = {} AND attempts = {}",
            self.mark(first),
            self.mark(first + 1)
        )
    }

    /// Runs `sql` (an `UPDATE` or `DELETE` binding `binds` in order);
    /// whether it matched a row. MySQL counts matched rows, not changed
    /// ones (sqlx asks for `CLIENT_FOUND_ROWS`), so a renew within the
    /// same second still counts.
    async fn guarded_write(&self, sql: String, binds: &[i64], doing: &str) -> Result<bool> {
        let pool = self.pool();
        let done = self
            .bounded(async {
                on_pool!(&pool, |p| {
                    let mut q = sqlx::query(AssertSqlSafe(sql));
                    for b in binds {
                        q = q.bind(*b);
                    }
                    q.execute(p).await.map(|done| done.rows_affected())
                })
            })
            .await;
        match done {
            Ok(n) => Ok(n > 0),
            Err(e) => Err(self.explained(e, doing).await),
        }
    }

    /// Renews the reservation: `reserved_at = now` (UNIX seconds), so no
    /// worker takes the row for another `retry_after`. `false`: the
    /// reservation is gone (the row was reclaimed, released or deleted).
    ///
    /// # Errors
    /// The database could not be reached or refused the update.
    pub async fn renew(&self, handle: ReservationHandle, now: i64) -> Result<bool> {
        let sql = format!(
            "UPDATE {} SET reserved_at = {} WHERE {} AND reserved_at IS NOT NULL",
            self.quoted(),
            self.mark(1),
            self.guard(2)
        );
        self.guarded_write(
            sql,
            &[now, handle.id, handle.attempts],
            "renew a reservation in",
        )
        .await
    }

    /// Deletes the reserved row (a job done, or failed and recorded).
    /// `false`: the reservation is gone and the row, if any, was left.
    ///
    /// # Errors
    /// The database could not be reached or refused the delete.
    pub async fn delete(&self, handle: ReservationHandle) -> Result<bool> {
        let sql = format!("DELETE FROM {} WHERE {}", self.quoted(), self.guard(1));
        self.guarded_write(sql, &[handle.id, handle.attempts], "delete a job from")
            .await
    }

    /// Deletes the rows of many reservations (jobs that ended together) in
    /// as few statements as the database allows; for each handle, in
    /// order, whether its row was deleted.
    ///
    /// # Errors
    /// The database could not be reached or refused a delete; chunks of
    /// [`DELETE_CHUNK`] handles deleted before the error stay deleted.
    pub async fn delete_many(&self, handles: &[ReservationHandle]) -> Result<Vec<bool>> {
        let mut deleted = Vec::with_capacity(handles.len());
        for chunk in handles.chunks(DELETE_CHUNK) {
            if self.engine() == Engine::MySql {
                // MySQL has no DELETE … RETURNING: one statement each.
                for handle in chunk {
                    deleted.push(self.delete(*handle).await?);
                }
                continue;
            }
            let rows = self.delete_returning(chunk).await?;
            deleted.extend(chunk.iter().map(|h| rows.contains(&(h.id, h.attempts))));
        }
        Ok(deleted)
    }

    /// One `DELETE … RETURNING id, attempts` of `chunk`'s rows (PostgreSQL,
    /// SQLite, MariaDB); the `(id, attempts)` deleted.
    async fn delete_returning(&self, chunk: &[ReservationHandle]) -> Result<HashSet<(i64, i64)>> {
        let guards: Vec<String> = (0..chunk.len())
            .map(|i| format!("({})", self.guard(2 * i + 1)))
            .collect();
        let sql = format!(
            "DELETE FROM {} WHERE {} RETURNING {}, {}",
            self.quoted(),
            guards.join(" OR "),
            self.int("id"),
            self.int("attempts")
        );
        let pool = self.pool();
        let ids = self
            .bounded(async {
                on_pool!(&pool, |p| {
                    let mut q = sqlx::query(AssertSqlSafe(sql));
                    for h in chunk {
                        q = q.bind(h.id).bind(h.attempts);
                    }
                    match q.fetch_all(p).await {
                        Ok(rows) => rows
                            .iter()
                            .map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)?)))
                            .collect(),
                        Err(e) => Err(e),
                    }
                })
            })
            .await;
        match ids {
            Ok(ids) => Ok(ids),
            Err(e) => Err(self.explained(e, "delete jobs from").await),
        }
    }

    /// Releases the job back onto its queue as Laravel's
    /// `DatabaseQueue::deleteAndRelease` does: in one transaction, delete
    /// the row and insert a new one with the same queue and payload bytes,
    /// `attempts` as counted, not reserved, `available_at = now +
    /// delay_secs`, `created_at = now` (UNIX seconds). The new row has a new
    /// `id`, at the back of the line. Unlike Laravel, the insert happens
    /// only when the guarded delete removed the row: a release after the
    /// row was reclaimed does nothing (`false`) instead of duplicating the
    /// job.
    ///
    /// # Errors
    /// The database could not be reached (nothing changed) or refused a
    /// statement.
    pub async fn release(
        &self,
        reservation: &DatabaseReservation,
        delay_secs: u64,
        now: i64,
    ) -> Result<bool> {
        let h = reservation.handle;
        let delete = format!("DELETE FROM {} WHERE {}", self.quoted(), self.guard(1));
        let insert = self.insert_sql();
        let available = available_at(now, delay_secs);
        let sqlite = self.engine() == Engine::Sqlite;
        // The bytes as read; a payload that is not UTF-8 is failed, never
        // released, so the lossy text is only ever written for a row that
        // a hostile writer made.
        let payload = String::from_utf8_lossy(&reservation.payload);
        let pool = self.pool();
        let done: std::result::Result<bool, sqlx::Error> = self
            .bounded(async {
                on_pool!(&pool, |p| async {
                    let mut tx = if sqlite {
                        p.begin_with("BEGIN IMMEDIATE").await?
                    } else {
                        p.begin().await?
                    };
                    let gone = sqlx::query(AssertSqlSafe(delete))
                        .bind(h.id)
                        .bind(h.attempts)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if gone > 0 {
                        sqlx::query(AssertSqlSafe(insert))
                            .bind(reservation.queue.as_str())
                            .bind(h.attempts)
                            .bind(available)
                            .bind(now)
                            .bind(payload.as_ref())
                            .execute(&mut *tx)
                            .await?;
                    }
                    tx.commit().await?;
                    Ok(gone > 0)
                }
                .await)
            })
            .await;
        match done {
            Ok(released) => Ok(released),
            Err(e) => Err(self.explained(e, "release a job onto").await),
        }
    }

    /// Hands a reserved row that never started back, uncounted: `reserved_at
    /// = NULL` and `attempts` back as it was (the row keeps its `id` and
    /// place in line). `false`: the reservation is gone.
    ///
    /// # Errors
    /// The database could not be reached or refused the update.
    pub async fn hand_back(&self, handle: ReservationHandle) -> Result<bool> {
        let uncount = if handle.counted {
            ", attempts = attempts - 1"
        } else {
            ""
        };
        let sql = format!(
            "UPDATE {} SET reserved_at = NULL{uncount} WHERE {} AND reserved_at IS NOT NULL",
            self.quoted(),
            self.guard(1)
        );
        self.guarded_write(sql, &[handle.id, handle.attempts], "hand a job back to")
            .await
    }
}
