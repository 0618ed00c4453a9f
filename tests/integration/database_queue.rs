//! The database queue driver (`queue::database`) on real databases: SQLite
//! always, PostgreSQL and MariaDB started by the tests where installed
//! (skipped with a printed reason where not), each with the `jobs` table
//! Laravel's migration makes.
//!
//! Times are passed in (`now`), so no test sleeps or depends on the clock.

use crate::common;

use std::future::Future;

use common::databases::{MariaDb, Postgres};
use common::jobs_table::{JobRow, JobsTable, Kind, Shape};
use laravel_worker::{DatabaseQueue, DatabaseQueueSpec, DatabaseReservation, Engine, ErrorKind};

/// A fixed "now" (UNIX seconds) for the statements.
const NOW: i64 = 1_800_000_000;

/// `retry_after` of the tables here.
const RETRY_AFTER: u64 = 90;

/// The databases of one test: a SQLite file always, PostgreSQL and MariaDB
/// when installed; dropped (servers killed) at the end of the test.
struct Databases {
    _dir: tempfile::TempDir,
    postgres: Option<Postgres>,
    mariadb: Option<MariaDb>,
    tables: Vec<JobsTable>,
}

impl Databases {
    /// Starts the servers and makes a `jobs` table (the pre-13.6 shape) in
    /// each database.
    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lw-dbq-")
            .tempdir()
            .unwrap();
        let mut tables = vec![JobsTable::sqlite(&dir.path().join("database.sqlite"))];
        let postgres = Postgres::start();
        if let Some(pg) = &postgres {
            tables.push(JobsTable::postgres(pg, "app"));
        }
        let mariadb = MariaDb::start();
        if let Some(m) = &mariadb {
            tables.push(JobsTable::mariadb(m, "app", Shape::Before13_6));
        }
        Databases {
            _dir: dir,
            postgres,
            mariadb,
            tables,
        }
    }
}

/// A runtime for the driver's calls (the table helpers run outside it).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn spec(table: &JobsTable) -> DatabaseQueueSpec {
    DatabaseQueueSpec {
        url: table.url.clone(),
        table: "jobs".into(),
        retry_after: RETRY_AFTER,
    }
}

fn open(rt: &tokio::runtime::Runtime, table: &JobsTable) -> DatabaseQueue {
    rt.block_on(DatabaseQueue::open(&spec(table)))
        .unwrap_or_else(|e| panic!("{:?}: {e}", table.kind))
}

/// Runs `f` on `rt` and unwraps it, naming the engine on failure.
fn ok<T, E: std::fmt::Display>(
    rt: &tokio::runtime::Runtime,
    kind: Kind,
    f: impl Future<Output = Result<T, E>>,
) -> T {
    rt.block_on(f).unwrap_or_else(|e| panic!("{kind:?}: {e}"))
}

fn ids(reserved: &[DatabaseReservation]) -> Vec<i64> {
    reserved.iter().map(|r| r.handle.id).collect()
}

#[test]
fn reserve_takes_available_and_expired_rows_oldest_first_up_to_max() {
    let dbs = Databases::start();
    let rt = runtime();
    for t in &dbs.tables {
        let q = open(&rt, t);
        let k = t.kind;
        let retry = RETRY_AFTER as i64;
        let a = t.insert("default", "{\"a\":1}", 0, None, NOW);
        let delayed = t.insert("default", "{}", 0, None, NOW + 10);
        let held = t.insert("default", "{}", 1, Some(NOW - retry + 1), NOW - 500);
        let expired = t.insert("default", "{}", 2, Some(NOW - retry), NOW + 1000);
        let other = t.insert("other", "{}", 0, None, NOW);
        let b = t.insert("default", "{}", 0, None, NOW - 1);

        let first = ok(&rt, k, q.reserve("default", 2, NOW));
        assert_eq!(
            ids(&first),
            vec![a, expired],
            "{k:?}: oldest id first, max 2"
        );
        assert_eq!(first[0].payload, "{\"a\":1}");
        assert_eq!(first[0].queue, "default");
        assert_eq!(
            (first[0].handle.attempts, first[1].handle.attempts),
            (1, 3),
            "{k:?}: attempts + 1, an expired reservation counted again"
        );
        assert!(first.iter().all(|r| !r.at_attempts_limit));
        let row = t.row(expired).unwrap();
        assert_eq!((row.attempts, row.reserved_at), (3, Some(NOW)), "{k:?}");

        let second = ok(&rt, k, q.reserve("default", 10, NOW));
        assert_eq!(
            ids(&second),
            vec![b],
            "{k:?}: not delayed, held nor other queue"
        );
        assert!(ok(&rt, k, q.reserve("default", 10, NOW)).is_empty());
        assert!(ok(&rt, k, q.reserve("default", 0, NOW + 1000)).is_empty());
        // Later, the delayed row is due and the held reservation expired.
        let later = ok(&rt, k, q.reserve("default", 10, NOW + 10));
        assert_eq!(ids(&later), vec![delayed, held], "{k:?}");
        assert_eq!(ids(&ok(&rt, k, q.reserve("other", 10, NOW))), vec![other]);
    }
}

