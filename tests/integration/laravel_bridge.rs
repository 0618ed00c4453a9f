//! The PHP bridge on its own, driven the way the daemon drives it: jobs
//! dispatched by the real Laravel app, handed to
//! `php/laravel-worker-bridge.php` through both transports (one process per
//! job: stdin, environment, result file; persistent: NDJSON on stdin,
//! responses on fd 3). The bridge must report each outcome, run failed()
//! logic in failed mode, and never touch the queue keys itself.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::laravel::{App, bridge};
use common::{Scene, q};
use serde_json::{Value, json};

/// LPOPs the next job Laravel pushed and returns it as the daemon would
/// hand it over: the reserved copy, attempts counted (`attempt`).
fn reserve(s: &Scene, attempt: u64) -> Value {
    let raw: String = s.redis.cmd(&["LPOP", &q("default")]);
    let mut payload: Value = serde_json::from_str(&raw).unwrap();
    payload["attempts"] = attempt.into();
    payload
}

/// `php BRIDGE --app=APP`, as the one-process-per-job handler runs it;
/// stdin piped.
fn per_job(app: &App) -> Command {
    let mut cmd = Command::new("php");
    cmd.arg(bridge())
        .arg(format!("--app={}", app.dir.display()))
        .env_remove("LARAVEL_WORKER_PROTOCOL")
        .stdin(Stdio::piped());
    cmd
}

/// The bridge as a persistent handler: its fd 3 (responses) is our stdout
/// pipe, and the job's own stdout goes to its stderr; stdin piped.
fn persistent(app: &App) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "exec \"$@\" 3>&1 1>&2", "sh", "php"])
        .arg(bridge())
        .arg(format!("--app={}", app.dir.display()))
        .env("LARAVEL_WORKER_PROTOCOL", "persistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    cmd
}

/// Writes `payload` to the child's stdin and closes it.
fn feed(child: &mut std::process::Child, payload: &Value) {
    let mut stdin = child.stdin.take().expect("stdin piped");
    stdin.write_all(payload.to_string().as_bytes()).unwrap();
}

/// Runs the bridge once (one-process-per-job transport) and returns the
/// JSON it wrote to the result file.
fn run_once(app: &App, s: &Scene, payload: &Value, env: &[(&str, &str)]) -> Value {
    let result = s.path("result.json");
    let _ = std::fs::remove_file(&result);
    let mut child = per_job(app)
        .env("LARAVEL_WORKER_MODE", "run")
        .env("LARAVEL_WORKER_JOB_ID", payload["id"].as_str().unwrap())
        .env("LARAVEL_WORKER_JOB_UUID", payload["uuid"].as_str().unwrap())
        .env(
            "LARAVEL_WORKER_JOB_NAME",
            payload["displayName"].as_str().unwrap(),
        )
        .env("LARAVEL_WORKER_QUEUE", "default")
        .env("LARAVEL_WORKER_CONNECTION", "redis")
        .env("LARAVEL_WORKER_ATTEMPT", payload["attempts"].to_string())
        .env("LARAVEL_WORKER_MAX_TRIES", "1")
        .env("LARAVEL_WORKER_TIMEOUT", "60")
        .env("LARAVEL_WORKER_RESULT", &result)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    feed(&mut child, payload);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "bridge exited with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&result).expect("the bridge wrote no result");
    serde_json::from_str(&text).unwrap()
}

/// Redis holds nothing the bridge could have written: no reserved or
/// delayed job, and the ready list as the test left it.
fn assert_queue_untouched(s: &Scene, ready: i64) {
    assert_eq!(s.redis.llen(&q("default")), ready, "jobs ready");
    for part in [":delayed", ":reserved"] {
        let key = format!("{}{part}", q("default"));
        assert!(!s.redis.exists(&key), "{key}: {:?}", s.redis.zrange(&key));
    }
}

