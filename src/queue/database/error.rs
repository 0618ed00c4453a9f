//! What can go wrong talking to the jobs table, sorted by what the worker
//! does about it: wait and try again ([`ErrorKind::Unavailable`]: nothing
//! is lost, the rows stay where they are) or tell the operator the table
//! itself is wrong ([`ErrorKind::Refused`]).

use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

/// The seam's one [`ErrorKind`]: this driver sorts its errors into it.
pub use crate::queue::error::ErrorKind;

/// An error of the database queue, with its [`ErrorKind`] and a message
/// that names the table and, where one is known, the fix.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DatabaseQueueError {
    /// Whether trying again later can work.
    pub kind: ErrorKind,
    message: String,
}

impl DatabaseQueueError {
    /// An error of `kind` saying `message`.
    pub(super) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        DatabaseQueueError {
            kind,
            message: message.into(),
        }
    }

    /// Whether the database could not be used for now (see
    /// [`ErrorKind::Unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }

    /// The error of `doing` (e.g. "reserve from table jobs") that `e` says,
    /// where the database is `place` (engine and where, never a password).
    pub(super) fn from_sqlx(e: &sqlx::Error, doing: &str, place: &str) -> Self {
        let (kind, fix) = classify(e);
        let mut message = format!("cannot {doing} ({place}): {e}");
        if let Some(fix) = fix {
            message.push_str(": ");
            message.push_str(fix);
        }
        DatabaseQueueError { kind, message }
    }
}

/// The result type of the database queue.
pub type Result<T> = std::result::Result<T, DatabaseQueueError>;

/// What to do about `e`, and the fix when one is known.
pub(super) fn classify(e: &sqlx::Error) -> (ErrorKind, Option<&'static str>) {
    match e {
        sqlx::Error::Database(db) => database_error(db.as_ref()),
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => (
            ErrorKind::Unavailable,
            Some("the server cannot be reached or closed the connection; the worker tries again"),
        ),
        sqlx::Error::PoolTimedOut => (
            ErrorKind::Unavailable,
            Some("no connection to the database came free in time; the worker tries again"),
        ),
        sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => (ErrorKind::Unavailable, None),
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::TypeNotFound { .. } => (
            ErrorKind::Refused,
            Some("the table does not have the columns of Laravel's jobs migration"),
        ),
        sqlx::Error::Configuration(_) => (ErrorKind::Refused, None),
        _ => (ErrorKind::Unavailable, None),
    }
}

/// What to do about an answer of the database itself.
fn database_error(db: &dyn DatabaseError) -> (ErrorKind, Option<&'static str>) {
    if let Some(mysql) = db.try_downcast_ref::<MySqlDatabaseError>() {
        return mysql_error(mysql.number());
    }
    let code = db.code().unwrap_or_default();
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // An extended result code; the primary code is its low byte.
        let primary = code.parse::<i32>().map_or(0, |extended| extended & 0xff);
        return sqlite_error(primary);
    }
    postgres_error(&code)
}

const TOO_MANY_CONNECTIONS: &str = "the server has no free connection (max_connections): \
     raise max_connections or give the worker and other clients smaller pools";
const READ_ONLY_SERVER: &str = "the server is read-only (a replica, or a failover in \
     progress): point the queue connection at the primary";
const DEADLOCK: &str = "the server ended the transaction (deadlock or lock wait timeout); \
     nothing changed and the worker tries again";
const NO_TABLE: &str = "no such table or column: create the jobs table with Laravel's \
     migration (php artisan queue:table, or make:queue-table since 11.x, then migrate) and \
     check DB_QUEUE_TABLE";
const WRONG_CREDENTIALS: &str = "access denied: check DB_USERNAME and DB_PASSWORD";
const NO_DATABASE: &str = "no such database: check DB_DATABASE";
const CONSTRAINT: &str = "the table refuses the row Laravel's insert writes: a column \
     Laravel's jobs migration does not make is NOT NULL without a default (Laravel 5.x's \
     reserved column), or a constraint of its own; give the column a default or drop it";
const DENIED: &str = "the database user lacks a permission on the jobs table (SELECT, \
     INSERT, UPDATE, DELETE)";

/// PostgreSQL SQLSTATE classes.
fn postgres_error(sqlstate: &str) -> (ErrorKind, Option<&'static str>) {
    match sqlstate {
        "53300" => (ErrorKind::Unavailable, Some(TOO_MANY_CONNECTIONS)),
        "25006" => (ErrorKind::Unavailable, Some(READ_ONLY_SERVER)),
        "42P01" | "42703" => (ErrorKind::Refused, Some(NO_TABLE)),
        "42501" => (ErrorKind::Refused, Some(DENIED)),
        // invalid_password, invalid_authorization_specification: the
        // same answer on every try, as MySQL's 1045.
        "28P01" | "28000" => (ErrorKind::Refused, Some(WRONG_CREDENTIALS)),
        "3D000" => (ErrorKind::Refused, Some(NO_DATABASE)),
        // not_null_violation, check_violation, foreign_key_violation.
        "23502" | "23514" | "23503" => (ErrorKind::Refused, Some(CONSTRAINT)),
        _ => match sqlstate.get(..2) {
            // Connection exception, insufficient resources, operator
            // intervention (shutdown), system error.
            Some("08" | "53" | "57" | "58") => (ErrorKind::Unavailable, None),
            // Transaction rollback (deadlock, serialization), lock not
            // available.
            Some("40") | Some("55") => (ErrorKind::Unavailable, Some(DEADLOCK)),
            // Data exception, integrity constraint, syntax or access rule.
            Some("22" | "23" | "42") => (ErrorKind::Refused, None),
            _ => (ErrorKind::Unavailable, None),
        },
    }
}

