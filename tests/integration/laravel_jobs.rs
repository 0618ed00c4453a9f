//! Every kind of Laravel job, dispatched by the real app and run by
//! laravel-worker through the PHP bridge, with both transports (a PHP
//! process per job; warm persistent processes). Each test checks what ran,
//! how often, with which attempt numbers and release delays, the
//! failed_jobs rows, the failed() hooks, chains and unique locks, and that
//! no queue key is left behind.

use crate::common;

use common::laravel::{self, App, Transport};
use common::{Daemon, QueueState, Scene, q};
use serde_json::{Value, json};

const PER_JOB: Transport = Transport::PerJob;
const PERSISTENT: Transport = Transport::Persistent(2);

/// Two `#[test]`s running `scenario`: one a PHP process per job, one with
/// two warm persistent processes.
macro_rules! on_both_transports {
    ($($scenario:ident: $per_job:ident, $persistent:ident;)*) => {
        $(
            #[test]
            fn $per_job() {
                $scenario(PER_JOB);
            }

            #[test]
            fn $persistent() {
                $scenario(PERSISTENT);
            }
        )*
    };
}

on_both_transports! {
    every_kind_runs_once: every_kind_runs_once_per_job, every_kind_runs_once_persistent;
    retries_backoff_and_failed_rows: retries_backoff_and_failed_rows_per_job, retries_backoff_and_failed_rows_persistent;
    timeouts_deadlines_and_max_exceptions: timeouts_deadlines_and_max_exceptions_per_job, timeouts_deadlines_and_max_exceptions_persistent;
    releases_failures_and_delays: releases_failures_and_delays_per_job, releases_failures_and_delays_persistent;
}

/// The unique lock of `UniqueJob` with `key` (cache prefix on DB 0, the
/// skeleton's `lock_connection`).
fn unique_lock(key: &str) -> String {
    format!("laravel_database_laravel_cache:laravel_unique_job:App\\Jobs\\UniqueJob{key}")
}

/// The scene, app and config for `transport`, with `jobs` dispatched
/// through the app's bus; `None` (after a note) when PHP or Laravel is
/// missing.
fn dispatched(transport: Transport, jobs: Value) -> Option<(Scene, App, std::path::PathBuf)> {
    let (s, app, config) = laravel::scene(transport)?;
    app.dispatch(jobs);
    Some((s, app, config))
}

/// Runs the daemon once to its end (it must exit 0) and returns it.
fn run(s: &Scene, config: &std::path::Path, args: &[&str]) -> Daemon {
    let mut all = vec!["--stop-when-empty", "--sleep=0", "--json"];
    all.extend_from_slice(args);
    s.run(config, &all)
}

/// Runs the daemon until no job is ready or delayed, making delayed jobs
/// due between runs. Returns every JSON event of every run.
fn drain(s: &Scene, config: &std::path::Path, args: &[&str]) -> Vec<Value> {
    let mut events = vec![];
    for _ in 0..20 {
        events.extend(run(s, config, args).events());
        let delayed = format!("{}:delayed", q("default"));
        if s.redis.zcard(&delayed) == 0 && s.redis.llen(&q("default")) == 0 {
            return events;
        }
        s.redis.make_due(&delayed);
    }
    panic!("the queue never drained");
}

/// `:delayed` as (payload, score).
fn delayed(s: &Scene) -> Vec<(Value, i64)> {
    s.redis
        .zrange(&format!("{}:delayed", q("default")))
        .into_iter()
        .map(|(m, score)| (serde_json::from_str(&m).unwrap(), score))
        .collect()
}

/// The release delay of `tag`'s job in `:delayed`: its score minus the
/// time its last run started (the release happens within that second).
fn release_delay(app: &App, s: &Scene, tag: &str) -> i64 {
    let runs = app.events("handle", tag);
    let started = runs.last().unwrap()["time"].as_f64().unwrap().floor() as i64;
    let all = delayed(s);
    let (_, score) = all
        .iter()
        .find(|(p, _)| tag_of(p).as_deref() == Some(tag))
        .unwrap_or_else(|| panic!("{tag} is not delayed: {all:?}"));
    score - started
}

