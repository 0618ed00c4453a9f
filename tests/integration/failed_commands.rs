//! The failed-job commands (protocol §8.3): `failed`, `retry`, `forget` and
//! `flush`, run as the real binary against each store: the SQLite
//! `failed_jobs` table, the Redis store, and real PostgreSQL and MariaDB
//! servers the tests start themselves (skipped when not installed). Every
//! scenario asserts the command's output and exit status, what is left in
//! the store, and what is on the queue in Redis; the end-to-end scenario
//! has the worker fail a job, `retry` it, and the worker run it again.

use crate::common;

use std::path::{Path, PathBuf};

use common::databases::{FailedDb, MariaDb, Postgres};
use common::sqlite::FailedRow;
use common::{Daemon, Job, QueueState, Scene, now};
use serde_json::json;

/// The Redis store's keys under the test prefix.
const HASH: &str = "laravel_database_laravel-worker:failed_jobs";
const INDEX: &str = "laravel_database_laravel-worker:failed_jobs:index";

/// Terminal width the commands lay their lines out to in these tests.
const COLUMNS: usize = 120;

const EXCEPTION: &str = "Exception: boom in /srv/app/Job.php:12\nStack trace:\n#0 {main}";

/// Where a scenario keeps its failed jobs.
enum Store {
    /// Laravel's table (`database-uuids`).
    Db(FailedDb),
    /// `driver = "redis"`.
    Redis,
}

impl Store {
    fn sqlite(s: &Scene) -> Self {
        Store::Db(FailedDb::sqlite(&s.path("failed.sqlite")))
    }

    /// `config` with `[failed]` set for this store.
    fn configure<'s>(&self, config: common::Config<'s>) -> common::Config<'s> {
        match self {
            Store::Db(db) => config.failed_url(db.url()),
            Store::Redis => config.failed_driver("redis"),
        }
    }

    /// Stores `row` as Laravel (table) or the worker (Redis) writes it.
    fn insert(&self, s: &Scene, row: &FailedRow) {
        match self {
            Store::Db(db) => db.insert(row),
            Store::Redis => {
                let record = json!({
                    "uuid": row.uuid,
                    "connection": row.connection,
                    "queue": row.queue,
                    "payload": row.payload,
                    "exception": row.exception,
                    "failed_at": row.failed_at,
                })
                .to_string();
                let at = chrono::NaiveDateTime::parse_from_str(&row.failed_at, "%Y-%m-%d %H:%M:%S")
                    .unwrap()
                    .and_utc()
                    .timestamp();
                let _: () = s.redis.cmd(&["HSET", HASH, &row.uuid, &record]);
                let _: () = s.redis.cmd(&["ZADD", INDEX, &at.to_string(), &row.uuid]);
            }
        }
    }

    /// Every stored failed job, oldest first (table: by id; Redis: by the
    /// index, each index entry's record required).
    fn rows(&self, s: &Scene) -> Vec<FailedRow> {
        match self {
            Store::Db(db) => db.rows(),
            Store::Redis => {
                let ids: Vec<String> = s.redis.cmd(&["ZRANGE", INDEX, "0", "-1"]);
                let records: Vec<String> = s.redis.cmd(&["HKEYS", HASH]);
                assert_eq!(records.len(), ids.len(), "hash and index disagree");
                ids.iter()
                    .map(|id| {
                        let text: String = s.redis.cmd(&["HGET", HASH, id]);
                        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
                        let field = |k: &str| r[k].as_str().unwrap().to_string();
                        FailedRow {
                            uuid: field("uuid"),
                            connection: field("connection"),
                            queue: field("queue"),
                            payload: field("payload"),
                            exception: field("exception"),
                            failed_at: field("failed_at"),
                        }
                    })
                    .collect()
            }
        }
    }

    fn ids(&self, s: &Scene) -> Vec<String> {
        self.rows(s).into_iter().map(|r| r.uuid).collect()
    }
}

/// A config for `store`, with one handler, `handler`, for every job when
/// given.
fn config(s: &Scene, store: &Store, handler: Option<&Path>) -> PathBuf {
    let config = store.configure(s.config());
    match handler {
        Some(h) => config.command(h).write(),
        None => config.write(),
    }
}

/// Runs `laravel-worker --config CONFIG ARGS...` to its end, in a
/// terminal `COLUMNS` wide.
fn cli(config: &Path, args: &[&str]) -> Daemon {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let columns = COLUMNS.to_string();
    Daemon::run(&all, &[("COLUMNS", &columns)])
}

