//! Pulse's database storage (laravel/pulse 1.x, `DatabaseStorage::store`)
//! written directly: the entries that keep a row go to `pulse_entries`,
//! the buckets are upserted into `pulse_aggregates` (a count adds, a max
//! keeps the larger), all in one transaction.
//!
//! `key_hash` is the md5 of `key`: MySQL/MariaDB `binary(16)`
//! (`unhex(md5)`), PostgreSQL `uuid` (`md5::uuid`), SQLite the hex text.
//! It was a generated column on MySQL and PostgreSQL until Pulse's
//! migration `2026_02_13_000001_remove_generated_key_hash_from_pulse_tables`
//! made it plain: it is written only where the column is not generated,
//! which [`Storage::open`] reads from the table's definition.

use anyhow::Context;
use md5::{Digest, Md5};
// Every statement here is built from constants: table and column names,
// placeholders; the values are bound.
use sqlx::AssertSqlSafe;

use super::aggregate::{self, Row};
use super::entry::{Aggregation, Entry};
use crate::sql::Pool;

/// Pulse's tables on one database.
pub struct Storage {
    pool: Pool,
    /// `pulse_entries.key_hash` must be written.
    entries_hash: bool,
    /// `pulse_aggregates.key_hash` must be written.
    aggregates_hash: bool,
}

impl Storage {
    /// Opens the database at `url` and reads whether each table's
    /// `key_hash` is generated.
    ///
    /// # Errors
    /// The database cannot be reached, or Pulse's tables are not there.
    pub async fn open(url: &str) -> anyhow::Result<Storage> {
        let pool = Pool::lazy(url)?;
        let place = crate::sql::place(url);
        let entries_hash = !generated(&pool, "pulse_entries")
            .await
            .with_context(|| format!("Pulse's tables on {place}"))?;
        let aggregates_hash = !generated(&pool, "pulse_aggregates")
            .await
            .with_context(|| format!("Pulse's tables on {place}"))?;
        Ok(Storage {
            pool,
            entries_hash,
            aggregates_hash,
        })
    }

