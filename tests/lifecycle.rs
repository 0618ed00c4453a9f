//! Job lifecycle compatibility (protocol §15 cases 6–17): release with
//! backoff, max tries, retryUntil, maxExceptions, timeouts. Each test
//! asserts the Redis, cache and failed_jobs state afterwards.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::payloads::Job;
use common::{Scene, now, q};
use serde_json::{Value, json};

/// A config with one handler for everything, a SQLite failed store, the
/// given `[queue]` lines and a one-second kill grace for timed-out handlers.
fn config(s: &Scene, handler: &Path, queue_extra: &str) -> PathBuf {
    let db = s.failed_db();
    s.config_toml(&format!(
        "[queue]\n{queue_extra}\n\n[worker]\nkill_grace = 1\n\n[failed]\nurl = \"{db}\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n",
        handler.display()
    ))
}

fn delayed() -> String {
    format!("{}:delayed", q("default"))
}

fn reserved() -> String {
    format!("{}:reserved", q("default"))
}

/// The single member of `:delayed`, parsed, with its raw text and score.
fn only_delayed(s: &Scene) -> (String, Value, i64) {
    let members = s.redis.zrange(&delayed());
    assert_eq!(members.len(), 1, "delayed: {members:?}");
    let (raw, score) = members[0].clone();
    let parsed: Value = serde_json::from_str(&raw).unwrap();
    (raw, parsed, score)
}

/// Asserts that nothing is left in the ready list, `:delayed` or `:reserved`.
fn assert_queue_empty(s: &Scene) {
    assert_eq!(
        s.redis.llen(&q("default")),
        0,
        "ready: {:?}",
        s.redis.lrange(&q("default"))
    );
    assert_eq!(
        s.redis.zcard(&delayed()),
        0,
        "delayed: {:?}",
        s.redis.zrange(&delayed())
    );
    assert_eq!(
        s.redis.zcard(&reserved()),
        0,
        "reserved: {:?}",
        s.redis.zrange(&reserved())
    );
}

fn assert_close(score: i64, expected: i64) {
    assert!(
        (score - expected).abs() <= 2,
        "score {score}, expected {expected} ±2"
    );
}

fn read_pid(s: &Scene, name: &str) -> i32 {
    std::fs::read_to_string(s.path(name))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn read_trimmed(s: &Scene, name: &str) -> String {
    std::fs::read_to_string(s.path(name))
        .unwrap()
        .trim_end()
        .to_string()
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
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "cat > \"$DIR/stdin.json\"; echo boom >&2; exit 1");
    let cfg = config(&s, &handler, "");
    let job = Job::laravel8("App\\Jobs\\Flaky");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&cfg, &["--once", "--json", "--tries=3", "--backoff=10"]);
    assert_eq!(d.code(), Some(0));

    let (raw, member, score) = only_delayed(&s);
    assert_close(score, now() + 10);
    assert_eq!(member["attempts"], 1);
    assert_eq!(member["uuid"], job.uuid());
    assert_eq!(
        raw,
        read_trimmed(&s, "stdin.json"),
        "the reserved string moves to delayed"
    );
    assert_eq!(s.redis.llen(&q("default")), 0);
    assert_eq!(s.redis.zcard(&reserved()), 0);
    assert!(s.failed_rows().is_empty());
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Flaky {} 1 default", job.id())]
    );
    let released = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "released_after_exception")
        .unwrap();
    assert_eq!(released["result"], "released");
    assert_eq!(released["attempts"], 1);
    assert_eq!(
        released["exception"],
        "LaravelWorker\\HandlerFailedException"
    );
}

