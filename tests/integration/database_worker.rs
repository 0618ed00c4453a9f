//! The worker on the database queue (issue 27), end to end: the real
//! binary on a `jobs` table of SQLite (always), PostgreSQL and MariaDB
//! (started by the test where installed, skipped with a printed reason
//! where not), with real handler processes and the `failed_jobs` table.

use crate::common;

use std::path::{Path, PathBuf};

use common::Daemon;
use common::databases::{FailedDb, MariaDb, Postgres};
use common::jobs_table::{JobsTable, Shape};
use common::queue_scenes::{self, QueueSide};
use nix::sys::signal::Signal;

pub(crate) use common::queue_scenes::payload;

/// Current UNIX time in seconds.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A config file for a worker on `jobs` (retry_after `retry_after` s) with
/// failed jobs in `failed`, and one handler for every job: `script`, a
/// shell script run with `DIR` set to `dir`.
pub(crate) fn config(
    dir: &Path,
    jobs: &JobsTable,
    failed: &str,
    retry_after: u64,
    script: &str,
) -> PathBuf {
    let queue = format!(
        "[queue]\nconnection = \"database\"\nretry_after = {retry_after}\n\n\
         [database]\nurl = \"{}\"",
        jobs.url
    );
    queue_scenes::write_config(dir, &queue, failed, script)
}

/// The `jobs` table as the scenes see it: a row a job.
impl QueueSide for JobsTable {
    fn put(&self, queue: &str, payload: &str) -> String {
        self.insert(queue, payload, 0, None, now()).to_string()
    }

    fn left(&self, queue: &str) -> (usize, usize) {
        let rows: Vec<_> = self
            .rows()
            .into_iter()
            .filter(|r| r.queue == queue)
            .collect();
        let reserved = rows.iter().filter(|r| r.reserved_at.is_some()).count();
        (rows.len(), reserved)
    }
}

/// The databases of one test, each with a `jobs` table and a `failed_jobs`
/// table of its own.
pub(crate) struct Databases {
    pub(crate) dir: tempfile::TempDir,
    _postgres: Option<Postgres>,
    _mariadb: Option<MariaDb>,
    /// `(name, jobs table, failed store)`.
    pub(crate) each: Vec<(&'static str, JobsTable, FailedDb)>,
}

impl Databases {
    pub(crate) fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lw-dbw-")
            .tempdir()
            .unwrap();
        let mut each = vec![(
            "sqlite",
            JobsTable::sqlite(&dir.path().join("database.sqlite")),
            FailedDb::sqlite(&dir.path().join("failed.sqlite")),
        )];
        let postgres = Postgres::start();
        if let Some(pg) = &postgres {
            each.push((
                "postgres",
                JobsTable::postgres(pg, "app"),
                pg.database("failed"),
            ));
        }
        let mariadb = MariaDb::start();
        if let Some(m) = &mariadb {
            let jobs = JobsTable::mariadb(m, "app", Shape::Before13_6);
            each.push(("mariadb", jobs, m.database("failed")));
        }
        Databases {
            dir,
            _postgres: postgres,
            _mariadb: mariadb,
            each,
        }
    }
}

/// On each database: the scene of [`queue_scenes::runs_releases_and_fails`]
/// (a released job is a new row, the attempt counted).
#[test]
fn the_worker_runs_releases_and_fails_jobs_on_each_database() {
    let dbs = Databases::start();
    for (name, jobs, failed) in &dbs.each {
        let dir = dbs.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let config = config(&dir, jobs, failed.url(), 90, queue_scenes::RUNS_SCRIPT);
        let files = (dir.as_path(), config.as_path(), failed);
        let d = queue_scenes::runs_releases_and_fails(jobs, files, "database", name);
        // The start block's queue line: engine, version, table and lock.
        let queue = crate::banner::start_line(&d, "queue");
        let (engine, lock) = match *name {
            "sqlite" => ("SQLite 3.", "BEGIN IMMEDIATE, busy timeout 60 s"),
            "postgres" => ("PostgreSQL ", "FOR UPDATE SKIP LOCKED"),
            _ => ("MariaDB ", "FOR UPDATE SKIP LOCKED"),
        };
        let start = format!("database connection \"database\": {engine}");
        assert!(queue.starts_with(&start), "{name}: {queue}");
        assert!(queue.ends_with(&format!("table jobs, {lock}")), "{queue}");
        assert!(!d.stderr_text().contains("redis="), "{}", d.stderr_text());
    }
}

