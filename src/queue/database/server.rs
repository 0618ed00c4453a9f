//! What `DatabaseQueue::open` learns from the database once: the engine
//! and version (and so the lock a pop takes), the database's name, and
//! the largest number the table's `attempts` column holds.

use sqlx::{AssertSqlSafe, Row};

use super::engine::{self, Engine, Version};
use super::pool::{Pool, on_pool};

/// The server behind a pool.
#[derive(Debug, Clone)]
pub(super) struct Server {
    /// The engine, MySQL and MariaDB told apart.
    pub engine: Engine,
    /// The version text the server gives (`SELECT VERSION()`).
    pub version: String,
    /// Whether pops can take `FOR UPDATE SKIP LOCKED`.
    pub skip_locked: bool,
    /// The database's name (`DATABASE()`, `current_database()`); empty on
    /// SQLite, which the file names.
    pub database: String,
}

/// Asks the server behind `pool` who it is.
pub(super) async fn identify(pool: &Pool) -> Result<Server, sqlx::Error> {
    let sql = match pool {
        Pool::Sqlite(_) => "SELECT sqlite_version(), ''",
        Pool::MySql(_) => "SELECT VERSION(), COALESCE(DATABASE(), '')",
        Pool::Postgres(_) => "SELECT VERSION(), current_database()",
    };
    let (version, database): (String, String) = on_pool!(pool, |p| {
        let row = sqlx::query(sql).fetch_one(p).await?;
        (row.try_get(0)?, row.try_get(1)?)
    });
    let (engine, parsed) = match pool {
        Pool::Sqlite(_) => (Engine::Sqlite, None),
        Pool::MySql(_) => engine::mysql_server(&version),
        Pool::Postgres(_) => (Engine::Postgres, engine::postgres_version(&version)),
    };
    Ok(Server {
        engine,
        skip_locked: engine::has_skip_locked(engine, parsed),
        version: short_version(engine, &version, parsed),
        database,
    })
}

/// `10.11.19`, `15.20`: the version as operators write it.
fn short_version(engine: Engine, text: &str, parsed: Option<Version>) -> String {
    match (engine, parsed) {
        (Engine::Postgres, Some((major, minor, _))) if major >= 10 => format!("{major}.{minor}"),
        (_, Some((major, minor, patch))) => format!("{major}.{minor}.{patch}"),
        (_, None) => text.to_string(),
    }
}

/// The `attempts` column: its SQL type and the largest count it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptsColumn {
    /// The column's type as the database names it (`tinyint unsigned`,
    /// `smallint`, `integer`).
    pub column_type: String,
    /// The largest value it holds (255 for MySQL's `tinyint unsigned` of
    /// tables made before Laravel 13.6).
    pub limit: i64,
}

/// The largest value a column of SQL integer type `data_type` holds,
/// `unsigned` or not (MySQL's types; PostgreSQL's are signed).
fn integer_limit(data_type: &str, unsigned: bool) -> i64 {
    let bits = match data_type {
        "tinyint" => 8,
        "smallint" | "int2" => 16,
        "mediumint" => 24,
        "int" | "integer" | "int4" => 32,
        _ => 64,
    };
    match (bits, unsigned) {
        (64, _) => i64::MAX,
        (b, true) => (1i64 << b) - 1,
        (b, false) => (1i64 << (b - 1)) - 1,
    }
}

/// `schema.table` as its schema and name; a table without a schema is of
/// the connection's database/schema (`None`).
fn schema_and_name(table: &str) -> (Option<&str>, &str) {
    match table.split_once('.') {
        Some((schema, name)) => (Some(schema), name),
        None => (None, table),
    }
}