/// Case 7: payload backoff "1,5,30" gives delays 1, 5, 30, 30 for failures
/// 1 to 4; the fifth failure (tries = 5) fails the job.
#[test]
fn case07_backoff_list_from_payload() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 1");
    let cfg = config(&s, &handler, "");
    let job = Job::laravel13("App\\Jobs\\Backoff").set("backoff", json!("1,5,30"));
    s.redis.push("default", &job.build());

    for (attempt, delay) in [(1, 1), (2, 5), (3, 30), (4, 30)] {
        let mut d = s.work_until_exit(&cfg, &["--once", "--json", "--tries=5", "--backoff=99"]);
        assert_eq!(d.code(), Some(0));
        let (_, member, score) = only_delayed(&s);
        assert_close(score, now() + delay);
        assert_eq!(member["attempts"], attempt, "after failure {attempt}");
        assert_eq!(s.redis.zcard(&reserved()), 0);
        assert_eq!(s.redis.llen(&q("default")), 0);
        assert!(s.failed_rows().is_empty(), "failed after attempt {attempt}");
        s.redis.make_due(&delayed());
    }

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=5", "--backoff=99"]);
    assert_eq!(d.code(), Some(0));
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    let attempts: Vec<String> = s
        .log()
        .iter()
        .filter(|l| l.starts_with("run "))
        .map(|l| l.split(' ').nth(3).unwrap().to_string())
        .collect();
    assert_eq!(attempts, ["1", "2", "3", "4", "5"]);
}

/// Case 9: after the third failure with `--tries=3` the job is failed: one
/// row with the raw body of attempt 3 (cjson form, attempts 2) and the
/// handler's stderr, nothing left in the queue, and the failed hook called.
#[test]
fn case09_max_tries_reached_fails_the_job() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "if [ \"$LARAVEL_WORKER_MODE\" = failed ]; then exit 0; fi; echo \"boom-attempt-$LARAVEL_WORKER_ATTEMPT\" >&2; exit 1",
    );
    let cfg = config(&s, &handler, "");
    let job = Job::string("App\\Jobs\\Flaky@handle", json!({"order": 7, "tags": []}));
    let original = job.build();
    s.redis.push("default", &original);

    let mut raw_of_attempt_3 = String::new();
    for attempt in 1..=3 {
        if attempt == 3 {
            raw_of_attempt_3 = only_delayed(&s).0;
        }
        let mut d = s.work_until_exit(&cfg, &["--once", "--tries=3"]);
        assert_eq!(d.code(), Some(0));
        if attempt < 3 {
            let (_, member, _) = only_delayed(&s);
            assert_eq!(member["attempts"], attempt);
            assert!(s.failed_rows().is_empty());
            s.redis.make_due(&delayed());
        }
    }

    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.uuid, job.uuid());
    assert_eq!(row.queue, "default");
    assert_eq!(row.connection, "redis");
    assert_eq!(row.payload, raw_of_attempt_3);
    assert_ne!(row.payload, original, "attempt 3 runs the cjson copy");
    assert!(row.payload.contains("\"attempts\":2"), "{}", row.payload);
    assert!(
        row.payload.contains("\"tags\":{}"),
        "cjson turns [] into {{}}: {}",
        row.payload
    );
    assert!(
        row.exception.starts_with(
            "LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky exited with status 1"
        ),
        "{}",
        row.exception
    );
    assert!(
        row.exception.contains("boom-attempt-3"),
        "{}",
        row.exception
    );
    let id = job.id();
    assert_eq!(
        s.log(),
        vec![
            format!("run App\\Jobs\\Flaky {id} 1 default"),
            format!("run App\\Jobs\\Flaky {id} 2 default"),
            format!("run App\\Jobs\\Flaky {id} 3 default"),
            format!("failed App\\Jobs\\Flaky {id} 3 default"),
        ]
    );
}