/// A job that runs for more than twice `retry_after` beside a second
/// worker on the same table runs once: its reservation is renewed while
/// it runs, so the other worker never takes the row.
#[test]
fn a_job_longer_than_retry_after_runs_once_beside_another_worker() {
    let dbs = Databases::start();
    let (_, jobs, failed) = &dbs.each[0];
    let dir = dbs.dir.path();
    let script = "echo run >> \"$DIR/runs\"; touch \"$DIR/started\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done";
    let config = config(dir, jobs, failed.url(), 2, script);
    jobs.insert("default", &payload("Long", "u-long"), 0, None, now());
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.2"];
    let mut first = Daemon::start(&args, &[]);
    common::wait_until("the job to start", || dir.join("started").exists());
    let mut second = Daemon::start(&args, &[]);
    let reserved_at = jobs.rows()[0].reserved_at.unwrap();
    // Three renewals (every (retry_after - 1) / 2 s, at least 1 s) move
    // reserved_at forward past twice retry_after: the second worker polled
    // all along and found nothing to take.
    common::wait_until("reserved_at to move past 2 x retry_after", || {
        jobs.rows()[0].reserved_at.unwrap() >= reserved_at + 5
    });
    std::fs::write(dir.join("go"), "").unwrap();
    common::wait_until("the row to be deleted", || jobs.rows().is_empty());
    for d in [&mut first, &mut second] {
        d.signal(Signal::SIGTERM);
        d.expect_exit(0);
    }
    let runs = std::fs::read_to_string(dir.join("runs")).unwrap();
    assert_eq!(runs, "run\n", "the job ran once");
    assert_eq!(failed.rows().len(), 0);
}

/// PostgreSQL stopped for a while mid-run: the worker logs the outage,
/// loses nothing and goes on once the server is back; every job runs to
/// its end exactly once.
#[test]
fn a_database_stopped_mid_run_loses_nothing() {
    let dir = tempfile::Builder::new()
        .prefix("lw-dbw-")
        .tempdir()
        .unwrap();
    let Some(mut pg) = Postgres::start() else {
        return;
    };
    let jobs = JobsTable::postgres(&pg, "app");
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let script = "echo \"$LARAVEL_WORKER_JOB_ID\" >> \"$DIR/ran\"; \
                  if [ \"$(wc -l < \"$DIR/ran\")\" -eq 5 ]; then touch \"$DIR/fifth\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done; fi";
    let config = config(dir.path(), &jobs, failed.url(), 60, script);
    for i in 0..20 {
        jobs.insert(
            "default",
            &payload("Step", &format!("u-{i}")),
            0,
            None,
            now(),
        );
    }
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.2"];
    let mut d = Daemon::start(&args, &[]);
    common::wait_until("the fifth job to start", || {
        dir.path().join("fifth").exists()
    });
    pg.stop_server();
    std::fs::write(dir.path().join("go"), "").unwrap();
    d.wait_log(&["cannot delete the job in the queue"]);
    pg.start_again();
    common::wait_until("every row settled", || jobs.rows().is_empty());
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap();
    let mut ids: Vec<&str> = ran.lines().collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20, "every job ran: {ran}");
    assert_eq!(ran.lines().count(), 20, "none ran twice: {ran}");
    assert_eq!(failed.rows().len(), 0);
}