#[test]
fn guarded_writes_change_nothing_after_the_row_was_reclaimed() {
    let dbs = Databases::start();
    let rt = runtime();
    let retry = RETRY_AFTER as i64;
    for t in &dbs.tables {
        let q = open(&rt, t);
        let k = t.kind;
        let id = t.insert("default", "{}", 0, None, NOW);
        let mine = ok(&rt, k, q.reserve("default", 1, NOW)).remove(0);
        assert!(ok(&rt, k, q.renew(mine.handle, NOW + 60)), "{k:?}");
        assert!(
            ok(&rt, k, q.renew(mine.handle, NOW + 60)),
            "{k:?}: same second"
        );
        assert!(
            ok(&rt, k, q.reserve("default", 1, NOW + 60 + retry - 1)).is_empty(),
            "{k:?}: the renewed reservation holds"
        );
        // Another worker reclaims the row after retry_after.
        let theirs = ok(&rt, k, q.reserve("default", 1, NOW + 60 + retry)).remove(0);
        assert_eq!(theirs.handle.id, id);
        let before = t.rows();
        assert!(!ok(&rt, k, q.renew(mine.handle, NOW + 200)), "{k:?}");
        assert!(!ok(&rt, k, q.delete(mine.handle)), "{k:?}");
        assert!(!ok(&rt, k, q.release(&mine, 0, NOW + 200)), "{k:?}");
        assert!(!ok(&rt, k, q.hand_back(mine.handle)), "{k:?}");
        assert_eq!(
            ok(&rt, k, q.delete_many(&[mine.handle])),
            vec![false],
            "{k:?}"
        );
        assert_eq!(t.rows(), before, "{k:?}: the stale handle changed nothing");
        // The holder's own writes work.
        assert!(ok(&rt, k, q.hand_back(theirs.handle)), "{k:?}");
        let row = t.row(id).unwrap();
        assert_eq!(
            (row.attempts, row.reserved_at),
            (1, None),
            "{k:?}: uncounted"
        );
        let again = ok(&rt, k, q.reserve("default", 1, NOW + 300)).remove(0);
        assert_eq!((again.handle.id, again.handle.attempts), (id, 2));
        assert!(ok(&rt, k, q.delete(again.handle)), "{k:?}");
        assert!(t.rows().is_empty(), "{k:?}");
    }
}

#[test]
fn release_leaves_the_row_as_laravels_delete_and_release() {
    let dbs = Databases::start();
    let rt = runtime();
    // Bytes a re-encoding would change: unicode, escaped slashes, spacing.
    let payload = "{\"uuid\":\"u-1\",\"displayName\":\"App\\\\Jobs\\\\Ship\",\
                   \"data\":{\"x\":\"caf\u{e9} \\/ \u{1f680}\"},  \"n\":1.50}";
    for t in &dbs.tables {
        let q = open(&rt, t);
        let k = t.kind;
        let old = t.insert("emails", payload, 2, None, NOW - 5);
        let r = ok(&rt, k, q.reserve("emails", 1, NOW)).remove(0);
        assert!(ok(&rt, k, q.release(&r, 30, NOW + 7)), "{k:?}");
        let rows = t.rows();
        assert_eq!(rows.len(), 1, "{k:?}");
        let new = &rows[0];
        assert!(new.id > old, "{k:?}: a new id, at the back of the line");
        assert_eq!(
            new,
            &JobRow {
                id: new.id,
                queue: "emails".into(),
                payload: payload.into(),
                attempts: 3,
                reserved_at: None,
                available_at: NOW + 7 + 30,
                created_at: NOW + 7,
            },
            "{k:?}"
        );
        assert!(ok(&rt, k, q.reserve("emails", 1, NOW + 36)).is_empty());
        let next = ok(&rt, k, q.reserve("emails", 1, NOW + 37)).remove(0);
        assert_eq!(next.handle.attempts, 4, "{k:?}");
        assert_eq!(next.payload, payload, "{k:?}");
    }
}

