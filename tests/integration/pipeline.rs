//! Pipelined persistent handlers (`pipeline = true`): a busy process gets
//! its next request before it answers the one in flight. The request
//! behind never runs twice, and costs no attempt when the call ahead fails
//! before the process read it.

use crate::common;
use crate::persistent::{DONE, calls, crash_with_the_window_full, pids};

use std::path::PathBuf;

use common::{Failed, Handler, Job, Payload, QueueState, Scene, Score};

/// A `case` pattern's start that matches run requests only (a failed
/// hook's request names the job too).
const RUN: &str = "*'\"mode\":\"run\"'";

/// A scene with a pipelined persistent handler in bash, as
/// `persistent::warm`'s (it logs `PID <request>` per call and runs
/// `respond`, which answers with `answer '{"action":…}'`), with one more
/// helper: `queued` waits until the next request is in its stdin, unread.
/// `tune` adds settings to the entry. Kill grace: one second.
fn pipelined(respond: &str, tune: impl FnOnce(Handler) -> Handler) -> (Scene, PathBuf) {
    let s = Scene::new();
    let script = s.script(
        "p.sh",
        &format!(
            "answer() {{ printf '{{\"call\":%s,%s\\n' \"$CALL\" \"${{1#?}}\" >&3; }}\n\
             queued() {{ until read -t 0; do sleep 0.01; done; }}\n\
             while IFS= read -r line; do\n  printf '%s %s\\n' \"$$\" \"$line\" >> \"$LOG\"\n  \
             CALL=${{line#{{\\\"call\\\":}}; CALL=${{CALL%%,*}}\n  {respond}\ndone"
        ),
    );
    let bash = Handler::argv(&["bash", script.to_str().unwrap()]);
    let handler = tune(bash.persistent().pipeline());
    let config = s.config().kill_grace(1).handler(handler).write();
    (s, config)
}

/// The names of the jobs the handler was called to run (failed hooks left
/// out), in order, with the attempt each call carried.
fn runs(s: &Scene) -> Vec<(String, i64)> {
    let name = |r: &serde_json::Value| r["name"].as_str().unwrap_or("").to_string();
    calls(s)
        .into_iter()
        .filter(|(_, r)| r["mode"] == "run")
        .map(|(_, r)| (name(&r), r["attempt"].as_i64().unwrap_or(0)))
        .collect()
}

/// Pushes `App\Jobs\<ahead>` and `App\Jobs\Next` and runs a worker with
/// one pipelined process at `--concurrency=2` (with `args` added) until the
/// queue is empty; the handler runs `on_ahead` for the first job's run
/// request and answers done to the others. Returns the two jobs.
fn ahead_and_behind(ahead: &str, on_ahead: &str, args: &[&str]) -> (Scene, Job, Job) {
    let (s, config) = pipelined(
        &format!("case \"$line\" in {RUN}*{ahead}*) {on_ahead} ;; *) {DONE} ;; esac"),
        |h| h.processes(1),
    );
    let first = Job::laravel8(&format!("App\\Jobs\\{ahead}"));
    let next = Job::laravel8("App\\Jobs\\Next");
    s.push_on("default", [&first, &next]);
    let mut all = vec!["--stop-when-empty", "--sleep=0", "--concurrency=2"];
    all.extend_from_slice(args);
    s.run(&config, &all);
    (s, first, next)
}

/// With one process and `--concurrency=2`, the second job's request is in
/// the process's stdin while the first one runs: the handler waits for it
/// before answering the first (it would wait forever without pipelining).
#[test]
fn the_next_request_is_in_stdin_before_the_answer() {
    let (s, config) = pipelined(
        &format!("case \"$line\" in *First*) queued; touch \"$DIR/queued\" ;; esac; {DONE}"),
        |h| h.processes(1),
    );
    let (first, second) = (
        Job::laravel8("App\\Jobs\\First"),
        Job::laravel8("App\\Jobs\\Second"),
    );
    s.push_on("default", [&first, &second]);
    s.run(
        &config,
        &["--stop-when-empty", "--sleep=0", "--concurrency=2"],
    );
    assert!(s.path("queued").exists());
    let runs = runs(&s);
    assert_eq!(
        runs,
        [
            ("App\\Jobs\\First".into(), 1),
            ("App\\Jobs\\Second".into(), 1)
        ]
    );
    assert_eq!(pids(&s).len(), 1, "one process served both");
    s.assert_state(QueueState::empty());
}

