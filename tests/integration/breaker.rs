//! A handler that cannot work trips instead of re-running every job for
//! ever: an old-protocol persistent handler, a missing program, a process
//! that exits 137 before answering, an HTTP endpoint answering 200 with a
//! "JSON" body that is not JSON. Each trips within `trip_after` faults,
//! loses no job, fails `/readyz` naming the handler, and takes jobs again
//! once it is fixed while the worker runs.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::http_server::{Reply, Server, get};
use common::{Config, Daemon, Handler, Job, Scene, q};
use nix::sys::signal::Signal;

/// Faults in a row that trip a handler in these tests.
const TRIP_AFTER: i64 = 3;

/// Jobs pushed per test.
const JOBS: i64 = 12;

/// Answers every request the new way: `call` echoed, then logs it.
const FIXED: &str = "while IFS= read -r line; do\n  \
    CALL=${line#{\\\"call\\\":}; CALL=${CALL%%,*}\n  \
    echo \"$line\" >> \"$LOG\"\n  \
    printf '{\"call\":%s,\"action\":\"done\"}\\n' \"$CALL\" >&3\ndone";

/// The scene's config with the breaker tuned for a test: `TRIP_AFTER`
/// faults, one second before the first trial, the metrics endpoint on.
fn tuned(s: &Scene, handler: Handler) -> Config<'_> {
    s.config()
        .kill_grace(1)
        .handler(handler)
        .set("worker", "trip_after", TRIP_AFTER)
        .set("worker", "trip_backoff", 1)
        .metrics_listen("127.0.0.1:0")
}

/// Jobs in Redis: waiting, delayed and reserved, read in one step (a job
/// moves between these keys while the worker runs).
fn in_redis(s: &Scene) -> i64 {
    let key = q("default");
    let count = "return redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2]) \
                 + redis.call('ZCARD', KEYS[3])";
    let delayed = format!("{key}:delayed");
    let reserved = format!("{key}:reserved");
    s.redis
        .cmd(&["EVAL", count, "3", &key, &delayed, &reserved])
}

/// Replaces the script at `path` with one running `body`, atomically, as
/// a deploy would.
fn replace_script(s: &Scene, path: &Path, body: &str) {
    let new = s.script("replacement.sh", body);
    std::fs::rename(new, path).unwrap();
}

/// Pushes the jobs, runs the worker until the handler trips, checks that
/// nothing was lost and `/readyz` names it; then `fix`es the handler and
/// waits until every job is `done` (counted by `done`) and `/readyz` is
/// green again. Returns the daemon's log.
fn trips_then_recovers(
    s: &Scene,
    config: &Path,
    fault: &str,
    fix: impl FnOnce(),
    done: impl Fn() -> i64,
) -> String {
    s.push_on("default", &Job::numbered("App\\Jobs\\Work@handle", JOBS));
    let mut d = s.work(config, &["--sleep=0.05", "--tries=0"]);
    let address = d.metrics_address();
    let tripped = d.wait_log(&["handler \"*\" tripped after 3 faults in a row", fault]);
    assert!(tripped.contains("To fix:"), "says how to fix it: {tripped}");
    assert_eq!(in_redis(s) + done(), JOBS, "no job lost while tripped");
    let (status, body) = get(&address, "/readyz");
    assert_eq!(status, 503, "/readyz while tripped: {body}");
    assert!(body.contains("handler \"*\" is tripped"), "{body}");
    let (_, metrics) = get(&address, "/metrics");
    assert!(
        metrics.contains("laravel_worker_handler_trips_total{handler=\"*\"} "),
        "{metrics}"
    );

    fix();
    d.wait_log(&["answered well again"]);
    common::wait_until("every job done", || done() == JOBS && in_redis(s) == 0);
    common::wait_until("/readyz to answer 200", || {
        get(&address, "/readyz").0 == 200
    });
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    d.stderr_text()
}

/// Jobs the fixed persistent handler ran (one log line each).
fn logged(s: &Scene) -> i64 {
    s.log().len() as i64
}

/// Processes the broken handler started, from its `starts` file.
fn starts(s: &Scene) -> usize {
    s.read("starts").lines().count()
}

/// Failed trials logged: each may have started one more process.
fn failed_trials(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("is still tripped"))
        .count()
}

/// A persistent handler written for the earlier protocol: its answers do
/// not echo the request's `call` id.
#[test]
fn an_old_protocol_persistent_handler_trips_and_recovers() {
    let body = "while IFS= read -r line; do printf '{\"action\":\"done\"}\\n' >&3; done";
    let log = persistent_trips_and_recovers(body, "echoing the request's `call` id");
    // Logged once, then summarised every 30 s: the test takes less.
    let faults = log
        .lines()
        .filter(|l| l.contains("handler protocol error: handler"))
        .count();
    assert_eq!(faults, 1, "the fault is logged once; log:\n{log}");
}

/// A process that is killed (exit 137) each time before it answers.
#[test]
fn a_handler_that_exits_137_before_answering_trips_and_recovers() {
    let log = persistent_trips_and_recovers("IFS= read -r line\nexit 137", "exit before answering");
    assert!(log.contains("exited with status 137"), "{log}");
}