/// The admin commands on the database queue: `push` writes a row as
/// Laravel's `pushToDatabase` does (no `id` or `attempts` in the payload,
/// `available_at` now + `--delay`), `monitor` counts pending, delayed and
/// reserved rows, `clear` deletes the queue's rows, and `retry` puts a
/// failed row back into the table.
#[test]
fn push_monitor_clear_and_retry_work_on_the_table() {
    let dbs = Databases::start();
    let (_, jobs, failed) = &dbs.each[0];
    let dir = dbs.dir.path();
    let config = config(dir, jobs, failed.url(), 90, "exit 3");
    Daemon::cli(
        &config,
        &["push", "default", "--job", "App\\Jobs\\Now", "--count", "2"],
    )
    .expect_exit(0);
    Daemon::cli(
        &config,
        &[
            "push",
            "default",
            "--job",
            "App\\Jobs\\Later",
            "--delay",
            "600",
        ],
    )
    .expect_exit(0);
    let rows = jobs.rows();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert!(!row.payload.contains("\"attempts\""), "{}", row.payload);
        assert!(!row.payload.contains("\"id\""), "{}", row.payload);
        assert_eq!((row.attempts, row.reserved_at), (0, None));
    }
    assert!(rows[2].available_at >= rows[2].created_at + 600);
    let mut monitor = Daemon::cli(&config, &["monitor", "default", "--json"]);
    monitor.expect_exit(0);
    let out = monitor.stdout.join("\n");
    assert!(
        out.contains("\"pending\":2") && out.contains("\"delayed\":1"),
        "{out}"
    );
    // Another connection's name is refused, not shown with the table's
    // counts (before: `monitor redis:default` printed them as redis's).
    for other in ["redis:default", "foo:default"] {
        let mut refused = Daemon::cli(&config, &["monitor", other]);
        refused.expect_exit(1);
        let log = refused.stderr_text();
        assert!(
            log.contains("is not the configured one (\"database\"")
                && log.contains("laravel-worker monitor database:default"),
            "{other}: {log}"
        );
        assert!(refused.stdout.is_empty(), "{other}: {:?}", refused.stdout);
    }
    let mut clear = Daemon::cli(&config, &["clear", "default", "--force"]);
    clear.expect_exit(0);
    assert_eq!(jobs.rows(), vec![]);

    jobs.insert("default", &payload("Bad", "u-retry"), 0, None, now());
    let args = [
        "--config",
        config.to_str().unwrap(),
        "work",
        "--stop-when-empty",
    ];
    Daemon::start(&args, &[]).expect_stop(0, "empty");
    assert_eq!(failed.rows().len(), 1);
    // A database app's commands touch no Redis (the config's points at a
    // socket nobody listens on): no fallback to read, no warning.
    let mut listed = Daemon::cli(&config, &["failed"]);
    listed.expect_exit(0);
    let mut retried = Daemon::cli(&config, &["retry", "all"]);
    retried.expect_exit(0);
    for d in [&listed, &retried] {
        let log = d.stderr_text();
        assert!(!log.contains("Redis") && !log.contains("WARN"), "{log}");
    }
    assert_eq!(failed.rows().len(), 0);
    let rows = jobs.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].attempts, rows[0].payload.clone()),
        (0, payload("Bad", "u-retry"))
    );
}

