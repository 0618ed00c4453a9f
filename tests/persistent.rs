//! Persistent handlers: warm processes serving many calls over NDJSON
//! (requests on stdin, responses on fd 3), recycled by call count and
//! memory, replaced when they crash or time out.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::{Failed, Handler, Job, Payload, QueueState, Scene, Score};
use serde_json::Value;

/// Responds `done` to every request.
const DONE: &str = "echo '{\"action\":\"done\"}' >&3";

/// A scene with a persistent handler in sh that logs `PID <request>` per
/// call, then runs `respond` (which must write one JSON line to fd 3);
/// `tune` adds settings to the handler entry. Kill grace: one second.
fn warm(respond: &str, tune: impl FnOnce(Handler) -> Handler) -> (Scene, PathBuf) {
    let s = Scene::new();
    let script = s.script(
        "p.sh",
        &format!("while IFS= read -r line; do\n  printf '%s %s\\n' \"$$\" \"$line\" >> \"$LOG\"\n  {respond}\ndone"),
    );
    let handler = tune(Handler::command(&script).persistent());
    let config = s.config().kill_grace(1).handler(handler).write();
    (s, config)
}

/// (pid, request) per call, from the job log.
fn calls(s: &Scene) -> Vec<(String, Value)> {
    s.log()
        .iter()
        .map(|l| {
            let (pid, json) = l.split_once(' ').expect("PID REQUEST lines");
            (pid.to_string(), serde_json::from_str(json).unwrap())
        })
        .collect()
}

/// The processes that served calls.
fn pids(s: &Scene) -> BTreeSet<String> {
    calls(s).into_iter().map(|(pid, _)| pid).collect()
}

/// Pushes `n` string jobs `App\Jobs\<name>` and runs the worker until the
/// queue is empty, with `args` added.
fn run_numbered(s: &Scene, config: &std::path::Path, name: &str, n: i64, args: &[&str]) {
    s.push_on(
        "default",
        &Job::numbered(&format!("App\\Jobs\\{name}@handle"), n),
    );
    let mut all = vec!["--stop-when-empty", "--sleep=0"];
    all.extend_from_slice(args);
    s.run(config, &all);
}

#[test]
fn one_process_serves_every_job_with_full_metadata() {
    let (s, config) = warm(DONE, |h| h);
    let jobs: Vec<Job> = (0..5).map(|_| Job::laravel8("App\\Jobs\\Warm")).collect();
    s.push_on("default", &jobs);
    let args = [
        "--stop-when-empty",
        "--sleep=0",
        "--tries=3",
        "--timeout=30",
    ];
    s.run(&config, &args);
    let calls = calls(&s);
    assert_eq!(calls.len(), 5, "one call a job: {calls:?}");
    assert_eq!(pids(&s).len(), 1, "one warm process");
    for ((_, request), job) in calls.iter().zip(&jobs) {
        let expected = [
            ("mode", Value::from("run")),
            ("id", job.id().into()),
            ("uuid", job.uuid().into()),
            ("name", "App\\Jobs\\Warm".into()),
            ("queue", "default".into()),
            ("connection", "redis".into()),
            ("attempt", 1.into()),
            ("max_tries", 3.into()),
            ("timeout", 30.into()),
        ];
        for (field, value) in expected {
            assert_eq!(request[field], value, "{field} in {request}");
        }
        let payload = Payload::from(request["payload"].as_str().unwrap_or_default());
        assert_eq!(payload, Payload::reserved(job, 1), "the reserved payload");
    }
    s.assert_state(QueueState::empty());
}

#[test]
fn processes_are_recycled_after_max_jobs() {
    let (s, config) = warm(DONE, |h| h.max_jobs(2));
    run_numbered(&s, &config, "R", 5, &[]);
    let per_call: Vec<String> = calls(&s).into_iter().map(|(pid, _)| pid).collect();
    assert_eq!(per_call.len(), 5, "one call a job");
    let same: Vec<bool> = per_call.windows(2).map(|w| w[0] == w[1]).collect();
    assert_eq!(
        same,
        [true, false, true, false],
        "same process as the call before, per call: {per_call:?}"
    );
    assert_eq!(pids(&s).len(), 3, "processes: {per_call:?}");
}

#[test]
fn processes_above_max_memory_are_recycled() {
    // Every shell is above 1 MB resident, so each call recycles its process.
    let (s, config) = warm(DONE, |h| h.max_memory(1));
    run_numbered(&s, &config, "M", 3, &[]);
    assert_eq!(pids(&s).len(), 3, "a process a call: {:?}", calls(&s));
}