/// A program that is not there (a bare name not on the handler's PATH:
/// only a warning at start), installed while the worker runs.
#[test]
fn a_missing_program_trips_and_recovers() {
    let s = Scene::new();
    let bin = s.path("bin");
    std::fs::create_dir(&bin).unwrap();
    let log_path = s.path("jobs.log");
    let handler = Handler::argv(&["lw-breaker-handler"]).env(&[
        ("PATH", bin.to_str().unwrap()),
        ("LOG", log_path.to_str().unwrap()),
    ]);
    let config = tuned(&s, handler).write();
    let program: PathBuf = bin.join("lw-breaker-handler");
    let log = trips_then_recovers(
        &s,
        &config,
        "the program must exist and be executable",
        || {
            let new = s.script(
                "replacement.sh",
                "echo \"$LARAVEL_WORKER_JOB_ID\" >> \"$LOG\"",
            );
            std::fs::rename(new, &program).unwrap();
        },
        || logged(&s),
    );
    assert!(log.contains("No such file or directory"), "{log}");
}

/// An endpoint that answers 200 with an HTML page (a wrong route, a login
/// page, as a web app serves it: `text/html`), then is fixed.
#[test]
fn an_http_endpoint_answering_200_with_a_body_that_is_not_json_trips_and_recovers() {
    let s = Scene::new();
    let fixed = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let server = {
        let (fixed, done) = (Arc::clone(&fixed), Arc::clone(&done));
        Server::start(move |_| {
            if fixed.load(Ordering::SeqCst) {
                done.fetch_add(1, Ordering::SeqCst);
                return common::http_server::ok();
            }
            let html = vec![("Content-Type", "text/html; charset=UTF-8".to_string())];
            Reply::Send(200, html, "<!DOCTYPE html>\n<html>Log in</html>".into())
        })
    };
    let config = tuned(&s, Handler::url(&server.url("/_queue"))).write();
    trips_then_recovers(
        &s,
        &config,
        "must hold JSON",
        || fixed.store(true, Ordering::SeqCst),
        || done.load(Ordering::SeqCst) as i64,
    );
}

/// `[worker] on_handler_tripped = "exit"`: the worker drains and exits
/// with status 4, every job still in Redis.
#[test]
fn on_handler_tripped_exit_stops_the_worker_with_status_4() {
    let s = Scene::new();
    let answers = "while IFS= read -r line; do printf '{\"action\":\"done\"}\\n' >&3; done";
    let handler = Handler::command(&s.script("p.sh", answers)).persistent();
    let config = tuned(&s, handler)
        .set("worker", "on_handler_tripped", "exit")
        .write();
    s.push_on("default", &Job::numbered("App\\Jobs\\Work@handle", JOBS));
    let mut d: Daemon = s.work(&config, &["--sleep=0.05", "--tries=0"]);
    d.wait_exit();
    d.expect_stop(4, "handler_tripped");
    d.log_line(
        "tripped after 3 faults",
        &["echoing the request's `call` id"],
    );
    assert_eq!(in_redis(&s), JOBS, "every job still in Redis");
}

/// A persistent handler running `body` (each start recorded in `starts`)
/// trips with `fix` in its error line and recovers once its script is
/// fixed; it was started no more often than the trips and the failed
/// trials allow. Returns the worker's log.
fn persistent_trips_and_recovers(body: &str, fix: &str) -> String {
    let s = Scene::new();
    let script = s.script("p.sh", &format!("echo $$ >> \"$DIR/starts\"\n{body}"));
    let config = tuned(&s, Handler::command(&script).persistent()).write();
    let log = trips_then_recovers(
        &s,
        &config,
        fix,
        || replace_script(&s, &script, FIXED),
        || logged(&s),
    );
    assert!(
        starts(&s) <= TRIP_AFTER as usize + failed_trials(&log),
        "the broken handler ran {} times; log:\n{log}",
        starts(&s)
    );
    log
}

/// A handler that faults now and then, between good answers, logs its
/// fault once, then as a count per `error_summary_interval`: the good
/// answers in between do not start the count again (they did: one line
/// per fault).
#[test]
fn a_handler_that_fails_now_and_then_logs_its_fault_once() {
    let s = Scene::new();
    let answers = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let server = {
        let (answers, done) = (Arc::clone(&answers), Arc::clone(&done));
        Server::start(move |_| {
            if answers.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
                done.fetch_add(1, Ordering::SeqCst);
                return common::http_server::ok();
            }
            let json = vec![("Content-Type", "application/json".to_string())];
            Reply::Send(200, json, "{not json".into())
        })
    };
    let config = s
        .config()
        .handler(Handler::url(&server.url("/_queue")))
        .set("worker", "trip_after", 0)
        .error_summary_interval(3600)
        .write();
    s.push_on("default", &Job::named(["A"; 12]));
    let mut d = s.work(&config, &["--sleep=0.05", "--tries=0"]);
    common::wait_until("12 good answers", || done.load(Ordering::SeqCst) >= 12);
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    let faults = d
        .stderr
        .iter()
        .filter(|l| l.contains("ERROR") && l.contains("malformed handler answer"))
        .count();
    assert!(
        answers.load(Ordering::SeqCst) >= 20,
        "faults between the good answers"
    );
    assert_eq!(faults, 1, "{}", d.stderr_text());
}
