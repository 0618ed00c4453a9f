//! Laravel's database cache store (the `cache` table; the default store of
//! the Laravel 11+ skeleton, `CACHE_STORE=database`).
//!
//! Schema (the app's `cache` migration): `key` string (primary or unique),
//! `value` (medium)text, `expiration` integer (UNIX seconds). A cache key is
//! stored as `{cache prefix}{key}`, with no `:` in any version (unlike the
//! Redis store of Laravel ≤ 10). The value is PHP-serialized (`i:5;`,
//! `b:1;`).
//!
//! What `Illuminate\Cache\DatabaseStore` does, and so what this does:
//! - `get`/`many`: a row whose `expiration` is at or before now is treated
//!   as missing and deleted;
//! - `put`: insert, or update value and expiration of an existing row
//!   (8.x: insert then update on a duplicate; 11+: upsert);
//! - `forever`: `put` for 315 360 000 seconds (ten years);
//! - `increment`: in a transaction, lock the row, and when it exists and
//!   holds a number, write the number + 1 back, keeping its expiration (an
//!   expired row is incremented too); no row: `false` (here `None`);
//! - `forget`: delete the row.

use anyhow::Context;
use sqlx::{AssertSqlSafe, Row};

use super::php;
use crate::queue::now;
use crate::sql::{Pool, on_pool};

/// Seconds `forever` stores a value for (Laravel's ten years).
pub const FOREVER_SECONDS: i64 = 315_360_000;

/// The `cache` table of one database.
#[derive(Clone)]
pub struct DatabaseCache {
    pool: Pool,
    table: String,
    prefix: String,
}

