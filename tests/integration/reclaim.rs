//! Crash recovery and reservations (protocol §15 case 18, §6.7): a daemon
//! killed mid-job leaves its job reserved; once `retry_after` passes another
//! daemon reclaims it with the attempt counted. A live daemon renews its
//! reservation, so a long job is never run twice.

use crate::common;

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
    let job = Job::laravel8("App\\Jobs\\Crash");
    let (s, config) = Scene::with_job(&job, |c| c.recording(HANG_ON_FIRST).retry_after(2));

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
    s.assert_ran_then_gone(&job, 2);
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
    let long = "touch \"$DIR/started\"; sleep 4";
    let job = Job::laravel8("App\\Jobs\\Long");
    let (s, config) = Scene::with_job(&job, |c| c.recording(long).retry_after(2));

    let mut a = s.work(&config, &["--once", "--tries=3"]);
    s.wait_for_file("started");
    let mut b = s.work(&config, &["--max-time=4", "--sleep=0.2", "--tries=3"]);
    for d in [&mut a, &mut b] {
        d.expect_exit(0);
    }
    s.assert_ran_then_gone(&job, 1);
}

/// Starts `work --once --tries=3` on one gated job (its handler's pid in
/// `pid`), waits for the handler, then removes the reservation as a
/// reclaim by another worker would, and waits for the renewal to find it
/// gone (`retry_after` 3: a renewal every second).
fn reclaim_under_a_running_job(s: &Scene, config: &std::path::Path) -> (common::Daemon, i32) {
    s.push(&Job::laravel8("App\\Jobs\\Long"));
    let mut d = s.work(config, &["--once", "--tries=3"]);
    s.wait_for_file("started");
    let pid = s.read_pid("pid");
    let member = s.redis.zrange(RESERVED)[0].0.clone();
    let removed: i64 = s.redis.cmd(&["ZREM", RESERVED, &member]);
    assert_eq!(removed, 1, "the reservation to take away");
    d.wait_log(&["reservation lost"]);
    (d, pid)
}

/// A renewal that finds the reservation gone stops the handler (the
/// default `on_lease_lost = "kill"`), and the job is left to whoever took
/// it: this worker releases, fails and deletes nothing (protocol §6.9).
#[test]
fn a_renewal_that_finds_the_reservation_gone_stops_the_handler() {
    let s = Scene::new();
    let gated = format!("echo $$ > \"$DIR/pid\"; {}", common::GATED);
    let config = s.config().retry_after(3).recording(&gated).write();
    let (mut d, pid) = reclaim_under_a_running_job(&s, &config);
    d.expect_exit(0);
    assert!(
        d.stderr_text().contains("stopping the handler"),
        "{}",
        d.stderr_text()
    );
    common::wait_dead(pid);
    s.assert_state(QueueState::empty());
}

/// Case 34, our side: with `on_lease_lost = "keep"` the handler runs on;
/// its release then finds the reservation gone, adds nothing to
/// `:delayed` (Laravel's release would add a second copy) and says so.
#[test]
fn case34_a_release_after_the_reservation_was_lost_adds_nothing() {
    let s = Scene::new();
    let gated = format!("echo $$ > \"$DIR/pid\"; {}; exit 1", common::GATED);
    let config = s
        .config()
        .retry_after(3)
        .set("worker", "on_lease_lost", "keep")
        .recording(&gated)
        .write();
    let (mut d, _) = reclaim_under_a_running_job(&s, &config);
    s.touch("go");
    d.expect_exit(0);
    let said = "the reservation was already gone when the job was settled";
    assert!(d.stderr_text().contains(said), "{}", d.stderr_text());
    s.assert_state(QueueState::empty());
}

/// `laravel_worker_jobs_total{queue="default",outcome=…}` from the
/// metrics endpoint at `address`.
fn jobs_total(address: &str, outcome: &str) -> Option<String> {
    let (_, text) = common::http_server::get(address, "/metrics");
    let series = format!("laravel_worker_jobs_total{{queue=\"default\",outcome=\"{outcome}\"}}");
    common::http_server::metric(&text, &series)
}

/// Starts `work` (metrics on, `on_lease_lost = "keep"`, `retry_after` 3)
/// on one gated job that exits 0 once `go` exists; returns the daemon and
/// its metrics address once the handler has started.
fn start_kept_job(s: &Scene) -> (common::Daemon, String) {
    let config = s
        .config()
        .retry_after(3)
        .set("worker", "on_lease_lost", "keep")
        .metrics_listen("127.0.0.1:0")
        .recording(common::GATED)
        .write();
    s.push(&Job::laravel8("App\\Jobs\\Long"));
    let mut d = s.work(&config, &["--tries=3"]);
    let address = d.metrics_address();
    s.wait_for_file("started");
    (d, address)
}

/// Issue 31 item 2: a job whose reservation another worker took while it
/// ran is not reported as done: its line ends `UNSETTLED`, and it counts
/// under `outcome="reclaimed"`, never `done`.
#[test]
fn a_job_whose_reservation_was_taken_is_not_counted_done() {
    let s = Scene::new();
    let (mut d, address) = start_kept_job(&s);
    let member = s.redis.zrange(RESERVED)[0].0.clone();
    let removed: i64 = s.redis.cmd(&["ZREM", RESERVED, &member]);
    assert_eq!(removed, 1, "the reservation to take away");
    d.wait_log(&["reservation lost"]);
    s.touch("go");
    let line = d.wait_stdout(|l| l.contains("App\\Jobs\\Long"));
    assert!(line.trim_end().ends_with("UNSETTLED"), "{line}");
    assert_eq!(jobs_total(&address, "reclaimed").as_deref(), Some("1"));
    assert_eq!(jobs_total(&address, "done"), None, "counted as done");
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
}

/// Issue 31 item 2: a job whose delete Redis refuses until its lease runs
/// out stays reserved: its line ends `UNSETTLED` and it counts under
/// `outcome="left_reserved"`, never `done`. Redis refuses every write
/// while `min-replicas-to-write` asks for a replica it does not have.
#[test]
fn a_job_whose_delete_redis_refused_is_not_counted_done() {
    let s = Scene::new();
    let (mut d, address) = start_kept_job(&s);
    let _: String = s
        .redis
        .cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
    s.touch("go");
    let line = d.wait_stdout(|l| l.contains("App\\Jobs\\Long"));
    assert!(line.trim_end().ends_with("UNSETTLED"), "{line}");
    assert_eq!(jobs_total(&address, "left_reserved").as_deref(), Some("1"));
    assert_eq!(jobs_total(&address, "done"), None, "counted as done");
    let _: String = s
        .redis
        .cmd(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    assert_eq!(s.redis.zrange(RESERVED).len(), 1, "the job stays reserved");
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
}