/// What the commands print, as artisan lays it out.
trait Printed {
    /// Asserts that stdout has `line` (exactly, as a whole line).
    fn has_line(&self, line: &str) -> &Self;

    /// The `  ID ..... 1.23ms DONE` task lines, as ids, in order; each
    /// checked to fill the line like artisan's task component.
    fn done_ids(&self) -> Vec<String>;

    /// stdout as one text.
    fn out(&self) -> String;
}

impl Printed for Daemon {
    fn has_line(&self, line: &str) -> &Self {
        assert!(
            self.stdout.iter().any(|l| l == line),
            "no line {line:?} in:\n{}",
            self.out()
        );
        self
    }

    fn out(&self) -> String {
        self.stdout.join("\n")
    }

    fn done_ids(&self) -> Vec<String> {
        self.stdout
            .iter()
            .filter(|l| l.ends_with(" DONE"))
            .map(|l| {
                assert_eq!(l.chars().count(), COLUMNS - 2, "task line width: {l:?}");
                let words: Vec<&str> = l.split_whitespace().collect();
                let [id, dots, took, _] = words[..] else {
                    panic!("not ID DOTS TIME DONE: {l:?}");
                };
                assert!(dots.chars().all(|c| c == '.'), "dots after the id: {l:?}");
                let ms = took.strip_suffix("ms").expect("a run time in ms");
                assert!(ms.parse::<f64>().is_ok(), "a run time in ms: {l:?}");
                id.to_string()
            })
            .collect()
    }
}

