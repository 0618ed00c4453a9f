//! The failed-job commands (protocol §8.3): `failed`, `retry`, `forget` and
//! `flush`, run as the real binary against each store: the SQLite
//! `failed_jobs` table, the Redis store, and real PostgreSQL and MariaDB
//! servers the tests start themselves (skipped when not installed). Every
//! scenario asserts the command's output and exit status, what is left in
//! the store, and what is on the queue in Redis; the end-to-end scenario
//! has the worker fail a job, `retry` it, and the worker run it again.

mod common;

use std::path::{Path, PathBuf};

use common::databases::{FailedDb, MariaDb, Postgres};
use common::payloads::Job;
use common::sqlite::FailedRow;
use common::{Daemon, Scene, now, q};
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

    /// The body of `[failed]`.
    fn failed_section(&self) -> String {
        match self {
            Store::Db(db) => format!("url = \"{}\"", db.url()),
            Store::Redis => "driver = \"redis\"".into(),
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

/// A config for `store`, with one handler for every job when given.
fn config(s: &Scene, store: &Store, handler: Option<&Path>) -> PathBuf {
    let mut extra = format!("[failed]\n{}\n", store.failed_section());
    if let Some(h) = handler {
        extra.push_str(&format!(
            "\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
            h.display()
        ));
    }
    s.config_toml(&extra)
}

/// A finished command.
struct Ran {
    code: Option<i32>,
    /// stdout lines.
    lines: Vec<String>,
    stdout: String,
    stderr: String,
}

/// Runs `laravel-worker --config CONFIG ARGS...` to its end.
fn cli(config: &Path, args: &[&str]) -> Ran {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let columns = COLUMNS.to_string();
    let mut d = Daemon::start(&all, &[("COLUMNS", &columns)]);
    let code = d.code();
    Ran {
        code,
        lines: d.stdout.clone(),
        stdout: d.stdout.join("\n"),
        stderr: d.stderr.join("\n"),
    }
}

impl Ran {
    /// Asserts the exit status, showing the output when it differs.
    fn expect(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Asserts that stdout has `line` (exactly, as a whole line).
    fn has_line(&self, line: &str) -> &Self {
        assert!(
            self.lines.iter().any(|l| l == line),
            "no line {line:?} in:\n{}",
            self.stdout
        );
        self
    }

    /// The `  ID ..... 1.23ms DONE` task lines, as ids, in order; each
    /// checked to fill the line like artisan's task component.
    fn done_ids(&self) -> Vec<String> {
        self.lines
            .iter()
            .filter(|l| l.ends_with(" DONE"))
            .map(|l| {
                assert_eq!(l.chars().count(), COLUMNS - 2, "task line width: {l:?}");
                let mut words = l.split_whitespace();
                let id = words.next().unwrap().to_string();
                let dots = words.next().unwrap();
                assert!(dots.chars().all(|c| c == '.'), "{l:?}");
                let took = words.next().unwrap();
                let ms = took.strip_suffix("ms").expect("a run time in ms");
                assert!(ms.parse::<f64>().is_ok(), "{l:?}");
                id
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

fn notify(queue: &str) -> String {
    format!("{}:notify", q(queue))
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

    let ran = cli(&config, &["failed", "--json"]);
    ran.expect(0);
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
    assert_eq!(ran.lines, vec![expected]);

    let ran = cli(&config, &["failed"]);
    ran.expect(0);
    let line = |job: &Job, queue: &str, class: &str, at: i64| {
        let first = format!("{} {}", stamp(at), job.uuid());
        let second = format!("redis@{queue} {class}");
        let dots = COLUMNS - 6 - first.chars().count() - second.chars().count();
        format!("  {first} {} {second}", ".".repeat(dots))
    };
    let listed: Vec<&String> = ran.lines.iter().filter(|l| !l.is_empty()).collect();
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
    assert!(s.redis.keys(0).iter().all(|k| !k.contains("queues:")));

    let ran = cli(&config, &["flush"]);
    ran.expect(0);
    cli(&config, &["failed"])
        .expect(0)
        .has_line("   INFO  No failed jobs found.");
    cli(&config, &["failed", "--json"]).expect(0).has_line("[]");
}

/// `retry ID`: the payload goes back with `attempts` 0, every other field
/// and the key order kept (uuid, id, retryUntil), re-encoded like PHP's
/// json_encode (`\/`, non-ASCII as `\uXXXX`, surrogate pairs above the BMP),
/// at the tail of the ready list with one notify token; the failed job is
/// deleted. An unknown id is reported and skipped (exit 0, as artisan).
fn retry_rewrites_the_payload(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let waiting = Job::laravel8("App\\Jobs\\Waiting");
    s.redis.push("default", &waiting.build());
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

    let ran = cli(&config, &["retry", uuid, "nope"]);
    ran.expect(0)
        .has_line("   INFO  Pushing failed queue jobs back onto the queue.")
        .has_line("   ERROR  Unable to find failed job with ID [nope].");
    assert_eq!(ran.done_ids(), vec![uuid.to_string()]);

    assert_eq!(
        s.redis.lrange(&q("default")),
        vec![waiting.build(), expected.to_string()]
    );
    assert_eq!(s.redis.llen(&notify("default")), 2);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    assert_eq!(s.redis.zcard(&format!("{}:delayed", q("default"))), 0);
    assert!(!s.redis.exists(&q("other")));
    assert_eq!(store.ids(s), vec![other.uuid()]);
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

    let ran = cli(&config, &["retry", "all"]);
    ran.expect(0);
    assert_eq!(ran.done_ids(), vec![c.uuid(), b.uuid(), a.uuid()]);
    // ASCII payloads PHP wrote with attempts 0 come back byte for byte.
    assert_eq!(s.redis.lrange(&q("default")), vec![c.build(), a.build()]);
    assert_eq!(s.redis.lrange(&q("other")), vec![b.build()]);
    assert_eq!(s.redis.llen(&notify("default")), 2);
    assert_eq!(s.redis.llen(&notify("other")), 1);
    assert!(store.rows(s).is_empty());

    cli(&config, &["retry", "all"])
        .expect(0)
        .has_line("   INFO  No retryable jobs found.");
    assert_eq!(s.redis.llen(&q("default")), 2);
}

/// `retry --queue=Q`: only Q's failed jobs, newest first; `--queue` wins
/// over ids given with it; a queue with none is reported (exit 0).
fn retry_by_queue(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let (a, b, c) = (
        Job::laravel8("App\\Jobs\\A"),
        Job::laravel8("App\\Jobs\\B"),
        Job::laravel8("App\\Jobs\\C"),
    );
    store.insert(s, &row(&a, "default", t - 300));
    store.insert(s, &row(&b, "other", t - 200));
    store.insert(s, &row(&c, "other", t - 100));

    let ran = cli(&config, &["retry", "--queue=other"]);
    ran.expect(0);
    assert_eq!(ran.done_ids(), vec![c.uuid(), b.uuid()]);
    assert_eq!(s.redis.lrange(&q("other")), vec![c.build(), b.build()]);
    assert_eq!(s.redis.llen(&notify("other")), 2);
    assert!(!s.redis.exists(&q("default")));
    assert_eq!(store.ids(s), vec![a.uuid()]);

    // `a` is named, but --queue decides: nothing of `other` is left.
    let ran = cli(&config, &["retry", &a.uuid(), "--queue=other"]);
    ran.expect(0)
        .has_line("   ERROR  Unable to find failed jobs for queue [other].")
        .has_line("   INFO  No retryable jobs found.");
    assert!(ran.done_ids().is_empty());
    assert!(!s.redis.exists(&q("default")));
    assert_eq!(store.ids(s), vec![a.uuid()]);
}

/// `forget ID`: deletes that one (exit 0); an id that is not there: exit 1
/// with artisan's message, nothing touched.
fn forget_one(s: &Scene, store: &Store) {
    let config = config(s, store, None);
    let t = now();
    let (a, b) = (Job::laravel8("App\\Jobs\\A"), Job::laravel8("App\\Jobs\\B"));
    store.insert(s, &row(&a, "default", t - 20));
    store.insert(s, &row(&b, "default", t - 10));

    cli(&config, &["forget", &a.uuid()])
        .expect(0)
        .has_line("   INFO  Failed job deleted successfully.");
    assert_eq!(store.ids(s), vec![b.uuid()]);

    cli(&config, &["forget", &a.uuid()])
        .expect(1)
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
    let (old, mid, new) = (
        Job::laravel8("App\\Jobs\\Old"),
        Job::laravel8("App\\Jobs\\Mid"),
        Job::laravel8("App\\Jobs\\New"),
    );
    store.insert(s, &row(&old, "default", t - 3 * 3600));
    store.insert(s, &row(&mid, "default", t - 90 * 60));
    store.insert(s, &row(&new, "default", t - 60));

    cli(&config, &["flush", "--hours=2"]).expect(0).has_line(
        "   INFO  All jobs that failed more than 2 hours ago have been deleted successfully.",
    );
    assert_eq!(store.ids(s), vec![mid.uuid(), new.uuid()]);

    cli(&config, &["flush", "--hours=1"]).expect(0);
    assert_eq!(store.ids(s), vec![new.uuid()]);

    cli(&config, &["flush"])
        .expect(0)
        .has_line("   INFO  All failed jobs deleted successfully.");
    assert!(store.rows(s).is_empty());

    store.insert(s, &row(&new, "default", t - 60));
    cli(&config, &["flush", "--hours=0"])
        .expect(0)
        .has_line("   INFO  All failed jobs deleted successfully.");
    assert!(store.rows(s).is_empty());
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
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

    let ran = cli(&config, &["retry", "all"]);
    ran.expect(1);
    assert_eq!(ran.done_ids(), vec![good.uuid()]);
    assert!(
        ran.stdout.contains(&format!(
            "ERROR  Failed job [{}] belongs to connection [redis-long]",
            elsewhere.uuid()
        )),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains(&format!(
            "ERROR  Failed job [{}] cannot be retried: the payload is not valid JSON",
            broken.uuid
        )),
        "{}",
        ran.stdout
    );
    assert_eq!(s.redis.lrange(&q("default")), vec![good.build()]);
    assert_eq!(s.redis.llen(&notify("default")), 1);
    assert_eq!(fields(&store.rows(s)), fields(&[foreign, broken]));
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
    s.redis.push("default", &job.build());

    let before = now();
    let ran = cli(&config, &["work", "--stop-when-empty"]);
    let after = now();
    ran.expect(0);
    let rows = store.rows(s);
    assert_eq!(rows.len(), 1, "{}", ran.stderr);
    assert_eq!(rows[0].uuid, job.uuid());
    assert_eq!(rows[0].connection, "redis");
    assert_eq!(rows[0].queue, "default");
    assert_eq!(rows[0].payload, job.build());
    assert!(
        rows[0].exception.starts_with(
            "LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky exited with status 1"
        ),
        "{}",
        rows[0].exception
    );
    let failed_at = parse_stamp(&rows[0].failed_at);
    assert!(
        (before..=after).contains(&failed_at),
        "{}",
        rows[0].failed_at
    );
    assert!(!s.redis.exists(&q("default")));

    let ran = cli(&config, &["retry", &job.uuid()]);
    ran.expect(0);
    assert_eq!(ran.done_ids(), vec![job.uuid()]);
    assert_eq!(s.redis.lrange(&q("default")), vec![job.build()]);
    assert!(store.rows(s).is_empty());

    s.touch("ok");
    cli(&config, &["work", "--stop-when-empty"]).expect(0);
    let run = format!("run App\\Jobs\\Flaky {} 1 default", job.id());
    assert_eq!(
        s.log(),
        vec![
            run.clone(),
            format!("failed App\\Jobs\\Flaky {} 1 default", job.id()),
            run,
        ]
    );
    assert!(store.rows(s).is_empty());
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

type Scenario = fn(&Scene, &Store);

const SCENARIOS: &[(&str, Scenario)] = &[
    ("failed_lists_newest_first", failed_lists_newest_first),
    ("retry_rewrites_the_payload", retry_rewrites_the_payload),
    ("retry_all", retry_all),
    ("retry_by_queue", retry_by_queue),
    ("forget_one", forget_one),
    ("flush_by_age", flush_by_age),
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
    retry_refuses_what_it_cannot_push,
    failed_by_the_worker_then_retried_runs_again,
);

/// Every scenario on a real PostgreSQL (one private server, a fresh
/// database per scenario), with Laravel's PostgreSQL schema.
#[test]
fn postgres_every_scenario() {
    let Some(server) = Postgres::start() else {
        return;
    };
    for (i, (name, scenario)) in SCENARIOS.iter().enumerate() {
        eprintln!("postgres: {name}");
        let s = Scene::new();
        let store = Store::Db(server.database(&format!("scenario_{i}")));
        scenario(&s, &store);
    }
}

/// Every scenario on a real MariaDB (one private server, a fresh database
/// per scenario), with Laravel's MySQL schema.
#[test]
fn mariadb_every_scenario() {
    let Some(server) = MariaDb::start() else {
        return;
    };
    for (i, (name, scenario)) in SCENARIOS.iter().enumerate() {
        eprintln!("mariadb: {name}");
        let s = Scene::new();
        let store = Store::Db(server.database(&format!("scenario_{i}")));
        scenario(&s, &store);
    }
}

/// `driver = "null"`: nothing is kept, so nothing is listed or retried;
/// `forget` answers success as Laravel's `NullFailedJobProvider` does.
#[test]
fn null_store_keeps_nothing() {
    let s = Scene::new();
    let config = s.config_toml("[failed]\ndriver = \"null\"\n");
    cli(&config, &["failed"])
        .expect(0)
        .has_line("   INFO  No failed jobs found.");
    cli(&config, &["failed", "--json"]).expect(0).has_line("[]");
    cli(&config, &["retry", "all"])
        .expect(0)
        .has_line("   INFO  No retryable jobs found.");
    let ran = cli(&config, &["retry", "0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11"]);
    ran.expect(0).has_line(
        "   ERROR  Unable to find failed job with ID [0b0e6c46-3f0a-4d43-9d8e-5f3c1f0e2a11].",
    );
    assert!(ran.done_ids().is_empty());
    cli(&config, &["forget", "anything"])
        .expect(0)
        .has_line("   INFO  Failed job deleted successfully.");
    cli(&config, &["flush", "--hours=3"]).expect(0).has_line(
        "   INFO  All jobs that failed more than 3 hours ago have been deleted successfully.",
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}
