//! The connections to the database that holds the jobs table: one sqlx
//! pool of the engine the URL names.
//!
//! The pool is `crate::sql::Pool`, the failed and cache stores' too; a
//! queue's SQLite pool is one connection with a busy timeout of its own.

use std::time::Duration;

/// How long a SQLite statement waits for another connection's write lock
/// before it gives up with "database is locked": PDO's default, so the
/// worker waits as long as a PHP worker beside it would. The worker never
/// changes the file's `journal_mode` (WAL is the app's choice: it is a
/// permanent setting of the file).
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) use crate::sql::{Pool, on_pool};

/// A lazy pool for the queue's `url` (nothing connects until it is used),
/// SQLite's connections waiting [`SQLITE_BUSY_TIMEOUT`] for a write lock.
///
/// # Errors
/// A URL of an unknown scheme, or one the driver cannot parse.
pub(super) fn lazy(url: &str) -> Result<Pool, String> {
    Pool::lazy_with(url, Some(SQLITE_BUSY_TIMEOUT))
        .map_err(|e| format!("cannot read the database URL: {e}"))
}

/// Where `url` points, for messages and the banner (see
/// [`crate::sql::place`]).
pub(super) fn place(url: &str) -> String {
    crate::sql::place(url)
}
