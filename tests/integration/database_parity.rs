//! Parity with `php artisan queue:work database` of the real Laravel 8.83
//! (issue 27), on each database: the job kinds of the Redis parity test
//! ([`super::laravel_parity::scenario`]), dispatched by the app through its
//! bus onto its `jobs` table, run round by round once by `queue:work
//! database` and once by the daemon (through the PHP bridge, every setting
//! read from the app), each on its own database and Redis. After every
//! round both leave the same job log, the same rows in `jobs` (attempts,
//! reservation, release delay within a second), the same `failed_jobs`
//! rows and the same keys in the app's Redis cache (unique locks,
//! `job-exceptions:` counters). SQLite always (the app's file holds `jobs`
//! and `failed_jobs`); PostgreSQL and MariaDB on private servers, where
//! the app's default connection (`DB_CONNECTION`) is that server's
//! database, holding both tables; each skips with a note when the server
//! or PHP's driver is missing.
//!
//! The named difference of the Redis parity test holds here too: the
//! failed row of a job whose `retryUntil` has passed (`too-late`) ends,
//! in queue:work's, with PHP's ` in file:line`. What differs between the
//! two runs but not between the workers is masked: the failed rows'
//! uuid, and the scene's directory in exception lines.

use crate::common;

use std::collections::BTreeMap;

use common::Scene;
use common::databases::{FailedDb, MariaDb, Postgres};
use common::jobs_table::{JobsTable, Shape};
use common::laravel::{self, App, Transport};
use serde_json::Value;

use super::laravel_parity::{
    APP_KEY, ARGS, FAILED_TAGS, FailedRows, TOO_LATE, cache_keys, round_records, scenario,
    split_named_differences, tag_of,
};

/// The database of one parity test.
enum Server {
    Sqlite,
    Postgres(Postgres),
    MariaDb(MariaDb),
}

impl Server {
    /// Points `app` at a new database `name` of this server, holding
    /// Laravel's `jobs` and `failed_jobs` tables, and returns both.
    fn database(&self, s: &Scene, app: &App, name: &str) -> (JobsTable, FailedDb) {
        app.set_env("QUEUE_CONNECTION", "database");
        app.set_env("APP_KEY", APP_KEY);
        let (jobs, failed) = match self {
            // The app's SQLite file, made with failed_jobs by App::new.
            Server::Sqlite => {
                let file = s.path("failed.sqlite");
                let url = format!("sqlite://{}", file.display());
                return (JobsTable::sqlite(&file), FailedDb::Sqlite(url));
            }
            Server::Postgres(pg) => {
                app.set_env("DB_CONNECTION", "pgsql");
                app.set_env("PG_HOST", pg.socket_dir().to_str().unwrap());
                app.set_env("PG_DATABASE", name);
                let jobs = JobsTable::postgres(pg, name);
                let failed = FailedDb::Postgres(jobs.url.clone());
                (jobs, failed)
            }
            Server::MariaDb(m) => {
                app.set_env("DB_CONNECTION", "mysql");
                app.set_env("MY_SOCKET", m.socket().to_str().unwrap());
                app.set_env("MY_DATABASE", name);
                let jobs = JobsTable::mariadb(m, name, Shape::Before13_6);
                let failed = FailedDb::MySql(jobs.url.clone());
                (jobs, failed)
            }
        };
        failed.create_table();
        (jobs, failed)
    }
}

/// What one round left behind, normalized so that two runs compare.
#[derive(Debug, PartialEq)]
struct Round {
    /// Everything the jobs recorded, without times, pids and the class
    /// that ran the job.
    records: Vec<String>,
    /// The rows left in `jobs`: tag → (queue, attempts, reserved).
    rows: BTreeMap<String, (String, i64, bool)>,
    /// Each row's delay: `available_at` after its `created_at` (when it
    /// was pushed or released).
    delays: BTreeMap<String, i64>,
    /// failed_jobs: tag → (connection, queue, first exception line,
    /// payload with the uuid masked).
    failed: FailedRows,
    /// The keys of Redis DB 0 (locks) and DB 1 (the cache), uuids masked.
    keys: (Vec<String>, Vec<String>),
}

