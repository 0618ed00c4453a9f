//! The database queue's server refusing connections (issue 47): the cause
//! is named at the first failure, and a server back within `retry_after`
//! gets a finished job's delete before its reservation lapses, so no other
//! worker runs it again.
//!
//! The outage is a [`TcpGate`] in front of the test server's unix socket:
//! closed, its port refuses connects as a stopped server's port does, and
//! the connections through it are cut; the data stays.

use crate::common;

use std::path::{Path, PathBuf};

use common::Daemon;
use common::databases::{FailedDb, Postgres};
use common::jobs_table::{JobsTable, Kind};
use common::tcp_gate::TcpGate;

use super::database_worker::{config, payload};

/// A port of 127.0.0.1 that nothing listens on (bound, then let go).
fn refusing_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The unix socket a PostgreSQL test server listens on.
fn postgres_socket(pg: &Postgres) -> PathBuf {
    std::fs::read_dir(pg.socket_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with(".s.PGSQL.") && !name.ends_with(".lock")
        })
        .expect("the server's socket")
}

/// A PostgreSQL and a MariaDB URL on `port` of 127.0.0.1.
fn tcp_urls(port: u16) -> [(Kind, String); 2] {
    [
        (
            Kind::Postgres,
            format!("postgres://postgres@127.0.0.1:{port}/app"),
        ),
        (Kind::MariaDb, format!("mysql://root@127.0.0.1:{port}/app")),
    ]
}

/// A config on the table at `url` with failed jobs in a SQLite file of
/// `dir`, every job run by `script`.
fn config_at(dir: &Path, kind: Kind, url: &str, retry_after: u64, script: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let failed = FailedDb::sqlite(&dir.join("failed.sqlite"));
    let jobs = JobsTable {
        url: url.to_string(),
        kind,
    };
    config(dir, &jobs, failed.url(), retry_after, script)
}

/// A worker whose PostgreSQL or MariaDB port refuses connections says so
/// in its first error (before: "pool timed out", after 30 s a try).
/// No server is needed: nothing listens on the port.
#[test]
fn a_refused_database_port_is_named_at_the_first_failure() {
    let dir = tempfile::Builder::new()
        .prefix("lw-refused-")
        .tempdir()
        .unwrap();
    for (kind, url) in tcp_urls(refusing_port()) {
        let config = config_at(&dir.path().join(format!("{kind:?}")), kind, &url, 90, "");
        let mut d = Daemon::work(&config, &["--stop-when-empty"]);
        d.expect_exit(1);
        let log = d.stderr_text();
        let first = log
            .lines()
            .find(|l| l.contains("cannot open the"))
            .unwrap_or_else(|| panic!("{kind:?}: no failure logged:\n{log}"));
        assert!(
            first.contains("Connection refused"),
            "{kind:?}: the first failure names the cause: {first}"
        );
        assert!(!log.contains("timed out"), "{kind:?}: {log}");
    }
}

