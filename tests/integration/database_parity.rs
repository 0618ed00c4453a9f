//! Parity with `php artisan queue:work database` of the real Laravel 8.83
//! (issue 27), on each database: the parity scenario
//! ([`common::parity`]) run round by round once by `queue:work database`
//! and once by the daemon, each on its own database and Redis, leaves the
//! same job log, the same rows in `jobs` (attempts, reservation, release
//! delay within a second), the same `failed_jobs` rows and the same keys
//! in the app's Redis cache. SQLite always (the app's file holds `jobs`
//! and `failed_jobs`); PostgreSQL and MariaDB on private servers, where
//! the app's default connection (`DB_CONNECTION`) is that server's
//! database, holding both tables; each skips with a note when the server
//! or PHP's driver is missing.

use crate::common;

use common::Scene;
use common::databases::{FailedDb, MariaDb, Postgres};
use common::jobs_table::{JobsTable, Shape};
use common::laravel::{self, App};
use common::parity::{JobLeft, QueueUnderParity, Round, Run, parity};

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

/// The `jobs` table's rows as the parity scenario compares them: a push
/// and a release both write `created_at` = now, so a row's delay is
/// `available_at - created_at`.
impl QueueUnderParity for JobsTable {
    fn jobs_left(&self) -> Vec<JobLeft> {
        self.rows()
            .into_iter()
            .map(|row| JobLeft {
                delay: row.available_at - row.created_at,
                reserved: row.reserved_at.is_some(),
                payload: row.payload,
                queue: row.queue,
                attempts: row.attempts,
            })
            .collect()
    }

    fn make_due(&self) {
        self.execute("UPDATE jobs SET available_at = 0 WHERE reserved_at IS NULL");
    }
}

/// The scenario's rounds on a database `name` of `server`, with `php`
/// (`queue:work database`) or the daemon.
fn run_scenario(server: &Server, name: &str, php: bool) -> Vec<Round> {
    let s = Scene::new();
    let app = App::new(&s).expect("checked before");
    let (jobs, failed) = server.database(&s, &app, name);
    let run = Run {
        s: &s,
        app: &app,
        queue: &jobs,
        failed: &failed,
    };
    run.rounds("database", php)
}

/// Runs the scenario with both workers on `server` and compares them.
fn parity_on(server: Server, what: &str) {
    let php = run_scenario(&server, "php", true);
    let ours = run_scenario(&server, "daemon", false);
    parity(php, ours, "database", what);
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
