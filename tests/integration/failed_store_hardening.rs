//! The failed-job stores under stress: records that share a uuid, records a
//! database refuses, a SQLite file that was read-only for a while. Each
//! test runs the real binary against a private redis-server and real
//! databases (SQLite always; PostgreSQL and MariaDB servers the tests start
//! themselves, skipped with a note when not installed).

use crate::common;

use std::path::{Path, PathBuf};

use common::databases::{FailedDb, MariaDb, Postgres};
use common::payloads::Job;
use common::sandbox::Sandbox;
use common::sqlite::FailedRow;
use common::{Daemon, Scene, q};
use serde_json::Value;

/// The Redis store's keys under the test prefix.
const HASH: &str = "laravel_database_laravel-worker:failed_jobs";
const INDEX: &str = "laravel_database_laravel-worker:failed_jobs:index";

/// A finished command.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
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
}

/// Runs `laravel-worker --config CONFIG ARGS...` to its end.
fn cli(config: &Path, args: &[&str]) -> Ran {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut d = Daemon::start(&all, &[]);
    let code = d.code();
    Ran {
        code,
        stdout: d.stdout.join("\n"),
        stderr: d.stderr.join("\n"),
    }
}

/// `failed --json` as (id, queue, class) triples, in the listed order.
fn listed(config: &Path) -> Vec<(String, String, String)> {
    let ran = cli(config, &["failed", "--json"]);
    ran.expect(0);
    let list: Value = serde_json::from_str(&ran.stdout).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let f = |k: &str| j[k].as_str().unwrap().to_string();
            (f("id"), f("queue"), f("class"))
        })
        .collect()
}

/// A handler that fails every job (exit 1) and does nothing in failed mode.
fn failing_handler(s: &Scene) -> PathBuf {
    s.recording_script(
        "fail.sh",
        "[ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0\necho boom >&2\nexit 1",
    )
}

/// A config with `[failed] key = value` and `handler` for every job.
fn config(s: &Scene, (key, value): (&str, &str), handler: &Path) -> PathBuf {
    s.config()
        .set("failed", key, value)
        .command(handler)
        .write()
}

// ---------------------------------------------------------------------------
// Item 14: the Redis store never overwrites a record
// ---------------------------------------------------------------------------

