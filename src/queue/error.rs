//! [`QueueError`]: what a queue operation can fail with, whichever driver
//! runs, and its [`ErrorKind`]: what the worker does about it.

/// Whether trying the same operation later can work: the one question the
/// settle, the loop and the start ask of every driver's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The queue cannot be reached, went away, is read-only, throttled the
    /// call, has no free connection: a state that passes, or that an
    /// operator fixes without touching the queue. Nothing changed; try
    /// again later (the settle does, while the reservation lasts).
    Unavailable,
    /// The queue answered and refused the operation (no such table, column
    /// or queue, no permission, a value it cannot hold): the same call gets
    /// the same answer until the queue or the configuration is fixed, so
    /// trying again while a reservation lasts only delays the job.
    Refused,
}

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
    /// Another driver's error (one plugged in through
    /// [`super::driver::Driver`] without a variant here), with its kind.
    #[error("{message}")]
    Other {
        /// Whether trying again later can work.
        kind: ErrorKind,
        /// The driver's text, naming what failed.
        message: String,
    },
}

impl QueueError {
    /// What the worker does about this error (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            QueueError::Redis(e) => redis_kind(e),
            QueueError::Database(e) => e.kind,
            QueueError::Sqs(e) => e.kind,
            QueueError::Other { kind, .. } => *kind,
        }
    }

    /// Whether the queue answered and refused the operation
    /// ([`ErrorKind::Refused`]).
    pub fn is_refused(&self) -> bool {
        self.kind() == ErrorKind::Refused
    }
}

/// The kind of a Redis error: refused when Redis answered that the
/// command, the key or the user is wrong (`NOPERM`, `WRONGTYPE`, refused
/// credentials, an unknown command); every other error (a lost
/// connection, a time-out, `LOADING`, `READONLY` during a failover,
/// `OOM`, `TRYAGAIN`) passes.
fn redis_kind(e: &redis::RedisError) -> ErrorKind {
    use redis::ErrorKind as Redis;
    if matches!(
        e.kind(),
        Redis::AuthenticationFailed | Redis::InvalidClientConfig
    ) {
        return ErrorKind::Refused;
    }
    let text = e.to_string();
    let refused = [
        "NOPERM",
        "WRONGTYPE",
        "WRONGPASS",
        "NOAUTH",
        "unknown command",
    ]
    .iter()
    .any(|word| text.contains(word));
    if refused {
        ErrorKind::Refused
    } else {
        ErrorKind::Unavailable
    }
}

/// What a queue operation returns.
pub type QueueResult<T> = Result<T, QueueError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn redis_error(code: &str, detail: &str) -> QueueError {
        let e =
            redis::RedisError::from((redis::ErrorKind::Extension, "", format!("{code} {detail}")));
        QueueError::Redis(e)
    }

    #[test]
    fn redis_outages_pass_and_refusals_do_not() {
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(QueueError::Redis(io).kind(), ErrorKind::Unavailable);
        assert_eq!(
            redis_error("LOADING", "loading the dataset").kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(
            redis_error("READONLY", "replica").kind(),
            ErrorKind::Unavailable
        );
        assert!(redis_error("NOPERM", "no permission on queues:default").is_refused());
        assert!(redis_error("WRONGTYPE", "Operation against a key").is_refused());
    }
}
