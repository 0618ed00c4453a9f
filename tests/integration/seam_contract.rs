//! The driver seam's contract (`laravel_worker::contract`, issue 46) on
//! every real driver, each opened as `work` opens it from a config file:
//! Redis, SQLite, PostgreSQL, MariaDB and beanstalkd (each started here
//! where installed, skipped with a printed reason where not) and SQS
//! (moto).
//! The same checks run on the memory queue in the crate's unit tests.
//!
//! Each driver says how another worker takes a reservation away (its
//! `lose`): on Redis the reclaim moves the member from `:reserved` back to
//! the ready list; on a table another worker's reserve counts the attempt
//! again; on SQS the message is made visible and received by another
//! consumer, which gives it a new receipt handle; on beanstalkd, where a
//! reservation lives as long as the connection that made it, the server
//! restarts (its binlog keeps the job, ready again).

use crate::common;

use std::path::Path;

use common::beanstalkd::Beanstalkd;
use common::databases::{MariaDb, Postgres};
use common::jobs_table::{JobsTable, Shape};
use common::redis_server::RedisServer;
use common::sqs::Moto;
use laravel_worker::config::Settings;
use laravel_worker::{Queue, contract, open_queue};

/// A queue opened from `toml` (a config file's queue sections; no failed
/// store, no cache), as `work` opens it.
fn open(dir: &Path, toml: &str) -> (tokio::runtime::Runtime, Queue) {
    let path = dir.join("worker.toml");
    let stores = "\n[failed]\ndriver = \"null\"\n\n[cache]\nstore = \"none\"\n";
    std::fs::write(&path, format!("{toml}{stores}")).unwrap();
    let settings = Settings::load(Some(&path), None, None).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let queue = rt.block_on(open_queue(&settings)).unwrap();
    (rt, queue)
}

/// Runs every check of the contract on `queue`, each on a queue of its
/// own, `lose` taking the reservations of a queue away (`None`: the
/// driver cannot tell a lost reservation, see SQS).
fn holds(
    rt: &tokio::runtime::Runtime,
    queue: &Queue,
    hand_back_uncounted: bool,
    lose: Option<&(dyn Fn(&str) + Sync)>,
) {
    // `lose` runs its own runtime (the test helpers' clients): on a thread
    // of its own, outside this one.
    rt.block_on(async {
        contract::attempts_are_counted_as_laravel_counts_them(
            queue,
            "c-attempts",
            hand_back_uncounted,
        )
        .await;
        if let Some(lose) = lose {
            let lose = |name: &str| std::thread::scope(|s| s.spawn(|| lose(name)).join().unwrap());
            contract::a_lost_reservation_is_reported_and_left_alone(queue, "c-lost", lose).await;
        }
        contract::sizes_and_clear_agree(queue, "c-sizes").await;
    });
}

#[test]
fn the_redis_queue_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let toml = format!(
        "[queue]\nconnection = \"redis\"\nretry_after = 60\n\n[redis]\nurl = \"{}\"\nprefix = \"laravel_database_\"\n",
        redis.url(0)
    );
    let (rt, queue) = open(dir.path(), &toml);
    let reclaim = |name: &str| {
        let reserved = format!("{}:reserved", common::q(name));
        for (member, _) in redis.zrange(&reserved) {
            let _: i64 = redis.cmd(&["ZREM", &reserved, &member]);
            redis.push(name, &member);
        }
    };
    holds(&rt, &queue, true, Some(&reclaim));
}

/// The config of a worker on the `jobs` table at `jobs`.
fn database_toml(jobs: &JobsTable) -> String {
    format!(
        "[queue]\nconnection = \"database\"\nretry_after = 60\n\n[database]\nurl = \"{}\"\n",
        jobs.url
    )
}

/// Another worker's reserve of every row: the attempt counted again.
fn reserve_elsewhere(jobs: &JobsTable) {
    jobs.execute("UPDATE jobs SET attempts = attempts + 1");
}

#[test]
fn the_sqlite_queue_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = JobsTable::sqlite(&dir.path().join("database.sqlite"));
    let (rt, queue) = open(dir.path(), &database_toml(&jobs));
    holds(&rt, &queue, true, Some(&|_: &str| reserve_elsewhere(&jobs)));
}

#[test]
fn the_postgres_queue_keeps_the_contract() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let jobs = JobsTable::postgres(&pg, "contract");
    let (rt, queue) = open(dir.path(), &database_toml(&jobs));
    holds(&rt, &queue, true, Some(&|_: &str| reserve_elsewhere(&jobs)));
}

#[test]
fn the_mariadb_queue_keeps_the_contract() {
    let Some(mariadb) = MariaDb::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let jobs = JobsTable::mariadb(&mariadb, "contract", Shape::Before13_6);
    let (rt, queue) = open(dir.path(), &database_toml(&jobs));
    holds(&rt, &queue, true, Some(&|_: &str| reserve_elsewhere(&jobs)));
}

/// SQS: a hand back counts an attempt there (SQS counts every receive and
/// cannot uncount one), and a lost reservation cannot be told: AWS accepts
/// a receipt handle of an earlier receive of a message received again
/// (its documentation: the request succeeds, and the message may or may not
/// be deleted), so the lost-reservation check does not apply.
#[test]
fn the_sqs_queue_keeps_the_contract() {
    let Some(moto) = Moto::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    for name in ["c-attempts", "c-sizes"] {
        moto.create_queue(name, 60);
    }
    let toml = format!(
        "[queue]\nconnection = \"sqs\"\nretry_after = 60\n\n\
         [sqs]\nprefix = \"{}\"\nendpoint = \"{}\"\nkey = \"test\"\nsecret = \"test\"\n",
        moto.prefix(),
        moto.endpoint
    );
    let (rt, queue) = open(dir.path(), &toml);
    holds(&rt, &queue, false, None);
}

#[test]
fn the_beanstalkd_queue_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = Beanstalkd::start(dir.path()) else {
        return;
    };
    let toml = format!(
        "[queue]\nconnection = \"beanstalkd\"\nhost = \"127.0.0.1\"\nport = {}\nretry_after = 60\n",
        server.port
    );
    let (rt, queue) = open(dir.path(), &toml);
    let server = std::sync::Mutex::new(server);
    let restart = |_: &str| {
        let mut server = server.lock().unwrap();
        server.kill();
        server.start_again();
    };
    holds(&rt, &queue, true, Some(&restart));
}
