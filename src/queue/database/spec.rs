//! Where the database queue lives: what the configuration resolves and the
//! driver opens.

/// Laravel's default `retry_after` on the database driver when the app's
/// config leaves it `null`: `DatabaseConnector` passes
/// `$config['retry_after'] ?? 60` (seconds). Unlike Redis, a database
/// reservation always expires.
pub const NULL_RETRY_AFTER: u64 = 60;

/// One database queue connection, resolved as Laravel resolves the
/// `database` connection of `config/queue.php`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseQueueSpec {
    /// The database: `sqlite://PATH`, `mysql://…` (MySQL and MariaDB) or
    /// `postgres://…`, from the queue connection's `connection` key
    /// (`DB_QUEUE_CONNECTION`, else the app's default `DB_CONNECTION`).
    pub url: String,
    /// The jobs table (`DB_QUEUE_TABLE`, default `jobs`).
    pub table: String,
    /// Seconds a reservation lasts before another worker may take the row
    /// again (`DB_QUEUE_RETRY_AFTER`, default 90; `null` means
    /// [`NULL_RETRY_AFTER`]).
    pub retry_after: u64,
}