#[test]
fn push_sizes_clear_and_batched_deletes() {
    let dbs = Databases::start();
    let rt = runtime();
    for t in &dbs.tables {
        let q = open(&rt, t);
        let k = t.kind;
        let a = ok(&rt, k, q.push("default", "{\"n\":1}", 0, NOW));
        let b = ok(&rt, k, q.push("default", "{\"n\":2}", 0, NOW + 1));
        let c = ok(&rt, k, q.push("default", "{\"n\":3}", 60, NOW));
        ok(&rt, k, q.push("other", "{}", 0, NOW));
        let row = t.row(c).unwrap();
        assert_eq!(
            (
                row.attempts,
                row.reserved_at,
                row.available_at,
                row.created_at
            ),
            (0, None, NOW + 60, NOW),
            "{k:?}: as pushToDatabase writes it"
        );
        let sizes = ok(&rt, k, q.sizes("default", NOW + 1));
        assert_eq!(
            (sizes.pending, sizes.delayed, sizes.reserved),
            (2, 1, 0),
            "{k:?}"
        );
        assert_eq!(sizes.oldest_pending_available_at, Some(NOW), "{k:?}");
        let got = ok(&rt, k, q.reserve("default", 5, NOW + 1));
        assert_eq!(ids(&got), vec![a, b], "{k:?}");
        let sizes = ok(&rt, k, q.sizes("default", NOW + 1));
        assert_eq!(
            (sizes.pending, sizes.delayed, sizes.reserved),
            (0, 1, 2),
            "{k:?}"
        );
        assert_eq!(sizes.oldest_pending_available_at, None, "{k:?}");
        // One handle of three is stale.
        let mut stale = got[1].handle;
        stale.attempts += 1;
        let results = ok(
            &rt,
            k,
            q.delete_many(&[got[0].handle, stale, got[1].handle]),
        );
        assert_eq!(results, vec![true, false, true], "{k:?}");
        assert_eq!(ok(&rt, k, q.clear("default")), 1, "{k:?}");
        assert_eq!(t.rows().len(), 1, "{k:?}: the other queue stays");
    }
}

#[test]
fn the_attempts_column_limit_fails_the_job_instead_of_overflowing() {
    let dbs = Databases::start();
    let rt = runtime();
    let mut cases: Vec<(JobsTable, i64)> = Vec::new();
    if let Some(m) = &dbs.mariadb {
        cases.push((
            JobsTable::mariadb(m, "tinyint_attempts", Shape::Before13_6),
            255,
        ));
        cases.push((
            JobsTable::mariadb(m, "smallint_attempts", Shape::Since13_6),
            65_535,
        ));
    }
    if let Some(t) = dbs.tables.iter().find(|t| t.kind == Kind::Postgres) {
        cases.push((t.clone(), 32_767));
    }
    for (t, limit) in &cases {
        let q = open(&rt, t);
        let k = t.kind;
        assert_eq!(q.attempts_column().limit, *limit, "{k:?}");
        let below = t.insert("default", "{}", limit - 1, None, NOW);
        let at = t.insert("default", "{}", *limit, None, NOW);
        let got = ok(&rt, k, q.reserve("default", 5, NOW));
        assert_eq!(ids(&got), vec![below, at], "{k:?}");
        assert!(!got[0].at_attempts_limit && got[0].handle.attempts == *limit);
        assert!(got[1].at_attempts_limit, "{k:?}: flagged");
        assert_eq!(got[1].handle.attempts, *limit, "{k:?}: not counted");
        assert_eq!(t.row(at).unwrap().reserved_at, Some(NOW), "{k:?}");
        let text = q.attempts_limit_exception();
        assert!(
            text.contains(&limit.to_string()) && text.contains("jobs"),
            "{text}"
        );
        // The worker fails it: the row goes, the queue moves on.
        assert!(ok(&rt, k, q.delete(got[1].handle)), "{k:?}");
        assert!(t.row(at).is_none());
    }
    let sqlite = &dbs.tables[0];
    let q = open(&rt, sqlite);
    assert_eq!(q.attempts_column().limit, i64::MAX, "SQLite's integer");
    sqlite.insert("default", "{}", 255, None, NOW);
    let got = ok(&rt, Kind::Sqlite, q.reserve("default", 1, NOW));
    assert!(!got[0].at_attempts_limit && got[0].handle.attempts == 256);
}

