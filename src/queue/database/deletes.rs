//! The deletes of jobs that end together, as one statement.
//!
//! Every delete of a finished job is its own transaction in Laravel (a
//! commit, and on most setups a disk sync, per job). Here a job task's
//! delete joins the ones already waiting: a task of the queue takes the
//! first delete that comes and every other one queued by then (no wait is
//! added), and deletes them with one guarded `DELETE … RETURNING` (see
//! `delete_many`); each job's task gets its own answer. At `--concurrency`
//! above 1 that cuts the commits per job (`bench/database.py`).

use std::sync::Weak;

use tokio::sync::{mpsc, oneshot};

use super::error::DatabaseQueueError;
use super::queue::{DatabaseQueue, Inner, ReservationHandle};

/// The most deletes sent as one statement.
const MAX_BATCH: usize = 32;

/// One delete waiting for its batch, and where its answer goes.
pub(super) type Pending = (
    ReservationHandle,
    oneshot::Sender<Result<bool, DatabaseQueueError>>,
);

impl DatabaseQueue {
    /// Deletes the row of `handle` (false: the reservation is gone) with
    /// the other deletes waiting at the same moment.
    ///
    /// # Errors
    /// The database could not be reached or refused the delete.
    pub(super) async fn delete_batched(
        &self,
        handle: ReservationHandle,
    ) -> Result<bool, DatabaseQueueError> {
        let deletes = self.deletes(start);
        let (answer, answered) = oneshot::channel();
        if deletes.send((handle, answer)).await.is_err() {
            return self.delete(handle).await;
        }
        match answered.await {
            Ok(result) => result,
            Err(_) => self.delete(handle).await,
        }
    }
}

/// Starts the task that deletes in batches for the queue `inner` points
/// at; it ends once that queue is dropped (it holds only a weak handle).
fn start(inner: Weak<Inner>) -> mpsc::Sender<Pending> {
    let (sender, mut waiting) = mpsc::channel::<Pending>(MAX_BATCH * 4);
    tokio::spawn(async move {
        while let Some(first) = waiting.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH
                && let Ok(next) = waiting.try_recv()
            {
                batch.push(next);
            }
            let Some(queue) = DatabaseQueue::upgrade(&inner) else {
                break;
            };
            let handles: Vec<ReservationHandle> = batch.iter().map(|(h, _)| *h).collect();
            match queue.delete_many(&handles).await {
                Ok(deleted) => {
                    for ((_, answer), deleted) in batch.into_iter().zip(deleted) {
                        let _ = answer.send(Ok(deleted));
                    }
                }
                Err(e) => {
                    for (_, answer) in batch {
                        let _ = answer.send(Err(DatabaseQueueError::new(e.kind, e.to_string())));
                    }
                }
            }
        }
    });
    sender
}