/// Case 10: payload `maxTries:2` beats `--tries=5`: failed after attempt 2.
#[test]
fn case10_payload_max_tries_beats_the_flag() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "echo \"$LARAVEL_WORKER_MAX_TRIES\" > \"$DIR/max_tries\"; exit 1",
    );
    let cfg = config(&s, &handler, "");
    let job = Job::laravel8("App\\Jobs\\Twice").set("maxTries", json!(2));
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=5"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(read_trimmed(&s, "max_tries"), "2");
    let (_, member, _) = only_delayed(&s);
    assert_eq!(member["attempts"], 1);
    assert!(s.failed_rows().is_empty());
    s.redis.make_due(&delayed());

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=5"]);
    assert_eq!(d.code(), Some(0));
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert!(
        rows[0].payload.contains("\"attempts\":1"),
        "{}",
        rows[0].payload
    );
    let runs = s.log().iter().filter(|l| l.starts_with("run ")).count();
    assert_eq!(runs, 2);
}

/// Case 10: `maxTries:0` is unlimited: attempt 4 with `--tries=1` is run
/// and released, not failed.
#[test]
fn case10_max_tries_zero_is_unlimited() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 1");
    let cfg = config(&s, &handler, "");
    let job = Job::laravel13("App\\Jobs\\Forever")
        .set("maxTries", json!(0))
        .set("attempts", json!(3));
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=1", "--backoff=7"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Forever {} 4 default", job.id())]
    );
    let (_, member, score) = only_delayed(&s);
    assert_eq!(member["attempts"], 4);
    assert_close(score, now() + 7);
    assert_eq!(s.redis.zcard(&reserved()), 0);
    assert!(s.failed_rows().is_empty());
}

/// Case 11: `retryUntil` in the future wins over the attempt count.
#[test]
fn case11_retry_until_in_the_future_still_runs() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let cfg = config(&s, &handler, "");
    let job = Job::laravel8("App\\Jobs\\Until")
        .set("retryUntil", json!(now() + 3600))
        .set("attempts", json!(5));
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=1"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Until {} 6 default", job.id())]
    );
    assert!(s.failed_rows().is_empty());
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Case 11: once `retryUntil` has passed the pop fails the job at once
/// with MaxAttemptsExceeded, without running the handler.
#[test]
fn case11_retry_until_passed_fails_without_running() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "echo \"$LARAVEL_WORKER_MODE\" >> \"$DIR/modes\"\nif [ \"$LARAVEL_WORKER_MODE\" = run ]; then echo \"run $LARAVEL_WORKER_ATTEMPT\" >> \"$LOG\"; fi\nexit 0",
    );
    let cfg = config(&s, &handler, "");
    let job = Job::laravel13("App\\Jobs\\Late").set("retryUntil", json!(now() - 10));
    let body = job.build();
    s.redis.push("default", &body);

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=5"]);
    assert_eq!(d.code(), Some(0));
    assert!(s.log().is_empty(), "the handler ran: {:?}", s.log());
    assert_eq!(
        read_trimmed(&s, "modes"),
        "failed",
        "only the failed hook is called"
    );
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert_eq!(rows[0].payload, body);
    assert!(
        rows[0]
            .exception
            .starts_with("Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\Late has been attempted too many times."),
        "{}",
        rows[0].exception
    );
}

/// Case 12: a job popped with attempts = tries already exceeds them: it is
/// failed without running, its reservation removed, and the handler is
/// called once in failed mode with the recorded exception.
#[test]
fn case12_already_exceeded_on_pop() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "if [ \"$LARAVEL_WORKER_MODE\" = failed ]; then printf '%s' \"$LARAVEL_WORKER_EXCEPTION\" > \"$DIR/exception\"; fi; exit 0",
    );
    let cfg = config(&s, &handler, "");
    let job = Job::string("App\\Jobs\\Worn@handle", json!({"n": 1})).set("attempts", json!(3));
    let body = job.build();
    s.redis.push("default", &body);

    let mut d = s.work_until_exit(&cfg, &["--once", "--json", "--tries=3"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("failed App\\Jobs\\Worn {} 4 default", job.id())]
    );
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (
            row.uuid.as_str(),
            row.connection.as_str(),
            row.queue.as_str()
        ),
        (job.uuid().as_str(), "redis", "default")
    );
    assert_eq!(row.payload, body);
    assert!(
        row.exception.starts_with("Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\Worn has been attempted too many times."),
        "{}",
        row.exception
    );
    assert_eq!(read_trimmed(&s, "exception"), row.exception.trim_end());
    let failed = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "failed")
        .unwrap();
    assert_eq!(failed["attempts"], 4);
    assert_eq!(
        failed["exception"],
        "Illuminate\\Queue\\MaxAttemptsExceededException"
    );
}