impl DatabaseCache {
    /// A store on the database at `url` (`sqlite://`, `mysql://`,
    /// `postgres://`), table `table`, keys prefixed with `prefix` (the cache
    /// prefix, `CACHE_PREFIX`). Nothing connects until the first use.
    ///
    /// # Errors
    /// A URL of an unknown scheme or one the driver cannot parse, or a table
    /// name that is not a plain identifier.
    pub fn new(url: &str, table: &str, prefix: impl Into<String>) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !table.is_empty()
                && table
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'),
            "cache table name {table:?} is not a plain identifier"
        );
        Ok(DatabaseCache {
            pool: Pool::lazy(url).context("the cache database")?,
            table: table.to_string(),
            prefix: prefix.into(),
        })
    }

    /// The stored `key` of cache key `key`.
    pub fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Where cache key `key` is, for messages: its row of the table.
    pub fn locate(&self, key: &str) -> String {
        format!(
            "the row {:?} of the cache table {}",
            self.key(key),
            self.table
        )
    }

    /// The `key` column, quoted (`key` is a reserved word in MySQL).
    fn key_column(&self) -> &'static str {
        match self.pool {
            Pool::MySql(_) => "`key`",
            Pool::Sqlite(_) | Pool::Postgres(_) => "\"key\"",
        }
    }

    /// Bind mark number `n` (from 1).
    fn mark(&self, n: usize) -> String {
        match self.pool {
            Pool::Postgres(_) => format!("${n}"),
            Pool::Sqlite(_) | Pool::MySql(_) => "?".into(),
        }
    }

    /// `expiration` as a 64-bit integer (the column is a 32-bit `integer`
    /// on PostgreSQL and MySQL).
    fn expiration_column(&self) -> &'static str {
        match self.pool {
            Pool::Sqlite(_) => "expiration",
            Pool::MySql(_) => "CAST(expiration AS SIGNED)",
            Pool::Postgres(_) => "CAST(expiration AS BIGINT)",
        }
    }

    /// The serialized values of `keys` (`None` when missing or expired), in
    /// one `SELECT`; expired rows found are deleted, as Laravel does.
    ///
    /// # Errors
    /// Any database error (no such table, unreachable server).
    pub async fn many(&self, keys: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let full: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        let marks: Vec<String> = (1..=full.len()).map(|n| self.mark(n)).collect();
        // The table name was checked to be a plain identifier; values are bound.
        let sql = format!(
            "SELECT {k}, value, {e} FROM {t} WHERE {k} IN ({m})",
            k = self.key_column(),
            e = self.expiration_column(),
            t = self.table,
            m = marks.join(", ")
        );
        let rows: Vec<(String, String, i64)> = on_pool!(&self.pool, |p| {
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for k in &full {
                q = q.bind(k.as_str());
            }
            q.fetch_all(p)
                .await
                .with_context(|| format!("cannot read the cache table {}", self.table))?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                .collect::<Result<_, sqlx::Error>>()?
        });
        let now = now();
        let mut values = vec![None; keys.len()];
        for (key, value, expiration) in rows {
            if expiration <= now {
                self.forget_if_expired(&key, now).await?;
                continue;
            }
            if let Some(i) = full.iter().position(|k| *k == key) {
                values[i] = Some(value);
            }
        }
        Ok(values)
    }

    /// Up to `limit` stored keys that end with `suffix` (for the hint that
    /// a signal is written under another cache prefix; `suffix` holds no
    /// `%` or `_`).
    ///
    /// # Errors
    /// Any database error.
    pub async fn keys_ending_with(&self, suffix: &str, limit: u32) -> anyhow::Result<Vec<String>> {
        let sql = format!(
            "SELECT {k} FROM {t} WHERE {k} LIKE {m} LIMIT {limit}",
            k = self.key_column(),
            t = self.table,
            m = self.mark(1),
        );
        let pattern = format!("%{suffix}");
        Ok(on_pool!(&self.pool, |p| {
            sqlx::query(AssertSqlSafe(sql))
                .bind(pattern.as_str())
                .fetch_all(p)
                .await
                .with_context(|| format!("cannot read the cache table {}", self.table))?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<Vec<String>, sqlx::Error>>()?
        }))
    }

    /// Deletes the row of stored key `full` if it has expired by `now`.
    async fn forget_if_expired(&self, full: &str, now: i64) -> anyhow::Result<()> {
        let sql = format!(
            "DELETE FROM {} WHERE {} = {} AND expiration <= {}",
            self.table,
            self.key_column(),
            self.mark(1),
            self.mark(2)
        );
        on_pool!(&self.pool, |p| {
            sqlx::query(AssertSqlSafe(sql))
                .bind(full)
                .bind(now)
                .execute(p)
                .await
                .with_context(|| format!("cannot delete from the cache table {}", self.table))?;
        });
        Ok(())
    }

    /// `put`: writes `value` under `key` until `expiration` (UNIX seconds),
    /// replacing a row already there.
    ///
    /// # Errors
    /// Any database error.
    async fn put(&self, key: &str, value: &php::Value, expiration: i64) -> anyhow::Result<()> {
        let k = self.key_column();
        let (a, b, c) = (self.mark(1), self.mark(2), self.mark(3));
        let sql = match self.pool {
            Pool::MySql(_) => format!(
                "INSERT INTO {t} ({k}, value, expiration) VALUES ({a}, {b}, {c}) \
                 ON DUPLICATE KEY UPDATE value = VALUES(value), expiration = VALUES(expiration)",
                t = self.table
            ),
            Pool::Sqlite(_) | Pool::Postgres(_) => format!(
                "INSERT INTO {t} ({k}, value, expiration) VALUES ({a}, {b}, {c}) \
                 ON CONFLICT ({k}) DO UPDATE SET value = excluded.value, \
                 expiration = excluded.expiration",
                t = self.table
            ),
        };
        let full = self.key(key);
        let serialized = php::serialize(value);
        on_pool!(&self.pool, |p| {
            sqlx::query(AssertSqlSafe(sql))
                .bind(full.as_str())
                .bind(serialized.as_str())
                .bind(expiration)
                .execute(p)
                .await
                .with_context(|| format!("cannot write to the cache table {}", self.table))?;
        });
        Ok(())
    }

    /// `forever`: `put` for ten years.
    ///
    /// # Errors
    /// Any database error.
    pub async fn forever(&self, key: &str, value: &php::Value) -> anyhow::Result<()> {
        self.put(key, value, now() + FOREVER_SECONDS).await
    }

    /// `forget`: deletes the row.
    ///
    /// # Errors
    /// Any database error.
    pub async fn forget(&self, key: &str) -> anyhow::Result<()> {
        let sql = format!(
            "DELETE FROM {} WHERE {} = {}",
            self.table,
            self.key_column(),
            self.mark(1)
        );
        let full = self.key(key);
        on_pool!(&self.pool, |p| {
            sqlx::query(AssertSqlSafe(sql))
                .bind(full.as_str())
                .execute(p)
                .await
                .with_context(|| format!("cannot delete from the cache table {}", self.table))?;
        });
        Ok(())
    }

    /// What the worker does for maxExceptions (`Worker::
    /// markJobAsFailedIfWillExceedMaxExceptions`): `get`; when the value is
    /// missing, expired or falsy, `put(key, 0, ttl_seconds)`; then
    /// `increment`. Returns the new count, or 0 when the row vanished
    /// between the two (Laravel's `increment` gives `false` then, which no
    /// maxExceptions reaches).
    ///
    /// # Errors
    /// Any database error.
    pub async fn count(&self, key: &str, ttl_seconds: u64) -> anyhow::Result<i64> {
        let current = self.many(&[key.to_string()]).await?.pop().flatten();
        if !current.is_some_and(|v| php::truthy(&v)) {
            let ttl = i64::try_from(ttl_seconds).unwrap_or(i64::MAX / 2);
            self.put(key, &php::Value::Int(0), now() + ttl).await?;
        }
        Ok(self.increment(key).await?.unwrap_or(0))
    }

    /// `increment`: in one transaction, reads the row with a lock (`FOR
    /// UPDATE`; SQLite: `BEGIN IMMEDIATE`), and writes its number + 1 back
    /// keeping the expiration. `None` when there is no row or it does not
    /// hold a number.
    ///
    /// # Errors
    /// Any database error.
    pub async fn increment(&self, key: &str) -> anyhow::Result<Option<i64>> {
        let k = self.key_column();
        let lock = match self.pool {
            Pool::Sqlite(_) => "",
            Pool::MySql(_) | Pool::Postgres(_) => " FOR UPDATE",
        };
        let select = format!(
            "SELECT value FROM {t} WHERE {k} = {m}{lock}",
            t = self.table,
            m = self.mark(1)
        );
        let update = format!(
            "UPDATE {t} SET value = {a} WHERE {k} = {b}",
            t = self.table,
            a = self.mark(1),
            b = self.mark(2)
        );
        let full = self.key(key);
        let context = || format!("cannot increment in the cache table {}", self.table);
        let new = on_pool!(&self.pool, |p| {
            let mut tx = match self.pool {
                Pool::Sqlite(_) => p.begin_with("BEGIN IMMEDIATE").await,
                _ => p.begin().await,
            }
            .with_context(context)?;
            let row = sqlx::query(AssertSqlSafe(select))
                .bind(full.as_str())
                .fetch_optional(&mut *tx)
                .await
                .with_context(context)?;
            let current = match row {
                Some(row) => Some(row.try_get::<String, _>(0).with_context(context)?),
                None => None,
            };
            match current.as_deref().and_then(php::as_int) {
                Some(n) => {
                    let new = n.saturating_add(1);
                    sqlx::query(AssertSqlSafe(update))
                        .bind(php::serialize(&php::Value::Int(new)))
                        .bind(full.as_str())
                        .execute(&mut *tx)
                        .await
                        .with_context(context)?;
                    tx.commit().await.with_context(context)?;
                    Some(new)
                }
                None => {
                    tx.rollback().await.with_context(context)?;
                    None
                }
            }
        });
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store(dir: &tempfile::TempDir) -> DatabaseCache {
        let path = dir.path().join("db.sqlite");
        std::fs::File::create(&path).unwrap();
        let url = format!("sqlite://{}", path.display());
        let c = DatabaseCache::new(&url, "cache", "app-cache-").unwrap();
        let Pool::Sqlite(p) = &c.pool else {
            unreachable!()
        };
        sqlx::query(
            "create table \"cache\" (\"key\" varchar not null, \"value\" text not null, \
             \"expiration\" integer not null, primary key (\"key\"))",
        )
        .execute(p)
        .await
        .unwrap();
        c
    }

    #[tokio::test]
    async fn laravel_semantics_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let c = store(&dir).await;
        c.forever("k", &php::Value::Bool(true)).await.unwrap();
        assert_eq!(
            c.many(&["missing".into(), "k".into()]).await.unwrap(),
            vec![None, Some("b:1;".into())]
        );
        assert_eq!(c.count("n", 60).await.unwrap(), 1);
        assert_eq!(c.count("n", 60).await.unwrap(), 2);
        // An expired row is missing for `get`, and is deleted.
        c.put("n", &php::Value::Int(5), now() - 1).await.unwrap();
        assert_eq!(
            c.increment("n").await.unwrap(),
            Some(6),
            "increment ignores expiry"
        );
        assert_eq!(c.many(&["n".into()]).await.unwrap(), vec![None]);
        assert_eq!(
            c.increment("n").await.unwrap(),
            None,
            "the expired row is gone"
        );
        assert_eq!(c.count("n", 60).await.unwrap(), 1, "counting starts again");
        c.forget("k").await.unwrap();
        c.forget("k").await.unwrap();
        assert_eq!(c.many(&["k".into()]).await.unwrap(), vec![None]);
        assert!(DatabaseCache::new("sqlite://x", "cache; drop", "").is_err());
    }
}