#[test]
fn per_job_transport_reports_every_outcome() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([
        {"kind": "plain", "tag": "plain", "data": {"city": "Zürich"}},
        {"kind": "flaky", "tag": "flaky", "failures": 1},
        {"kind": "releasing", "tag": "rel", "release": 7},
        {"kind": "self-failing", "tag": "self"},
        {"kind": "string", "tag": "str", "data": {"n": 5}},
        {"kind": "encrypted", "tag": "enc", "secret": "hush"},
    ]));

    let plain = run_once(&app, &s, &reserve(&s, 1), &[]);
    assert_eq!(plain, json!({"action": "done"}));

    let flaky = run_once(&app, &s, &reserve(&s, 1), &[]);
    assert_eq!(flaky["action"], "exception");
    assert_eq!(flaky["class"], "RuntimeException");
    assert_eq!(flaky["message"], "flaky flaky failed attempt 1");
    // PHP's own (string) $e: first line with file and line, then the trace.
    let text = flaky["text"].as_str().unwrap();
    assert!(
        text.starts_with("RuntimeException: flaky flaky failed attempt 1 in ")
            && text.contains("app/Jobs/FlakyJob.php:")
            && text.contains("\nStack trace:\n#0 "),
        "{text}"
    );

    let released = run_once(&app, &s, &reserve(&s, 1), &[]);
    assert_eq!(released, json!({"action": "release", "delay": 7}));

    let failed = run_once(&app, &s, &reserve(&s, 1), &[]);
    assert_eq!(failed["action"], "fail");
    assert_eq!(failed["reason"], "bad input for self");
    assert_eq!(failed["class"], "InvalidArgumentException");
    // $this->fail() ran the job's failed() in the same process.
    assert_eq!(app.events("failed", "self").len(), 1);

    let string = run_once(&app, &s, &reserve(&s, 1), &[]);
    assert_eq!(string, json!({"action": "done"}));

    let encrypted = run_once(&app, &s, &reserve(&s, 1), &[]);
    assert_eq!(encrypted, json!({"action": "done"}));

    // Each ran once, as attempt 1, on the bridge's job object.
    for tag in ["plain", "flaky", "rel", "self", "str", "enc"] {
        let runs = app.events("handle", tag);
        assert_eq!(runs.len(), 1, "{tag}");
        assert_eq!(runs[0]["attempt"], 1, "{tag}");
        assert_eq!(runs[0]["runner"], "LaravelWorker\\BridgeJob", "{tag}");
    }
    assert_eq!(app.events("handle", "plain")[0]["data"]["city"], "Zürich");
    assert_eq!(
        app.events("handle", "str")[0]["data"],
        json!({"tag": "str", "n": 5})
    );
    assert_eq!(app.events("handle", "enc")[0]["secret"], "hush");
    assert_queue_untouched(&s, 0);
}

/// The attempt number comes from the daemon, not from the payload.
#[test]
fn attempt_number_is_the_daemons() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([{"kind": "flaky", "tag": "f", "failures": 2}]));
    let payload = reserve(&s, 3);
    assert_eq!(run_once(&app, &s, &payload, &[]), json!({"action": "done"}));
    assert_eq!(app.attempts("f"), [3]);
}

