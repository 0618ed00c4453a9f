//! Redis protocol compatibility (protocol §15): reservation, deletion,
//! notify bookkeeping, delayed migration, poison payloads, cjson fidelity.
//! Each test asserts the Redis state afterwards, not just that a job ran.

mod common;

use common::payloads::Job;
use common::{Scene, now, q};
use serde_json::json;

/// Case 1: a job pushed the way PHP pushes it is reserved with attempts 1,
/// scored now + retry_after, and the ready and notify lists are emptied.
#[test]
fn case01_push_interop_reserves_like_laravel() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done",
    );
    let config = s.config_with_handler(&handler, "retry_after = 90");
    let job = Job::laravel8("App\\Jobs\\SendMail");
    s.redis.push("default", &job.build());

    let mut d = s.work(&config, &["--once", "--json"]);
    let starting = d.wait_event("starting");
    assert_eq!(starting["attempts"], 1);
    s.wait_for_file("started");

    assert_eq!(s.redis.llen(&q("default")), 0);
    assert!(!s.redis.exists(&format!("{}:notify", q("default"))));
    let reserved = s.redis.zrange(&format!("{}:reserved", q("default")));
    assert_eq!(reserved.len(), 1);
    let member: serde_json::Value = serde_json::from_str(&reserved[0].0).unwrap();
    assert_eq!(member["attempts"], 1);
    assert_eq!(member["uuid"], job.uuid());
    assert!(
        (reserved[0].1 - (now() + 90)).abs() <= 2,
        "score {}",
        reserved[0].1
    );

    s.touch("go");
    assert_eq!(d.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\SendMail {} 1 default", job.id())]
    );
}

/// Case 3: after success the reserved member is gone and no key is left.
#[test]
fn case03_success_leaves_no_keys() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    s.redis
        .push("default", &Job::laravel13("App\\Jobs\\Ok").build());

    let mut d = s.work_until_exit(&config, &["--once", "--json"]);
    assert_eq!(d.code(), Some(0));
    let done = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "success")
        .unwrap();
    assert_eq!(done["result"], "deleted");
    assert_eq!(done["connection"], "redis");
    assert_eq!(done["queue"], "default");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