#[test]
fn responses_release_and_fail_the_job() {
    let (s, config) = warm(
        "case \"$line\" in *Release*) echo '{\"action\":\"release\",\"delay\":40}' >&3 ;; *) echo '{\"action\":\"fail\",\"reason\":\"nope\"}' >&3 ;; esac",
        |h| h,
    );
    let release = Job::laravel13("App\\Jobs\\Release");
    let fail = Job::laravel13("App\\Jobs\\Fail");
    s.push_on("default", [&release, &fail]);
    s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=3"]);
    let row = Failed::job(&fail).exception("Illuminate\\Queue\\ManuallyFailedException: nope");
    let expected = QueueState::empty()
        .delayed(Payload::job(&release, 1), Score::In(40))
        .failed([row]);
    s.assert_state(expected);
    assert_eq!(pids(&s).len(), 1, "one process: {:?}", calls(&s));
}

/// A process that dies mid-call costs that job one attempt (an exception,
/// with its stderr) and is replaced for the next job.
#[test]
fn a_crashed_process_is_an_exception_and_is_replaced() {
    let (s, config) = warm(
        &format!(
            "case \"$line\" in *Crash*) echo 'fatal: out of cheese' >&2; exit 7 ;; *) {DONE} ;; esac"
        ),
        |h| h,
    );
    let crash = Job::laravel8("App\\Jobs\\Crash");
    let after = Job::laravel8("App\\Jobs\\After");
    s.push_on("default", [&crash, &after]);
    s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    let row = Failed::job(&crash)
        .containing("exited with status 7")
        .containing("fatal: out of cheese");
    s.assert_state(QueueState::empty().failed([row]));
    let calls = calls(&s);
    let modes: Vec<&Value> = calls.iter().map(|(_, r)| &r["mode"]).collect();
    let runs = modes.iter().filter(|m| **m == "run").count();
    assert_eq!(runs, 2, "modes: {modes:?}");
    let (_, failed_hook) = calls
        .iter()
        .find(|(_, r)| r["mode"] == "failed")
        .expect("failed hook call");
    assert_eq!(failed_hook["id"], crash.id(), "{failed_hook}");
    let exception = failed_hook["exception"].as_str().unwrap_or_default();
    assert!(exception.contains("out of cheese"), "{failed_hook}");
    assert!(pids(&s).len() >= 2, "replaced after the crash: {calls:?}");
}

/// A call past its time limit: the process group is killed, the job is
/// treated as timed out, and a fresh process serves the next job.
#[test]
fn a_timed_out_call_kills_the_process_and_the_next_job_gets_a_new_one() {
    let (s, config) = warm(
        &format!("case \"$line\" in *Slow*) sleep 300 ;; *) {DONE} ;; esac"),
        |h| h,
    );
    let slow = Job::laravel8("App\\Jobs\\Slow");
    let next = Job::laravel8("App\\Jobs\\Next");
    s.push_on("default", [&slow, &next]);
    let args = [
        "--stop-when-empty",
        "--sleep=0",
        "--tries=3",
        "--timeout=1",
        "--backoff=60",
        "--json",
    ];
    let d = s.run(&config, &args);
    let released = d.event("released_after_exception");
    assert_eq!(
        released["exception"], "Illuminate\\Queue\\TimeoutExceededException",
        "{released}"
    );
    let calls = calls(&s);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_ne!(calls[0].0, calls[1].0, "a new process after the timeout");
    let released = Payload::containing([&slow.id()]);
    s.assert_state(QueueState::empty().delayed(released, Score::Any));
}

/// `processes = 2` with `--concurrency=2`: two calls run at once, in two
/// processes.
#[test]
fn two_processes_serve_two_jobs_at_once() {
    let (s, config) = warm(
        &format!(
            "touch \"$DIR/started.$$\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done; {DONE}"
        ),
        |h| h.processes(2),
    );
    s.push_on("default", &Job::numbered("App\\Jobs\\P@handle", 2));
    let mut d = s.work(&config, &["--concurrency=2", "--max-jobs=2", "--json"]);
    common::wait_until("both calls to run at once", || {
        let started = std::fs::read_dir(s.dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("started."))
            .count();
        started == 2
    });
    s.touch("go");
    d.expect_exit(0);
    assert_eq!(pids(&s).len(), 2, "two processes: {:?}", calls(&s));
    s.assert_state(QueueState::empty());
}
