//! Redis protocol compatibility (protocol §15): reservation, deletion,
//! notify bookkeeping, delayed migration, poison payloads, cjson fidelity.
//! Each test asserts the Redis state afterwards, not just that a job ran.

use crate::common;

use common::{Failed, GATED, Job, Payload, QueueState, Scene, Score, now};
use serde_json::json;

const DELAYED: &str = "laravel_database_queues:default:delayed";

/// Case 1: a job pushed the way PHP pushes it is reserved with attempts 1,
/// scored now + retry_after, and the ready and notify lists are emptied.
#[test]
fn case01_push_interop_reserves_like_laravel() {
    let s = Scene::new();
    let config = s.config().recording(GATED).retry_after(90).write();
    let job = Job::laravel8("App\\Jobs\\SendMail");
    s.push(&job);

    let mut d = s.work(&config, &["--once", "--json"]);
    let starting = d.wait_event("starting");
    assert_eq!(starting["attempts"], 1, "{starting}");
    s.wait_for_file("started");
    let reserved = Payload::job(&job, 1);
    s.assert_state(QueueState::empty().reserved(reserved, Score::In(90)));

    s.touch("go");
    d.expect_exit(0);
    assert_eq!(s.log(), vec![job.run_line(1)]);
}

/// Case 3: after success the reserved member is gone and no key is left.
#[test]
fn case03_success_leaves_no_keys() {
    let (s, config) = Scene::recording("exit 0");
    s.push(&Job::laravel13("App\\Jobs\\Ok"));
    let d = s.run(&config, &["--once", "--json"]);
    let done = d.event("success");
    for (field, value) in [
        ("result", "deleted"),
        ("connection", "redis"),
        ("queue", "default"),
    ] {
        assert_eq!(done[field], value, "{field} of {done}");
    }
    s.assert_state(QueueState::empty());
}

/// Case 21: N pushes and N pops leave the notify list absent.
#[test]
fn case21_notify_list_ends_empty() {
    let (s, config) = Scene::recording("exit 0");
    s.push_on("default", &Job::numbered("App\\Jobs\\N@handle", 5));
    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.log().len(), 5, "every job ran: {:?}", s.log());
    s.assert_state(QueueState::empty());
}

/// Case 32: a payload that is not JSON is not lost: it leaves the ready
/// list for the failed store with a clear reason, and the worker goes on
/// to the next job.
#[test]
fn case32_poison_payload_goes_to_the_failed_store() {
    let (s, config) = Scene::recording("exit 0");
    s.redis.push("default", "not json");
    s.redis.push("default", r#"{"job":"no attempts"}"#);
    s.push(&Job::laravel8("App\\Jobs\\Good"));

    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.log().len(), 1, "only the good job runs: {:?}", s.log());
    let not_json = Failed::row()
        .payload("not json")
        .exception("Illuminate\\Queue\\InvalidPayloadException: ")
        .containing("not a JSON object");
    let no_attempts = Failed::row()
        .payload(r#"{"job":"no attempts"}"#)
        .containing("attempts");
    s.assert_state(QueueState::empty().failed([not_json, no_attempts]));
}

/// A poison payload that carries its own `uuid` (valid JSON, no usable
/// `attempts`) is recorded under that uuid, so the operator finds it by
/// the job's own id (`failed`, `retry <uuid>`), not under a new one.
#[test]
fn a_poison_payload_keeps_its_own_uuid_in_the_failed_store() {
    let (s, config) = Scene::recording("exit 0");
    let missing = r#"{"uuid":"5f0c1a7e-poison-missing","job":"x"}"#;
    let string = r#"{"uuid":"5f0c1a7e-poison-string","attempts":"many"}"#;
    s.redis.push("default", missing);
    s.redis.push("default", string);

    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(s.log(), Vec::<String>::new(), "no poison payload runs");
    let row = |uuid: &str, payload: &str| {
        Failed::uuid(uuid)
            .payload(payload)
            .exception("Illuminate\\Queue\\InvalidPayloadException: ")
            .containing("attempts")
    };
    s.assert_state(QueueState::empty().failed([
        row("5f0c1a7e-poison-missing", missing),
        row("5f0c1a7e-poison-string", string),
    ]));
}

/// Case 4: a delayed job is not popped before its time and stays in
/// `:delayed`; once due it is migrated to the ready list (with a notify
/// token), reserved and run, and nothing is left behind.
#[test]
fn case04_delayed_job_waits_for_its_time() {
    let (s, config) = Scene::recording("exit 0");
    let job = Job::laravel8("App\\Jobs\\Later");
    let at = now() + 3600;
    s.redis.later("default", at, &job.build());

    s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(s.log(), Vec::<String>::new(), "not run before its time");
    s.assert_state(QueueState::empty().delayed(&job, Score::At(at)));

    s.redis.make_due(DELAYED);
    s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty());
}