/// A fleet on one PostgreSQL table: three daemons at `--concurrency=4`,
/// one SIGKILLed while its jobs run and started again. Every job runs; a
/// job runs twice only when it was running in the killed daemon (at most
/// its 4 slots), reclaimed after `retry_after`.
#[test]
fn a_fleet_with_a_killed_daemon_loses_no_job() {
    let dir = tempfile::Builder::new()
        .prefix("lw-dbw-")
        .tempdir()
        .unwrap();
    let Some(pg) = Postgres::start() else {
        return;
    };
    let jobs = JobsTable::postgres(&pg, "app");
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let script = "echo \"$LARAVEL_WORKER_JOB_UUID\" >> \"$DIR/ran\"; \
                  if [ \"$LARAVEL_WORKER_JOB_UUID\" = u-100 ]; then touch \"$DIR/hundred\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done; fi";
    let config = config(dir.path(), &jobs, failed.url(), 3, script);
    const JOBS: usize = 400;
    for i in 0..JOBS {
        jobs.insert(
            "default",
            &payload("Step", &format!("u-{i}")),
            0,
            None,
            now(),
        );
    }
    let args = [
        "--config",
        config.to_str().unwrap(),
        "work",
        "--sleep=0.1",
        "--concurrency=4",
        "--stop-when-empty-for=4",
        "--tries=3",
    ];
    let mut fleet = vec![Daemon::start(&args, &[]), Daemon::start(&args, &[])];
    let mut victim = Daemon::start(&args, &[]);
    // Whoever runs u-100 hangs in it; kill that daemon if it is the victim,
    // else the victim anyway once u-100 started (its slots are busy).
    common::wait_until("u-100 to start", || dir.path().join("hundred").exists());
    victim.signal(Signal::SIGKILL);
    victim.wait_exit();
    std::fs::write(dir.path().join("go"), "").unwrap();
    fleet.push(Daemon::start(&args, &[]));
    common::wait_until("every row settled", || jobs.rows().is_empty());
    for d in &mut fleet {
        d.signal(Signal::SIGTERM);
        d.expect_exit(0);
    }
    let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap();
    let mut counts = std::collections::HashMap::<&str, usize>::new();
    for id in ran.lines() {
        *counts.entry(id).or_default() += 1;
    }
    assert_eq!(counts.len(), JOBS, "every job ran");
    let twice: Vec<_> = counts.iter().filter(|&(_, &n)| n > 1).collect();
    assert!(
        twice.len() <= 4,
        "only the killed daemon's jobs run again: {twice:?}"
    );
    assert!(twice.iter().all(|&(_, &n)| n == 2), "{twice:?}");
    assert_eq!(failed.rows().len(), 0);
}

/// The `query:` of the KEDA trigger `kind` in the database autoscaling
/// recipe of the book.
fn keda_query(kind: &str) -> String {
    let recipe = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/src/migrating/kubernetes-autoscaling-database.yaml"),
    )
    .unwrap();
    let trigger = recipe
        .split("- type: ")
        .find(|t| t.starts_with(kind))
        .unwrap_or_else(|| panic!("no {kind} trigger"));
    let line = trigger
        .lines()
        .find(|l| l.trim_start().starts_with("query:"))
        .unwrap();
    line.trim_start()["query:".len()..]
        .trim()
        .trim_matches('"')
        .to_string()
}

/// The book's KEDA recipe for the database queue, on real PostgreSQL and
/// MariaDB: each trigger's query counts what the backlog gauge counts
/// (rows available now plus reserved rows of the queue; not rows delayed
/// into the future, nor another queue's).
#[test]
fn the_keda_queries_count_the_backlog_the_gauge_counts() {
    use sqlx::{Connection, Row};
    let dbs = Databases::start();
    for (name, jobs, _) in &dbs.each[1..] {
        let t = now();
        jobs.insert("default", &payload("Ready", "u-1"), 0, None, t - 5);
        jobs.insert("default", &payload("Running", "u-2"), 1, Some(t), t - 5);
        jobs.insert("default", &payload("Later", "u-3"), 0, None, t + 3600);
        jobs.insert("emails", &payload("Other", "u-4"), 0, None, t - 5);
        let count: i64 = common::sqlite::block_on(async {
            match *name {
                "postgres" => {
                    let mut c = sqlx::PgConnection::connect(&jobs.url).await.unwrap();
                    let sql = sqlx::AssertSqlSafe(keda_query("postgresql"));
                    sqlx::query(sql).fetch_one(&mut c).await.unwrap().get(0)
                }
                _ => {
                    let mut c = sqlx::MySqlConnection::connect(&jobs.url).await.unwrap();
                    let sql = sqlx::AssertSqlSafe(keda_query("mysql"));
                    sqlx::query(sql).fetch_one(&mut c).await.unwrap().get(0)
                }
            }
        });
        assert_eq!(count, 2, "{name}");
    }
}

