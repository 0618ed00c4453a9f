//! Job lifecycle compatibility (protocol §15 cases 6–17): release with
//! backoff, max tries, retryUntil, maxExceptions, timeouts. Each test
//! asserts the Redis, cache and failed_jobs state afterwards.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Daemon, Failed, Job, Payload, QueueState, Scene, Score};
use serde_json::json;

const DELAYED: &str = "laravel_database_queues:default:delayed";

/// A scene whose handler is `h.sh` running `body` (after recording the call
/// when `recording`), with a one-second kill grace for timed-out handlers
/// and `queue` applied to the config.
fn scene_with(
    body: &str,
    recording: bool,
    queue: impl FnOnce(common::Config<'_>) -> common::Config<'_>,
) -> (Scene, PathBuf) {
    let s = Scene::new();
    let handler = if recording {
        s.recording_script("h.sh", body)
    } else {
        s.script("h.sh", body)
    };
    let config = queue(s.config().kill_grace(1).command(&handler)).write();
    (s, config)
}

/// Pushes `job`, then runs `work ARGS` once to its end (exit 0) through a
/// recording handler running `body`. The config is returned for more runs.
fn run_one(body: &str, job: &Job, args: &[&str]) -> (Scene, PathBuf, Daemon) {
    let (s, config) = scene_with(body, true, |c| c);
    s.push(job);
    let d = s.run(&config, args);
    (s, config, d)
}

/// The job's one failed row, as it must read: `exception` starting the
/// text, the payload as given.
fn failed_once(job: &Job, payload: impl Into<Payload>, exception: &str) -> QueueState {
    QueueState::empty().failed([Failed::job(job).payload(payload).exception(exception)])
}

/// A 13.x job `App\Jobs\Throws` with these `maxExceptions` and `maxTries`.
fn throwing_job(max_exceptions: i64, max_tries: i64) -> Job {
    Job::laravel13("App\\Jobs\\Throws")
        .set("maxExceptions", json!(max_exceptions))
        .set("maxTries", json!(max_tries))
}

/// The cache Redis (DB 1) key of a job's exception counter.
fn exceptions_key(uuid: &str) -> String {
    format!("laravel_database_laravel_cache:job-exceptions:{uuid}")
}

/// A handler body for timeout tests: on attempt 1 it starts two background
/// sleeps (one ignoring SIGTERM), records their pids, and sleeps in the
/// foreground; other attempts and the failed hook end at once.
const SLOW_FIRST_ATTEMPT: &str = r#"if [ "$LARAVEL_WORKER_MODE" = failed ]; then exit 0; fi
if [ "$LARAVEL_WORKER_ATTEMPT" = 1 ]; then
  sleep 300 &
  echo $! > "$DIR/bg1.tmp"
  ( trap '' TERM; exec sleep 300 ) &
  echo $! > "$DIR/bg2.tmp"
  mv "$DIR/bg1.tmp" "$DIR/bg1.pid"
  mv "$DIR/bg2.tmp" "$DIR/bg2.pid"
  echo "slow-stderr-tail" >&2
  sleep 300
fi
exit 0"#;

/// Case 6: an exception with `--backoff=10` and tries left moves the
/// reserved copy (attempts 1), byte for byte, to `:delayed` at now + 10.
#[test]
fn case06_exception_releases_with_backoff() {
    let job = Job::laravel8("App\\Jobs\\Flaky");
    let body = "cat > \"$DIR/stdin.json\"; echo boom >&2; exit 1";
    let args = ["--once", "--json", "--tries=3", "--backoff=10"];
    let (s, _, d) = run_one(body, &job, &args);

    // The reserved string moves to delayed.
    let reserved = s.read("stdin.json");
    s.assert_state(QueueState::empty().delayed(reserved.as_str(), Score::In(10)));
    let member = Payload::from(reserved);
    assert_eq!(member, Payload::reserved(&job, 1), "the reserved copy");
    assert_eq!(s.log(), vec![job.run_line(1)]);
    let released = d.event("released_after_exception");
    assert_eq!(released["result"], "released", "{released}");
    assert_eq!(released["attempts"], 1, "{released}");
    assert_eq!(
        released["exception"], "LaravelWorker\\HandlerFailedException",
        "{released}"
    );
}

/// Case 7: payload backoff "1,5,30" gives delays 1, 5, 30, 30 for failures
/// 1 to 4; the fifth failure (tries = 5) fails the job.
#[test]
fn case07_backoff_list_from_payload() {
    let (s, cfg) = scene_with("exit 1", true, |c| c);
    let job = Job::laravel13("App\\Jobs\\Backoff").set("backoff", json!("1,5,30"));
    s.push(&job);

    for (attempt, delay) in [(1, 1), (2, 5), (3, 30), (4, 30)] {
        s.run(&cfg, &["--once", "--json", "--tries=5", "--backoff=99"]);
        let released = Payload::job(&job, attempt);
        s.assert_state(QueueState::empty().delayed(released, Score::In(delay)));
        s.redis.make_due(DELAYED);
    }

    s.run(&cfg, &["--once", "--tries=5", "--backoff=99"]);
    s.assert_state(QueueState::empty().failed([Failed::job(&job)]));
    let attempts: Vec<String> = s
        .log()
        .iter()
        .filter(|l| l.starts_with("run "))
        .map(|l| l.split(' ').nth(3).unwrap_or_default().to_string())
        .collect();
    assert_eq!(attempts, ["1", "2", "3", "4", "5"], "runs' attempt numbers");
}

/// Case 9: after the third failure with `--tries=3` the job is failed: one
/// row with the raw body of attempt 3 (cjson form, attempts 2) and the
/// handler's stderr, nothing left in the queue, and the failed hook called.
#[test]
fn case09_max_tries_reached_fails_the_job() {
    let (s, cfg) = scene_with(
        "if [ \"$LARAVEL_WORKER_MODE\" = failed ]; then exit 0; fi; echo \"boom-attempt-$LARAVEL_WORKER_ATTEMPT\" >&2; exit 1",
        true,
        |c| c,
    );
    let job = Job::string("App\\Jobs\\Flaky@handle", json!({"order": 7, "tags": []}));
    let original = job.build();
    s.push(&job);

    for attempt in 1..=2 {
        s.run(&cfg, &["--once", "--tries=3"]);
        let released = Payload::job(&job, attempt);
        s.assert_state(QueueState::empty().delayed(released, Score::Any));
        s.redis.make_due(DELAYED);
    }
    let raw_of_attempt_3 = s.redis.zrange(DELAYED).remove(0).0;
    s.run(&cfg, &["--once", "--tries=3"]);

    let row = Failed::job(&job)
        .payload(raw_of_attempt_3.as_str())
        .exception("LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky exited with status 1")
        .containing("boom-attempt-3");
    s.assert_state(QueueState::empty().failed([row]));
    assert_ne!(raw_of_attempt_3, original, "attempt 3 runs the cjson copy");
    assert!(
        raw_of_attempt_3.contains("\"attempts\":2"),
        "attempts 2 before the third run: {raw_of_attempt_3}"
    );
    assert!(
        raw_of_attempt_3.contains("\"tags\":{}"),
        "cjson turns [] into {{}}: {raw_of_attempt_3}"
    );
    let runs = (1..=3).map(|n| job.run_line(n));
    let calls: Vec<String> = runs.chain([job.failed_line(3)]).collect();
    assert_eq!(s.log(), calls);
}

/// Case 10: payload `maxTries:2` beats `--tries=5`: failed after attempt 2.
#[test]
fn case10_payload_max_tries_beats_the_flag() {
    let job = Job::laravel8("App\\Jobs\\Twice").set("maxTries", json!(2));
    let body = "echo \"$LARAVEL_WORKER_MAX_TRIES\" > \"$DIR/max_tries\"; exit 1";
    let (s, cfg, _) = run_one(body, &job, &["--once", "--tries=5"]);
    assert_eq!(s.read("max_tries"), "2", "LARAVEL_WORKER_MAX_TRIES");
    let released = Payload::job(&job, 1);
    s.assert_state(QueueState::empty().delayed(released, Score::Any));
    s.redis.make_due(DELAYED);

    s.run(&cfg, &["--once", "--tries=5"]);
    let last = Payload::containing(["\"attempts\":1"]);
    s.assert_state(QueueState::empty().failed([Failed::job(&job).payload(last)]));
    let runs = s.log().iter().filter(|l| l.starts_with("run ")).count();
    assert_eq!(runs, 2, "run twice: {:?}", s.log());
}

/// Case 10: `maxTries:0` is unlimited: attempt 4 with `--tries=1` is run
/// and released, not failed.
#[test]
fn case10_max_tries_zero_is_unlimited() {
    let job = Job::laravel13("App\\Jobs\\Forever")
        .set("maxTries", json!(0))
        .set("attempts", json!(3));
    let (s, ..) = run_one("exit 1", &job, &["--once", "--tries=1", "--backoff=7"]);
    assert_eq!(s.log(), vec![job.run_line(4)]);
    let released = Payload::job(&job, 4);
    s.assert_state(QueueState::empty().delayed(released, Score::In(7)));
}

/// Case 11: `retryUntil` in the future wins over the attempt count.
#[test]
fn case11_retry_until_in_the_future_still_runs() {
    let job = Job::laravel8("App\\Jobs\\Until")
        .set("retryUntil", json!(common::now() + 3600))
        .set("attempts", json!(5));
    let (s, ..) = run_one("exit 0", &job, &["--once", "--tries=1"]);
    assert_eq!(s.log(), vec![job.run_line(6)]);
    s.assert_state(QueueState::empty());
}

/// Case 11: once `retryUntil` has passed the pop fails the job at once
/// with MaxAttemptsExceeded, without running the handler.
#[test]
fn case11_retry_until_passed_fails_without_running() {
    let (s, cfg) = scene_with(
        "echo \"$LARAVEL_WORKER_MODE\" >> \"$DIR/modes\"\nif [ \"$LARAVEL_WORKER_MODE\" = run ]; then echo \"run $LARAVEL_WORKER_ATTEMPT\" >> \"$LOG\"; fi\nexit 0",
        false,
        |c| c,
    );
    let job = Job::laravel13("App\\Jobs\\Late").set("retryUntil", json!(common::now() - 10));
    s.push(&job);

    s.run(&cfg, &["--once", "--tries=5"]);
    assert_eq!(s.log(), Vec::<String>::new(), "the handler ran");
    assert_eq!(s.read("modes"), "failed", "only the failed hook is called");
    s.assert_state(failed_once(
        &job,
        &job,
        "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\Late has been attempted too many times.",
    ));
}

/// Case 12: a job popped with attempts = tries already exceeds them: it is
/// failed without running, its reservation removed, and the handler is
/// called once in failed mode with the recorded exception.
#[test]
fn case12_already_exceeded_on_pop() {
    let job = Job::string("App\\Jobs\\Worn@handle", json!({"n": 1})).set("attempts", json!(3));
    let body = "if [ \"$LARAVEL_WORKER_MODE\" = failed ]; then printf '%s' \"$LARAVEL_WORKER_EXCEPTION\" > \"$DIR/exception\"; fi; exit 0";
    let (s, _, d) = run_one(body, &job, &["--once", "--json", "--tries=3"]);
    assert_eq!(s.log(), vec![job.failed_line(4)]);
    s.assert_state(failed_once(
        &job,
        &job,
        "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\Worn has been attempted too many times.",
    ));
    let row = s.failed_rows().remove(0);
    assert_eq!(
        s.read("exception"),
        row.exception.trim_end(),
        "the failed hook gets the recorded exception"
    );
    let failed = d.event("failed");
    assert_eq!(failed["attempts"], 4, "{failed}");
    assert_eq!(
        failed["exception"], "Illuminate\\Queue\\MaxAttemptsExceededException",
        "{failed}"
    );
}

/// Case 13: `maxExceptions:2`: the first exception leaves a counter of 1
/// with a one-day TTL in the cache; the second deletes it and fails the job.
#[test]
fn case13_max_exceptions_counter_in_the_cache() {
    let job = throwing_job(2, 10);
    let (s, cfg, _) = run_one("exit 1", &job, &["--once", "--tries=1"]);
    let key = exceptions_key(&job.uuid());
    let value: Option<String> = s.redis.cache(&["GET", &key]);
    assert_eq!(
        value.as_deref(),
        Some("1"),
        "cache keys: {:?}",
        s.redis.keys(1)
    );
    let ttl: i64 = s.redis.cache(&["TTL", &key]);
    assert!(
        (86_390..=86_400).contains(&ttl),
        "ttl {ttl}, expected a day"
    );
    let released = Payload::job(&job, 1);
    s.assert_state(QueueState::empty().delayed(released, Score::Any));
    s.redis.make_due(DELAYED);

    s.run(&cfg, &["--once", "--tries=1"]);
    let exists: i64 = s.redis.cache(&["EXISTS", &key]);
    assert_eq!(exists, 0, "counter left: {:?}", s.redis.keys(1));
    let last = Payload::containing(["\"attempts\":1"]);
    s.assert_state(QueueState::empty().failed([Failed::job(&job).payload(last)]));
}

/// Case 13, the last try: the exception still counts towards
/// maxExceptions, as Laravel's `handleJobException` runs both checks; the
/// job fails on its tries and the counter, below its limit, stays at 1 (it
/// expires within a day). Its `--json` line reports the result `deleted`.
#[test]
fn case13_max_exceptions_counts_the_last_try_too() {
    let job = throwing_job(5, 1);
    let (s, _, d) = run_one("exit 1", &job, &["--once", "--json"]);
    // A failed job's `--json` result is `deleted`, as Laravel reports it.
    assert_eq!(d.event("failed")["result"], "deleted");
    s.assert_state(QueueState::empty().failed([Failed::job(&job)]));
    let counter: Option<String> = s.redis.cache(&["GET", &exceptions_key(&job.uuid())]);
    assert_eq!(
        counter.as_deref(),
        Some("1"),
        "cache keys: {:?}",
        s.redis.keys(1)
    );
}

/// `[cache] store = "none"`: nothing counts exceptions, so `maxExceptions`
/// does not apply (the job is released, tries being left) and no cache key
/// is written (protocol §7.5).
#[test]
fn without_a_cache_max_exceptions_is_not_counted() {
    let (s, cfg) = scene_with("exit 1", true, |c| {
        c.without("cache").set("cache", "store", "none")
    });
    let job = throwing_job(1, 3);
    s.push(&job);
    s.run(&cfg, &["--once"]);
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::Any));
    assert!(
        s.redis.keys(1).is_empty(),
        "cache keys: {:?}",
        s.redis.keys(1)
    );
}