/// Asserts `tag` was released for `expected` seconds (the release may
/// fall in the second after the run started).
fn assert_release_delay(app: &App, s: &Scene, tag: &str, expected: i64) {
    let delay = release_delay(app, s, tag);
    assert!(
        (expected..=expected + 1).contains(&delay),
        "{tag} released for {delay} s, expected {expected}"
    );
}

/// The test tag of a payload: `data.tag` of a string job, or the `tag`
/// property inside the serialized command of an object job.
fn tag_of(payload: &Value) -> Option<String> {
    if let Some(tag) = payload["data"]["tag"].as_str() {
        return Some(tag.to_string());
    }
    let command = payload["data"]["command"].as_str()?;
    let rest = &command[command.find("s:3:\"tag\";s:")? + 12..];
    let rest = &rest[rest.find(':')? + 2..];
    Some(rest[..rest.find('"')?].to_string())
}

/// The failed_jobs row of `tag`.
fn row_of(s: &Scene, tag: &str) -> common::sqlite::FailedRow {
    s.failed_rows()
        .into_iter()
        .find(|r| tag_of(&serde_json::from_str(&r.payload).unwrap()).as_deref() == Some(tag))
        .unwrap_or_else(|| panic!("no failed_jobs row for {tag}"))
}

/// No `event` line of `tag` was recorded.
#[track_caller]
fn assert_none(app: &App, event: &str, tag: &str) {
    let seen = app.events(event, tag);
    assert!(seen.is_empty(), "{event} of {tag} recorded: {seen:?}");
}

fn every_kind_runs_once(transport: Transport) {
    let jobs = json!([
        {"kind": "plain", "tag": "plain", "data": {"city": "Zürich", "n": [1, 2]}},
        {"kind": "string", "tag": "str", "data": {"x": "y"}},
        {"kind": "encrypted", "tag": "enc", "secret": "s3cret"},
        {"kind": "event", "tag": "order-1"},
        {"kind": "notification", "tag": "inv-1", "to": "ada@example.com"},
        {"kind": "chain", "tag": "c", "steps": ["a", "b", "c"]},
        {"kind": "unique", "tag": "u", "key": "k"},
        {"kind": "unique", "tag": "u-again", "key": "k"},
    ]);
    let Some((s, app, config)) = dispatched(transport, jobs) else {
        return;
    };
    // The second unique job was not queued: the lock was held.
    assert!(s.redis.exists(&unique_lock("k")), "the unique lock is held");
    assert_eq!(s.redis.llen(&q("default")), 7, "jobs queued");

    let d = run(&s, &config, &[]);
    let names = d.event_fields("success", "job");
    assert_eq!(
        names,
        [
            "App\\Jobs\\PlainJob",
            "App\\Jobs\\StringJob",
            "App\\Jobs\\EncryptedJob",
            "App\\Listeners\\RecordShipment",
            "App\\Notifications\\InvoicePaid",
            "App\\Jobs\\ChainStep",
            "App\\Jobs\\UniqueJob",
            "App\\Jobs\\ChainStep",
            "App\\Jobs\\ChainStep",
        ]
    );

    for tag in ["plain", "str", "enc", "order-1", "c.a", "c.b", "c.c", "u"] {
        let runs = app.events("handle", tag);
        assert_eq!(runs.len(), 1, "{tag}: {runs:?}");
        assert_eq!(runs[0]["attempt"], 1, "{tag}");
        assert_eq!(runs[0]["runner"], "LaravelWorker\\BridgeJob", "{tag}");
    }
    assert_eq!(
        app.events("handle", "plain")[0]["data"],
        json!({"city": "Zürich", "n": [1, 2]})
    );
    assert_eq!(
        app.events("handle", "str")[0]["data"],
        json!({"tag": "str", "x": "y"})
    );
    assert_eq!(app.events("handle", "enc")[0]["secret"], "s3cret");
    let sent = app.events("notification", "inv-1");
    assert_eq!(sent.len(), 1, "one notification: {sent:?}");
    assert_eq!(sent[0]["to"], "ada@example.com");
    assert_none(&app, "handle", "u-again");

    // The chain ran in order, each step dispatched by the one before.
    let times: Vec<f64> = ["c.a", "c.b", "c.c"]
        .map(|tag| {
            app.events("handle", tag)[0]["time"]
                .as_f64()
                .unwrap_or_default()
        })
        .to_vec();
    assert!(
        times[0] < times[1] && times[1] < times[2],
        "chain steps' start times: {times:?}"
    );

    // Running the unique job released its lock; it can be dispatched again.
    assert!(
        !s.redis.exists(&unique_lock("k")),
        "the unique lock is released"
    );
    app.dispatch(json!([{"kind": "unique", "tag": "u-later", "key": "k"}]));
    assert_eq!(s.redis.llen(&q("default")), 1, "dispatched again");
    run(&s, &config, &[]);
    assert_eq!(app.attempts("u-later"), [1]);

    let failed: Vec<_> = app
        .records()
        .into_iter()
        .filter(|r| r["event"] == "failed")
        .collect();
    assert!(failed.is_empty(), "failed() ran: {failed:?}");
    s.assert_state(QueueState::empty());
}

