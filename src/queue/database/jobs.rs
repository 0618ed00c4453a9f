//! The database queue as the worker sees it: rows become [`ReservedJob`]s,
//! and each later write of a job goes to its row through the reservation's
//! handle (see [`Reservation::Row`]).

use std::sync::Arc;
use std::time::Instant;

use super::error::{DatabaseQueueError, ErrorKind};
use super::queue::{DatabaseQueue, DatabaseReservation, ReservationHandle};
use crate::queue::job::{Lease, Reservation};
use crate::queue::{Payload, QueueHandle, ReservedJob, now};

/// A `Result` of this module.
type Result<T> = std::result::Result<T, DatabaseQueueError>;

impl DatabaseQueue {
    /// Reserves up to `count` rows of `queue` (Laravel's `pop`) as jobs.
    /// The payload is the column's bytes, parsed without `attempts` (the
    /// count is the row's); a row at its `attempts` limit comes flagged,
    /// to be failed.
    ///
    /// # Errors
    /// The database could not be reached (nothing was reserved) or refused
    /// the statements.
    pub async fn pop_jobs(
        &self,
        queue: &Arc<QueueHandle>,
        count: usize,
    ) -> Result<Vec<ReservedJob>> {
        let sent = Instant::now();
        let at = now();
        let rows = self.reserve(&queue.name, count, at).await?;
        let retry_after = u64::try_from(self.retry_after()).unwrap_or(u64::MAX);
        Ok(rows
            .into_iter()
            .map(|row| {
                let raw = row.payload;
                ReservedJob {
                    queue: Arc::clone(queue),
                    payload: Payload::parse_stored(raw.clone()),
                    reserved: raw.clone(),
                    raw,
                    lease: Lease::new(Some(retry_after), sent),
                    reservation: Reservation::Row {
                        handle: row.handle,
                        at_attempts_limit: row.at_attempts_limit,
                    },
                }
            })
            .collect())
    }

    /// Deletes `job`'s row (it ran), in one statement with the other jobs
    /// that end at the same moment; false when the reservation is gone.
    ///
    /// # Errors
    /// The database could not be reached or refused the delete.
    pub async fn delete_job(&self, job: &ReservedJob) -> Result<bool> {
        self.delete_batched(handle(job)?).await
    }

    /// Releases `job` as Laravel's `deleteAndRelease` does: a new row with
    /// the attempt counted, available in `delay` seconds; false when the
    /// reservation is gone (nothing inserted).
    ///
    /// # Errors
    /// The database could not be reached or refused the statements.
    pub async fn release_job(&self, job: &ReservedJob, delay: u64) -> Result<bool> {
        let reservation = DatabaseReservation {
            handle: handle(job)?,
            queue: job.queue.name.clone(),
            payload: job.raw.clone(),
            at_attempts_limit: false,
        };
        self.release(&reservation, delay, now()).await
    }

    /// Hands `job`'s row back uncounted, in its place; `delay` (seconds)
    /// is not kept: the row is available again at once, where it was.
    ///
    /// # Errors
    /// The database could not be reached or refused the update.
    pub async fn hand_back_job(&self, job: &ReservedJob) -> Result<bool> {
        self.hand_back(handle(job)?).await
    }

    /// Moves `job`'s `reserved_at` to now (ours: Laravel never renews), and
    /// its lease with it; false when the reservation is gone.
    ///
    /// # Errors
    /// The database could not be reached.
    pub async fn renew_job(&self, job: &ReservedJob) -> Result<bool> {
        let sent = Instant::now();
        let at = now();
        let renewed = self.renew(handle(job)?, at).await?;
        if renewed {
            job.lease.confirm(sent);
        }
        Ok(renewed)
    }
}

/// The row handle of `job`.
fn handle(job: &ReservedJob) -> Result<ReservationHandle> {
    match &job.reservation {
        Reservation::Row { handle, .. } => Ok(*handle),
        _ => Err(DatabaseQueueError::new(
            ErrorKind::Refused,
            "a job reserved from another queue driver cannot be settled in the database queue",
        )),
    }
}