/// The deprecated `--delay` is still read, and the larger of it and
/// `--backoff` is the delay (protocol §6.1).
#[test]
fn the_larger_of_delay_and_backoff_is_the_delay() {
    let job = Job::laravel8("App\\Jobs\\Flaky");
    let args = ["--once", "--tries=3", "--backoff=3", "--delay=7"];
    run_one("exit 1", &job, &args)
        .0
        .assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(7)));
}

/// Case 8: a 13.x payload with `"delay":300` and no backoff of its own is
/// released for 300 s when it fails, whatever `--backoff` says (Laravel's
/// `backoff ?? delay`).
#[test]
fn case08_dispatch_delay_is_the_backoff_without_one() {
    let job = Job::laravel13("App\\Jobs\\Later")
        .set("delay", json!(300))
        .set("backoff", json!(null));
    let (s, _, _) = run_one("exit 1", &job, &["--once", "--tries=3", "--backoff=0"]);
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(300)));
}

/// Case 14: a timeout kills the handler's whole process group, the daemon
/// carries on (exit 0 after `--once`), and the job is released at once with
/// attempts 1 (documented difference: Laravel leaves it reserved until
/// retry_after); the next run is attempt 2.
#[test]
fn case14_timeout_kills_the_group_and_releases() {
    let (s, cfg) = scene_with(SLOW_FIRST_ATTEMPT, true, |c| c.retry_after(90));
    let job = Job::laravel8("App\\Jobs\\Slow");
    s.push(&job);

    let started = Instant::now();
    let mut d = s.work(&cfg, &["--once", "--json", "--tries=3", "--timeout=1"]);
    let starting = d.wait_event("starting");
    assert_eq!(starting["attempts"], 1, "{starting}");
    s.wait_for_file("bg2.pid");
    let (bg1, bg2) = (s.read_pid("bg1.pid"), s.read_pid("bg2.pid"));
    assert!(
        common::alive(bg1) && common::alive(bg2),
        "background sleeps must be running"
    );
    let reserved_now = s.redis.zrange("laravel_database_queues:default:reserved");
    assert_eq!(reserved_now.len(), 1, "reserved while it runs");

    d.expect_exit(0);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    common::wait_dead(bg1);
    common::wait_dead(bg2);

    // The reserved copy is released.
    let raw = reserved_now[0].0.as_str();
    s.assert_state(QueueState::empty().delayed(raw, Score::In(0)));
    assert_eq!(Payload::from(raw), Payload::job(&job, 1), "attempts 1");
    let released = d.event("released_after_exception");
    assert_eq!(
        released["exception"], "Illuminate\\Queue\\TimeoutExceededException",
        "{released}"
    );
    // The kill is logged: the job, its timeout and the signal that ended it
    // (fields are logged as Rust strings: the job name's `\` doubled).
    let parts = [
        r#"job="App\\Jobs\\Slow""#,
        "timeout=1",
        r#"signal="SIGTERM""#,
    ];
    let line = d.log_line("ran past its timeout", &parts);
    assert!(line.contains(&job.id()), "{line}");

    s.redis.make_due(DELAYED);
    s.run(&cfg, &["--once", "--tries=3", "--timeout=1"]);
    assert_eq!(s.log(), vec![job.run_line(1), job.run_line(2)]);
    s.assert_state(QueueState::empty());
}