/// `$tries` and `$backoff` from the job, `--tries` and `--backoff` for a
/// job pushed by name; failed rows carry PHP's exception text.
fn retries_backoff_and_failed_rows(transport: Transport) {
    let jobs = json!([
        {"kind": "flaky", "tag": "ok", "failures": 1},
        {"kind": "flaky", "tag": "doomed", "failures": 9},
        {"kind": "string", "tag": "str", "data": {"fail": true}},
    ]);
    let Some((s, app, config)) = dispatched(transport, jobs) else {
        return;
    };
    let uuids: Vec<String> = s
        .redis
        .lrange(&q("default"))
        .iter()
        .map(|p| {
            serde_json::from_str::<Value>(p).unwrap()["uuid"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let args = ["--tries=2", "--backoff=4"];

    // Round 1: every job throws once; released with its backoff.
    let d = run(&s, &config, &args);
    let released = d.events_with("released_after_exception").len();
    assert_eq!(released, 3, "every job released once");
    assert_release_delay(&app, &s, "ok", 2);
    assert_release_delay(&app, &s, "doomed", 2);
    assert_release_delay(&app, &s, "str", 4);
    assert_eq!(s.failed_rows().len(), 0, "no failed row yet");

    // Round 2: "ok" succeeds; "doomed" is released for 5 s (second
    // backoff); the string job fails on its second try (--tries=2).
    s.redis.make_due(&format!("{}:delayed", q("default")));
    run(&s, &config, &args);
    assert_eq!(app.attempts("ok"), [1, 2]);
    assert_release_delay(&app, &s, "doomed", 5);
    assert_eq!(app.attempts("str"), [1, 2]);
    let hooks = app.events("failed", "str");
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0]["exception"], "RuntimeException");
    assert_eq!(hooks[0]["message"], "string job str failed");

    // Round 3: "doomed" fails on its third try ($tries = 3).
    s.redis.make_due(&format!("{}:delayed", q("default")));
    run(&s, &config, &args);
    assert_eq!(app.attempts("doomed"), [1, 2, 3]);
    let hooks = app.events("failed", "doomed");
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0]["message"], "flaky doomed failed attempt 3");
    assert_none(&app, "failed", "ok");

    let rows = s.failed_rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (str_row, doomed_row) = (&rows[0], &rows[1]);
    assert_eq!(str_row.uuid, uuids[2]);
    assert_eq!(doomed_row.uuid, uuids[1]);
    for (row, first_line, attempts) in [
        (str_row, "RuntimeException: string job str failed in ", 1),
        (
            doomed_row,
            "RuntimeException: flaky doomed failed attempt 3 in ",
            2,
        ),
    ] {
        assert_eq!(
            (row.connection.as_str(), row.queue.as_str()),
            ("redis", "default")
        );
        assert!(row.exception.starts_with(first_line), "{}", row.exception);
        assert!(
            row.exception.contains("\nStack trace:\n#0 "),
            "{}",
            row.exception
        );
        // The payload as popped for the last attempt (attempts before it).
        let payload: Value = serde_json::from_str(&row.payload).unwrap();
        assert_eq!(payload["attempts"], attempts);
    }
    s.assert_redis(QueueState::empty());
}