/// `Y-m-d H:i:s` (UTC) of UNIX time `at`.
fn stamp(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

fn parse_stamp(text: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .unwrap()
        .and_utc()
        .timestamp()
}

/// A failed job of connection `redis` on `queue`, failed at `at`.
fn row(job: &Job, queue: &str, at: i64) -> FailedRow {
    raw_row(&job.uuid(), queue, &job.build(), at)
}

fn raw_row(uuid: &str, queue: &str, payload: &str, at: i64) -> FailedRow {
    FailedRow {
        uuid: uuid.into(),
        connection: "redis".into(),
        queue: queue.into(),
        payload: payload.into(),
        exception: EXCEPTION.into(),
        failed_at: stamp(at),
    }
}

/// Rows as comparable tuples (uuid, connection, queue, payload,
/// exception, failed_at).
fn fields(rows: &[FailedRow]) -> Vec<[String; 6]> {
    rows.iter()
        .map(|r| {
            [
                r.uuid.clone(),
                r.connection.clone(),
                r.queue.clone(),
                r.payload.clone(),
                r.exception.clone(),
                r.failed_at.clone(),
            ]
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Scenarios, each run on every store
// ---------------------------------------------------------------------------

/// `failed`: newest first, the class by artisan's rule (displayName; no
/// data.command → job; empty displayName → the first quoted name in the
/// command), as artisan's dotted lines and as `--json` encoded like PHP's
/// json_encode (`\/`, `\u00e9`, `\\`). An empty store says so.
fn failed_lists_newest_first(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let alpha = Job::laravel8("App\\Jobs\\Alpha");
    let beta = Job::string("App\\Jobs\\Beta@handle", json!({"to": "a/b"}));
    let gamma = Job::laravel8("App\\Jobs\\Gamma").set("displayName", "".into());
    store.insert(s, &row(&alpha, "default", t - 300));
    store.insert(s, &row(&beta, "mail/é", t - 200));
    store.insert(s, &row(&gamma, "default", t - 100));

    let mut ran = cli(&config, &["failed", "--json"]);
    ran.expect_exit(0);
    let entry = |job: &Job, queue: &str, class: &str, at: i64| {
        format!(
            r#"{{"id":"{}","connection":"redis","queue":"{queue}","class":"{class}","failed_at":"{}"}}"#,
            job.uuid(),
            stamp(at)
        )
    };
    let expected = format!(
        "[{},{},{}]",
        entry(&gamma, "default", r"App\\Jobs\\Gamma", t - 100),
        entry(&beta, r"mail\/\u00e9", r"App\\Jobs\\Beta@handle", t - 200),
        entry(&alpha, "default", r"App\\Jobs\\Alpha", t - 300),
    );
    assert_eq!(ran.stdout, vec![expected], "failed --json");

    let mut ran = cli(&config, &["failed"]);
    ran.expect_exit(0);
    let line = |job: &Job, queue: &str, class: &str, at: i64| {
        let first = format!("{} {}", stamp(at), job.uuid());
        let second = format!("redis@{queue} {class}");
        let dots = COLUMNS - 6 - first.chars().count() - second.chars().count();
        format!("  {first} {} {second}", ".".repeat(dots))
    };
    let listed: Vec<&String> = ran.stdout.iter().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        listed,
        vec![
            &line(&gamma, "default", "App\\Jobs\\Gamma", t - 100),
            &line(&beta, "mail/é", "App\\Jobs\\Beta@handle", t - 200),
            &line(&alpha, "default", "App\\Jobs\\Alpha", t - 300),
        ]
    );

    // Nothing was changed by listing.
    assert_eq!(store.ids(s), vec![alpha.uuid(), beta.uuid(), gamma.uuid()]);
    s.assert_queues(QueueState::empty());

    cli(&config, &["flush"]).expect_exit(0);
    cli(&config, &["failed"])
        .expect_exit(0)
        .has_line("   INFO  No failed jobs found.");
    cli(&config, &["failed", "--json"])
        .expect_exit(0)
        .has_line("[]");
}

/// `retry ID`: the payload goes back with `attempts` 0, every other field
/// and the key order kept (uuid, id, retryUntil), re-encoded like PHP's
/// json_encode (`\/`, non-ASCII as `\uXXXX`, surrogate pairs above the BMP),
/// at the tail of the ready list with one notify token; the failed job is
/// deleted. An unknown id is reported and skipped (exit 0, as artisan).
fn retry_rewrites_the_payload(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let waiting = Job::laravel8("App\\Jobs\\Waiting");
    s.push(&waiting);
    let uuid = "0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11";
    // As PHP writes it (JSON_UNESCAPED_UNICODE): `\/`, raw UTF-8; then
    // counted to 2 attempts by the pop script.
    let stored = concat!(
        r#"{"uuid":"0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11","displayName":"App\\Jobs\\Mail","#,
        r#""job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":3,"retryUntil":1999999999,"#,
        r#""data":{"commandName":"App\\Jobs\\Mail","command":"O:13:\"App\\Jobs\\Mail\":1:{s:2:\"to\";s:11:\"zoë@x.test\";}","#,
        r#""url":"https:\/\/x.test\/a","note":"😀 ok","ratio":1.5,"list":[1,"two",null,false],"empty":{}},"#,
        r#""id":"Zq3Xbq2Yc1Vw8Tn4Rm7Lk5Jh6Gf9Dd0S","attempts":2}"#
    );
    let expected = concat!(
        r#"{"uuid":"0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11","displayName":"App\\Jobs\\Mail","#,
        r#""job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":3,"retryUntil":1999999999,"#,
        r#""data":{"commandName":"App\\Jobs\\Mail","command":"O:13:\"App\\Jobs\\Mail\":1:{s:2:\"to\";s:11:\"zo\u00eb@x.test\";}","#,
        r#""url":"https:\/\/x.test\/a","note":"\ud83d\ude00 ok","ratio":1.5,"list":[1,"two",null,false],"empty":{}},"#,
        r#""id":"Zq3Xbq2Yc1Vw8Tn4Rm7Lk5Jh6Gf9Dd0S","attempts":0}"#
    );
    let t = now();
    store.insert(s, &raw_row(uuid, "default", stored, t - 60));
    let other = Job::laravel8("App\\Jobs\\Other");
    store.insert(s, &row(&other, "other", t - 30));

    let mut ran = cli(&config, &["retry", uuid, "nope"]);
    ran.expect_exit(0)
        .has_line("   INFO  Pushing failed queue jobs back onto the queue.")
        .has_line("   ERROR  Unable to find failed job with ID [nope].");
    assert_eq!(ran.done_ids(), vec![uuid.to_string()]);

    let pushed = [waiting.build(), expected.to_string()];
    s.assert_queues(QueueState::empty().ready(pushed).notify(2));
    assert_eq!(store.ids(s), vec![other.uuid()], "the other one is kept");
}

/// `retry all`: every failed job, newest first (artisan's `ids()` order),
/// each onto its own queue; the store is left empty.
fn retry_all(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let (a, b, c) = (
        Job::laravel8("App\\Jobs\\A"),
        Job::laravel13("App\\Jobs\\B"),
        Job::string("App\\Jobs\\C@handle", json!({"n": 3})),
    );
    store.insert(s, &row(&a, "default", t - 300));
    store.insert(s, &row(&b, "other", t - 200));
    store.insert(s, &row(&c, "default", t - 100));

    let mut ran = cli(&config, &["retry", "all"]);
    ran.expect_exit(0);
    assert_eq!(ran.done_ids(), vec![c.uuid(), b.uuid(), a.uuid()]);
    // ASCII payloads PHP wrote with attempts 0 come back byte for byte.
    let pushed = QueueState::empty()
        .ready([&c, &a])
        .notify(2)
        .ready_on("other", [&b])
        .notify_on("other", 1);
    s.assert_queues(pushed.clone());
    assert_eq!(store.rows(s).len(), 0, "the store is left empty");

    cli(&config, &["retry", "all"])
        .expect_exit(0)
        .has_line("   INFO  No retryable jobs found.");
    s.assert_queues(pushed);
}

/// `retry --queue=Q`: only Q's failed jobs, newest first; `--queue` wins
/// over ids given with it; a queue with none is reported (exit 0).
fn retry_by_queue(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let [a, b, c] = Job::named(["A", "B", "C"]);
    store.insert(s, &row(&a, "default", t - 300));
    store.insert(s, &row(&b, "other", t - 200));
    store.insert(s, &row(&c, "other", t - 100));

    let mut ran = cli(&config, &["retry", "--queue=other"]);
    ran.expect_exit(0);
    assert_eq!(ran.done_ids(), vec![c.uuid(), b.uuid()]);
    let pushed = QueueState::empty()
        .ready_on("other", [&c, &b])
        .notify_on("other", 2);
    s.assert_queues(pushed.clone());
    assert_eq!(store.ids(s), vec![a.uuid()], "default's job is kept");

    // `a` is named, but --queue decides: nothing of `other` is left.
    let mut ran = cli(&config, &["retry", &a.uuid(), "--queue=other"]);
    ran.expect_exit(0)
        .has_line("   ERROR  Unable to find failed jobs for queue [other].")
        .has_line("   INFO  No retryable jobs found.");
    assert_eq!(ran.done_ids(), Vec::<String>::new(), "nothing retried");
    s.assert_queues(pushed);
    assert_eq!(store.ids(s), vec![a.uuid()], "default's job is kept");
}

/// `forget ID`: deletes that one (exit 0); an id that is not there: exit 1
/// with artisan's message, nothing touched.
fn forget_one(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let [a, b] = Job::named(["A", "B"]);
    store.insert(s, &row(&a, "default", t - 20));
    store.insert(s, &row(&b, "default", t - 10));

    cli(&config, &["forget", &a.uuid()])
        .expect_exit(0)
        .has_line("   INFO  Failed job deleted successfully.");
    assert_eq!(store.ids(s), vec![b.uuid()], "only that one is deleted");

    cli(&config, &["forget", &a.uuid()])
        .expect_exit(1)
        .has_line("   ERROR  No failed job matches the given ID.");
    assert_eq!(
        fields(&store.rows(s)),
        fields(&[row(&b, "default", t - 10)])
    );
}

/// `flush --hours=N`: only jobs that failed at or before now − N hours;
/// `flush`: all; `--hours=0` means all too (artisan's falsy check).
fn flush_by_age(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let [old, mid, new] = Job::named(["Old", "Mid", "New"]);
    store.insert(s, &row(&old, "default", t - 3 * 3600));
    store.insert(s, &row(&mid, "default", t - 90 * 60));
    store.insert(s, &row(&new, "default", t - 60));

    cli(&config, &["flush", "--hours=2"])
        .expect_exit(0)
        .has_line(
            "   INFO  All jobs that failed more than 2 hours ago have been deleted successfully.",
        );
    assert_eq!(
        store.ids(s),
        vec![mid.uuid(), new.uuid()],
        "after --hours=2"
    );

    cli(&config, &["flush", "--hours=1"]).expect_exit(0);
    assert_eq!(store.ids(s), vec![new.uuid()], "after --hours=1");

    for (i, flush) in [&["flush"][..], &["flush", "--hours=0"]].iter().enumerate() {
        if i > 0 {
            store.insert(s, &row(&new, "default", t - 60));
        }
        cli(&config, flush)
            .expect_exit(0)
            .has_line("   INFO  All failed jobs deleted successfully.");
        assert_eq!(store.ids(s), Vec::<String>::new(), "after {flush:?}");
    }
    s.assert_state(QueueState::empty());
}

/// `prune-failed --hours=N` (artisan's `queue:prune-failed`): the jobs that
/// failed at or before now − N hours go, the count is said; without
/// `--hours`, 24 hours.
fn prune_failed_by_age(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let [ancient, old, new] = Job::named(["Ancient", "Old", "New"]);
    store.insert(s, &row(&ancient, "default", t - 30 * 3600));
    store.insert(s, &row(&old, "default", t - 3 * 3600));
    store.insert(s, &row(&new, "default", t - 60));

    cli(&config, &["prune-failed"])
        .expect_exit(0)
        .has_line("   INFO  1 entries deleted.");
    assert_eq!(store.ids(s), vec![old.uuid(), new.uuid()], "after 24 h");
    cli(&config, &["prune-failed", "--hours=2"])
        .expect_exit(0)
        .has_line("   INFO  1 entries deleted.");
    assert_eq!(store.ids(s), vec![new.uuid()], "after --hours=2");
}

/// Jobs `retry` must not push: one of another connection (this worker
/// only pushes to its own), one whose payload is not JSON. Both are kept
/// and reported, the valid one is retried, and the exit status is 1.
fn retry_refuses_what_it_cannot_push(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let elsewhere = Job::laravel8("App\\Jobs\\Elsewhere");
    let mut foreign = row(&elsewhere, "default", t - 30);
    foreign.connection = "redis-long".into();
    store.insert(s, &foreign);
    let broken = raw_row(
        "5d1c0b8e-0000-4000-8000-00000000b0b0",
        "default",
        "not json",
        t - 20,
    );
    store.insert(s, &broken);
    let good = Job::laravel8("App\\Jobs\\Good");
    store.insert(s, &row(&good, "default", t - 10));

    let mut ran = cli(&config, &["retry", "all"]);
    ran.expect_exit(1);
    assert_eq!(ran.done_ids(), vec![good.uuid()]);
    for refused in [
        format!(
            "ERROR  Failed job [{}] belongs to connection [redis-long]",
            elsewhere.uuid()
        ),
        format!(
            "ERROR  Failed job [{}] cannot be retried: the payload is not valid JSON",
            broken.uuid
        ),
    ] {
        let out = ran.out();
        assert!(out.contains(&refused), "no {refused:?} in:\n{out}");
    }
    s.assert_queues(QueueState::empty().ready([&good]).notify(1));
    assert_eq!(
        fields(&store.rows(s)),
        fields(&[foreign, broken]),
        "both are kept"
    );
}

/// End to end: the worker fails a job (row written, payload = the original
/// body), `retry` puts it back byte for byte, and the worker runs it again
/// as attempt 1; nothing is left anywhere.
fn failed_by_the_worker_then_retried_runs_again(s: &Scene, store: &Store) {
    let handler = s.recording_script(
        "h.sh",
        "[ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0\n[ -f \"$DIR/ok\" ] || { echo not yet >&2; exit 1; }",
    );
    let config = config(s, store, Some(&handler));
    let job = Job::laravel8("App\\Jobs\\Flaky").set("maxTries", 1.into());
    s.push(&job);

    let before = now();
    let mut ran = cli(&config, &["work", "--stop-when-empty"]);
    let after = now();
    ran.expect_exit(0);
    let rows = store.rows(s);
    let row = match &rows[..] {
        [row] => row,
        _ => panic!("one row expected: {rows:?}\nstderr:\n{}", ran.stderr_text()),
    };
    let expected = [
        job.uuid(),
        "redis".into(),
        "default".into(),
        job.build(),
        row.exception.clone(),
        row.failed_at.clone(),
    ];
    assert_eq!(fields(&rows), [expected], "the failed row");
    assert!(
        row.exception.starts_with(
            "LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky exited with status 1"
        ),
        "{}",
        row.exception
    );
    let failed_at = parse_stamp(&row.failed_at);
    assert!(
        (before..=after).contains(&failed_at),
        "failed_at {} not in {before}..={after}",
        row.failed_at
    );
    s.assert_queues(QueueState::empty());

    let mut ran = cli(&config, &["retry", &job.uuid()]);
    ran.expect_exit(0);
    assert_eq!(ran.done_ids(), vec![job.uuid()]);
    s.assert_queues(QueueState::empty().ready([&job]).notify(1));
    assert_eq!(store.ids(s), Vec::<String>::new(), "the row is deleted");

    s.touch("ok");
    cli(&config, &["work", "--stop-when-empty"]).expect_exit(0);
    let run = format!("run App\\Jobs\\Flaky {} 1 default", job.id());
    assert_eq!(
        s.log(),
        vec![
            run.clone(),
            format!("failed App\\Jobs\\Flaky {} 1 default", job.id()),
            run,
        ]
    );
    assert_eq!(store.ids(s), Vec::<String>::new(), "no row again");
    s.assert_state(QueueState::empty());
}

type Scenario = fn(&Scene, &Store);

const SCENARIOS: &[(&str, Scenario)] = &[
    ("failed_lists_newest_first", failed_lists_newest_first),
    ("retry_rewrites_the_payload", retry_rewrites_the_payload),
    ("retry_all", retry_all),
    ("retry_by_queue", retry_by_queue),
    ("forget_one", forget_one),
    ("flush_by_age", flush_by_age),
    ("prune_failed_by_age", prune_failed_by_age),
    (
        "retry_refuses_what_it_cannot_push",
        retry_refuses_what_it_cannot_push,
    ),
    (
        "failed_by_the_worker_then_retried_runs_again",
        failed_by_the_worker_then_retried_runs_again,
    ),
];

/// One `#[test]` per scenario on the SQLite table and on the Redis store.
macro_rules! on_sqlite_and_redis {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    let s = super::Scene::new();
                    let store = super::Store::sqlite(&s);
                    super::$name(&s, &store);
                }
            )*
        }
        mod redis_store {
            $(
                #[test]
                fn $name() {
                    let s = super::Scene::new();
                    super::$name(&s, &super::Store::Redis);
                }
            )*
        }
    };
}