/// A job that finished as its PostgreSQL went away, with the server back
/// 6 s later and `retry_after = 9`: its delete lands within the
/// reservation, and a second worker polling the table all along (on the
/// server's own socket, untouched by the outage) never runs it. Before,
/// the pool's reconnect waits doubled (2.56 s, 5.12 s) and the delete came
/// after the reservation lapsed: the second worker ran the job again.
#[test]
fn a_database_back_within_retry_after_gets_the_delete_in_time() {
    let Some(pg) = Postgres::start() else {
        return;
    };
    let jobs = JobsTable::postgres(&pg, "app");
    let mut gate = TcpGate::open(&postgres_socket(&pg));
    let dir = tempfile::Builder::new()
        .prefix("lw-outage-")
        .tempdir()
        .unwrap();
    let script = "touch \"$DIR/../started\"\n\
                  while [ ! -e \"$DIR/../go\" ]; do sleep 0.02; done\n\
                  echo ran >> \"$DIR/../ran\"";
    let through_gate = format!(
        "postgres://postgres@127.0.0.1:{}/app?sslmode=disable",
        gate.port()
    );
    let first = config_at(
        &dir.path().join("first"),
        Kind::Postgres,
        &through_gate,
        9,
        script,
    );
    let second = config_at(
        &dir.path().join("second"),
        Kind::Postgres,
        &jobs.url,
        9,
        script,
    );
    jobs.insert(
        "default",
        &payload("Once", "u-once"),
        0,
        None,
        common::now(),
    );

    // RUST_LOG empty: the worker's own default filter, as an operator
    // who sets none gets it.
    let work = |config: &Path| {
        Daemon::start(
            &["--config", config.to_str().unwrap(), "work", "--sleep=0"],
            &[("RUST_LOG", "")],
        )
    };
    let mut a = work(&first);
    let started = dir.path().join("started");
    common::wait_until("the job to start", || started.exists());
    let mut b = work(&second);
    b.wait_log(&["worker started"]);

    gate.close();
    std::fs::write(dir.path().join("go"), "").unwrap();
    // The outage's length is the scenario: shorter than retry_after, longer
    // than the pool's old waits.
    std::thread::sleep(std::time::Duration::from_secs(6));
    gate.reopen();
    // A late delete would have let the second worker take the row when
    // the reservation lapsed, run the job and delete the row itself: by
    // the time the row is gone, any second run is on record.
    common::wait_until("the job's row to be deleted", || jobs.count() == 0);

    for d in [&mut a, &mut b] {
        d.signal(nix::sys::signal::Signal::SIGTERM);
        d.wait_exit();
    }
    let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap();
    assert_eq!(
        ran.lines().count(),
        1,
        "the job ran once; first worker:\n{}\nsecond worker:\n{}",
        a.stderr_text(),
        b.stderr_text()
    );
    let log = a.stderr_text();
    assert!(
        log.lines()
            .any(|l| l.contains("cannot delete") && l.contains("Connection refused")),
        "the failed deletes name the cause:\n{log}"
    );
    for sqlx_own in ["on-release", "slow threshold", "ping on idle"] {
        assert!(
            !log.contains(sqlx_own),
            "the worker's lines say it, not sqlx's ({sqlx_own}):\n{log}"
        );
    }
}

/// A reserve that PostgreSQL never answers (the table locked by another
/// session, so the worker's statement waits in the server) does not keep a
/// stopping worker: SIGTERM ends it, exit 0, once the statement is given up
/// (30 s, as a Redis command's timeout). Before, a statement in flight
/// waited for ever (a stopped server, a network dropping packets, a lock),
/// and neither SIGTERM nor `drain_timeout` ended the worker.
#[test]
fn a_reserve_the_database_never_answers_does_not_keep_a_stopping_worker() {
    use sqlx::Connection;
    let Some(pg) = Postgres::start() else {
        return;
    };
    let jobs = JobsTable::postgres(&pg, "app");
    let dir = tempfile::Builder::new()
        .prefix("lw-hung-")
        .tempdir()
        .unwrap();
    let config = config_at(dir.path(), Kind::Postgres, &jobs.url, 90, "");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = Daemon::start(
        &["--config", config.to_str().unwrap(), "work", "--sleep=0"],
        &[],
    );
    d.wait_log(&["worker started"]);
    let mut locker = rt.block_on(async {
        let mut c = sqlx::PgConnection::connect(&jobs.url).await.unwrap();
        sqlx::raw_sql("BEGIN; LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            .execute(&mut c)
            .await
            .unwrap();
        c
    });
    // The worker's reserve waits on the lock, in the server.
    common::wait_until("the worker's reserve to wait on the lock", || {
        rt.block_on(async {
            let mut c = sqlx::PgConnection::connect(&jobs.url).await.unwrap();
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%FOR UPDATE%'",
            )
            .fetch_one(&mut c)
            .await
            .unwrap();
            waiting > 0
        })
    });
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d.wait_exit_within(std::time::Duration::from_secs(90));
    rt.block_on(async {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut locker)
            .await
            .unwrap()
    });
    assert_eq!(status.code(), Some(0), "{}", d.stderr_text());
    let log = d.stderr_text();
    assert!(log.contains("did not answer within 30 s"), "{log}");
    assert!(log.contains("reason=\"interrupted\""), "{log}");
}