/// Failed mode runs what `Job::fail()` runs: the job's failed() with an
/// exception rebuilt from the recorded text, the unique lock release, the
/// chain's catch callbacks; string jobs get `Class::failed($data, $e)`.
#[test]
fn failed_mode_runs_the_apps_failure_logic() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([
        {"kind": "flaky", "tag": "php-text", "failures": 9},
        {"kind": "flaky", "tag": "timeout", "failures": 9},
        {"kind": "flaky", "tag": "unknown", "failures": 9},
        {"kind": "unique", "tag": "uniq", "key": "k1"},
        {"kind": "chain", "tag": "ch", "steps": ["a", "b"]},
        {"kind": "string", "tag": "str"},
        {"kind": "event", "tag": "order-1"},
    ]));
    let lock = "laravel_database_laravel_cache:laravel_unique_job:App\\Jobs\\UniqueJobk1";
    assert!(s.redis.exists(lock), "dispatch took the unique lock");
    let failed = [("LARAVEL_WORKER_MODE", "failed")];
    let with = |text: &'static str| {
        [
            ("LARAVEL_WORKER_MODE", "failed"),
            ("LARAVEL_WORKER_EXCEPTION", text),
        ]
    };

    // PHP's text (as the bridge reported it earlier): class and message back.
    let done = run_once(
        &app,
        &s,
        &reserve(&s, 3),
        &with("RuntimeException: boom in /srv/app/Jobs/X.php:12\nStack trace:\n#0 {main}"),
    );
    assert_eq!(done, json!({"action": "done"}));
    let hook = &app.events("failed", "php-text")[0];
    assert_eq!(
        (&hook["exception"], &hook["message"]),
        (&json!("RuntimeException"), &json!("boom"))
    );

    // The daemon's timeout: Laravel 8 has no TimeoutExceededException and
    // uses MaxAttemptsExceededException for timeouts.
    run_once(
        &app,
        &s,
        &reserve(&s, 2),
        &with(
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\FlakyJob has timed out.\nStack trace:\n#0 {main}\n\nHandler was killed after 1 s.",
        ),
    );
    let hook = &app.events("failed", "timeout")[0];
    assert_eq!(
        hook["exception"],
        "Illuminate\\Queue\\MaxAttemptsExceededException"
    );
    assert_eq!(hook["message"], "App\\Jobs\\FlakyJob has timed out.");

    // A class the app does not have.
    run_once(
        &app,
        &s,
        &reserve(&s, 1),
        &with("App\\Exceptions\\Gone: vanished\nStack trace:\n#0 {main}"),
    );
    let hook = &app.events("failed", "unknown")[0];
    assert_eq!(hook["exception"], "LaravelWorker\\RecordedFailureException");
    assert_eq!(hook["message"], "vanished");

    // Unique job: failed() runs and the lock is released.
    run_once(&app, &s, &reserve(&s, 1), &failed);
    assert_eq!(app.events("failed", "uniq").len(), 1);
    assert!(
        !s.redis.exists(lock),
        "failed mode released the unique lock"
    );

    // Chain: the catch callback runs; the next step is not dispatched.
    run_once(&app, &s, &reserve(&s, 1), &failed);
    assert_eq!(app.events("failed", "ch.a").len(), 1);
    assert_eq!(app.events("chain-catch", "ch").len(), 1);

    // String job: StringJob::failed($data, $e).
    run_once(&app, &s, &reserve(&s, 1), &failed);
    assert_eq!(app.events("failed", "str").len(), 1);

    // Queued listener: RecordShipment::failed($event, $e).
    run_once(&app, &s, &reserve(&s, 1), &failed);
    assert_eq!(app.events("failed", "order-1").len(), 1);

    // Nothing ran, and nothing was queued (not even the chain's next step).
    assert!(
        app.records().iter().all(|r| r["event"] != "handle"),
        "{:?}",
        app.records()
    );
    assert_queue_untouched(&s, 0);
}

/// The persistent transport: one boot, many requests, one response line
/// per request on fd 3, stdout free for the job, exit at end of stdin.
#[test]
fn persistent_transport_serves_many_jobs_from_one_boot() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([
        {"kind": "plain", "tag": "p1"},
        {"kind": "flaky", "tag": "f", "failures": 1},
        {"kind": "releasing", "tag": "r", "release": 3},
        {"kind": "unique", "tag": "u", "key": "k"},
        {"kind": "plain", "tag": "p2"},
    ]));
    let jobs: Vec<Value> = (0..5).map(|_| reserve(&s, 1)).collect();

    let mut child = persistent(&app)
        .env("LARAVEL_WORKER_CONNECTION", "redis")
        .stderr(std::fs::File::create(s.path("bridge.err")).unwrap())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut responses = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |request: Value| -> Value {
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let line = responses.next().expect("no response").unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let request = |mode: &str, job: &Value| {
        json!({
            "mode": mode,
            "payload": job.to_string(),
            "id": job["id"],
            "uuid": job["uuid"],
            "name": job["displayName"],
            "queue": "default",
            "connection": "redis",
            "attempt": job["attempts"],
            "max_tries": 3,
            "timeout": 60,
        })
    };

    assert_eq!(call(request("run", &jobs[0])), json!({"action": "done"}));
    let e = call(request("run", &jobs[1]));
    assert_eq!(
        (&e["action"], &e["class"]),
        (&json!("exception"), &json!("RuntimeException"))
    );
    assert_eq!(
        call(request("run", &jobs[2])),
        json!({"action": "release", "delay": 3})
    );
    // A line that is not JSON is answered, and the process goes on.
    let garbage = call(json!("not an object"));
    assert_eq!(garbage["action"], "exception", "{garbage}");
    let message = garbage["message"].as_str().unwrap_or_default();
    assert!(message.contains("unreadable request"), "{garbage}");
    // Failed mode on the same process.
    let mut fail = request("failed", &jobs[3]);
    fail["exception"] = "RuntimeException: gave up\nStack trace:\n#0 {main}".into();
    assert_eq!(call(fail), json!({"action": "done"}));
    assert_eq!(call(request("run", &jobs[4])), json!({"action": "done"}));

    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit at end of stdin: {status}");

    // One process did all of it.
    let records = app.records();
    assert_eq!(records.len(), 5, "{records:?}");
    let pid = &records[0]["pid"];
    assert!(records.iter().all(|r| &r["pid"] == pid), "{records:?}");
    assert_eq!(app.events("failed", "u")[0]["message"], "gave up");
    assert_eq!(app.attempts("p2"), [1]);
    assert_queue_untouched(&s, 0);
}