/// One run's app and tables.
struct Run<'a> {
    s: &'a Scene,
    app: &'a App,
    jobs: &'a JobsTable,
    failed: &'a FailedDb,
}

impl Run<'_> {
    fn observe(&self, previous: usize) -> Round {
        let scene = self.app.scene().display().to_string();
        let all = self.app.records();
        let records = round_records(&all[previous..]);
        let (mut rows, mut delays) = (BTreeMap::new(), BTreeMap::new());
        for row in self.jobs.rows() {
            let tag = tag_of(&serde_json::from_str(&row.payload).unwrap());
            // A push and a release both write created_at = now.
            delays.insert(tag.clone(), row.available_at - row.created_at);
            let left = (row.queue, row.attempts, row.reserved_at.is_some());
            assert!(
                rows.insert(tag.clone(), left).is_none(),
                "two rows of {tag}"
            );
        }
        let failed = self
            .failed
            .rows()
            .into_iter()
            .map(|row| {
                let p: Value = serde_json::from_str(&row.payload).unwrap();
                let first_line = row.exception.lines().next().unwrap_or_default();
                let first_line = first_line.replace(&scene, "<scene>");
                let payload = row.payload.replace(&row.uuid, "<uuid>");
                (tag_of(&p), (row.connection, row.queue, first_line, payload))
            })
            .collect();
        let keys = cache_keys(&self.s.redis);
        Round {
            records,
            rows,
            delays,
            failed,
            keys,
        }
    }
}

/// Dispatches the scenario on a database `name` of `server` and runs it
/// in three rounds with `php` (`queue:work database`) or the daemon,
/// making every row left available between rounds.
fn run_scenario(server: &Server, name: &str, php: bool) -> Vec<Round> {
    let s = Scene::new();
    let app = App::new(&s).expect("checked before");
    let (jobs, failed) = server.database(&s, &app, name);
    let run = Run {
        s: &s,
        app: &app,
        jobs: &jobs,
        failed: &failed,
    };
    app.dispatch(scenario());
    let config = app.config_from_app(&s, Transport::Persistent(1));
    let flag = app.app_flag();
    let mut rounds = vec![];
    for _ in 0..3 {
        let before = app.records().len();
        if php {
            let mut worker = app.queue_work_on("database", ARGS);
            let status = worker.wait();
            assert!(
                status.success(),
                "queue:work: {status}\n{}",
                worker.output()
            );
        } else {
            let args = [ARGS, &["database", flag.as_str()]].concat();
            s.work(&config, &args).expect_stop(0, "empty");
        }
        rounds.push(run.observe(before));
        jobs.execute("UPDATE jobs SET available_at = 0 WHERE reserved_at IS NULL");
    }
    rounds
}

/// Drops the named differences from a round, returning them apart.
fn split_differences(round: &mut Round) -> Vec<String> {
    split_named_differences(&mut round.records, &mut round.failed)
}

