//! Which database holds the table, and how SQL is written for it: bind
//! marks, integer casts, quoting, and the lock a pop takes, decided from
//! the server's version as Laravel's `DatabaseQueue::getLockForPopping`
//! decides it.

/// The database engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// SQLite (no row locks: a pop serialises on the database's write
    /// lock, taken at once with `BEGIN IMMEDIATE`).
    Sqlite,
    /// MySQL.
    MySql,
    /// MariaDB (the MySQL protocol; `VERSION()` names it).
    MariaDb,
    /// PostgreSQL.
    Postgres,
}

impl Engine {
    /// The engine's name as operators know it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "SQLite",
            Engine::MySql => "MySQL",
            Engine::MariaDb => "MariaDB",
            Engine::Postgres => "PostgreSQL",
        }
    }
}

/// A server version, `major.minor.patch`.
pub type Version = (u32, u32, u32);

/// Reads `major.minor.patch` from the start of `text` (missing parts are 0).
fn parse_version(text: &str) -> Option<Version> {
    let mut parts = text
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// The engine and version a MySQL-protocol server's `SELECT VERSION()`
/// names: `10.11.19-MariaDB-0+deb12u1`, `5.5.5-10.6.4-MariaDB` (the
/// replication prefix some MariaDB builds send), `8.0.36`.
pub fn mysql_server(version: &str) -> (Engine, Option<Version>) {
    if version.contains("MariaDB") {
        let text = version.strip_prefix("5.5.5-").unwrap_or(version);
        (Engine::MariaDb, parse_version(text))
    } else {
        (Engine::MySql, parse_version(version))
    }
}

/// The version a PostgreSQL `SELECT VERSION()` names (`PostgreSQL 15.20
/// (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu, …`).
pub fn postgres_version(version: &str) -> Option<Version> {
    parse_version(version.strip_prefix("PostgreSQL ")?)
}

/// Whether the server has `FOR UPDATE SKIP LOCKED`: MySQL ≥ 8.0.1,
/// MariaDB ≥ 10.6, PostgreSQL ≥ 9.5 (Laravel's thresholds). An unreadable
/// version counts as old: the plain `FOR UPDATE` works everywhere.
pub fn has_skip_locked(engine: Engine, version: Option<Version>) -> bool {
    let Some(v) = version else {
        return false;
    };
    match engine {
        Engine::MySql => v >= (8, 0, 1),
        Engine::MariaDb => v >= (10, 6, 0),
        Engine::Postgres => v >= (9, 5, 0),
        Engine::Sqlite => false,
    }
}

/// Bind mark number `n` (from 1) in `engine`'s syntax.
pub fn mark(engine: Engine, n: usize) -> String {
    match engine {
        Engine::Postgres => format!("${n}"),
        _ => "?".into(),
    }
}

/// `column` as a signed 64-bit integer, which every engine decodes into an
/// `i64` (MySQL's columns are unsigned, PostgreSQL's `integer` and
/// `smallint` narrower).
///
/// SQLite keeps what a row holds whatever the column's type (a text
/// `'abc'`, a real `1.5`), so its value is cast too: as PHP's `(int)` reads
/// those (`0`, `1`), where an `i64` decode would fail on the row.
pub fn int(engine: Engine, column: &str) -> String {
    match engine {
        Engine::Sqlite => format!("CAST({column} AS INTEGER)"),
        Engine::MySql | Engine::MariaDb => format!("CAST({column} AS SIGNED)"),
        Engine::Postgres => format!("CAST({column} AS BIGINT)"),
    }
}

/// A row's `attempts` as Laravel counts it: [`int`] of the column, a NULL
/// read as 0 (`DatabaseJobRecord::increment` adds one to PHP's `null`, so
/// a row pushed without a count runs once, not for ever).
pub fn attempts_count(engine: Engine, column: &str) -> String {
    format!("COALESCE({}, 0)", int(engine, column))
}

/// Whether `table` is a plain identifier, or `schema.table` of two.
pub fn plain_table_name(table: &str) -> bool {
    let parts: Vec<&str> = table.split('.').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !p.starts_with(|c: char| c.is_ascii_digit())
        })
}

/// `table` quoted as Laravel's grammars wrap it (`` `jobs` `` on MySQL,
/// `"jobs"` elsewhere; `schema.table` part by part). The name must be
/// [`plain_table_name`].
pub fn quote_table(engine: Engine, table: &str) -> String {
    let q = match engine {
        Engine::MySql | Engine::MariaDb => '`',
        Engine::Sqlite | Engine::Postgres => '"',
    };
    table
        .split('.')
        .map(|p| format!("{q}{p}{q}"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_skip_locked_as_laravel_decides() {
        assert_eq!(
            mysql_server("10.11.19-MariaDB-0+deb12u1"),
            (Engine::MariaDb, Some((10, 11, 19)))
        );
        assert_eq!(
            mysql_server("5.5.5-10.5.22-MariaDB"),
            (Engine::MariaDb, Some((10, 5, 22)))
        );
        assert_eq!(mysql_server("8.0.36"), (Engine::MySql, Some((8, 0, 36))));
        assert_eq!(
            postgres_version("PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64"),
            Some((15, 20, 0))
        );
        assert_eq!(postgres_version("PostgreSQL 9.4beta1"), Some((9, 4, 0)));
        assert!(has_skip_locked(Engine::MariaDb, Some((10, 6, 0))));
        assert!(!has_skip_locked(Engine::MariaDb, Some((10, 5, 22))));
        assert!(has_skip_locked(Engine::MySql, Some((8, 0, 1))));
        assert!(!has_skip_locked(Engine::MySql, Some((8, 0, 0))));
        assert!(!has_skip_locked(Engine::MySql, Some((5, 7, 44))));
        assert!(has_skip_locked(Engine::Postgres, Some((9, 5, 0))));
        assert!(!has_skip_locked(Engine::Postgres, Some((9, 4, 26))));
        assert!(!has_skip_locked(Engine::MySql, None));
    }

    #[test]
    fn table_names_are_plain_and_quoted_per_engine() {
        assert!(plain_table_name("jobs") && plain_table_name("queue.jobs_2"));
        for bad in ["", "jobs; drop", "a.b.c", "1jobs", "jo`bs", "jobs."] {
            assert!(!plain_table_name(bad), "{bad}");
        }
        assert_eq!(quote_table(Engine::MariaDb, "jobs"), "`jobs`");
        assert_eq!(quote_table(Engine::Postgres, "q.jobs"), "\"q\".\"jobs\"");
    }
}