/// An app that cannot boot: the job gets the boot error as its exception
/// (per-job transport), or the first request does and the process exits so
/// that a fresh one tries again (persistent transport).
#[test]
fn boot_failure_is_reported_as_the_jobs_exception() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([{"kind": "plain", "tag": "p"}]));
    let payload = reserve(&s, 1);
    std::fs::write(
        app.dir.join("config/broken.php"),
        "<?php throw new LogicException('config is broken');\n",
    )
    .unwrap();

    let result = s.path("result.json");
    let mut child = per_job(&app)
        .env("LARAVEL_WORKER_RESULT", &result)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    feed(&mut child, &payload);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "the bridge's exit status");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&result).unwrap()).unwrap();
    assert_eq!(r["action"], "exception");
    assert_eq!(r["class"], "LogicException");
    assert_eq!(r["message"], "config is broken");

    let mut child = persistent(&app).stderr(Stdio::null()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"mode": "run", "payload": payload.to_string(), "attempt": 1})
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["class"], "LogicException", "{r}");
    assert_eq!(
        child.wait().unwrap().code(),
        Some(1),
        "exits after the answer"
    );
    assert_eq!(app.records(), Vec::<Value>::new(), "no job ran");
}

/// The queue events a job's run fired, in order: `(event, what it
/// carried)`, for the job whose payload `uuid` is given.
fn queue_events(app: &App, uuid: &str) -> Vec<(String, Value)> {
    app.records()
        .into_iter()
        .filter(|r| r["event"] == "queue-event" && r["uuid"] == uuid)
        .map(|r| {
            (
                r["job"].as_str().unwrap_or("").to_string(),
                r["carried"].clone(),
            )
        })
        .collect()
}