/// The call ahead runs past its time limit with the next request waiting
/// behind it, unread: the process is killed, and the request behind goes
/// to a new process, on its first attempt, and runs once.
#[test]
fn a_timeout_ahead_costs_the_request_behind_nothing() {
    let on_slow = "queued; touch \"$DIR/queued\"; sleep 300";
    let args = ["--tries=3", "--timeout=1", "--backoff=60"];
    let (s, slow, _) = ahead_and_behind("Slow", on_slow, &args);
    assert!(s.path("queued").exists(), "Next waited behind Slow");
    let calls = calls(&s);
    let runs = runs(&s);
    assert_eq!(
        runs,
        [("App\\Jobs\\Slow".into(), 1), ("App\\Jobs\\Next".into(), 1)]
    );
    assert_ne!(calls[0].0, calls[1].0, "Next ran in a new process");
    let released = Payload::containing([&slow.id()]);
    s.assert_state(QueueState::empty().delayed(released, Score::Any));
}

/// The process dies during the call ahead, the request behind unread: the
/// job ahead fails (one try), the job behind runs in a new process on its
/// first attempt.
#[test]
fn a_crash_ahead_sends_the_unread_request_behind_to_a_new_process() {
    let (s, crash, _) = ahead_and_behind("Crash", "queued; exit 7", &["--tries=1"]);
    let row = Failed::job(&crash).containing("exited with status 7");
    s.assert_state(QueueState::empty().failed([row]));
    let runs = runs(&s);
    assert_eq!(
        runs,
        [
            ("App\\Jobs\\Crash".into(), 1),
            ("App\\Jobs\\Next".into(), 1)
        ],
        "Next ran once"
    );
}

/// A handler that reads the request behind before its call ahead ends, and
/// then dies: the job behind may have started, so it is an exception for
/// it (its attempt counted), never a second delivery.
#[test]
fn a_request_read_ahead_by_a_process_that_dies_is_an_exception() {
    let on_crash = "queued; IFS= read -r ahead; exit 7";
    let (s, crash, next) = ahead_and_behind("Crash", on_crash, &["--tries=1"]);
    let mut rows = vec![
        Failed::job(&crash).containing("exited with status 7"),
        Failed::job(&next).containing("read this request ahead"),
    ];
    // Both fail at once: either row may be written first.
    let uuids = common::sqlite::strings(
        &s.path("failed.sqlite"),
        "SELECT uuid FROM failed_jobs ORDER BY id",
    );
    if uuids.first() == Some(&next.uuid()) {
        rows.reverse();
    }
    s.assert_state(QueueState::empty().failed(rows));
    let runs = runs(&s);
    assert_eq!(
        runs,
        [("App\\Jobs\\Crash".into(), 1)],
        "Next never ran again"
    );
}

/// The window still bounds what a SIGKILL costs: with one process and
/// `reserve_ahead = 2`, one job runs, one waits in its stdin and one waits
/// for it; the others were never reserved.
#[test]
fn a_crash_costs_the_started_job_and_the_window_when_pipelined() {
    let (s, config) = pipelined("touch \"$DIR/started\"; sleep 300", |h| {
        h.processes(1).reserve_ahead(2)
    });
    crash_with_the_window_full(&s, &config);
}

/// `max_jobs` holds: a process due for recycling takes no request behind
/// its last call. 300 jobs, every one run once, no process above 3 calls.
#[test]
fn pipelined_processes_are_recycled_after_max_jobs() {
    let (s, config) = pipelined(DONE, |h| h.processes(2).max_jobs(3));
    let jobs = Job::numbered("App\\Jobs\\Quick@handle", 300);
    s.push_on("default", &jobs);
    s.run(
        &config,
        &["--stop-when-empty", "--sleep=0", "--concurrency=8"],
    );
    s.assert_state(QueueState::empty());
    let calls = calls(&s);
    assert_eq!(calls.len(), 300, "each job once");
    let mut per_pid: std::collections::HashMap<String, usize> = Default::default();
    for (pid, _) in &calls {
        *per_pid.entry(pid.clone()).or_default() += 1;
    }
    assert!(per_pid.values().all(|&n| n <= 3), "{per_pid:?}");
    let ids: std::collections::BTreeSet<&str> =
        calls.iter().filter_map(|(_, r)| r["id"].as_str()).collect();
    assert_eq!(ids.len(), 300, "no job twice");
}
