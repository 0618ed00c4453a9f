//! Crash recovery and reservations (protocol §15 case 18, §6.7): a daemon
//! killed mid-job leaves its job reserved; once `retry_after` passes another
//! daemon reclaims it with the attempt counted. A live daemon renews its
//! reservation, so a long job is never run twice.

mod common;

use common::payloads::Job;
use common::{Scene, now, q};
use nix::sys::signal::Signal;

/// Case 18: SIGKILL the daemon mid-job. Its handler dies with it; after
/// `retry_after` a second daemon reclaims the job and runs it as attempt 2.
#[test]
fn case18_killed_daemon_job_is_reclaimed_after_retry_after() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "if [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ]; then echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; exec sleep 300; fi",
    );
    let config = s.config_with_handler(&handler, "retry_after = 2");
    let job = Job::laravel8("App\\Jobs\\Crash");
    s.redis.push("default", &job.build());

    let mut a = s.work(&config, &["--tries=3", "--json"]);
    a.wait_event("starting");
    s.wait_for_file("started");
    a.signal(Signal::SIGKILL);
    a.wait_exit();
    let handler_pid: i32 = std::fs::read_to_string(s.path("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    common::wait_dead(handler_pid);

    let reserved = s.redis.zrange(&format!("{}:reserved", q("default")));
    assert_eq!(reserved.len(), 1, "the job stays reserved after the crash");
    assert!(reserved[0].0.contains(r#""attempts":1"#));

    let mut b = s.work(
        &config,
        &["--tries=3", "--json", "--max-jobs=1", "--sleep=0.1"],
    );
    let starting = b.wait_event("starting");
    assert_eq!(starting["attempts"], 2);
    assert_eq!(starting["id"], job.id());
    assert!(
        now() >= reserved[0].1,
        "reclaimed only once the reservation expired"
    );
    assert_eq!(b.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![
            format!("run App\\Jobs\\Crash {} 1 default", job.id()),
            format!("run App\\Jobs\\Crash {} 2 default", job.id()),
        ]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

/// Case 18, second half: with `retry_after` null a crashed daemon's job is
/// never reclaimed.
#[test]
fn case18_null_retry_after_never_reclaims() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "touch \"$DIR/started\"; exec sleep 300");
    let config = s.config_with_handler(&handler, "retry_after = \"null\"");
    s.redis
        .push("default", &Job::laravel13("App\\Jobs\\Stuck").build());

    let mut a = s.work(&config, &["--json"]);
    a.wait_event("starting");
    s.wait_for_file("started");
    let reserved_at = now();
    a.signal(Signal::SIGKILL);
    a.wait_exit();

    let reserved = s.redis.zrange(&format!("{}:reserved", q("default")));
    assert_eq!(reserved.len(), 1);
    assert!(reserved[0].1 <= reserved_at, "scored now + 0");
    let mut b = s.work_until_exit(&config, &["--once", "--sleep=0"]);
    assert_eq!(b.code(), Some(0));
    assert_eq!(s.log().len(), 1, "not run again");
    assert_eq!(
        s.redis.zrange(&format!("{}:reserved", q("default"))),
        reserved
    );
}

/// Lease renewal: a job that runs twice as long as `retry_after` is not
/// reclaimed by a second daemon polling the same queue meanwhile. (2 s is
/// the smallest `retry_after` a renewal can protect: see `worker::lease`.)
#[test]
fn running_job_keeps_its_reservation() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "touch \"$DIR/started\"; sleep 4");
    let config = s.config_with_handler(&handler, "retry_after = 2");
    let job = Job::laravel8("App\\Jobs\\Long");
    s.redis.push("default", &job.build());

    let mut a = s.work(&config, &["--once", "--tries=3"]);
    s.wait_for_file("started");
    let mut b = s.work(&config, &["--max-time=4", "--sleep=0.2", "--tries=3"]);
    assert_eq!(a.code(), Some(0));
    assert_eq!(b.code(), Some(0));
    assert_eq!(
        s.log(),
        vec![format!("run App\\Jobs\\Long {} 1 default", job.id())]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}
