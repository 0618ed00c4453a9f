//! Connections to the SQL databases Laravel supports (SQLite, MySQL and
//! MariaDB, PostgreSQL), for the stores that live in a table: the failed
//! jobs (`failed_jobs`) and the cache (`cache`).

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
        Ok(match url.split_once("://").map(|(scheme, _)| scheme) {
            Some("sqlite") => Pool::Sqlite(SqlitePool::connect_lazy(url)?),
            Some("mysql" | "mariadb") => Pool::MySql(MySqlPool::connect_lazy(&url.replacen(
                "mariadb://",
                "mysql://",
                1,
            ))?),
            Some("postgres" | "postgresql" | "pgsql") => {
                let url = url.replacen("pgsql://", "postgres://", 1);
                Pool::Postgres(PgPool::connect_lazy(&url)?)
            }
            _ => anyhow::bail!("database URL must start with sqlite://, mysql:// or postgres://"),
        })
    }
}