/// `reservers` tasks (each on one of `queues`' pools, in turn) reserve in
/// batches of 3 and delete every row they get while a writer pushes
/// `pushed` more; returns every reserved id.
fn drain_concurrently(
    rt: &tokio::runtime::Runtime,
    queues: &[DatabaseQueue],
    reservers: usize,
    pushed: usize,
) -> Vec<i64> {
    rt.block_on(async {
        let writer = {
            let q = queues[0].clone();
            tokio::spawn(async move {
                for n in 0..pushed {
                    q.push("default", &format!("{{\"w\":{n}}}"), 0, NOW)
                        .await
                        .unwrap();
                }
            })
        };
        let tasks: Vec<_> = (0..reservers)
            .map(|i| {
                let q = queues[i % queues.len()].clone();
                tokio::spawn(async move {
                    let mut taken = Vec::new();
                    let mut empty = 0;
                    while empty < 20 {
                        let got = q.reserve("default", 3, NOW).await.unwrap();
                        if got.is_empty() {
                            empty += 1;
                            tokio::task::yield_now().await;
                            continue;
                        }
                        empty = 0;
                        let handles: Vec<_> = got.iter().map(|r| r.handle).collect();
                        let done = q.delete_many(&handles).await.unwrap();
                        assert!(done.iter().all(|d| *d), "a reserved row was not ours");
                        taken.extend(handles.iter().map(|h| h.id));
                    }
                    taken
                })
            })
            .collect();
        writer.await.unwrap();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    })
}

#[test]
fn concurrent_reservers_never_share_a_row() {
    let dbs = Databases::start();
    let rt = runtime();
    for t in &dbs.tables {
        let k = t.kind;
        for n in 0..150 {
            t.insert("default", &format!("{{\"n\":{n}}}"), 0, None, NOW);
        }
        // Four workers' pools, as four daemons would have.
        let queues: Vec<DatabaseQueue> = (0..4).map(|_| open(&rt, t)).collect();
        let taken = drain_concurrently(&rt, &queues, 4, 50);
        let mut unique = taken.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), taken.len(), "{k:?}: a row reserved twice");
        // Whatever the writer pushed after the reservers gave up stays.
        let left = t.rows().len();
        assert_eq!(taken.len() + left, 200, "{k:?}: rows lost");
        let rest = drain_concurrently(&rt, &queues[1..], 2, 0);
        assert_eq!(rest.len(), left, "{k:?}");
        assert!(t.rows().is_empty(), "{k:?}");
    }
}

#[test]
fn open_describes_the_server_and_refuses_a_wrong_table() {
    let dbs = Databases::start();
    let rt = runtime();
    for t in &dbs.tables {
        let q = open(&rt, t);
        let d = q.describe();
        let (engine, lock) = match t.kind {
            Kind::Sqlite => (Engine::Sqlite, "BEGIN IMMEDIATE, busy timeout 60 s"),
            Kind::Postgres => (Engine::Postgres, "FOR UPDATE SKIP LOCKED"),
            Kind::MariaDb => (Engine::MariaDb, "FOR UPDATE SKIP LOCKED"),
        };
        assert_eq!(q.engine(), engine, "{d}");
        assert!(
            d.starts_with(engine.name()) && d.contains("table jobs"),
            "{d}"
        );
        assert!(d.ends_with(lock), "{d}");
        assert_eq!(
            q.lock_warning(),
            None,
            "{d}: the servers here have SKIP LOCKED"
        );
        let mut wrong = spec(t);
        wrong.table = "job".into();
        let e = rt.block_on(DatabaseQueue::open(&wrong)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Refused, "{e}");
        assert!(e.to_string().contains("job ") && e.to_string().contains("queue:table"));
        wrong.table = "jobs; drop table jobs".into();
        let e = rt.block_on(DatabaseQueue::open(&wrong)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Refused, "{e}");
        // A table without Laravel's columns is refused at open, naming it.
        t.execute("CREATE TABLE narrow (id integer, queue varchar(10), attempts integer)");
        wrong.table = "narrow".into();
        let e = rt.block_on(DatabaseQueue::open(&wrong)).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Refused, "{e}");
        assert!(e.to_string().contains("narrow"), "{e}");
    }
}

