//! Laravel's database cache store (the `cache` table, the Laravel 11+
//! default `CACHE_STORE=database`) on real SQLite, PostgreSQL and MariaDB:
//! maxExceptions counted in the table, `pause`/`resume` and `restart`
//! written as artisan writes them, and a worker noticing each.

use crate::common;

use common::databases::{MariaDb, Postgres};
use common::sqlite::block_on;
use common::state::Failed;
use common::{Daemon, Job, QueueState, Scene, now};
use serde_json::json;
use sqlx::{Connection, MySqlConnection, PgConnection, Row, SqliteConnection};

/// The cache prefix the tests use (Laravel 12's `laravel-cache-` style).
const PREFIX: &str = "shop-cache-";

/// Laravel's `cache` table in one database, by URL.
enum CacheDb {
    Sqlite(String),
    Postgres(String),
    MySql(String),
}

macro_rules! on_connection {
    ($db:expr, |$c:ident| $body:expr) => {
        block_on(async {
            match $db {
                CacheDb::Sqlite(url) => {
                    let mut $c = SqliteConnection::connect(url).await.unwrap();
                    $body
                }
                CacheDb::Postgres(url) => {
                    let mut $c = PgConnection::connect(url).await.unwrap();
                    $body
                }
                CacheDb::MySql(url) => {
                    let mut $c = MySqlConnection::connect(url).await.unwrap();
                    $body
                }
            }
        })
    };
}

impl CacheDb {
    fn url(&self) -> &str {
        match self {
            CacheDb::Sqlite(u) | CacheDb::Postgres(u) | CacheDb::MySql(u) => u,
        }
    }

    /// Creates the table as the app's migration does: SQLite with Laravel
    /// 8's `cache:table` (`key` unique), the servers with Laravel 11+'s
    /// (`key` primary).
    fn create_table(&self) {
        let sql = match self {
            CacheDb::Sqlite(_) => {
                "create table \"cache\" (\"key\" varchar not null, \"value\" text not null, \
                 \"expiration\" integer not null); \
                 create unique index \"cache_key_unique\" on \"cache\" (\"key\")"
            }
            CacheDb::Postgres(_) => {
                "create table \"cache\" (\"key\" varchar(255) not null, \"value\" text not null, \
                 \"expiration\" integer not null, primary key (\"key\"))"
            }
            CacheDb::MySql(_) => {
                "create table `cache` (`key` varchar(255) not null, `value` mediumtext not null, \
                 `expiration` int not null, primary key (`key`)) \
                 default character set utf8mb4 collate 'utf8mb4_unicode_ci'"
            }
        };
        on_connection!(self, |c| {
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
        });
    }

    /// `(value, expiration)` of the row whose key is `PREFIX` + `key`.
    fn row(&self, key: &str) -> Option<(String, i64)> {
        let full = format!("{PREFIX}{key}");
        let sql = match self {
            CacheDb::Sqlite(_) => "SELECT value, expiration FROM cache WHERE \"key\" = ?",
            CacheDb::Postgres(_) => {
                "SELECT value, CAST(expiration AS BIGINT) FROM cache WHERE \"key\" = $1"
            }
            CacheDb::MySql(_) => {
                "SELECT value, CAST(expiration AS SIGNED) FROM cache WHERE `key` = ?"
            }
        };
        on_connection!(self, |c| {
            sqlx::query(sql)
                .bind(full.as_str())
                .fetch_optional(&mut c)
                .await
                .unwrap()
                .map(|r| (r.get(0), r.get(1)))
        })
    }

    /// Every key in the table.
    fn keys(&self) -> Vec<String> {
        let sql = match self {
            CacheDb::MySql(_) => "SELECT `key` FROM cache ORDER BY `key`",
            _ => "SELECT \"key\" FROM cache ORDER BY \"key\"",
        };
        on_connection!(self, |c| {
            sqlx::query(sql)
                .fetch_all(&mut c)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect()
        })
    }
}

/// Asserts `expiration` is `seconds` from now, give or take a few.
fn assert_expires_in(expiration: i64, seconds: i64, what: &str) {
    assert!(
        (expiration - (now() + seconds)).abs() <= 5,
        "{what}: expiration {expiration} is not now + {seconds}"
    );
}

/// A scene whose cache store is `db`'s `cache` table (keys under
/// [`PREFIX`]) and whose handler records each job, then runs `then`.
fn recording_on(db: &CacheDb, then: &str) -> (Scene, std::path::PathBuf) {
    Scene::configured(|c| c.database_cache(db.url(), PREFIX).recording(then))
}