/// Runs the scenario with both workers on `server` and compares them.
fn parity_on(server: Server, what: &str) {
    let mut php = run_scenario(&server, "php", true);
    let mut ours = run_scenario(&server, "daemon", false);
    let (mut php_apart, mut our_apart) = (vec![], vec![]);
    for (i, (p, o)) in php.iter_mut().zip(ours.iter_mut()).enumerate() {
        php_apart.extend(split_differences(p));
        our_apart.extend(split_differences(o));
        assert_eq!(
            p.delays.keys().collect::<Vec<_>>(),
            o.delays.keys().collect::<Vec<_>>(),
            "{what}, round {i}: the rows left"
        );
        for (tag, delay) in &p.delays {
            let ours = o.delays[tag];
            assert!(
                (delay - ours).abs() <= 1,
                "{what}, round {i}: {tag} available after {delay} s vs {ours} s"
            );
        }
        assert_eq!(p.records, o.records, "{what}, round {i}: job records");
        assert_eq!(p.rows, o.rows, "{what}, round {i}: rows in jobs");
        assert_eq!(p.failed, o.failed, "{what}, round {i}: failed_jobs");
        assert_eq!(p.keys, o.keys, "{what}, round {i}: Redis keys");
    }
    // The scenario did what it is meant to (not just the same twice): the
    // first round left released and delayed rows, the last drained them.
    let first: Vec<&String> = php[0].rows.keys().collect();
    assert!(first.contains(&&"rel".to_string()), "{what}: {first:?}");
    assert!(first.contains(&&"late".to_string()), "{what}: {first:?}");
    assert_eq!(php[0].rows["rel"], ("default".to_string(), 1, false));
    // The flaky job: its own $backoff ([2, 5]: 2 s after its first
    // failure) over --backoff=4.
    for (tag, delay) in [("rel", 30), ("late", 40), ("ok", 2)] {
        let got = php[0].delays[tag];
        assert!((got - delay).abs() <= 1, "{what}: {tag} delayed {got} s");
    }
    assert!(php[2].rows.is_empty(), "{what}: drained: {:?}", php[2].rows);
    let failed_tags: Vec<&str> = php[2].failed.keys().map(String::as_str).collect();
    assert_eq!(failed_tags, FAILED_TAGS, "{what}");
    for (_, (connection, queue, _, _)) in php[2].failed.iter() {
        assert_eq!(
            (connection.as_str(), queue.as_str()),
            ("database", "default")
        );
    }
    // retryUntil passed: the same class and wording; PHP's line adds the
    // file and line it was thrown at.
    let row = |apart: &[String]| {
        apart
            .iter()
            .find(|r| r.starts_with("too-late: "))
            .cloned()
            .unwrap_or_else(|| panic!("{what}: no too-late row in {apart:?}"))
    };
    let message = format!("too-late: {TOO_LATE}");
    let php_row = row(&php_apart);
    assert!(
        php_row.starts_with(&format!("{message} in ")),
        "{what}: queue:work's row: {php_row}"
    );
    assert_eq!(row(&our_apart), message, "{what}: our row");
    let records: usize = php.iter().map(|r| r.records.len()).sum();
    eprintln!(
        "{what}: {records} job records, rows left after each round {:?}, {} failed rows, \
         the same for queue:work and the daemon",
        php.iter().map(|r| r.rows.len()).collect::<Vec<_>>(),
        php[2].failed.len() + 1
    );
}

/// On the app's SQLite file (Laravel 11's default).
#[test]
fn the_daemon_and_queue_work_database_leave_the_same_rows_on_sqlite() {
    if !laravel::available() {
        return;
    }
    parity_on(Server::Sqlite, "sqlite");
}

/// On PostgreSQL (a private server; PHP's pdo_pgsql).
#[test]
fn the_daemon_and_queue_work_database_leave_the_same_rows_on_postgres() {
    if !laravel::available()
        || !laravel::have_extension(
            "pdo_pgsql",
            "php-pgsql",
            "queue:work database on PostgreSQL",
        )
    {
        return;
    }
    let Some(pg) = Postgres::start() else {
        return;
    };
    parity_on(Server::Postgres(pg), "postgres");
}

/// On MariaDB (a private server; PHP's pdo_mysql).
#[test]
fn the_daemon_and_queue_work_database_leave_the_same_rows_on_mariadb() {
    if !laravel::available()
        || !laravel::have_extension("pdo_mysql", "php-mysql", "queue:work database on MariaDB")
    {
        return;
    }
    let Some(m) = MariaDb::start() else {
        return;
    };
    parity_on(Server::MariaDb(m), "mariadb");
}