/// Case 5: with `migration_batch_size = 2` one pop migrates exactly the two
/// lowest-scored due jobs, oldest first, to the tail of the ready list.
#[test]
fn case05_migration_batch_size_limits_each_migrate() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").migration_batch_size(2);
    let config = config.write();
    let jobs: Vec<Job> = (0..5).map(|_| Job::laravel8("App\\Jobs\\Batch")).collect();
    for (i, job) in jobs.iter().enumerate() {
        s.redis
            .later("default", now() - 50 + i as i64 * 10, &job.build());
    }

    s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(s.log(), vec![jobs[0].run_line(1)]);
    // Two tokens pushed by the migration, one taken by the pop.
    let migrated = QueueState::empty().ready([&jobs[1]]).notify(1);
    let expected = jobs[2..]
        .iter()
        .fold(migrated, |state, job| state.delayed(job, Score::Any));
    s.assert_state(expected);
}

/// Case 19: `--queue=high,low` serves high first, then low.
#[test]
fn case19_priority_queues_in_order() {
    let (s, config) = Scene::recording("exit 0");
    let (low, high) = (
        Job::numbered("App\\Jobs\\Low@handle", 3),
        Job::numbered("App\\Jobs\\High@handle", 3),
    );
    for (l, h) in low.iter().zip(&high) {
        s.push_on("low", [l]);
        s.push_on("high", [h]);
    }
    let args = [
        "--queue=high,low",
        "--stop-when-empty",
        "--sleep=0",
        "--json",
    ];
    let d = s.run(&config, &args);
    let order = ["high", "high", "high", "low", "low", "low"];
    let reserved_from = d.event_fields("starting", "queue");
    assert_eq!(reserved_from, order, "queues in the order reserved");
    let queues: Vec<String> = s
        .log()
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(queues, order, "queues in the order run");
    s.assert_state(QueueState::empty());
}

/// Case 31: cjson rewrites the reserved copy (big integers at 14 digits,
/// `[]` as `{}`); the worker releases and deletes by those exact bytes.
#[test]
fn case31_cjson_reserved_bytes_are_the_handle() {
    let (s, config) = Scene::recording("[ \"$LARAVEL_WORKER_ATTEMPT\" = 2 ] && exit 0; exit 1");
    s.push(&Job::string(
        "App\\Jobs\\Big@handle",
        json!({"n": 123456789012345678u64, "e": []}),
    ));

    s.run(&config, &["--once", "--tries=2"]);
    let cjson = Payload::containing(["1.2345678901235e+17", r#""e":{}"#, r#""attempts":1"#]);
    s.assert_state(QueueState::empty().delayed(cjson, Score::Any));

    s.redis.make_due(DELAYED);
    s.run(&config, &["--once", "--tries=2"]);
    assert_eq!(s.log().len(), 2, "run twice: {:?}", s.log());
    s.assert_state(QueueState::empty());
}

/// Case 20: an idle worker blocked on BLPOP of `:notify` wakes for a push.
/// With `block_for = 60` and `--sleep=60`, only the notify wake-up can get
/// the job started within the harness's 30 s limit.
#[test]
fn case20_block_for_wakes_on_push() {
    let s = Scene::new();
    let config = s.config().recording("exit 0").block_for(60).write();
    let args = [
        "--queue=high,default",
        "--sleep=60",
        "--json",
        "--max-jobs=1",
    ];
    let mut d = s.work(&config, &args);
    common::wait_until("the worker to block in BLPOP", || {
        let info: String = s.redis.cmd(&["INFO", "clients"]);
        info.contains("blocked_clients:1")
    });
    let job = Job::laravel13("App\\Jobs\\Wake");
    s.push(&job);
    let starting = d.wait_event("starting");
    assert_eq!(starting["id"], job.id(), "{starting}");
    assert_eq!(starting["queue"], "default", "{starting}");
    d.expect_exit(0);
    s.assert_state(QueueState::empty());
}

/// Without `--json`, one artisan-style line per job: time, displayName,
/// dots, run time, DONE or FAIL.
#[test]
fn artisan_style_line_per_job() {
    let s = Scene::new();
    let good_only = "[ \"$LARAVEL_WORKER_JOB_NAME\" = 'App\\Jobs\\Good' ]";
    let config = s.config().script(good_only).write();
    let pair = Job::named(["Good", "Bad"]);
    s.push_on("default", &pair);
    let d = s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.stdout.len(), 2, "one line a job: {:?}", d.stdout);
    for (line, name, word) in [
        (&d.stdout[0], "App\\Jobs\\Good", "DONE"),
        (&d.stdout[1], "App\\Jobs\\Bad", "FAIL"),
    ] {
        let rest = line.strip_prefix("  ").expect("two spaces first");
        let (date, rest) = rest.split_at(19);
        assert!(
            chrono::NaiveDateTime::parse_from_str(date, "%Y-%m-%d %H:%M:%S").is_ok(),
            "a date first: {line}"
        );
        let rest = rest
            .strip_prefix(' ')
            .and_then(|r| r.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} after the date: {line}"));
        assert!(rest.starts_with(" ..."), "dots after the name: {line}");
        assert!(
            rest.ends_with(&format!("ms {word}")) || rest.ends_with(&format!("s {word}")),
            "the run time and {word} at the end: {line}"
        );
    }
}