/// Runs `job` with `--tries=TRIES --timeout=1` through the slow handler,
/// which times out.
fn time_out(job: &Job, tries: &str) -> Scene {
    let (s, ..) = run_one(SLOW_FIRST_ATTEMPT, job, &["--once", tries, "--timeout=1"]);
    s
}

/// Case 15: a timeout on the last try fails the job with
/// TimeoutExceededException; nothing stays reserved.
#[test]
fn case15_timeout_on_the_last_try_fails() {
    let job = Job::laravel13("App\\Jobs\\Slow");
    let s = time_out(&job, "--tries=1");
    common::wait_dead(s.read_pid("bg1.pid"));
    common::wait_dead(s.read_pid("bg2.pid"));
    let row = Failed::job(&job)
        .payload(&job)
        .exception("Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Slow has timed out.")
        .containing("slow-stderr-tail");
    s.assert_state(QueueState::empty().failed([row]));
    assert_eq!(s.log(), vec![job.run_line(1), job.failed_line(1)]);
}

/// Case 16: `failOnTimeout:true` fails a timed-out job even with tries left.
#[test]
fn case16_fail_on_timeout() {
    let job = Job::laravel8("App\\Jobs\\Strict").set("failOnTimeout", json!(true));
    let s = time_out(&job, "--tries=3");
    s.assert_state(failed_once(
        &job,
        Payload::Any,
        "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Strict has timed out.",
    ));
}