/// MySQL/MariaDB error numbers.
fn mysql_error(number: u16) -> (ErrorKind, Option<&'static str>) {
    match number {
        1040 | 1203 => (ErrorKind::Unavailable, Some(TOO_MANY_CONNECTIONS)),
        1290 | 1792 | 1836 => (ErrorKind::Unavailable, Some(READ_ONLY_SERVER)),
        1205 | 1213 => (ErrorKind::Unavailable, Some(DEADLOCK)),
        1146 | 1054 => (ErrorKind::Refused, Some(NO_TABLE)),
        1142 | 1143 | 1044 => (ErrorKind::Refused, Some(DENIED)),
        1045 => (ErrorKind::Refused, Some(WRONG_CREDENTIALS)),
        1049 => (ErrorKind::Refused, Some(NO_DATABASE)),
        // Column cannot be null, field has no default value.
        1048 | 1364 => (ErrorKind::Refused, Some(CONSTRAINT)),
        // Syntax, out of range (the attempts column), data too long.
        1064 | 1264 | 1406 | 1366 => (ErrorKind::Refused, None),
        // Server shutdown, connection killed, gone away, lost, and anything
        // else: a state of the server.
        _ => (ErrorKind::Unavailable, None),
    }
}

/// SQLite primary result codes.
fn sqlite_error(primary: i32) -> (ErrorKind, Option<&'static str>) {
    match primary {
        5 | 6 => (
            ErrorKind::Unavailable,
            Some(
                "the SQLite database stayed locked for longer than the busy timeout: \
                 another connection holds a long write transaction (a web request, an \
                 open sqlite3 shell); the worker tries again",
            ),
        ),
        8 => (
            ErrorKind::Unavailable,
            Some(
                "the SQLite file is read-only for this process: give the worker's user \
                 write access to the file and to its directory (SQLite writes its journal \
                 beside it)",
            ),
        ),
        14 => (
            ErrorKind::Unavailable,
            Some(
                "cannot open the SQLite file: check that DB_DATABASE names an existing \
                 file and that its directory is writable",
            ),
        ),
        // IOERR, CORRUPT, FULL, PROTOCOL: the disk or the file.
        10 | 11 | 13 | 15 => (ErrorKind::Unavailable, None),
        19 => (ErrorKind::Refused, Some(CONSTRAINT)),
        // ERROR (no such table, no such column) and the rest.
        _ => (ErrorKind::Refused, Some(NO_TABLE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_that_pass_are_unavailable_and_the_table_is_refused() {
        for code in ["08006", "53300", "25006", "40P01", "57P01", "55P03"] {
            assert_eq!(postgres_error(code).0, ErrorKind::Unavailable, "{code}");
        }
        for code in [
            "42P01", "42703", "42501", "22003", "28P01", "28000", "3D000",
        ] {
            assert_eq!(postgres_error(code).0, ErrorKind::Refused, "{code}");
        }
        for n in [1040, 1290, 1836, 1205, 1213, 2006, 1927, 1053] {
            assert_eq!(mysql_error(n).0, ErrorKind::Unavailable, "{n}");
        }
        for n in [1146, 1054, 1142, 1264, 1045] {
            assert_eq!(mysql_error(n).0, ErrorKind::Refused, "{n}");
        }
        for code in [5, 6, 8, 14, 10, 13] {
            assert_eq!(sqlite_error(code).0, ErrorKind::Unavailable, "{code}");
        }
        assert_eq!(sqlite_error(1).0, ErrorKind::Refused);
        // A NOT NULL column Laravel does not fill is no missing table.
        for hint in [
            sqlite_error(19).1,
            postgres_error("23502").1,
            mysql_error(1364).1,
        ] {
            assert_eq!(hint, Some(CONSTRAINT));
        }
        assert_eq!(
            classify(&sqlx::Error::PoolTimedOut).0,
            ErrorKind::Unavailable
        );
        assert_eq!(
            classify(&sqlx::Error::Io(
                std::io::ErrorKind::ConnectionRefused.into()
            ))
            .0,
            ErrorKind::Unavailable
        );
        assert!(mysql_error(1040).1.unwrap().contains("max_connections"));
        assert!(sqlite_error(5).1.unwrap().contains("busy timeout"));
    }
}