/// A reserve that waited for SQLite's write lock (another connection held
/// it for 4 s, as a busy writer may) wrote `reserved_at` as of when it
/// was sent, so part of the reservation is gone before the job starts:
/// the first renewal comes `(retry_after - 1) / 2` after the reservation
/// was written, not after the handler started. The lease never runs out
/// under the running job: no "reservation expired" line, the handler is
/// not stopped, the row keeps its first attempt while it is renewed past
/// `retry_after`, and the job runs once.
#[test]
fn a_reserve_that_waited_for_the_sqlite_lock_renews_in_time() {
    use sqlx::Connection;
    let (dir, jobs, failed) = sqlite_tables();
    let script = "echo run >> \"$DIR/runs\"; touch \"$DIR/started\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done";
    let config = config(dir.path(), &jobs, failed.url(), 6, script);
    jobs.insert("default", &payload("Slow", "u-slow"), 0, None, now());
    // Another connection holds the file's write lock.
    let mut writer = common::sqlite::block_on(sqlx::SqliteConnection::connect(&jobs.url)).unwrap();
    common::sqlite::block_on(sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut writer)).unwrap();
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.2"];
    let mut d = Daemon::start(&args, &[]);
    d.wait_log(&["worker started"]);
    // The stimulus: the lock held for 4 s while the first reserve waits.
    std::thread::sleep(std::time::Duration::from_secs(4));
    common::sqlite::block_on(sqlx::raw_sql("ROLLBACK").execute(&mut writer)).unwrap();
    common::wait_until("the job to start", || dir.path().join("started").exists());
    let first = jobs.rows()[0].reserved_at.unwrap();
    common::wait_until("reserved_at to move past retry_after", || {
        let row = &jobs.rows()[0];
        assert_eq!(row.attempts, 1, "the job was reserved again: {row:?}");
        row.reserved_at.unwrap() >= first + 7
    });
    std::fs::write(dir.path().join("go"), "").unwrap();
    common::wait_until("the row to be deleted", || jobs.rows().is_empty());
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    let log = d.stderr_text();
    assert!(
        !log.contains("expired") && !log.contains("stopping the handler"),
        "{log}"
    );
    let runs = std::fs::read_to_string(dir.path().join("runs")).unwrap();
    assert_eq!(runs, "run\n", "the job ran once");
}

/// A failed-job store that is down when a job fails: the database queue has
/// no place to park the record (Redis keeps it in `:unrecorded`), so the
/// row stays reserved, the log says it comes back after `retry_after`, and
/// the worker goes on without holding a slot for it. Once the store is
/// back and the reservation expired, the job is reclaimed and failed into
/// `failed_jobs` (attempted too many times): nothing is lost.
#[test]
fn a_failure_while_the_failed_store_is_down_comes_back_after_retry_after() {
    let (dir, jobs, failed) = sqlite_tables();
    let script = "exit 3";
    // A SQLite file in a folder that does not exist cannot be opened: the
    // store is down at once (a server that refuses connections is down
    // too, after the pool's 30 s wait for a connection).
    let missing = dir.path().join("no-such-dir/failed.sqlite");
    let down_url = format!("sqlite://{}", missing.display());
    let down = config(dir.path(), &jobs, &down_url, 5, script);
    jobs.insert("default", &payload("Bad", "u-bad"), 0, None, now());
    let args = ["--config", down.to_str().unwrap(), "work"];
    let once = ["--stop-when-empty", "--sleep=0", "--tries=1"];
    let mut d = Daemon::start(&[&args[..], &once].concat(), &[]);
    d.expect_stop(0, "empty");
    let log = d.stderr_text();
    assert!(
        log.contains("cannot record the failed job")
            && log.contains("stays reserved and comes back after retry_after"),
        "{log}"
    );
    let rows = jobs.rows();
    assert_eq!(rows.len(), 1, "the row is kept: {rows:?}");
    let reserved_at = rows[0].reserved_at.expect("still reserved");
    // The reservation must expire (retry_after 5 s) before another reserve
    // may take the row: wait for that time to pass.
    common::wait_until("the reservation to expire", || now() > reserved_at + 5);
    let up = config(dir.path(), &jobs, failed.url(), 5, script);
    let args = ["--config", up.to_str().unwrap(), "work"];
    let mut d = Daemon::start(&[&args[..], &once].concat(), &[]);
    d.expect_stop(0, "empty");
    assert_eq!(jobs.rows(), vec![], "the reclaimed job was settled");
    let rows = failed.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].exception.contains("MaxAttemptsExceeded"),
        "{}",
        rows[0].exception
    );
}