/// The events of Laravel versions newer than the test app's 8.83
/// (JobReleasedAfterException 9.x, JobAttempted 11.23, JobReleased 13.26)
/// and 13.17's `shouldStopRetries()`, in the order Laravel's Worker fires
/// them. Laravel 8.83 has none of these classes: the test app declares
/// stand-ins with the newest constructors, and its exception handler a
/// `shouldStopRetries()`, only under `LW_NEWER_QUEUE_EVENTS`
/// (tests/laravel/app/Support/NewerQueueEvents.php). So what this shows is
/// the bridge's side: it fires each event where `class_exists` finds it,
/// in Worker's order, and fails at once what the handler says not to
/// retry; that Laravel's real classes take these arguments is read from
/// their source, not run here.
#[test]
fn newer_events_fire_in_the_workers_order_where_the_app_has_them() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else { return };
    app.dispatch(json!([
        {"kind": "plain", "tag": "plain"},
        {"kind": "flaky", "tag": "flaky", "failures": 5},
        {"kind": "flaky", "tag": "last", "failures": 5},
        {"kind": "releasing", "tag": "rel", "release": 7},
        {"kind": "dont-retry", "tag": "stop"},
        {"kind": "dont-retry", "tag": "old"},
        {"kind": "max-exceptions", "tag": "mx1"},
        {"kind": "max-exceptions", "tag": "mx2"},
    ]));
    let newer = [
        ("LW_NEWER_QUEUE_EVENTS", "1"),
        ("LARAVEL_WORKER_MAX_TRIES", "3"),
    ];
    let run = |attempt: u64, env: &[(&str, &str)]| {
        let payload = reserve(&s, attempt);
        let outcome = run_once(&app, &s, &payload, env);
        let uuid = payload["uuid"].as_str().unwrap().to_string();
        (outcome, queue_events(&app, &uuid))
    };
    let none = Value::Null;
    let thrown = |class: &str| Value::from(class);
    let names =
        |events: &[(String, Value)]| events.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();

    let (outcome, events) = run(1, &newer);
    assert_eq!(outcome, json!({"action": "done"}));
    assert_eq!(
        names(&events),
        ["JobProcessing", "JobProcessed", "JobAttempted"]
    );
    assert_eq!(events[2].1, none, "no exception carried");

    // Tries left: released after the exception, with the job's backoff.
    let (outcome, events) = run(1, &newer);
    assert_eq!(outcome["action"], "exception");
    assert_eq!(
        names(&events),
        [
            "JobProcessing",
            "JobExceptionOccurred",
            "JobReleasedAfterException",
            "JobAttempted"
        ]
    );
    assert_eq!(events[2].1, thrown("RuntimeException"));
    assert_eq!(events[3].1, thrown("RuntimeException"));
    let released = app
        .records()
        .into_iter()
        .find(|r| r["job"] == "JobReleasedAfterException")
        .unwrap();
    assert_eq!(
        released["backoff"], 2,
        "FlakyJob's backoff [2, 5], attempt 1"
    );

    // The last try: the daemon fails it, so no release is announced.
    let (outcome, events) = run(3, &newer);
    assert_eq!(outcome["action"], "exception");
    assert_eq!(
        names(&events),
        ["JobProcessing", "JobExceptionOccurred", "JobAttempted"]
    );

    // Released by the job itself: JobReleased, then JobProcessed.
    let (outcome, events) = run(1, &newer);
    assert_eq!(outcome, json!({"action": "release", "delay": 7}));
    assert_eq!(
        names(&events),
        [
            "JobProcessing",
            "JobReleased",
            "JobProcessed",
            "JobAttempted"
        ]
    );

    // dontRetry: failed at once on attempt 1 of 3, failed() run here.
    let (outcome, events) = run(1, &newer);
    assert_eq!(outcome["action"], "fail");
    assert_eq!(outcome["class"], "App\\Exceptions\\DontRetryException");
    assert_eq!(
        names(&events),
        [
            "JobProcessing",
            "JobFailed",
            "JobExceptionOccurred",
            "JobAttempted"
        ]
    );
    assert_eq!(app.events("failed", "stop").len(), 1);

    // Laravel 8.83 as it is: no such hook, the exception is retried.
    let (outcome, events) = run(1, &[("LARAVEL_WORKER_MAX_TRIES", "3")]);
    assert_eq!(outcome["action"], "exception");
    assert!(events.is_empty(), "no recording listener: {events:?}");
    assert!(app.events("failed", "old").is_empty());

    // maxExceptions 2: the first exception is released; with one already
    // counted (the daemon's `job-exceptions:{uuid}` cache entry) the
    // daemon fails it, so no release is announced.
    let ten = [
        ("LW_NEWER_QUEUE_EVENTS", "1"),
        ("LARAVEL_WORKER_MAX_TRIES", "10"),
    ];
    let (outcome, events) = run(2, &ten);
    assert_eq!(outcome["action"], "exception");
    assert!(
        names(&events).contains(&"JobReleasedAfterException".to_string()),
        "{events:?}"
    );
    let payload = reserve(&s, 3);
    let uuid = payload["uuid"].as_str().unwrap();
    let key = format!("laravel_database_laravel_cache:job-exceptions:{uuid}");
    let _: () = s.redis.cache(&["SET", &key, "1"]);
    let outcome = run_once(&app, &s, &payload, &ten);
    assert_eq!(outcome["action"], "exception");
    assert_eq!(
        names(&queue_events(&app, uuid)),
        ["JobProcessing", "JobExceptionOccurred", "JobAttempted"]
    );
    assert_queue_untouched(&s, 0);
}
