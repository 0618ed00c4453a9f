//! Connections to the SQL databases Laravel supports (SQLite, MySQL and
//! MariaDB, PostgreSQL), for the stores that live in a table: the failed
//! jobs (`failed_jobs`), the cache (`cache`) and the database queue
//! (`jobs`).

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{MySqlPool, PgPool, SqlitePool};

/// A pool for one of the databases Laravel supports.
#[derive(Clone)]
pub enum Pool {
    /// `sqlite://path` (`DB_CONNECTION=sqlite`).
    Sqlite(SqlitePool),
    /// `mysql://` (MySQL and MariaDB).
    MySql(MySqlPool),
    /// `postgres://` or `pgsql://`.
    Postgres(PgPool),
}

/// Runs `$body` with `$p` bound to whichever pool `$pool` holds; the body
/// must have the same type for every database.
macro_rules! on_pool {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            $crate::sql::Pool::Sqlite($p) => $body,
            $crate::sql::Pool::MySql($p) => $body,
            $crate::sql::Pool::Postgres($p) => $body,
        }
    };
}
pub(crate) use on_pool;

impl Pool {
    /// A lazy pool for `url` (nothing connects until it is used).
    ///
    /// # Errors
    /// A URL of an unknown scheme, or one the driver cannot parse.
    pub(crate) fn lazy(url: &str) -> anyhow::Result<Pool> {
        Self::lazy_with(url, None)
    }

    /// A lazy pool for `url`; with `sqlite_busy`, a SQLite pool of one
    /// connection that waits up to that long for another process's write
    /// lock (and for its own connection) before "database is locked"
    /// (without: sqlx's defaults, a 5 s busy timeout).
    ///
    /// # Errors
    /// A URL of an unknown scheme, or one the driver cannot parse.
    pub(crate) fn lazy_with(url: &str, sqlite_busy: Option<Duration>) -> anyhow::Result<Pool> {
        Ok(match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("sqlite") => {
                let options = quiet(SqliteConnectOptions::from_str(url)?);
                match sqlite_busy {
                    // One connection: SQLite has one writer at a time, and
                    // connections of one process that wait for each other
                    // do it by the busy handler's sleeps (up to 100 ms
                    // each), which made single deletes take seconds at
                    // --concurrency=8 (bench/database.py). Statements queue
                    // in the worker instead; a wait for the connection is
                    // bounded like a wait for the file's lock.
                    Some(busy) => Pool::Sqlite(
                        SqlitePoolOptions::new()
                            .max_connections(1)
                            .acquire_timeout(busy)
                            .acquire_slow_level(log::LevelFilter::Debug)
                            .connect_lazy_with(options.busy_timeout(busy)),
                    ),
                    None => Pool::Sqlite(SqlitePool::connect_lazy_with(options)),
                }
            }
            Some("mysql" | "mariadb") => Pool::MySql(
                server_pool()
                    .connect_lazy_with(quiet(MySqlConnectOptions::from_str(&mysql_url(url))?)),
            ),
            Some("postgres" | "postgresql" | "pgsql") => Pool::Postgres(
                server_pool()
                    .connect_lazy_with(quiet(PgConnectOptions::from_str(&postgres_url(url))?)),
            ),
            _ => anyhow::bail!(
                "database URL must start with sqlite://, mysql://, mariadb:// or postgres://"
            ),
        })
    }

    /// Opens one connection to the server `url` names, outside any pool,
    /// and closes it: the way to learn why a pool found no connection
    /// (sqlx's pool tries again while a server refuses, and reports only
    /// that its wait ran out). Nothing to do for SQLite, which has no
    /// server. Waits at most [`SERVER_ACQUIRE_TIMEOUT`].
    ///
    /// # Errors
    /// What the connect met: `Io` with `ConnectionRefused` for a port
    /// nobody listens on, the server's own refusal (a wrong password, no
    /// such database), or `Io` with `TimedOut` for a server that does not
    /// answer in time.
    pub(crate) async fn connect_once(url: &str) -> Result<(), sqlx::Error> {
        use sqlx::{ConnectOptions, Connection};
        let connect = async {
            match url.split_once("://").map(|(scheme, _)| scheme) {
                Some("mysql" | "mariadb") => {
                    let options = MySqlConnectOptions::from_str(&mysql_url(url))?;
                    options.connect().await?.close().await
                }
                Some("postgres" | "postgresql" | "pgsql") => {
                    let options = PgConnectOptions::from_str(&postgres_url(url))?;
                    options.connect().await?.close().await
                }
                _ => Ok(()),
            }
        };
        match tokio::time::timeout(SERVER_ACQUIRE_TIMEOUT, connect).await {
            Ok(done) => done,
            Err(_) => Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the server did not answer a connect within {} s",
                    SERVER_ACQUIRE_TIMEOUT.as_secs()
                ),
            ))),
        }
    }
}