/// `$timeout`, `$failOnTimeout`, `retryUntil()` and `$maxExceptions`.
fn timeouts_deadlines_and_max_exceptions(transport: Transport) {
    let jobs = json!([
        {"kind": "timeout", "tag": "slow", "sleep": 30},
        {"kind": "timeout", "tag": "slow-fot", "sleep": 30, "fail_on_timeout": true},
        {"kind": "deadline", "tag": "deadline", "seconds": 3600, "failures": 2},
        {"kind": "deadline", "tag": "too-late", "seconds": -10, "failures": 0},
        {"kind": "max-exceptions", "tag": "max-ex"},
    ]);
    let Some((s, app, config)) = dispatched(transport, jobs) else {
        return;
    };
    let uuid_of = |name: &str| -> String {
        s.redis
            .lrange(&q("default"))
            .iter()
            .map(|p| serde_json::from_str::<Value>(p).unwrap())
            .find(|p| p["displayName"] == name)
            .unwrap()["uuid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let max_ex_uuid = uuid_of("App\\Jobs\\MaxExceptionsJob");

    drain(&s, &config, &["--concurrency=2"]);

    // $timeout = 1 with 2 tries: killed twice, then failed.
    assert_eq!(app.attempts("slow"), [1, 2]);
    // $failOnTimeout: failed at the first timeout.
    assert_eq!(app.attempts("slow-fot"), [1]);
    assert!(
        app.records().iter().all(|r| r["woke"].is_null()),
        "a job outlived its timeout"
    );
    for tag in ["slow", "slow-fot"] {
        let hook = app.events("failed", tag);
        assert_eq!(hook.len(), 1, "{tag}");
        // Laravel 8 fails a timeout with MaxAttemptsExceededException and
        // its long message ([app] laravel = "8.83" in the test config).
        assert_eq!(
            hook[0]["exception"],
            "Illuminate\\Queue\\MaxAttemptsExceededException"
        );
        assert_eq!(
            hook[0]["message"],
            "App\\Jobs\\TimeoutJob has been attempted too many times or run too long. The job may have previously timed out."
        );
    }

    // retryUntil() in the future: retried past $tries = 1 until it succeeds.
    assert_eq!(app.attempts("deadline"), [1, 2, 3]);
    assert_none(&app, "failed", "deadline");
    // retryUntil() already passed: failed without running.
    assert_none(&app, "handle", "too-late");
    let hook = &app.events("failed", "too-late")[0];
    assert_eq!(
        hook["exception"],
        "Illuminate\\Queue\\MaxAttemptsExceededException"
    );

    // $maxExceptions = 2: a release (no exception), then two exceptions.
    assert_eq!(app.attempts("max-ex"), [1, 2, 3]);
    assert_eq!(app.events("failed", "max-ex").len(), 1);
    assert!(
        s.redis.keys(1).iter().all(|k| !k.contains(&max_ex_uuid)),
        "the exception counter is forgotten: {:?}",
        s.redis.keys(1)
    );

    let rows = s.failed_rows();
    let exception_of = |tag: &str| row_of(&s, tag).exception;
    assert_eq!(rows.len(), 4, "{rows:?}");
    for tag in ["slow", "slow-fot"] {
        let e = exception_of(tag);
        assert!(
            e.starts_with(
                "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\TimeoutJob has been attempted too many times or run too long. The job may have previously timed out."
            ),
            "{e}"
        );
    }
    for (tag, start) in [
        (
            "too-late",
            "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\DeadlineJob has been attempted too many times",
        ),
        (
            "max-ex",
            "RuntimeException: max exceptions max-ex attempt 3 in ",
        ),
    ] {
        let e = exception_of(tag);
        assert!(e.starts_with(start), "{tag}: {e}");
    }
    s.assert_redis(QueueState::empty());
}

/// `$this->release()`, `$this->fail()`, delayed dispatch, failing unique
/// jobs, chains and listeners.
fn releases_failures_and_delays(transport: Transport) {
    let jobs = json!([
        {"kind": "releasing", "tag": "rel", "release": 30},
        {"kind": "plain", "tag": "late", "delay": 45},
        {"kind": "string", "tag": "str-late", "delay": 50},
        {"kind": "self-failing", "tag": "self"},
        {"kind": "unique", "tag": "uniq", "key": "k2", "fail": true},
        {"kind": "chain", "tag": "cf", "steps": ["a", "b"], "fail": "a"},
        {"kind": "event", "tag": "order-2", "fail": true},
    ]);
    let Some((s, app, config)) = dispatched(transport, jobs) else {
        return;
    };
    let dispatched = common::now();
    // Delayed dispatch: in :delayed, due 45 s and 50 s from now.
    let mut scores: Vec<i64> = delayed(&s).iter().map(|(_, at)| at - dispatched).collect();
    scores.sort();
    assert!(
        (44..=46).contains(&scores[0]) && (49..=51).contains(&scores[1]),
        "{scores:?}"
    );
    assert!(
        s.redis.exists(&unique_lock("k2")),
        "the unique lock is held"
    );

    run(&s, &config, &[]);
    // Not due yet.
    assert_none(&app, "handle", "late");
    assert_none(&app, "handle", "str-late");
    // $this->release(30).
    assert_eq!(app.attempts("rel"), [1]);
    assert_release_delay(&app, &s, "rel", 30);

    // $this->fail(): failed() ran once, in the job's own process; the
    // daemon did not call it again.
    assert_eq!(app.attempts("self"), [1]);
    assert_eq!(app.events("failed", "self").len(), 1);

    // A failing unique job: failed() ran and the lock is released.
    assert_eq!(app.attempts("uniq"), [1]);
    assert_eq!(app.events("failed", "uniq").len(), 1);
    assert!(!s.redis.exists(&unique_lock("k2")), "the lock is released");

    // A failing chain step: its failed(), the chain's catch callback, and
    // no next step.
    assert_eq!(app.attempts("cf.a"), [1]);
    assert_eq!(app.events("failed", "cf.a").len(), 1);
    let caught = app.events("chain-catch", "cf");
    assert_eq!(caught.len(), 1);
    assert_eq!(caught[0]["message"], "chain step cf.a failed");

    // A failing queued listener: its failed($event, $e).
    assert_eq!(app.attempts("order-2"), [1]);
    assert_eq!(
        app.events("failed", "order-2")[0]["message"],
        "shipment order-2 failed"
    );

    let rows = s.failed_rows();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let names: Vec<String> = rows
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(&r.payload).unwrap()["displayName"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "App\\Jobs\\SelfFailingJob",
            "App\\Jobs\\UniqueJob",
            "App\\Jobs\\ChainStep",
            "App\\Listeners\\RecordShipment",
        ]
    );
    // (The daemon records $this->fail($e) as ManuallyFailedException with
    // the message; queue:work records (string) $e. See the parity test.)
    assert!(
        rows[0].exception.contains("bad input for self"),
        "{}",
        rows[0].exception
    );
    assert!(
        rows[1]
            .exception
            .starts_with("RuntimeException: unique uniq failed in "),
        "{}",
        rows[1].exception
    );

    // Everything due now: the released and the delayed jobs run.
    s.redis.make_due(&format!("{}:delayed", q("default")));
    run(&s, &config, &[]);
    assert_eq!(app.attempts("rel"), [1, 2]);
    assert_eq!(app.attempts("late"), [1]);
    assert_eq!(app.attempts("str-late"), [1]);
    assert_none(&app, "handle", "cf.b");
    assert_eq!(s.failed_rows().len(), 4, "no new failed row");
    s.assert_redis(QueueState::empty());
}