/// A job running three times `retry_after` in the daemon while a real
/// `php artisan queue:work database` (Laravel 8.83) polls the same SQLite
/// table runs once: the renewals keep `reserved_at` within `retry_after`,
/// so PHP never finds the row expired (it would run the app's `TimedJob`,
/// which records its start in the app, and print a `Processing` line).
#[test]
fn a_job_running_three_times_retry_after_beside_queue_work_runs_once() {
    let s = common::Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    // The app's default database (DB_DATABASE) holds jobs beside failed_jobs.
    let jobs = JobsTable::sqlite(&s.path("failed.sqlite"));
    app.set_env("QUEUE_CONNECTION", "database");
    app.set_env("DB_QUEUE_RETRY_AFTER", "4");
    app.dispatch(serde_json::json!([{"kind": "timed", "tag": "long"}]));
    assert_eq!(jobs.rows().len(), 1);
    let dir = s.dir.path();
    let script = "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done";
    let failed_url = format!("sqlite://{}", s.path("failed.sqlite").display());
    let config = config(dir, &jobs, &failed_url, 4, script);
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.2"];
    let mut daemon = Daemon::start(&args, &[]);
    common::wait_until("the job to start", || dir.join("started").exists());
    let reserved_at = jobs.rows()[0].reserved_at.unwrap();
    let php = app.queue_work_on("database", &["--sleep=0.2", "--tries=1"]);
    common::wait_until("reserved_at to move past 3 x retry_after", || {
        jobs.rows()
            .first()
            .is_some_and(|r| r.reserved_at.unwrap_or(0) >= reserved_at + 12)
    });
    std::fs::write(dir.join("go"), "").unwrap();
    common::wait_until("the row to be deleted", || jobs.rows().is_empty());
    daemon.signal(Signal::SIGTERM);
    daemon.expect_exit(0);
    php.signal(Signal::SIGTERM);
    let mut php = php;
    assert!(php.wait().success(), "{}", php.output());
    let out = php.output();
    assert!(
        !out.contains("Processing"),
        "queue:work took the job:\n{out}"
    );
    let starts = app
        .records()
        .iter()
        .filter(|r| r["event"] == "start")
        .count();
    assert_eq!(starts, 0, "the app ran the job");
    assert_eq!(daemon.stdout.join("\n").matches(" DONE").count(), 1);
    let failed = FailedDb::Sqlite(failed_url);
    assert_eq!(failed.rows().len(), 0);
}

/// Every stop condition of `queue:work` on the database queue
/// ([`queue_scenes::every_stop_condition`]), each on a queue of its own in
/// one SQLite table: the rows the worker did not run stay in the table,
/// available (none reserved and kept).
#[test]
fn every_stop_condition_on_the_database_queue_leaves_the_unrun_rows_available() {
    let (tmp, jobs, failed) = sqlite_tables();
    let dir = tmp.path();
    let config = config(dir, &jobs, failed.url(), 90, queue_scenes::STOP_SCRIPT);
    let work = |extra: &[&str]| Daemon::work(&config, extra);
    queue_scenes::every_stop_condition(&jobs, dir, &work);
    assert_eq!(failed.rows().len(), 0);
}