#[test]
fn a_database_that_goes_away_is_unavailable_and_works_again() {
    let mut dbs = Databases::start();
    let rt = runtime();
    // A read-only SQLite file (opened read-only: root ignores file modes).
    let sqlite = &dbs.tables[0];
    sqlite.insert("default", "{}", 0, None, NOW);
    let read_only = DatabaseQueueSpec {
        url: format!("{}?mode=ro", sqlite.url),
        ..spec(sqlite)
    };
    let q = rt.block_on(DatabaseQueue::open(&read_only)).unwrap();
    let e = rt.block_on(q.reserve("default", 1, NOW)).unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    assert!(e.to_string().contains("read-only"), "{e}");
    assert_eq!(sqlite.rows()[0].reserved_at, None, "nothing reserved");

    let Some(pg) = dbs.postgres.as_mut() else {
        return;
    };
    let t = dbs
        .tables
        .iter()
        .find(|t| t.kind == Kind::Postgres)
        .unwrap()
        .clone();
    let q = open(&rt, &t);
    let id = t.insert("default", "{}", 0, None, NOW);
    let r = ok(&rt, Kind::Postgres, q.reserve("default", 1, NOW)).remove(0);
    pg.stop_server();
    let e = rt.block_on(q.renew(r.handle, NOW + 1)).unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    let e = rt.block_on(q.reserve("default", 1, NOW)).unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    pg.start_again();
    assert!(ok(&rt, Kind::Postgres, q.renew(r.handle, NOW + 2)));
    assert!(ok(&rt, Kind::Postgres, q.delete(r.handle)));
    assert!(t.row(id).is_none());
}

/// The keys of a JSON object payload.
fn payload_keys(payload: &str) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_str(payload).unwrap();
    value.as_object().unwrap().keys().cloned().collect()
}

/// The test app in `s` on its database queue, the `jobs` table in its
/// default SQLite file (`DB_DATABASE`, beside `failed_jobs`), with `specs`
/// dispatched through its bus; `None` (the skip recorded) without PHP and
/// Laravel.
fn app_with_jobs(
    s: &common::Scene,
    specs: serde_json::Value,
) -> Option<(common::laravel::App, JobsTable)> {
    let app = common::laravel::App::new(s)?;
    let jobs = JobsTable::sqlite(&s.path("failed.sqlite"));
    app.set_env("QUEUE_CONNECTION", "database");
    app.dispatch(specs);
    Some((app, jobs))
}

#[test]
fn php_workers_and_the_driver_share_one_table() {
    let s = common::Scene::new();
    let Some((app, t)) = app_with_jobs(
        &s,
        serde_json::json!([
            {"kind": "plain", "tag": "released"},
            {"kind": "plain", "tag": "pushed"},
            {"kind": "plain", "tag": "handed-back"},
        ]),
    ) else {
        return;
    };
    let rt = runtime();
    let q = open(&rt, &t);
    let now = common::now();
    let got = ok(&rt, Kind::Sqlite, q.reserve("default", 3, now));
    assert_eq!(got.len(), 3, "{:?}", t.rows());
    for r in &got {
        let keys = payload_keys(std::str::from_utf8(&r.payload).unwrap());
        assert!(keys.contains(&"displayName".to_string()), "{keys:?}");
        assert!(
            !keys.contains(&"id".to_string()) && !keys.contains(&"attempts".to_string()),
            "a database payload has no id nor attempts: {keys:?}"
        );
        assert_eq!(r.handle.attempts, 1);
    }
    // Released with its attempt counted; deleted and pushed again as new;
    // handed back uncounted.
    assert!(ok(&rt, Kind::Sqlite, q.release(&got[0], 0, now)));
    assert!(ok(&rt, Kind::Sqlite, q.delete(got[1].handle)));
    ok(
        &rt,
        Kind::Sqlite,
        q.push(
            "default",
            std::str::from_utf8(&got[1].payload).unwrap(),
            0,
            now,
        ),
    );
    assert!(ok(&rt, Kind::Sqlite, q.hand_back(got[2].handle)));
    for _ in 0..3 {
        app.artisan_ok(&["queue:work", "database", "--once", "--sleep=0", "--tries=3"]);
    }
    assert_eq!(app.attempts("released"), vec![2], "{:?}", app.records());
    assert_eq!(app.attempts("pushed"), vec![1]);
    assert_eq!(app.attempts("handed-back"), vec![1]);
    assert!(t.rows().is_empty(), "PHP deleted every row: {:?}", t.rows());
}

