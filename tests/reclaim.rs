//! Crash recovery and reservations (protocol §15 case 18, §6.7): a daemon
//! killed mid-job leaves its job reserved; once `retry_after` passes another
//! daemon reclaims it with the attempt counted. A live daemon renews its
//! reservation, so a long job is never run twice.

mod common;

use common::{Job, Payload, QueueState, Scene, Score, now};
use nix::sys::signal::Signal;

const RESERVED: &str = "laravel_database_queues:default:reserved";

/// Handler body: on attempt 1, note the pid, touch `started` and hang.
const HANG_ON_FIRST: &str = "if [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ]; then echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; exec sleep 300; fi";

/// Starts `work --json ARGS` and SIGKILLs it once its handler has started
/// (touched `started`); returns the UNIX time just before the kill.
fn kill_mid_job(s: &Scene, config: &std::path::Path, args: &[&str]) -> i64 {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let mut a = s.work(config, &all);
    a.wait_event("starting");
    s.wait_for_file("started");
    let at = now();
    a.signal(Signal::SIGKILL);
    a.wait_exit();
    at
}

/// Case 18: SIGKILL the daemon mid-job. Its handler dies with it; after
/// `retry_after` a second daemon reclaims the job and runs it as attempt 2.
#[test]
fn case18_killed_daemon_job_is_reclaimed_after_retry_after() {
    let s = Scene::new();
    let config = s.config().recording(HANG_ON_FIRST).retry_after(2).write();
    let job = Job::laravel8("App\\Jobs\\Crash");
    s.push(&job);

    kill_mid_job(&s, &config, &["--tries=3"]);
    common::wait_dead(s.read_pid("pid"));
    // The job stays reserved after the crash.
    let stays = Payload::containing([r#""attempts":1"#]);
    s.assert_state(QueueState::empty().reserved(stays, Score::Any));
    let expires = s.redis.zrange(RESERVED)[0].1;

    let args = ["--tries=3", "--json", "--max-jobs=1", "--sleep=0.1"];
    let mut b = s.work(&config, &args);
    let starting = b.wait_event("starting");
    assert_eq!(starting["attempts"], 2, "{starting}");
    assert_eq!(starting["id"], job.id(), "{starting}");
    let at = now();
    assert!(
        at >= expires,
        "reclaimed at {at}, before the reservation expired at {expires}"
    );
    b.expect_exit(0);
    assert_eq!(s.log(), vec![job.run_line(1), job.run_line(2)]);
    s.assert_state(QueueState::empty());
}

/// Case 18, second half: with `retry_after` null a crashed daemon's job is
/// never reclaimed.
#[test]
fn case18_null_retry_after_never_reclaims() {
    let s = Scene::new();
    let hang = "touch \"$DIR/started\"; exec sleep 300";
    let config = s.config().recording(hang).retry_after_null().write();
    s.push(&Job::laravel13("App\\Jobs\\Stuck"));

    let killed_at = kill_mid_job(&s, &config, &[]);
    let reserved = s.redis.zrange(RESERVED);
    assert_eq!(reserved.len(), 1, "reserved: {reserved:?}");
    assert!(
        reserved[0].1 <= killed_at,
        "scored now + 0: {reserved:?}, killed at {killed_at}"
    );
    s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(s.log().len(), 1, "not run again: {:?}", s.log());
    assert_eq!(s.redis.zrange(RESERVED), reserved, "still reserved");
}

/// Lease renewal: a job that runs twice as long as `retry_after` is not
/// reclaimed by a second daemon polling the same queue meanwhile. (2 s is
/// the smallest `retry_after` a renewal can protect: see `worker::lease`.)
#[test]
fn running_job_keeps_its_reservation() {
    let s = Scene::new();
    let long = "touch \"$DIR/started\"; sleep 4";
    let config = s.config().recording(long).retry_after(2).write();
    let job = Job::laravel8("App\\Jobs\\Long");
    s.push(&job);

    let mut a = s.work(&config, &["--once", "--tries=3"]);
    s.wait_for_file("started");
    let mut b = s.work(&config, &["--max-time=4", "--sleep=0.2", "--tries=3"]);
    for d in [&mut a, &mut b] {
        d.expect_exit(0);
    }
    assert_eq!(s.log(), vec![job.run_line(1)], "run once");
    s.assert_state(QueueState::empty());
}
