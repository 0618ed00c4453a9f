//! [`QueueError`]: what a queue operation can fail with, whichever driver
//! runs.

/// A queue operation that did not complete. Its text is the driver's own
/// (a Redis error reads as Redis words it, a database error names the
/// table), so a log line says what the operator must fix.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The Redis queue.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The database queue (its text names the table, and the fix where one
    /// is known).
    #[error(transparent)]
    Database(#[from] super::database::DatabaseQueueError),
    /// The SQS queue (its text names the call and the queue URL).
    #[error(transparent)]
    Sqs(#[from] super::sqs::SqsQueueError),
    /// An operation the driver has no way to carry out.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl QueueError {
    /// Whether the queue answered and refused the operation, so that the
    /// same call gets the same answer until the table or the configuration
    /// is fixed (a database column that refuses Laravel's insert, a missing
    /// column): trying again while a reservation lasts only delays the job.
    /// Redis's and SQS's errors count as passing states here, as before.
    pub fn is_refused(&self) -> bool {
        match self {
            QueueError::Redis(_) | QueueError::Sqs(_) => false,
            QueueError::Database(e) => !e.is_unavailable(),
            QueueError::Unsupported(_) => true,
        }
    }
}

/// What a queue operation returns.
pub type QueueResult<T> = Result<T, QueueError>;
