//! Parity with `php artisan queue:work`: one scenario of real dispatched
//! jobs, run once by the app's own worker and once by laravel-worker
//! (through the PHP bridge), each on its own Redis with the same layout,
//! on the Laravel 8.83 test app (`tests/laravel/`: Redis cache store,
//! `laravel_database_` prefix). After every round both must show the same
//! runs and attempts, the same failed() hooks and chain callbacks, the
//! same release delays (within a second), the same failed_jobs rows and
//! the same Redis keys. Laravel 11–12 are checked against recordings of
//! Laravel 12.67 instead (`tests/integration/recordings.rs`).
//!
//! The differences that exist on purpose, or that are known, are named
//! here and asserted separately:
//!
//! - timeouts (deliberate, [`timeouts`]): queue:work SIGKILLs itself and
//!   leaves the job reserved until `retry_after`; laravel-worker kills only
//!   the handler and releases the job at once. On the last try both fail
//!   it with the app's version's class and message (8.x:
//!   `MaxAttemptsExceededException`);
//! - a job whose `retryUntil` has passed (`too-late`): queue:work's row
//!   ends its first line with PHP's ` in file:line`, which the worker,
//!   having no PHP frame, cannot write. Class and wording are the app's
//!   version's (`[app] laravel`): 8.x's "…attempted too many times or run
//!   too long. The job may have previously timed out.".
//!
//! What differs between the two runs but not between the workers is
//! masked: the failed rows' uuid and id.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::laravel::{App, Transport};
use common::parity::{
    APP_KEY, ARGS, FAILED_TAGS, FailedRows, TOO_LATE, cache_keys, round_records, scenario,
    split_named_differences, tag_of,
};
use common::{Failed, Payload, QueueState, Scene, Score, q};
use serde_json::{Value, json};

/// The start of both workers' failed row for a job that timed out on its
/// last try: 8.x's class and wording.
const TIMED_OUT: &str = "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\TimeoutJob has been attempted too many times or run too long.";

/// What one round left behind, normalized so that two runs compare.
#[derive(Debug, PartialEq)]
struct Round {
    /// Everything the jobs recorded (event, job, tag, attempt, exception,
    /// message, data...), without times, pids and the job object's class.
    records: Vec<String>,
    /// `:delayed`: tag → (attempts in the payload, release delay in s).
    delayed: BTreeMap<String, (i64, i64)>,
    /// failed_jobs: tag → (connection, queue, first exception line,
    /// payload with uuid and id masked).
    failed: FailedRows,
    /// Keys of DB 0 and DB 1, uuids masked.
    keys: (Vec<String>, Vec<String>),
}

fn observe(app: &App, s: &Scene, previous: &[Value], dispatched: i64) -> Round {
    let scene = app.scene().display().to_string();
    let all = app.records();
    // Records of this round only: the log keeps growing.
    let new = &all[previous.len()..];
    let records = round_records(new);

    let last_start = |tag: &str| -> i64 {
        all.iter()
            .rfind(|r| r["event"] == "handle" && r["tag"] == tag)
            .map_or(0, |r| r["time"].as_f64().unwrap().floor() as i64)
    };
    let delayed = s
        .redis
        .zrange(&format!("{}:delayed", q("default")))
        .into_iter()
        .map(|(member, score)| {
            let p: Value = serde_json::from_str(&member).unwrap();
            let tag = tag_of(&p);
            let started = last_start(&tag);
            // Never run (a delayed dispatch): the delay from dispatch.
            let delay = if started == 0 {
                score - dispatched
            } else {
                score - started
            };
            (tag, (p["attempts"].as_i64().unwrap(), delay))
        })
        .collect();

    let failed = s
        .failed_rows()
        .into_iter()
        .map(|row| {
            let p: Value = serde_json::from_str(&row.payload).unwrap();
            let payload = row
                .payload
                .replace(&row.uuid, "<uuid>")
                .replace(p["id"].as_str().unwrap(), "<id>");
            let first_line = row
                .exception
                .lines()
                .next()
                .unwrap()
                .replace(&scene, "<scene>");
            (tag_of(&p), (row.connection, row.queue, first_line, payload))
        })
        .collect();

    Round {
        records,
        delayed,
        failed,
        keys: cache_keys(&s.redis),
    }
}

/// Runs the scenario round by round with `work` (one worker run to its
/// end), making delayed jobs due between rounds.
fn run_scenario(work: &dyn Fn(&App, &Scene, &Path)) -> Option<Vec<Round>> {
    let s = Scene::new();
    let app = App::new(&s)?;
    app.set_env("APP_KEY", APP_KEY);
    let config = app.config(&s, Transport::Persistent(1));
    let dispatched = common::now();
    app.dispatch(scenario());
    let mut rounds = vec![];
    for _ in 0..3 {
        let before = app.records();
        work(&app, &s, &config);
        rounds.push(observe(&app, &s, &before, dispatched));
        s.redis.make_due(&format!("{}:delayed", q("default")));
    }
    Some(rounds)
}

fn php_worker(app: &App, _: &Scene, _: &Path) {
    let mut php = app.queue_work(ARGS);
    let status = php.wait();
    assert!(status.success(), "queue:work: {status}\n{}", php.output());
}

fn laravel_worker(_: &App, s: &Scene, config: &Path) {
    let mut args = ARGS.to_vec();
    args.push("--json");
    s.run(config, &args);
}

