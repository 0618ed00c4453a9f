//! The connections to the database that holds the jobs table: one sqlx
//! pool of the engine the URL names.
//!
//! The same shape as `crate::sql::Pool` (the failed and cache stores'),
//! kept here because the queue layer sits below `sql` (see the
//! "Architecture" section of `docs/src/development.md`), and because a
//! queue's SQLite connections carry a busy timeout of their own.

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{MySqlPool, PgPool, SqlitePool};

use super::engine::Engine;

/// How long a SQLite statement waits for another connection's write lock
/// before it gives up with "database is locked": PDO's default, so the
/// worker waits as long as a PHP worker beside it would. The worker never
/// changes the file's `journal_mode` (WAL is the app's choice: it is a
/// permanent setting of the file).
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// A pool for one of the databases Laravel supports.
#[derive(Clone)]
pub(super) enum Pool {
    /// `sqlite://PATH`.
    Sqlite(SqlitePool),
    /// `mysql://` or `mariadb://` (MySQL and MariaDB).
    MySql(MySqlPool),
    /// `postgres://`, `postgresql://` or `pgsql://`.
    Postgres(PgPool),
}

/// Runs `$body` with `$p` bound to whichever pool `$pool` holds; the body
/// must have the same type for every database.
macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            $crate::queue::database::pool::Pool::Sqlite($p) => $body,
            $crate::queue::database::pool::Pool::MySql($p) => $body,
            $crate::queue::database::pool::Pool::Postgres($p) => $body,
        }
    };
}
pub(super) use on_pool;

/// The engine a URL's scheme names (MySQL and MariaDB share one until the
/// server's version tells them apart).
pub(super) fn scheme_engine(url: &str) -> Option<Engine> {
    match url.split_once("://")?.0 {
        "sqlite" => Some(Engine::Sqlite),
        "mysql" | "mariadb" => Some(Engine::MySql),
        "postgres" | "postgresql" | "pgsql" => Some(Engine::Postgres),
        _ => None,
    }
}

impl Pool {
    /// A lazy pool for `url` (nothing connects until it is used).
    ///
    /// # Errors
    /// A URL of an unknown scheme, or one the driver cannot parse.
    pub(super) fn lazy(url: &str) -> Result<Pool, String> {
        let bad = |e: sqlx::Error| format!("cannot read the database URL: {e}");
        Ok(match scheme_engine(url) {
            Some(Engine::Sqlite) => {
                let options = SqliteConnectOptions::from_str(url)
                    .map_err(bad)?
                    .busy_timeout(SQLITE_BUSY_TIMEOUT);
                // One connection: SQLite has one writer at a time, and
                // connections of one process that wait for each other do it
                // by the busy handler's sleeps (up to 100 ms each), which
                // made single deletes take seconds at --concurrency=8
                // (bench/database.py). Statements now queue in the worker
                // instead; a wait for the connection is bounded like a
                // wait for the file's lock.
                Pool::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(1)
                        .acquire_timeout(SQLITE_BUSY_TIMEOUT)
                        .connect_lazy_with(options),
                )
            }
            Some(Engine::MySql | Engine::MariaDb) => {
                let url = url.replacen("mariadb://", "mysql://", 1);
                let options = MySqlConnectOptions::from_str(&url).map_err(bad)?;
                Pool::MySql(MySqlPool::connect_lazy_with(options))
            }
            Some(Engine::Postgres) => {
                let url = url.replacen("pgsql://", "postgres://", 1);
                let options = PgConnectOptions::from_str(&url).map_err(bad)?;
                Pool::Postgres(PgPool::connect_lazy_with(options))
            }
            None => {
                return Err(
                    "the database URL must start with sqlite://, mysql://, mariadb:// or \
                     postgres://"
                        .into(),
                );
            }
        })
    }
}

/// Where `url` points, for messages and the banner: the SQLite path, or
/// `host/database` with no user, password nor options.
pub(super) fn place(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    if scheme == "sqlite" {
        return rest.to_string();
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host == "localhost" {
        // A unix socket: `?host=/run/postgresql` or `?socket=/run/mysqld/mysqld.sock`.
        let socket = query.split('&').find_map(|kv| {
            kv.strip_prefix("host=")
                .or_else(|| kv.strip_prefix("socket="))
        });
        host = socket.unwrap_or(host);
    }
    format!("{host}/{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_place_never_shows_credentials() {
        assert_eq!(
            place("mysql://root:secret@db.internal:3306/app?socket=/x"),
            "db.internal:3306/app"
        );
        assert_eq!(place("postgres://u:p%40ss@pg/app"), "pg/app");
        assert_eq!(place("postgres:///app?host=/tmp/s&user=x"), "/tmp/s/app");
        assert_eq!(
            place("sqlite:///srv/app/database.sqlite"),
            "/srv/app/database.sqlite"
        );
        assert_eq!(scheme_engine("pgsql://x/y"), Some(Engine::Postgres));
        assert_eq!(scheme_engine("redis://x"), None);
    }
}