/// Two jobs with one uuid fail: both records are kept (before: the second
/// overwrote the first). `failed` lists both under the uuid, `retry UUID`
/// pushes both back, `forget UUID` deletes both, `flush` everything; a job
/// whose own uuid is `UUID#2` (what a duplicate's key looks like) is never
/// taken for one of them.
#[test]
fn redis_store_keeps_every_record_of_a_uuid() {
    let s = Scene::new();
    let handler = failing_handler(&s);
    let config = config(&s, ("driver", "redis"), &handler);
    let first = Job::laravel8("App\\Jobs\\Twin").set("maxTries", 1.into());
    let uuid = first.uuid();
    let second = Job::laravel8("App\\Jobs\\Twin")
        .set("maxTries", 1.into())
        .set("uuid", uuid.clone().into());
    let lookalike = Job::laravel8("App\\Jobs\\Lookalike")
        .set("maxTries", 1.into())
        .set("uuid", format!("{uuid}#2").into());
    for job in [&lookalike, &first, &second] {
        s.redis.push("default", &job.build());
    }
    cli(&config, &["work", "--stop-when-empty"]).expect(0);
    assert_eq!(s.redis.zcard(INDEX), 3, "records: {:?}", s.redis.keys(0));
    assert_eq!(s.redis.cmd::<i64>(&["HLEN", HASH]), 3);

    let mut ids: Vec<String> = listed(&config).into_iter().map(|(id, ..)| id).collect();
    ids.sort();
    assert_eq!(ids, vec![uuid.clone(), uuid.clone(), format!("{uuid}#2")]);

    // retry UUID: both records of the uuid, newest first, and only them.
    let ran = cli(&config, &["retry", &uuid]);
    ran.expect(0);
    assert_eq!(
        s.redis.lrange(&q("default")),
        vec![second.build(), first.build()],
        "{}",
        ran.stdout
    );
    assert_eq!(
        listed(&config),
        vec![(
            format!("{uuid}#2"),
            "default".to_string(),
            "App\\Jobs\\Lookalike".to_string()
        )]
    );

    // They fail again: forget UUID deletes both, not the look-alike.
    cli(&config, &["work", "--stop-when-empty"]).expect(0);
    assert_eq!(listed(&config).len(), 3);
    cli(&config, &["forget", &uuid]).expect(0);
    assert_eq!(listed(&config).len(), 1);
    cli(&config, &["forget", &uuid]).expect(1);

    cli(&config, &["flush"]).expect(0);
    assert!(listed(&config).is_empty());
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

// ---------------------------------------------------------------------------
// Item 15: a record the database refuses goes to the fallback
// ---------------------------------------------------------------------------

/// `Y-m-d H:i:s` (UTC) of UNIX time `at`.
fn stamp(at: i64) -> String {
    chrono::DateTime::from_timestamp(at, 0)
        .unwrap()
        .format("%Y-%m-%d %H:%M:%S")
        .to_string()
}

/// A job the test expects the database to refuse, and why.
struct Refusal {
    job: Job,
    why: &'static str,
}

/// Records refused for good: a duplicate uuid on every database (a row
/// Laravel wrote holds it), plus `extra` for the database at hand. Each
/// refused record lands in the fallback (the Redis store under the queue's
/// prefix), the job leaves `:reserved` (before: it stayed there for ever,
/// reclaimed every retry_after with two ERROR lines each time); `failed`
/// lists the table's rows and the fallback's records together, `retry`
/// pushes both records of the duplicate uuid, `flush` empties both.
fn refused_records_go_to_the_fallback(s: &Scene, db: &FailedDb, extra: Vec<Refusal>) {
    let handler = s.script(
        "refused.sh",
        r#"[ "$LARAVEL_WORKER_MODE" = failed ] && exit 0
case "$LARAVEL_WORKER_JOB_NAME" in
  *Nul) printf '%s' '{"action":"exception","class":"App\\Exceptions\\Nul","message":"a\u0000b","text":"App\\Exceptions\\Nul: a\u0000b"}' > "$LARAVEL_WORKER_RESULT" ;;
esac
echo boom >&2
exit 1"#,
    );
    let config = config(s, ("url", db.url()), &handler);
    let earlier = Job::laravel8("App\\Jobs\\Twin");
    let laravel_row = FailedRow {
        uuid: earlier.uuid(),
        connection: "redis".into(),
        queue: "default".into(),
        payload: earlier.build(),
        exception: "Exception: first in /srv/app/Job.php:1\nStack trace:\n#0 {main}".into(),
        failed_at: stamp(common::now() - 60),
    };
    db.insert(&laravel_row);
    let twin = Job::laravel8("App\\Jobs\\Twin")
        .set("maxTries", 1.into())
        .set("uuid", earlier.uuid().into());
    let mut refused = vec![Refusal {
        job: twin.clone(),
        why: "duplicate uuid",
    }];
    refused.extend(extra);
    for r in &refused {
        s.redis.push("default", &r.job.build());
    }

    let ran = cli(&config, &["work", "--stop-when-empty"]);
    ran.expect(0);
    let reserved = format!("{}:reserved", q("default"));
    assert_eq!(
        s.redis.zcard(&reserved),
        0,
        "jobs left reserved:\n{}",
        ran.stderr
    );
    assert!(
        !ran.stderr.contains("could not be settled"),
        "{}",
        ran.stderr
    );
    for r in &refused {
        assert!(
            ran.stderr
                .lines()
                .any(|l| l.contains("WARN") && l.contains("refused") && l.contains(&r.job.id())),
            "no warning for the {}:\n{}",
            r.why,
            ran.stderr
        );
    }
    // The table kept Laravel's row alone; the fallback holds the others.
    assert_eq!(db.rows().len(), 1);
    assert_eq!(db.rows()[0].uuid, laravel_row.uuid);
    let mut in_fallback: Vec<String> = s.redis.cmd(&["HKEYS", HASH]);
    in_fallback.sort();
    let mut expected: Vec<String> = refused.iter().map(|r| r.job.uuid()).collect();
    expected.sort();
    assert_eq!(in_fallback, expected);
    for r in &refused {
        let record: String = s.redis.cmd(&["HGET", HASH, &r.job.uuid()]);
        let record: Value = serde_json::from_str(&record).unwrap();
        assert_eq!(record["payload"], Value::from(r.job.build()), "{}", r.why);
    }

    // The commands see both places.
    let all = listed(&config);
    assert_eq!(all.len(), refused.len() + 1, "{all:?}");
    let ran = cli(&config, &["retry", &twin.uuid()]);
    ran.expect(0);
    let mut pushed = s.redis.lrange(&q("default"));
    pushed.sort();
    let mut both = vec![twin.build(), earlier.build()];
    both.sort();
    assert_eq!(pushed, both, "{}", ran.stdout);
    assert!(db.rows().is_empty());
    assert_eq!(listed(&config).len(), refused.len() - 1);
    cli(&config, &["flush"]).expect(0);
    assert!(listed(&config).is_empty());
    assert_eq!(s.redis.zcard(INDEX), 0);
}