    /// Stores `entries` at `now` (UNIX seconds) in one transaction.
    ///
    /// # Errors
    /// A statement the database refused; nothing of the batch is kept.
    pub async fn store(&self, entries: &[Entry], now: i64) -> anyhow::Result<()> {
        let rows = aggregate::rows(entries, now);
        let kept: Vec<&Entry> = entries.iter().filter(|e| !e.only_buckets).collect();
        let engine = match &self.pool {
            Pool::Sqlite(_) => Engine::Sqlite,
            Pool::Postgres(_) => Engine::Postgres,
            Pool::MySql(_) => Engine::MySql,
        };
        crate::sql::on_pool!(&self.pool, |pool| {
            let mut tx = pool.begin().await?;
            for e in &kept {
                let sql = entry_sql(engine, self.entries_hash);
                bind_entry(sqlx::query(AssertSqlSafe(sql)), e, self.entries_hash)
                    .execute(&mut *tx)
                    .await?;
            }
            for row in &rows {
                let sql = upsert_sql(engine, self.aggregates_hash, row.aggregate);
                bind_row(sqlx::query(AssertSqlSafe(sql)), row, self.aggregates_hash)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }
}

/// The three engines' SQL dialects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
    MySql,
}

/// The `pulse_entries` insert, `?` placeholders; `hash`: the key_hash
/// placeholder as the engine converts it.
fn entry_sql(engine: Engine, with_hash: bool) -> String {
    let sql = if with_hash {
        format!(
            r#"insert into "pulse_entries" ("timestamp", "type", "key", "key_hash", "value") values (?, ?, ?, {}, ?)"#,
            hash_placeholder(engine)
        )
    } else {
        r#"insert into "pulse_entries" ("timestamp", "type", "key", "value") values (?, ?, ?, ?)"#
            .to_string()
    };
    quoted(engine, &sql)
}

/// The key_hash placeholder: the md5 hex converted as the column wants.
fn hash_placeholder(engine: Engine) -> &'static str {
    match engine {
        Engine::Sqlite => "?",
        Engine::Postgres => "?::uuid",
        Engine::MySql => "unhex(?)",
    }
}

/// `sql`, its identifiers written `"name"`, as the engine quotes them
/// (`key` is a reserved word on MySQL), placeholders numbered on
/// PostgreSQL.
fn quoted(engine: Engine, sql: &str) -> String {
    match engine {
        Engine::MySql => sql.replace('"', "`"),
        Engine::Postgres => pg_numbered(sql),
        Engine::Sqlite => sql.to_string(),
    }
}

/// The `pulse_aggregates` upsert of one row, `?` placeholders in the
/// order [`bind_row`] binds: bucket, period, type, aggregate, key,
/// (key_hash), value.
fn upsert_sql(engine: Engine, with_hash: bool, aggregate: Aggregation) -> String {
    let (columns, hash) = if with_hash {
        (
            r#""bucket", "period", "type", "aggregate", "key", "key_hash", "value""#,
            format!("{}, ", hash_placeholder(engine)),
        )
    } else {
        (
            r#""bucket", "period", "type", "aggregate", "key", "value""#,
            String::new(),
        )
    };
    let insert =
        format!(r#"insert into "pulse_aggregates" ({columns}) values (?, ?, ?, ?, ?, {hash}?)"#);
    let conflict = r#"on conflict ("bucket", "period", "type", "aggregate", "key_hash") do update set "value" ="#;
    let update = match (engine, aggregate) {
        (Engine::MySql, Aggregation::Count) => {
            r#"on duplicate key update "value" = "value" + values("value")"#.to_string()
        }
        (Engine::MySql, Aggregation::Max) => {
            r#"on duplicate key update "value" = greatest("value", values("value"))"#.to_string()
        }
        (_, Aggregation::Count) => {
            format!(r#"{conflict} "pulse_aggregates"."value" + "excluded"."value""#)
        }
        (Engine::Postgres, Aggregation::Max) => {
            format!(r#"{conflict} greatest("pulse_aggregates"."value", "excluded"."value")"#)
        }
        (Engine::Sqlite, Aggregation::Max) => {
            format!(r#"{conflict} max("pulse_aggregates"."value", "excluded"."value")"#)
        }
    };
    quoted(engine, &format!("{insert} {update}"))
}

/// Binds `entry` in the order of [`entry_sql`].
fn bind_entry<'q, DB>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    entry: &'q Entry,
    with_hash: bool,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let query = query
        .bind(entry.timestamp)
        .bind(entry.kind)
        .bind(entry.key.as_str());
    let query = if with_hash {
        query.bind(md5_hex(&entry.key))
    } else {
        query
    };
    query.bind(entry.value)
}

/// Binds `row` in the order of [`upsert_sql`].
fn bind_row<'q, DB>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    row: &'q Row,
    with_hash: bool,
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    DB: sqlx::Database,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let query = query
        .bind(row.bucket)
        .bind(row.period)
        .bind(row.kind)
        .bind(row.aggregate.as_str())
        .bind(row.key.as_str());
    let query = if with_hash {
        query.bind(md5_hex(&row.key))
    } else {
        query
    };
    query.bind(row.value)
}

/// `?` placeholders numbered `$1`, `$2`… for PostgreSQL.
fn pg_numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

/// md5 of `key`, lowercase hex (what each engine's conversion takes).
fn md5_hex(key: &str) -> String {
    hex::encode(Md5::digest(key.as_bytes()))
}

/// Whether `table.key_hash` is a generated column: SQLite's
/// `table_xinfo` (hidden 2 or 3), PostgreSQL's `attgenerated`, MySQL's
/// and MariaDB's `EXTRA` (`VIRTUAL GENERATED`, `STORED GENERATED`).
///
/// # Errors
/// The table is not there (or has no `key_hash`), or the database cannot
/// be reached.
async fn generated(pool: &Pool, table: &str) -> anyhow::Result<bool> {
    let found: Option<bool> = match pool {
        Pool::Sqlite(pool) => {
            let sql =
                format!("select hidden from pragma_table_xinfo('{table}') where name = 'key_hash'");
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .fetch_optional(pool)
                .await?
                .map(|hidden| hidden == 2 || hidden == 3)
        }
        Pool::Postgres(pool) => sqlx::query_scalar::<_, String>(
            "select attgenerated::text from pg_attribute \
             where attrelid = to_regclass($1) and attname = 'key_hash' and not attisdropped",
        )
        .bind(table)
        .fetch_optional(pool)
        .await?
        .map(|g| !g.is_empty()),
        Pool::MySql(pool) => sqlx::query_scalar::<_, String>(
            "select cast(extra as char) from information_schema.columns \
             where table_schema = database() and table_name = ? and column_name = 'key_hash'",
        )
        .bind(table)
        .fetch_optional(pool)
        .await?
        .map(|extra| extra.to_ascii_uppercase().contains("GENERATED")),
    };
    found.with_context(|| {
        format!("no table {table} with a key_hash column (Pulse's migration not run?)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_upserts_as_pulse_does() {
        let sql = upsert_sql(Engine::Sqlite, true, Aggregation::Max);
        assert!(
            sql.contains(r#""key_hash", "value") values (?, ?, ?, ?, ?, ?, ?)"#),
            "{sql}"
        );
        assert!(
            sql.ends_with(r#"max("pulse_aggregates"."value", "excluded"."value")"#),
            "{sql}"
        );
        let sql = upsert_sql(Engine::Postgres, true, Aggregation::Count);
        assert!(sql.contains("($1, $2, $3, $4, $5, $6::uuid, $7)"), "{sql}");
        let sql = upsert_sql(Engine::MySql, false, Aggregation::Count);
        assert!(
            sql.contains("(`bucket`, `period`, `type`, `aggregate`, `key`, `value`)"),
            "{sql}"
        );
        assert!(
            sql.ends_with("`value` = `value` + values(`value`)"),
            "{sql}"
        );
    }
}