/// Timeouts and the drain deadline on the database queue, as on Redis: a
/// job over its payload `timeout` has its handler killed (the worker goes
/// on) and, out of tries, is failed with Laravel's timeout exception; a
/// job still running when a SIGTERM's drain deadline (`drain_timeout = 1`)
/// passes has its handler killed and is released, its row available again
/// at once with the attempt counted, and the worker exits 0.
#[test]
fn timeouts_and_the_drain_deadline_kill_only_the_handler_on_the_database_queue() {
    let (tmp, jobs, failed) = sqlite_tables();
    let dir = tmp.path();
    let script = "echo $$ > \"$DIR/pid-$LARAVEL_WORKER_JOB_UUID\"; touch \"$DIR/started\"; \
                  sleep 300; echo end >> \"$DIR/ended\"";
    let config = config(dir, &jobs, failed.url(), 90, script);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text += "\n[worker]\ndrain_timeout = 1\nkill_grace = 1\n";
    std::fs::write(&config, text).unwrap();
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.2"];

    let slow = payload("Slow", "u-slow").replace("\"timeout\":null", "\"timeout\":1");
    jobs.insert("default", &slow, 0, None, now());
    let mut d = Daemon::start(
        &[&args[..], &["--stop-when-empty", "--tries=1"]].concat(),
        &[],
    );
    d.expect_stop(0, "empty");
    common::wait_dead(read_pid(&dir.join("pid-u-slow")));
    assert_eq!(jobs.rows(), vec![], "the timed-out job left the table");
    let rows = failed.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0].exception.contains("TimeoutExceededException")
            && rows[0].exception.contains("has timed out"),
        "{}",
        rows[0].exception
    );

    std::fs::remove_file(dir.join("started")).unwrap();
    jobs.insert("default", &payload("Endless", "u-endless"), 0, None, now());
    let mut d = Daemon::start(&[&args[..], &["--tries=3"]].concat(), &[]);
    common::wait_until("the endless job to start", || dir.join("started").exists());
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    assert!(
        d.stderr_text().contains("drain deadline passed"),
        "{}",
        d.stderr_text()
    );
    common::wait_dead(read_pid(&dir.join("pid-u-endless")));
    let rows = jobs.rows();
    assert_eq!(rows.len(), 1, "released: {rows:?}");
    assert_eq!(
        (rows[0].attempts, rows[0].reserved_at),
        (1, None),
        "{rows:?}"
    );
    assert!(rows[0].available_at <= now(), "available at once: {rows:?}");
    assert!(!dir.join("ended").exists(), "no handler ran to its end");
    assert_eq!(failed.rows().len(), 1, "nothing more failed");
}

/// The process id a handler wrote to `path`.
fn read_pid(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A temporary directory with a SQLite `jobs` table (`database.sqlite`)
/// and a `failed_jobs` table (`failed.sqlite`) in it.
fn sqlite_tables() -> (tempfile::TempDir, JobsTable, FailedDb) {
    let dir = tempfile::Builder::new()
        .prefix("lw-dbw-")
        .tempdir()
        .unwrap();
    let jobs = JobsTable::sqlite(&dir.path().join("database.sqlite"));
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    (dir, jobs, failed)
}

/// A database queue whose config names no cache store: the store is then
/// the default, Redis, and a Redis that is not there stops the worker at
/// start (exit 1). The error names the cache Redis's address and says
/// which key picks the app's own store, and the row is left as it was.
#[test]
fn a_database_queue_with_the_default_cache_store_and_no_redis_says_what_to_set() {
    let (tmp, jobs, failed) = sqlite_tables();
    let dir = tmp.path();
    let config = config(dir, &jobs, failed.url(), 90, "true");
    let text = std::fs::read_to_string(&config).unwrap();
    let no_cache = "[cache]\nstore = \"none\"\n";
    assert!(
        text.contains(no_cache),
        "the helper's config names a store: {text}"
    );
    std::fs::write(&config, text.replace(no_cache, "")).unwrap();
    let id = jobs.insert("default", &payload("Good", "u-good"), 0, None, now());

    let args = [
        "--config",
        config.to_str().unwrap(),
        "work",
        "--stop-when-empty",
    ];
    let mut d = Daemon::start(&args, &[]);
    d.wait_exit();
    d.expect_exit(1);
    let err = d.stderr_text();
    let socket = dir.join("no-redis.sock").display().to_string();
    assert!(
        err.contains("cannot connect to the cache Redis") && err.contains(&socket),
        "the error names the cache Redis: {err}"
    );
    assert!(
        err.contains("set [cache] store (the app's CACHE_STORE)"),
        "the error says which key picks another store: {err}"
    );
    let rows = jobs.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].id, rows[0].attempts, rows[0].reserved_at),
        (id, 0, None),
        "the row untouched"
    );
}