/// Case 13: `maxExceptions:2`: the first exception leaves a counter of 1
/// with a one-day TTL in the cache; the second deletes it and fails the job.
#[test]
fn case13_max_exceptions_counter_in_the_cache() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 1");
    let cfg = config(&s, &handler, "");
    let job = Job::laravel13("App\\Jobs\\Throws")
        .set("maxExceptions", json!(2))
        .set("maxTries", json!(10));
    s.redis.push("default", &job.build());
    let key = exceptions_key(&job.uuid());
    let mut cache = s.redis.conn(1);

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=1"]);
    assert_eq!(d.code(), Some(0));
    let value: Option<String> = redis::cmd("GET").arg(&key).query(&mut cache).unwrap();
    assert_eq!(
        value.as_deref(),
        Some("1"),
        "cache keys: {:?}",
        s.redis.keys(1)
    );
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut cache).unwrap();
    assert!((86_390..=86_400).contains(&ttl), "ttl {ttl}");
    let (_, member, _) = only_delayed(&s);
    assert_eq!(member["attempts"], 1);
    assert!(s.failed_rows().is_empty());
    s.redis.make_due(&delayed());

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=1"]);
    assert_eq!(d.code(), Some(0));
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut cache).unwrap();
    assert_eq!(exists, 0, "counter left: {:?}", s.redis.keys(1));
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert!(
        rows[0].payload.contains("\"attempts\":1"),
        "{}",
        rows[0].payload
    );
}

/// Case 14: a timeout kills the handler's whole process group, the daemon
/// carries on (exit 0 after `--once`), and the job is released at once with
/// attempts 1 (documented difference: Laravel leaves it reserved until
/// retry_after); the next run is attempt 2.
#[test]
fn case14_timeout_kills_the_group_and_releases() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", SLOW_FIRST_ATTEMPT);
    let cfg = config(&s, &handler, "retry_after = 90");
    let job = Job::laravel8("App\\Jobs\\Slow");
    s.redis.push("default", &job.build());

    let started = Instant::now();
    let mut d = s.work(&cfg, &["--once", "--json", "--tries=3", "--timeout=1"]);
    assert_eq!(d.wait_event("starting")["attempts"], 1);
    s.wait_for_file("bg2.pid");
    let (bg1, bg2) = (read_pid(&s, "bg1.pid"), read_pid(&s, "bg2.pid"));
    assert!(
        common::alive(bg1) && common::alive(bg2),
        "background sleeps must be running"
    );
    let reserved_now = s.redis.zrange(&reserved());
    assert_eq!(reserved_now.len(), 1);

    assert_eq!(d.code(), Some(0), "the daemon itself must not die");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    common::wait_dead(bg1);
    common::wait_dead(bg2);

    let (raw, member, score) = only_delayed(&s);
    assert_eq!(raw, reserved_now[0].0, "the reserved copy is released");
    assert_eq!(member["attempts"], 1);
    assert_close(score, now());
    assert_eq!(s.redis.zcard(&reserved()), 0);
    assert_eq!(s.redis.llen(&q("default")), 0);
    assert!(s.failed_rows().is_empty());
    let released = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "released_after_exception")
        .unwrap();
    assert_eq!(
        released["exception"],
        "Illuminate\\Queue\\TimeoutExceededException"
    );

    s.redis.make_due(&delayed());
    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=3", "--timeout=1"]);
    assert_eq!(d.code(), Some(0));
    let id = job.id();
    assert_eq!(
        s.log(),
        vec![
            format!("run App\\Jobs\\Slow {id} 1 default"),
            format!("run App\\Jobs\\Slow {id} 2 default")
        ]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

/// Case 15: a timeout on the last try fails the job with
/// TimeoutExceededException; nothing stays reserved.
#[test]
fn case15_timeout_on_the_last_try_fails() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", SLOW_FIRST_ATTEMPT);
    let cfg = config(&s, &handler, "");
    let job = Job::laravel13("App\\Jobs\\Slow");
    let body = job.build();
    s.redis.push("default", &body);

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=1", "--timeout=1"]);
    assert_eq!(d.code(), Some(0));
    common::wait_dead(read_pid(&s, "bg1.pid"));
    common::wait_dead(read_pid(&s, "bg2.pid"));
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.uuid, job.uuid());
    assert_eq!(row.payload, body);
    assert!(
        row.exception.starts_with(
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Slow has timed out."
        ),
        "{}",
        row.exception
    );
    assert!(
        row.exception.contains("slow-stderr-tail"),
        "{}",
        row.exception
    );
    let id = job.id();
    assert_eq!(
        s.log(),
        vec![
            format!("run App\\Jobs\\Slow {id} 1 default"),
            format!("failed App\\Jobs\\Slow {id} 1 default")
        ]
    );
}

