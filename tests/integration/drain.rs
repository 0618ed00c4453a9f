//! The drain deadline (`[worker] drain_timeout`): after SIGTERM, jobs still
//! running when the deadline passes are handed back at once (released, the
//! attempt counted) and their handlers' process groups are killed, so the
//! worker stops in time and nothing is left running or reserved.

use crate::common;

use common::{Daemon, Handler, Job, Payload, QueueState, Scene, Score};
use nix::sys::signal::Signal;

/// Runs `job` through `handler` (a script running `body`, made a
/// `Handler` by `kind`) with a one-second drain deadline and kill grace;
/// SIGTERMs the worker (`work --json ARGS`) once the handler has touched
/// `started`, and waits for it to exit 0.
fn terminate_mid_job(
    body: &str,
    kind: fn(Handler) -> Handler,
    job: &Job,
    args: &[&str],
) -> (Scene, Daemon) {
    let s = Scene::new();
    let handler = kind(Handler::command(&s.script("h.sh", body)));
    let config = s
        .config()
        .drain_timeout(1)
        .kill_grace(1)
        .handler(handler)
        .write();
    s.push(job);
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let d = s.work(&config, &all);
    s.wait_for_file("started");
    d.signal(Signal::SIGTERM);
    (s, d)
}

/// One process per job: the handler and the child it started are killed,
/// the job is released with attempts 1, and the worker exits 0.
#[test]
fn a_job_running_past_the_drain_deadline_is_released() {
    let job = Job::laravel8("App\\Jobs\\Endless");
    let body = "sleep 300 & echo $! > \"$DIR/child\"; echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; wait";
    let (s, mut d) = terminate_mid_job(body, |h| h, &job, &["--tries=3"]);
    d.expect_exit(0);
    let said = d.stderr_text();
    assert!(said.contains("drain deadline passed"), "stderr:\n{said}");
    common::wait_dead(s.read_pid("pid"));
    common::wait_dead(s.read_pid("child"));

    let released = d.event("released_after_exception");
    assert_eq!(
        released["exception"], "LaravelWorker\\WorkerStoppedException",
        "{released}"
    );
    // Available again at once.
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(0)));
}

/// Persistent mode: the busy process is killed and the job released.
#[test]
fn a_persistent_call_past_the_drain_deadline_is_released() {
    let job = Job::laravel13("App\\Jobs\\Endless");
    let body = "while IFS= read -r line; do echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; sleep 300; done";
    let (s, mut d) = terminate_mid_job(body, Handler::persistent, &job, &["--tries=3"]);
    d.expect_exit(0);
    common::wait_dead(s.read_pid("pid"));
    let released = Payload::containing([&job.id()]);
    s.assert_state(QueueState::empty().delayed(released, Score::Any));
}

/// A job that finishes within the deadline is simply done.
#[test]
fn a_job_finishing_within_the_drain_deadline_is_done() {
    let job = Job::laravel8("App\\Jobs\\Quick");
    let body = "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done";
    let (s, mut d) = terminate_mid_job(body, |h| h, &job, &[]);
    d.wait_log(&["signal received"]);
    s.touch("go");
    d.expect_exit(0);
    assert_eq!(d.events_with("success").len(), 1, "done: {:?}", d.stdout);
    s.assert_state(QueueState::empty());
}

/// Issue 22, item 8: a failed hook still running at the drain deadline is
/// cut, but its job was already recorded as failed and removed: the log
/// says so, and not that the job "stays reserved".
#[test]
fn a_failed_hook_cut_by_the_drain_deadline_is_not_reported_as_reserved() {
    let job = Job::laravel8("App\\Jobs\\Doomed");
    let body = "[ \"$LARAVEL_WORKER_MODE\" = run ] && exit 1; \
                echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; exec sleep 300";
    let (s, mut d) = terminate_mid_job(body, |h| h, &job, &["--tries=1"]);
    d.expect_exit(0);
    common::wait_dead(s.read_pid("pid"));
    let said = d.stderr_text();
    assert!(!said.contains("stay reserved"), "stderr:\n{said}");
    assert!(
        said.contains("already recorded as failed") && said.contains("hook was cut short"),
        "stderr:\n{said}"
    );
    let failed = common::Failed::job(&job).containing("App\\Jobs\\Doomed");
    s.assert_state(QueueState::empty().failed([failed]));
}
