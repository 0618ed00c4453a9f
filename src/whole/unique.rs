//! Releasing a job's unique lock (`ShouldBeUnique`) as Laravel's cache
//! locks do (`Cache/RedisLock`, `Cache/DatabaseLock`), in the store the
//! payload names.
//!
//! - Redis store: on the store's lock connection (the skeleton's
//!   `REDIS_CACHE_LOCK_CONNECTION`, `default`: DB 0), key = Redis prefix +
//!   cache prefix + the lock's key. No owner: `DEL` (Laravel's
//!   `forceRelease`). An owner (13.24+): compare-and-delete, Laravel's
//!   `releaseLock` script.
//! - Database store: `DELETE FROM cache_locks WHERE key = ?`, with `AND
//!   owner = ?` when an owner is given; key = cache prefix + the lock's key.

use anyhow::Context;
use sqlx::AssertSqlSafe;

use crate::redis::RedisConn;
use crate::sql::{Pool, on_pool};

/// Laravel's `LuaScripts::releaseLock`: delete the key only when it still
/// holds the owner's token.
const RELEASE_LOCK: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end"#;

/// Where unique locks are released.
#[derive(Clone)]
pub enum LockStore {
    /// Laravel's Redis cache store, on its lock connection.
    Redis {
        /// The lock connection.
        conn: RedisConn,
        /// Redis prefix + cache prefix (+ `:` on Laravel ≤ 10).
        prefix: String,
    },
    /// Laravel's database cache store, its locks table.
    Database {
        /// The cache database.
        pool: Pool,
        /// The locks table (`cache_locks`).
        table: String,
        /// The cache prefix.
        prefix: String,
    },
}

impl LockStore {
    /// Releases the lock `key` (before the store's prefix); with `owner`,
    /// only while the lock is still that owner's. Returns whether a lock
    /// was deleted (false: none, or another owner's).
    ///
    /// # Errors
    /// Any store error.
    pub async fn release(&self, key: &str, owner: Option<&str>) -> anyhow::Result<bool> {
        match self {
            LockStore::Redis { conn, prefix } => {
                let full = format!("{prefix}{key}");
                let deleted: i64 = match owner {
                    None => {
                        redis::cmd("DEL")
                            .arg(&full)
                            .query_async(&mut conn.clone())
                            .await
                    }
                    // EVAL, not EVALSHA: the script is short, and the
                    // book's ACL user may run EVAL only.
                    Some(owner) => {
                        redis::cmd("EVAL")
                            .arg(RELEASE_LOCK)
                            .arg(1)
                            .arg(&full)
                            .arg(owner)
                            .query_async(&mut conn.clone())
                            .await
                    }
                }
                .with_context(|| format!("cannot release the unique lock {full:?} in Redis"))?;
                Ok(deleted > 0)
            }
            LockStore::Database {
                pool,
                table,
                prefix,
            } => {
                let full = format!("{prefix}{key}");
                let (k, m1, m2) = match pool {
                    Pool::MySql(_) => ("`key`", "?", "?"),
                    Pool::Sqlite(_) => ("\"key\"", "?", "?"),
                    Pool::Postgres(_) => ("\"key\"", "$1", "$2"),
                };
                let mut sql = format!("DELETE FROM {table} WHERE {k} = {m1}");
                if owner.is_some() {
                    sql.push_str(&format!(" AND owner = {m2}"));
                }
                let context = || format!("cannot release the unique lock {full:?} in {table}");
                let done = on_pool!(pool, |p| {
                    // The table name was checked to be a plain identifier.
                    let mut q = sqlx::query(AssertSqlSafe(sql)).bind(full.as_str());
                    if let Some(owner) = owner {
                        q = q.bind(owner);
                    }
                    q.execute(p).await.with_context(context)?.rows_affected()
                });
                Ok(done > 0)
            }
        }
    }

    /// Checks that the store answers (an `MGET` of a key under the locks'
    /// prefix: a command the book's ACL user may run; or a read of the
    /// locks table), for the start-up warning.
    ///
    /// # Errors
    /// The store cannot be reached or the table read.
    pub async fn check(&self) -> anyhow::Result<()> {
        match self {
            LockStore::Redis { conn, prefix } => {
                redis::cmd("MGET")
                    .arg(format!("{prefix}laravel_unique_job:"))
                    .query_async::<()>(&mut conn.clone())
                    .await
                    .context("the lock Redis does not answer")?;
            }
            LockStore::Database { pool, table, .. } => {
                let sql = format!("SELECT COUNT(*) FROM {table} WHERE 1 = 0");
                on_pool!(pool, |p| {
                    sqlx::query(AssertSqlSafe(sql))
                        .execute(p)
                        .await
                        .with_context(|| format!("cannot read the locks table {table}"))?;
                });
            }
        }
        Ok(())
    }

    /// Where the store is, for messages (no credentials).
    pub fn describe(&self) -> String {
        match self {
            LockStore::Redis { prefix, .. } => format!("Redis keys {prefix:?}…"),
            LockStore::Database { table, prefix, .. } => {
                format!("table {table}, keys {prefix:?}…")
            }
        }
    }
}