/// Case 21: N pushes and N pops leave the notify list absent.
#[test]
fn case21_notify_list_ends_empty() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    for i in 0..5 {
        s.redis.push(
            "default",
            &Job::string("App\\Jobs\\N@handle", json!({"i": i})).build(),
        );
    }
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(s.log().len(), 5);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Case 32: a payload that is not JSON is not lost: it leaves the ready
/// list for the failed store with a clear reason, and the worker goes on
/// to the next job.
#[test]
fn case32_poison_payload_goes_to_the_failed_store() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    s.redis.push("default", "not json");
    s.redis.push("default", r#"{"job":"no attempts"}"#);
    let good = Job::laravel8("App\\Jobs\\Good");
    s.redis.push("default", &good.build());

    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(s.log().len(), 1, "only the good job runs");
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].payload, "not json");
    assert!(
        rows[0]
            .exception
            .starts_with("Illuminate\\Queue\\InvalidPayloadException: "),
        "{}",
        rows[0].exception
    );
    assert!(rows[0].exception.contains("not a JSON object"));
    assert_eq!(rows[1].payload, r#"{"job":"no attempts"}"#);
    assert!(rows[1].exception.contains("attempts"));
    assert_eq!(rows[0].queue, "default");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Case 4: a delayed job is not popped before its time and stays in
/// `:delayed`; once due it is migrated to the ready list (with a notify
/// token), reserved and run, and nothing is left behind.
#[test]
fn case04_delayed_job_waits_for_its_time() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let job = Job::laravel8("App\\Jobs\\Later");
    let at = now() + 3600;
    s.redis.later("default", at, &job.build());

    let mut d = s.work_until_exit(&config, &["--once", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert!(s.log().is_empty());
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed, vec![(job.build(), at)]);
    assert!(!s.redis.exists(&q("default")));

    s.redis.make_due(&format!("{}:delayed", q("default")));
    let mut d = s.work_until_exit(&config, &["--once", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Later {} 1 default", job.id())]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Case 5: with `migration_batch_size = 2` one pop migrates exactly the two
/// lowest-scored due jobs, oldest first, to the tail of the ready list.
#[test]
fn case05_migration_batch_size_limits_each_migrate() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "migration_batch_size = 2");
    let jobs: Vec<Job> = (0..5).map(|_| Job::laravel8("App\\Jobs\\Batch")).collect();
    for (i, job) in jobs.iter().enumerate() {
        s.redis
            .later("default", now() - 50 + i as i64 * 10, &job.build());
    }

    let mut d = s.work_until_exit(&config, &["--once", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Batch {} 1 default", jobs[0].id())]
    );
    assert_eq!(s.redis.lrange(&q("default")), vec![jobs[1].build()]);
    let left: Vec<String> = s
        .redis
        .zrange(&format!("{}:delayed", q("default")))
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(
        left,
        vec![jobs[2].build(), jobs[3].build(), jobs[4].build()]
    );
    // Two tokens pushed by the migration, one taken by the pop.
    assert_eq!(s.redis.llen(&format!("{}:notify", q("default"))), 1);
}

/// Case 19: `--queue=high,low` serves high first, then low.
#[test]
fn case19_priority_queues_in_order() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    for i in 0..3 {
        s.redis.push(
            "low",
            &Job::string("App\\Jobs\\Low@handle", json!({"i": i})).build(),
        );
        s.redis.push(
            "high",
            &Job::string("App\\Jobs\\High@handle", json!({"i": i})).build(),
        );
    }
    let mut d = s.work_until_exit(
        &config,
        &[
            "--queue=high,low",
            "--stop-when-empty",
            "--sleep=0",
            "--json",
        ],
    );
    assert_eq!(d.code(), Some(0));
    let order: Vec<String> = d
        .events()
        .iter()
        .filter(|e| e["status"] == "starting")
        .map(|e| e["queue"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(order, ["high", "high", "high", "low", "low", "low"]);
    let queues: Vec<String> = s
        .log()
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(queues, ["high", "high", "high", "low", "low", "low"]);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Case 31: cjson rewrites the reserved copy (big integers at 14 digits,
/// `[]` as `{}`); the worker releases and deletes by those exact bytes.
#[test]
fn case31_cjson_reserved_bytes_are_the_handle() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "[ \"$LARAVEL_WORKER_ATTEMPT\" = 2 ] && exit 0; exit 1",
    );
    let config = s.config_with_handler(&handler, "");
    let job = Job::string(
        "App\\Jobs\\Big@handle",
        json!({"n": 123456789012345678u64, "e": []}),
    );
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--once", "--tries=2"]);
    assert_eq!(d.code(), Some(0));
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    let member = &delayed[0].0;
    assert!(member.contains("1.2345678901235e+17"), "{member}");
    assert!(member.contains(r#""e":{}"#), "{member}");
    assert!(member.contains(r#""attempts":1"#), "{member}");
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);

    s.redis.make_due(&format!("{}:delayed", q("default")));
    let mut d = s.work_until_exit(&config, &["--once", "--tries=2"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(s.log().len(), 2);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

/// Case 20: an idle worker blocked on BLPOP of `:notify` wakes for a push.
/// With `block_for = 60` and `--sleep=60`, only the notify wake-up can get
/// the job started within the harness's 30 s limit.
#[test]
fn case20_block_for_wakes_on_push() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "block_for = 60");
    let mut d = s.work(
        &config,
        &[
            "--queue=high,default",
            "--sleep=60",
            "--json",
            "--max-jobs=1",
        ],
    );
    // Wait until the worker is blocked in BLPOP.
    let deadline = std::time::Instant::now() + common::WAIT;
    loop {
        let info: String = s.redis.cmd(&["INFO", "clients"]);
        if info.contains("blocked_clients:1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "worker never blocked");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let job = Job::laravel13("App\\Jobs\\Wake");
    s.redis.push("default", &job.build());
    let starting = d.wait_event("starting");
    assert_eq!(starting["id"], job.id());
    assert_eq!(starting["queue"], "default");
    assert_eq!(d.code(), Some(0));
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Without `--json`, one artisan-style line per job: time, displayName,
/// dots, run time, DONE or FAIL.
#[test]
fn artisan_style_line_per_job() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "[ \"$LARAVEL_WORKER_JOB_NAME\" = 'App\\Jobs\\Good' ]",
    );
    let config = s.config_with_handler(&handler, "");
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Good").build());
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Bad").build());
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(d.stdout.len(), 2, "{:?}", d.stdout);
    for (line, name, word) in [
        (&d.stdout[0], "App\\Jobs\\Good", "DONE"),
        (&d.stdout[1], "App\\Jobs\\Bad", "FAIL"),
    ] {
        let rest = line.strip_prefix("  ").unwrap();
        let (date, rest) = rest.split_at(19);
        assert!(
            chrono::NaiveDateTime::parse_from_str(date, "%Y-%m-%d %H:%M:%S").is_ok(),
            "{line}"
        );
        let rest = rest.strip_prefix(' ').unwrap().strip_prefix(name).unwrap();
        assert!(rest.starts_with(" ..."), "{line}");
        assert!(
            rest.ends_with(&format!("ms {word}")) || rest.ends_with(&format!("s {word}")),
            "{line}"
        );
    }
}