/// How long a statement on a MySQL/MariaDB or PostgreSQL pool waits for a
/// connection (sqlx's default is 30 s). While the server refuses
/// connections, sqlx's pool tries again with pauses that double up to a
/// fifth of this wait: 2 s keeps them under 0.4 s, so a pool reconnects
/// within a fraction of a second of a restarted server's return (with
/// 30 s, waits of 2.56 s then 5.12 s let reservations lapse), and a server
/// that is down is reported within seconds, not after 30.
pub(crate) const SERVER_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The pool options of a server database (see [`SERVER_ACQUIRE_TIMEOUT`]).
/// sqlx's "time to acquire exceeded slow threshold" goes to DEBUG: after
/// an outage the worker's own line says what failed and why.
fn server_pool<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .acquire_timeout(SERVER_ACQUIRE_TIMEOUT)
        .acquire_slow_level(log::LevelFilter::Debug)
}

/// A `mysql://` or `mariadb://` URL as sqlx reads it.
fn mysql_url(url: &str) -> String {
    url.replacen("mariadb://", "mysql://", 1)
}

/// A `postgres://`, `postgresql://` or `pgsql://` URL as sqlx reads it.
fn postgres_url(url: &str) -> String {
    url.replacen("pgsql://", "postgres://", 1)
}

/// `options` with sqlx's own slow-statement lines at DEBUG: under a busy
/// SQLite file a delete can wait seconds for the lock, and sqlx would log
/// a WARN with the statement's text each time; the worker says itself what
/// a wait costs (a failed statement is logged with its context).
fn quiet<O: sqlx::ConnectOptions>(options: O) -> O {
    options.log_slow_statements(log::LevelFilter::Debug, Duration::from_secs(1))
}

/// Where `url` points, for messages and the banner: the SQLite path, or
/// `host/database` with no user, password nor options. A user part cut
/// by a raw `/`, `?` or `#` in its password (the host part then holds no
/// `@`, one comes later) is hidden up to the last `@`, however the URL
/// reads.
pub(crate) fn place(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let rest = match rest.rfind('@') {
        Some(at) if at > authority_end && !rest[..authority_end].contains('@') => &rest[at + 1..],
        _ => rest,
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    if scheme == "sqlite" {
        // The file's name, as the URL percent-encodes its `%`, `?`, `#`.
        return percent_encoding::percent_decode_str(rest)
            .decode_utf8_lossy()
            .into_owned();
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
        // Issue 47, 4: a password with a raw `/`, `?` or `#`.
        for cut in [
            "postgres://lw:pa/wrongPW@pg:5432/app",
            "postgres://lw:pa?wrongPW@pg:5432/app",
            "postgres://lw:pa#wrongPW@pg:5432/app",
        ] {
            assert_eq!(place(cut), "pg:5432/app", "{cut}");
        }
        assert_eq!(place("postgres:///app?host=/tmp/s&user=x"), "/tmp/s/app");
        assert_eq!(
            place("sqlite:///srv/app/database.sqlite"),
            "/srv/app/database.sqlite"
        );
    }
}