/// A uuid over the column's 255 characters.
fn long_uuid() -> Refusal {
    Refusal {
        job: Job::laravel8("App\\Jobs\\LongUuid")
            .set("maxTries", 1.into())
            .set("uuid", "u".repeat(300).into()),
        why: "uuid over 255 characters",
    }
}

/// An exception text with a NUL byte (PostgreSQL's text refuses it).
fn nul_byte() -> Refusal {
    Refusal {
        job: Job::laravel8("App\\Jobs\\Nul").set("maxTries", 1.into()),
        why: "NUL byte",
    }
}

/// A payload over MariaDB's default 16 MB `max_allowed_packet`.
fn over_16_mb() -> Refusal {
    Refusal {
        job: Job::laravel8("App\\Jobs\\Huge")
            .set("maxTries", 1.into())
            .set("blob", "x".repeat(17 << 20).into()),
        why: "record over 16 MB",
    }
}

#[test]
fn sqlite_refused_records_go_to_the_fallback() {
    let s = Scene::new();
    let db = FailedDb::sqlite(&s.path("failed.sqlite"));
    refused_records_go_to_the_fallback(&s, &db, vec![]);
}

#[test]
fn postgres_refused_records_go_to_the_fallback() {
    let Some(server) = Postgres::start() else {
        return;
    };
    let s = Scene::new();
    let db = server.database("refusals");
    refused_records_go_to_the_fallback(&s, &db, vec![long_uuid(), nul_byte()]);
}

#[test]
fn mariadb_refused_records_go_to_the_fallback() {
    let Some(server) = MariaDb::start() else {
        return;
    };
    let s = Scene::new();
    let db = server.database("refusals");
    refused_records_go_to_the_fallback(&s, &db, vec![long_uuid(), over_16_mb()]);
}

/// A store that is down (nothing listens where the URL points) refuses
/// nothing for good: nothing goes to the fallback. The failure record takes
/// the reservation's place in the queue's `:unrecorded` (before: the job
/// stayed reserved, ran again after retry_after and was then recorded as
/// MaxAttemptsExceededException, its real error lost).
#[test]
fn a_store_that_is_down_keeps_the_failure_in_redis() {
    let s = Scene::new();
    let handler = failing_handler(&s);
    let nowhere = s.path("nowhere");
    std::fs::create_dir(&nowhere).unwrap();
    for url in [
        format!("sqlite://{}/missing/dir/db.sqlite", nowhere.display()),
        format!("postgres:///app?host={}&user=postgres", nowhere.display()),
        format!(
            "mysql://root@localhost/app?socket={}/mysqld.sock",
            nowhere.display()
        ),
    ] {
        let config = config(&s, ("url", &url), &handler);
        let job = Job::laravel8("App\\Jobs\\Down").set("maxTries", 1.into());
        s.redis.push("default", &job.build());
        let ran = cli(&config, &["work", "--stop-when-empty"]);
        ran.expect(0);
        let reserved = format!("{}:reserved", q("default"));
        let unrecorded = format!("{}:unrecorded", q("default"));
        assert_eq!(s.redis.zcard(&reserved), 0, "{url}:\n{}", ran.stderr);
        let kept = s.redis.zrange(&unrecorded);
        assert_eq!(kept.len(), 1, "{url}:\n{}", ran.stderr);
        let record: Value = serde_json::from_str(&kept[0].0).unwrap();
        assert_eq!(record["uuid"], job.uuid(), "{record}");
        assert_eq!(record["payload"], job.build(), "the original payload");
        assert!(
            record["exception"].as_str().unwrap_or("").contains("boom"),
            "the real error: {record}"
        );
        assert!(
            ran.stderr.contains("cannot record the failed job"),
            "{url}:\n{}",
            ran.stderr
        );
        assert!(
            !s.redis.exists(HASH),
            "{url}: something went to the fallback"
        );
        let _: () = s.redis.cmd(&["DEL", &unrecorded]);
    }
}