/// Drops the named differences from a round, returning them apart.
fn split_differences(round: &mut Round) -> Vec<String> {
    split_named_differences(&mut round.records, &mut round.failed)
}

#[test]
fn queue_work_and_laravel_worker_leave_the_same_results() {
    let Some(mut php) = run_scenario(&php_worker) else {
        return;
    };
    let mut ours = run_scenario(&laravel_worker).unwrap();

    let mut php_apart = vec![];
    let mut our_apart = vec![];
    for (i, (p, o)) in php.iter_mut().zip(ours.iter_mut()).enumerate() {
        php_apart.extend(split_differences(p));
        our_apart.extend(split_differences(o));
        // Release delays: within a second of each other.
        for (tag, (attempts, delay)) in &p.delayed {
            let (our_attempts, our_delay) = o
                .delayed
                .get(tag)
                .unwrap_or_else(|| panic!("round {i}: {tag} is not delayed by laravel-worker"));
            assert_eq!(attempts, our_attempts, "round {i}: {tag}");
            assert!(
                (delay - our_delay).abs() <= 1,
                "round {i}: {tag} delay {delay} vs {our_delay}"
            );
        }
        assert_eq!(
            p.delayed.keys().collect::<Vec<_>>(),
            o.delayed.keys().collect::<Vec<_>>(),
            "round {i}"
        );
        p.delayed.clear();
        o.delayed.clear();
        assert_eq!(p.records, o.records, "round {i}: job records");
        assert_eq!(p.failed, o.failed, "round {i}: failed_jobs");
        assert_eq!(p.keys, o.keys, "round {i}: Redis keys");
    }

    // The scenario did what it is meant to (not just the same twice).
    let last = &ours[2];
    assert!(last.keys.0.is_empty(), "drained: {:?}", last.keys);
    let failed_tags: Vec<&str> = php[2].failed.keys().map(String::as_str).collect();
    assert_eq!(failed_tags, FAILED_TAGS);

    // $this->fail($e) records the job's own exception, as queue:work does
    // (compared with the other rows above).
    let php_self = &php[2].failed["self"];
    assert!(
        php_self
            .2
            .starts_with("InvalidArgumentException: bad input for self in "),
        "{php_self:?}"
    );

    // The named differences, as they are today.
    let row = |apart: &[String], tag: &str| {
        apart
            .iter()
            .find(|r| r.starts_with(&format!("{tag}: ")))
            .cloned()
            .unwrap()
    };
    // retryUntil passed: the same class and wording ([app] laravel); PHP's
    // line adds the file and line it was thrown at, which the worker,
    // having no PHP frame, cannot.
    let message = format!("too-late: {TOO_LATE}");
    let php_row = row(&php_apart, "too-late");
    assert!(
        php_row.starts_with(&format!("{message} in ")),
        "queue:work's row: {php_row}"
    );
    assert_eq!(row(&our_apart, "too-late"), message, "our row");
}

/// Timeouts, the deliberate difference. A job with `$timeout = 1` and two
/// tries sleeps past its limit every time.
///
/// queue:work: at the timeout the worker SIGKILLs itself; the job stays in
/// `:reserved` (attempt 1 counted) until `retry_after`; on the last try the
/// job is failed before the kill (8.x: `MaxAttemptsExceededException`,
/// 10.25+: `TimeoutExceededException`).
///
/// laravel-worker: only the handler is killed; the job is released at once
/// (attempt counted) and the worker goes on; on the last try the job is
/// failed with the same class and message as the app's version's
/// queue:work. Both run the failed() hook.
#[test]
fn timeouts_differ_on_purpose() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    let layout = || QueueState::empty();
    app.dispatch(json!([{"kind": "timeout", "tag": "slow", "sleep": 30}]));
    let reserved = format!("{}:reserved", q("default"));

    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
    let status = php.wait();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(9),
        "queue:work kills itself: {status}"
    );
    // The job stays reserved, attempt 1 counted.
    let left = Payload::containing(["\"attempts\":1"]);
    s.assert_state(layout().reserved(left, Score::Any));
    // Reclaimed after retry_after (made due here): the last try fails it.
    s.redis.make_due(&reserved);
    let mut php = app.queue_work(&["--stop-when-empty", "--sleep=0"]);
    assert_eq!(php.wait().signal(), Some(9), "queue:work kills itself");
    assert_eq!(app.attempts("slow"), [1, 2]);
    let row = Failed::row().exception(TIMED_OUT);
    s.assert_state(layout().failed([row]));
    assert_eq!(app.events("failed", "slow").len(), 1, "failed() ran");

    // laravel-worker, same job, same layout: one run, no reclaim wait.
    let s = Scene::new();
    let app = App::new(&s).unwrap();
    let config = app.config(&s, Transport::PerJob);
    app.dispatch(json!([{"kind": "timeout", "tag": "slow", "sleep": 30}]));
    // The worker lives on.
    let d = s.run(&config, &["--stop-when-empty", "--sleep=0", "--json"]);
    let statuses: Vec<String> = d
        .events()
        .iter()
        .map(|e| e["status"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        statuses,
        ["starting", "released_after_exception", "starting", "failed"]
    );
    assert_eq!(app.attempts("slow"), [1, 2]);
    // The same class and message as queue:work's row ([app] laravel);
    // the detail below says how the handler was stopped.
    let row = Failed::row()
        .exception(TIMED_OUT)
        .containing("was killed after 1 s");
    s.assert_state(layout().failed([row]));
    assert_eq!(app.events("failed", "slow").len(), 1, "failed() ran");
}
