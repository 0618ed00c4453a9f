//! The failed-job stores under stress: records that share a uuid, records a
//! database refuses, a SQLite file that was read-only for a while. Each
//! test runs the real binary against a private redis-server and real
//! databases (SQLite always; PostgreSQL and MariaDB servers the tests start
//! themselves, skipped with a note when not installed).

mod common;

use std::path::{Path, PathBuf};

use common::payloads::Job;
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

/// A config with `failed` as the `[failed]` section body and `handler` for
/// every job.
fn config(s: &Scene, failed: &str, handler: &Path) -> PathBuf {
    s.config(&format!(
        "[failed]\n{failed}\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
        handler.display()
    ))
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
    let config = config(&s, "driver = \"redis\"", &handler);
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