on_sqlite_and_redis!(
    failed_lists_newest_first,
    retry_rewrites_the_payload,
    retry_all,
    retry_by_queue,
    forget_one,
    flush_by_age,
    prune_failed_by_age,
    retry_refuses_what_it_cannot_push,
    failed_by_the_worker_then_retried_runs_again,
);

/// Runs every scenario, each on a fresh database of the one `server`
/// (its `database` creates one by name, with Laravel's schema for it).
fn every_scenario(server: &str, database: impl Fn(&str) -> FailedDb) {
    for (i, (name, scenario)) in SCENARIOS.iter().enumerate() {
        eprintln!("{server}: {name}");
        let s = Scene::new();
        scenario(&s, &Store::Db(database(&format!("scenario_{i}"))));
    }
}

/// Every scenario on a real PostgreSQL (one private server, a fresh
/// database per scenario), with Laravel's PostgreSQL schema.
#[test]
fn postgres_every_scenario() {
    if let Some(server) = Postgres::start() {
        every_scenario("postgres", |name| server.database(name));
    }
}

/// Every scenario on a real MariaDB (one private server, a fresh database
/// per scenario), with Laravel's MySQL schema.
#[test]
fn mariadb_every_scenario() {
    if let Some(server) = MariaDb::start() {
        every_scenario("mariadb", |name| server.database(name));
    }
}

/// `driver = "null"`: nothing is kept, so nothing is listed or retried;
/// `forget` answers success as Laravel's `NullFailedJobProvider` does.
#[test]
fn null_store_keeps_nothing() {
    let s = Scene::new();
    let config = s.config().failed_driver("null").write();
    for (args, line) in [
        (&["failed"][..], "   INFO  No failed jobs found."),
        (&["failed", "--json"], "[]"),
        (&["retry", "all"], "   INFO  No retryable jobs found."),
        (
            &["retry", "0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11"],
            "   ERROR  Unable to find failed job with ID [0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11].",
        ),
        (
            &["forget", "anything"],
            "   INFO  Failed job deleted successfully.",
        ),
        (
            &["flush", "--hours=3"],
            "   INFO  All jobs that failed more than 3 hours ago have been deleted successfully.",
        ),
    ] {
        let mut ran = cli(&config, args);
        ran.expect_exit(0).has_line(line);
        assert_eq!(ran.done_ids(), Vec::<String>::new(), "{args:?} retried");
    }
    s.assert_state(QueueState::empty());
}