/// Case 17: payload `timeout:1` overrides `--timeout=60`.
#[test]
fn case17_payload_timeout_shortens_the_flag() {
    let job = Job::string("App\\Jobs\\Quick@handle", json!({})).set("timeout", json!(1));
    let started = Instant::now();
    let (s, ..) = run_one(
        "if [ \"$LARAVEL_WORKER_MODE\" = failed ]; then exit 0; fi; echo \"$LARAVEL_WORKER_TIMEOUT\" > \"$DIR/timeout\"; sleep 300",
        &job,
        &["--once", "--tries=1", "--timeout=60"],
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(15),
        "took {took:?}"
    );
    assert_eq!(s.read("timeout"), "1", "LARAVEL_WORKER_TIMEOUT");
    let row = Failed::job(&job)
        .exception("Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Quick has timed out.")
        .containing("was killed after 1 s");
    s.assert_state(QueueState::empty().failed([row]));
}

/// Case 17: payload `timeout:0` means no limit, whatever `--timeout` says.
#[test]
fn case17_payload_timeout_zero_is_unlimited() {
    let job = Job::laravel13("App\\Jobs\\Long").set("timeout", json!(0));
    let body = "echo \"$LARAVEL_WORKER_TIMEOUT\" > \"$DIR/timeout\"; sleep 2; exit 0";
    let args = ["--once", "--json", "--tries=1", "--timeout=1"];
    let (s, _, d) = run_one(body, &job, &args);
    assert_eq!(s.read("timeout"), "0", "LARAVEL_WORKER_TIMEOUT");
    let done = d.event("success");
    assert_eq!(done["result"], "deleted", "{done}");
    let took = done["duration"].as_f64().unwrap_or_default();
    assert!(took >= 2.0, "ran its 2 s: {done}");
    s.assert_state(QueueState::empty());
    assert_eq!(s.log(), vec![job.run_line(1)]);
}