/// Reads the `attempts` column of `table` (`schema.table` or a table of
/// the connection's database/schema). `None`: the table has no such
/// column, or does not exist.
pub(super) async fn attempts_column(
    pool: &Pool,
    table: &str,
) -> Result<Option<AttemptsColumn>, sqlx::Error> {
    let (schema, name) = schema_and_name(table);
    if let Pool::Sqlite(p) = pool {
        // SQLite's integer holds any count a job will reach.
        let sql = "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'attempts'";
        let found: i64 = sqlx::query_scalar(sql).bind(name).fetch_one(p).await?;
        return Ok((found > 0).then(|| AttemptsColumn {
            column_type: "integer".into(),
            limit: i64::MAX,
        }));
    }
    let sql = match pool {
        Pool::Sqlite(_) => return Ok(None),
        Pool::MySql(_) => {
            "SELECT CAST(DATA_TYPE AS CHAR), CAST(COLUMN_TYPE AS CHAR) \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) \
             AND TABLE_NAME = ? AND COLUMN_NAME = 'attempts'"
        }
        Pool::Postgres(_) => {
            "SELECT CAST(data_type AS TEXT), CAST(data_type AS TEXT) \
             FROM information_schema.columns WHERE CAST(table_schema AS TEXT) = COALESCE(CAST($1 AS TEXT), CAST(current_schema() AS TEXT)) \
             AND CAST(table_name AS TEXT) = $2 AND column_name = 'attempts'"
        }
    };
    let found: Option<(String, String)> = on_pool!(pool, |p| {
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(schema)
            .bind(name)
            .fetch_optional(p)
            .await?;
        match row {
            Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
            None => None,
        }
    });
    Ok(found.map(|(data_type, column_type)| {
        let data_type = data_type.to_ascii_lowercase();
        let unsigned = column_type.to_ascii_lowercase().contains("unsigned");
        AttemptsColumn {
            limit: integer_limit(&data_type, unsigned),
            column_type: if unsigned {
                format!("{data_type} unsigned")
            } else {
                data_type
            },
        }
    }))
}

/// Whether `id` alone is the primary key of `table` (`schema.table` or a
/// table of the connection's database/schema), as Laravel's migration
/// makes it. Without it a row may have no `id` or share one, and the
/// worker could neither reserve nor delete it alone: it would run again
/// and again (a NULL `id` matches no `WHERE id = ?`).
pub(super) async fn id_is_primary_key(pool: &Pool, table: &str) -> Result<bool, sqlx::Error> {
    let (schema, name) = schema_and_name(table);
    if let Pool::Sqlite(p) = pool {
        // `pk` numbers the key's columns from 1; a column declared
        // `INTEGER PRIMARY KEY` is the rowid and never NULL, any other
        // key column must say NOT NULL (SQLite lets a key hold NULLs).
        let sql = "SELECT COUNT(CASE WHEN name = 'id' AND pk = 1 \
                   AND (\"notnull\" = 1 OR upper(type) = 'INTEGER') THEN 1 END), \
                   COUNT(CASE WHEN pk > 0 THEN 1 END) FROM pragma_table_info(?)";
        let (id, keys): (i64, i64) = sqlx::query_as(sql).bind(name).fetch_one(p).await?;
        return Ok(id == 1 && keys == 1);
    }
    // information_schema's names are of types of their own (PostgreSQL's
    // `sql_identifier`): compared as text.
    let (text, schema_now, m1, m2) = match pool {
        Pool::Postgres(_) => ("TEXT", "CAST(current_schema() AS TEXT)", "$1", "$2"),
        _ => ("CHAR", "DATABASE()", "?", "?"),
    };
    let sql = format!(
        "SELECT COUNT(CASE WHEN CAST(k.column_name AS {text}) = 'id' THEN 1 END), COUNT(*) \
         FROM information_schema.table_constraints c \
         JOIN information_schema.key_column_usage k \
         ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema \
         AND k.table_name = c.table_name \
         WHERE c.constraint_type = 'PRIMARY KEY' \
         AND CAST(c.table_schema AS {text}) = COALESCE(CAST({m1} AS {text}), {schema_now}) \
         AND CAST(c.table_name AS {text}) = {m2}"
    );
    let (id, keys): (i64, i64) = on_pool!(pool, |p| {
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(schema)
            .bind(name)
            .fetch_one(p)
            .await?;
        (row.try_get(0)?, row.try_get(1)?)
    });
    Ok(id == 1 && keys == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_limits() {
        assert_eq!(integer_limit("tinyint", true), 255);
        assert_eq!(integer_limit("smallint", true), 65_535);
        assert_eq!(integer_limit("smallint", false), 32_767);
        assert_eq!(integer_limit("integer", false), i64::from(i32::MAX));
        assert_eq!(integer_limit("bigint", true), i64::MAX);
        assert_eq!(
            short_version(Engine::Postgres, "", Some((15, 20, 0))),
            "15.20"
        );
        assert_eq!(
            short_version(Engine::MariaDb, "", Some((10, 11, 19))),
            "10.11.19"
        );
    }
}