/// Case 16: `failOnTimeout:true` fails a timed-out job even with tries left.
#[test]
fn case16_fail_on_timeout() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", SLOW_FIRST_ATTEMPT);
    let cfg = config(&s, &handler, "");
    let job = Job::laravel8("App\\Jobs\\Strict").set("failOnTimeout", json!(true));
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=3", "--timeout=1"]);
    assert_eq!(d.code(), Some(0));
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert!(
        rows[0].exception.starts_with(
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Strict has timed out."
        ),
        "{}",
        rows[0].exception
    );
}

/// Case 17: payload `timeout:1` overrides `--timeout=60`.
#[test]
fn case17_payload_timeout_shortens_the_flag() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "if [ \"$LARAVEL_WORKER_MODE\" = failed ]; then exit 0; fi; echo \"$LARAVEL_WORKER_TIMEOUT\" > \"$DIR/timeout\"; sleep 300",
    );
    let cfg = config(&s, &handler, "");
    let job = Job::string("App\\Jobs\\Quick@handle", json!({})).set("timeout", json!(1));
    s.redis.push("default", &job.build());

    let started = Instant::now();
    let mut d = s.work_until_exit(&cfg, &["--once", "--tries=1", "--timeout=60"]);
    assert_eq!(d.code(), Some(0));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(15),
        "took {took:?}"
    );
    assert_eq!(read_trimmed(&s, "timeout"), "1");
    assert_queue_empty(&s);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].exception.starts_with(
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Quick has timed out."
        ),
        "{}",
        rows[0].exception
    );
    assert!(
        rows[0].exception.contains("was killed after 1 s"),
        "{}",
        rows[0].exception
    );
}

/// Case 17: payload `timeout:0` means no limit, whatever `--timeout` says.
#[test]
fn case17_payload_timeout_zero_is_unlimited() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "echo \"$LARAVEL_WORKER_TIMEOUT\" > \"$DIR/timeout\"; sleep 2; exit 0",
    );
    let cfg = config(&s, &handler, "");
    let job = Job::laravel13("App\\Jobs\\Long").set("timeout", json!(0));
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&cfg, &["--once", "--json", "--tries=1", "--timeout=1"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(read_trimmed(&s, "timeout"), "0");
    let done = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "success")
        .unwrap();
    assert_eq!(done["result"], "deleted");
    assert!(done["duration"].as_f64().unwrap() >= 2.0, "{done}");
    assert!(s.failed_rows().is_empty());
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Long {} 1 default", job.id())]
    );
}