#[test]
fn a_php_workers_reclaim_leaves_our_stale_handle_powerless() {
    let s = common::Scene::new();
    let Some((app, t)) = app_with_jobs(&s, serde_json::json!([{"kind": "plain", "tag": "slow"}]))
    else {
        return;
    };
    let rt = runtime();
    let q = open(&rt, &t);
    // Our reservation, taken longer than retry_after (90 s) ago.
    t.execute("UPDATE jobs SET available_at = available_at - 200, created_at = created_at - 200");
    let long_ago = common::now() - 100;
    let ours = ok(&rt, Kind::Sqlite, q.reserve("default", 1, long_ago)).remove(0);
    app.artisan_ok(&["queue:work", "database", "--once", "--sleep=0", "--tries=3"]);
    assert_eq!(
        app.attempts("slow"),
        vec![2],
        "PHP reclaimed and counted it"
    );
    let now = common::now();
    assert!(!ok(&rt, Kind::Sqlite, q.renew(ours.handle, now)));
    assert!(!ok(&rt, Kind::Sqlite, q.release(&ours, 0, now)));
    assert!(t.rows().is_empty(), "no duplicate: {:?}", t.rows());
}

/// Four reservers of the driver (each its own pool, reserving 3 at a time
/// and deleting what they get) until the queue stays empty; how many rows
/// they deleted.
fn four_reservers_until_empty(rt: &tokio::runtime::Runtime, queues: &[DatabaseQueue]) -> usize {
    rt.block_on(async {
        let tasks: Vec<_> = queues
            .iter()
            .cloned()
            .map(|q| {
                tokio::spawn(async move {
                    let (mut deleted, mut empty) = (0, 0);
                    while empty < 50 {
                        let got = q.reserve("default", 3, common::now()).await.unwrap();
                        if got.is_empty() {
                            empty += 1;
                            tokio::task::yield_now().await;
                            continue;
                        }
                        empty = 0;
                        let handles: Vec<_> = got.iter().map(|r| r.handle).collect();
                        let done = q.delete_many(&handles).await.unwrap();
                        deleted += done.iter().filter(|d| **d).count();
                    }
                    deleted
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    })
}

/// Four reservers of the driver and one PHP `queue:work database` drain
/// 600 jobs from one SQLite file (rollback journal, as Laravel 11's
/// skeleton makes it). Every job is taken once, by one side: none lost,
/// none run twice. PHP's own transactions are deferred: its reserve or
/// delete can meet "database is locked" at once (SQLite refuses a
/// deferred transaction's upgrade, whatever the busy timeout) when any
/// other connection writes in between. A refused reserve changes nothing;
/// a refused delete leaves the row of a job PHP ran reserved, for Laravel
/// to run again after retry_after: the rows left are only those.
#[test]
fn sqlite_shared_with_a_php_worker_loses_nothing_and_runs_nothing_twice() {
    let s = common::Scene::new();
    let Some((app, t)) = app_with_jobs(
        &s,
        serde_json::json!([{"kind": "plain", "tag": "j", "count": 600}]),
    ) else {
        return;
    };
    let rt = runtime();
    let queues: Vec<DatabaseQueue> = (0..4).map(|_| open(&rt, &t)).collect();
    let out = std::fs::File::create(s.path("queue-work.out")).unwrap();
    let mut php = std::process::Command::new("php")
        .args(["artisan", "queue:work", "database", "--stop-when-empty"])
        .args(["--sleep=0", "--tries=1"])
        .current_dir(&app.dir)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let ours = four_reservers_until_empty(&rt, &queues);
    common::wait_until("queue:work to stop when empty", || {
        php.try_wait().unwrap().is_some()
    });
    let mut php_tags: Vec<String> = app
        .records()
        .into_iter()
        .filter(|r| r["event"] == "handle")
        .filter_map(|r| r["tag"].as_str().map(str::to_string))
        .collect();
    let php_runs = php_tags.len();
    php_tags.sort();
    php_tags.dedup();
    assert_eq!(php_runs, php_tags.len(), "a job ran twice in PHP");
    assert_eq!(ours + php_runs, 600, "ours {ours}, PHP {php_runs}");
    let left = t.rows();
    assert!(
        left.iter()
            .all(|r| r.reserved_at.is_some() && r.attempts == 1),
        "only rows PHP reserved, ran and could not delete stay: {left:?}"
    );
    assert!(left.len() <= php_runs);
    eprintln!(
        "ours {ours}, PHP {php_runs}, left reserved by PHP's refused deletes {}",
        left.len()
    );
}