/// A job fails while the SQLite store cannot be opened: it is not run
/// again, and once the database is there the worker writes the kept
/// record, with the job's own uuid and real error, without a restart.
#[test]
fn a_failure_kept_while_the_store_was_down_is_recorded_when_it_is_back() {
    let s = Scene::new();
    let dir = s.path("database");
    let db = dir.join("database.sqlite");
    let handler = failing_handler(&s);
    let url = format!("sqlite://{}", db.display());
    let config = config(&s, ("url", &url), &handler);
    let job = Job::laravel8("App\\Jobs\\Fails").set("maxTries", 3.into());
    s.redis.push("default", &job.build());

    let mut d = s.work(&config, &["--sleep=0.1", "--tries=3"]);
    d.wait_stderr(|l| l.contains("cannot record the failed job") && l.contains(&job.id()));
    let unrecorded = format!("{}:unrecorded", q("default"));
    common::wait_until("the record kept in Redis", || {
        s.redis.zcard(&unrecorded) == 1
    });
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);

    std::fs::create_dir(&dir).unwrap();
    common::sqlite::create_failed_jobs(&db);
    d.wait_stderr(|l| l.contains("is now recorded") && l.contains(&job.uuid()));
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.code(), Some(0));

    let rows = common::sqlite::rows(&db);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].uuid, job.uuid());
    assert!(rows[0].exception.contains("boom"), "{}", rows[0].exception);
    assert!(!rows[0].exception.contains("MaxAttemptsExceeded"));
    assert_eq!(s.redis.zcard(&unrecorded), 0, "nothing left in Redis");
    // Three tries (released twice, failed on the third), the failed hook
    // once, and no fourth run.
    let calls: Vec<String> = s
        .log()
        .iter()
        .map(|l| {
            l.split(' ')
                .take(1)
                .chain(l.split(' ').skip(3).take(1))
                .collect()
        })
        .collect();
    assert_eq!(calls, ["run1", "run2", "run3", "failed3"], "{:?}", s.log());
}

// ---------------------------------------------------------------------------
// Item 16: the SQLite store recovers after a read-only period
// ---------------------------------------------------------------------------

/// The SQLite file (and its directory) is read-only when the worker starts:
/// a failure cannot be recorded and the job stays reserved. Once they are
/// writable again, the next failure is recorded by the same worker, without
/// a restart (before: the connection opened read-only was kept for ever).
#[test]
fn sqlite_store_recovers_after_a_read_only_period() {
    let Some(sandbox) = Sandbox::available() else {
        return;
    };
    let s = Scene::new();
    let dir = s.path("database");
    std::fs::create_dir(&dir).unwrap();
    let db = FailedDb::sqlite(&dir.join("database.sqlite"));
    let handler = failing_handler(&s);
    let config = config(&s, ("url", db.url()), &handler);

    let mut d = sandbox.work(&config, &["--sleep=0.1"], &[&dir], &[]);
    d.wait_stderr(|l| l.contains("worker started"));
    let during = Job::laravel8("App\\Jobs\\DuringReadOnly").set("maxTries", 1.into());
    s.redis.push("default", &during.build());
    let refused =
        d.wait_stderr(|l| l.contains("cannot record the failed job") && l.contains(&during.id()));
    assert!(refused.contains("readonly"), "{refused}");
    let unrecorded = format!("{}:unrecorded", q("default"));
    common::wait_until("the record kept in Redis", || {
        s.redis.zcard(&unrecorded) == 1
    });

    sandbox.make_writable(&d, &dir);
    let after = Job::laravel8("App\\Jobs\\AfterReadOnly").set("maxTries", 1.into());
    s.redis.push("default", &after.build());
    d.wait_stdout(|l| l.contains("App\\Jobs\\AfterReadOnly") && l.contains("FAIL"));
    d.wait_stderr(|l| l.contains("is now recorded") && l.contains(&during.uuid()));
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(d.code(), Some(0));
    let mut uuids: Vec<String> = db.rows().iter().map(|r| r.uuid.clone()).collect();
    uuids.sort();
    let mut expected = vec![after.uuid(), during.uuid()];
    expected.sort();
    assert_eq!(uuids, expected, "{}", d.stderr.join("\n"));
    assert!(
        !d.stderr
            .iter()
            .any(|l| l.contains(&after.id()) && l.contains("ERROR"))
    );
}