/// The whole scenario on one database.
fn database_store_scenario(db: &CacheDb) {
    db.create_table();
    let (s, config) = recording_on(db, "exit 1");

    // maxExceptions: the first exception is counted in the table with a
    // one-day expiry (put 0, then increment) and the job is released; the
    // second reaches maxExceptions = 2: the job fails and the counter row
    // is deleted.
    let job = Job::laravel8("App\\Jobs\\Flaky")
        .set("maxExceptions", json!(2))
        .set("maxTries", json!(10));
    s.push(&job);
    s.run(&config, &["--once", "--sleep=0"]);
    let counter = format!("job-exceptions:{}", job.uuid());
    let (value, expiration) = db
        .row(&counter)
        .unwrap_or_else(|| panic!("no counter row; rows: {:?}", db.keys()));
    assert_eq!(value, "i:1;", "one exception counted");
    assert_expires_in(expiration, 86_400, "the counter");
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(
        s.log(),
        vec![job.run_line(1), job.run_line(2), job.failed_line(2)],
        "run twice, then failed"
    );
    assert_eq!(
        db.row(&counter),
        None,
        "the counter is forgotten on failure"
    );
    let failed = Failed::job(&job).exception("LaravelWorker\\HandlerFailedException");
    s.assert_state(QueueState::empty().failed([failed.clone()]));

    // pause / resume: the row `queue:pause` writes (b:1; for ten years);
    // a paused queue is not served; resume deletes the row.
    Daemon::cli(&config, &["pause", "redis:default"]).expect_exit(0);
    let (value, expiration) = db.row("illuminate:queue:paused:redis:default").unwrap();
    assert_eq!(value, "b:1;");
    assert_expires_in(expiration, 315_360_000, "forever");
    let held = Job::laravel8("App\\Jobs\\Held");
    s.push(&held);
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.log().len(), 3, "no job ran while paused");
    s.assert_state(
        QueueState::empty()
            .ready([&held])
            .notify(1)
            .failed([failed]),
    );
    Daemon::cli(&config, &["resume", "redis:default"]).expect_exit(0);
    assert_eq!(db.row("illuminate:queue:paused:redis:default"), None);

    // restart: `i:{now};` for ten years; a running worker stops with 0.
    let mut w = s.work(&config, &["--sleep=0.05"]);
    w.wait_log(&["worker started"]);
    Daemon::cli(&config, &["restart"]).expect_exit(0);
    let (value, expiration) = db.row("illuminate:queue:restart").unwrap();
    let time: i64 = value
        .strip_prefix("i:")
        .and_then(|v| v.strip_suffix(';'))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("restart value {value}"));
    assert!((time - now()).abs() <= 5, "the restart time: {value}");
    assert_expires_in(expiration, 315_360_000, "forever");
    w.expect_stop(0, "restart_signal");
    assert!(
        s.log().contains(&held.run_line(1)),
        "the resumed queue was served before the restart"
    );
}

#[test]
fn sqlite_cache_table_restart_pause_and_max_exceptions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.sqlite");
    std::fs::File::create(&path).unwrap();
    database_store_scenario(&CacheDb::Sqlite(format!("sqlite://{}", path.display())));
}

#[test]
fn postgres_cache_table_restart_pause_and_max_exceptions() {
    let Some(pg) = Postgres::start() else { return };
    let db = pg.database("app");
    database_store_scenario(&CacheDb::Postgres(db.url().to_string()));
}

#[test]
fn mariadb_cache_table_restart_pause_and_max_exceptions() {
    let Some(maria) = MariaDb::start() else {
        return;
    };
    let db = maria.database("app");
    database_store_scenario(&CacheDb::MySql(db.url().to_string()));
}

/// A restart row Laravel wrote before the worker started does not stop it;
/// an expired pause row is ignored (and deleted, as Laravel's `get` does).
#[test]
fn expired_rows_are_missing_and_an_old_restart_does_not_stop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.sqlite");
    std::fs::File::create(&path).unwrap();
    let db = CacheDb::Sqlite(format!("sqlite://{}", path.display()));
    db.create_table();
    on_connection!(&db, |c| {
        for (key, value, expiration) in [
            ("illuminate:queue:restart", "i:1700000000;", now() + 1000),
            ("illuminate:queue:paused:redis:default", "b:1;", now() - 1),
        ] {
            sqlx::query("INSERT INTO cache (\"key\", value, expiration) VALUES (?, ?, ?)")
                .bind(format!("{PREFIX}{key}"))
                .bind(value)
                .bind(expiration)
                .execute(&mut c)
                .await
                .unwrap();
        }
    });
    let (s, config) = recording_on(&db, "exit 0");
    let job = Job::laravel8("App\\Jobs\\Runs");
    s.push(&job);
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.log(), vec![job.run_line(1)], "not paused, not restarted");
    assert_eq!(db.row("illuminate:queue:paused:redis:default"), None);
    assert!(db.row("illuminate:queue:restart").is_some());
}
