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
    let handler = s.recording_script("h.sh", "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done");
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
    assert!((reserved[0].1 - (now() + 90)).abs() <= 2, "score {}", reserved[0].1);

    s.touch("go");
    assert_eq!(d.code(), Some(0));
    assert_eq!(s.log(), vec![format!("run App\\Jobs\\SendMail {} 1 default", job.id())]);
}

/// Case 3: after success the reserved member is gone and no key is left.
#[test]
fn case03_success_leaves_no_keys() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    s.redis.push("default", &Job::laravel13("App\\Jobs\\Ok").build());

    let mut d = s.work_until_exit(&config, &["--once", "--json"]);
    assert_eq!(d.code(), Some(0));
    let done = d.events().into_iter().find(|e| e["status"] == "success").unwrap();
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
        s.redis.push("default", &Job::string("App\\Jobs\\N@handle", json!({"i": i})).build());
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
    assert!(rows[0].exception.starts_with("Illuminate\\Queue\\InvalidPayloadException: "), "{}", rows[0].exception);
    assert!(rows[0].exception.contains("not a JSON object"));
    assert_eq!(rows[1].payload, r#"{"job":"no attempts"}"#);
    assert!(rows[1].exception.contains("attempts"));
    assert_eq!(rows[0].queue, "default");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}
