//! Persistent handlers: warm processes serving many calls over NDJSON
//! (requests on stdin, responses on fd 3), recycled by call count and
//! memory, replaced when they crash or time out.

use crate::common;

use std::collections::BTreeSet;
use std::path::PathBuf;

use common::{Failed, Handler, Job, Payload, QueueState, Scene, Score};
use serde_json::Value;

/// Responds `done` to every request.
pub const DONE: &str = "answer '{\"action\":\"done\"}'";

/// A scene with a persistent handler in sh that logs `PID <request>` per
/// call, then runs `respond`, which must answer once with
/// `answer '{"action":…}'` (it adds the request's `call` number, the
/// request's first key, as `$CALL`); `tune` adds settings to the handler
/// entry. Kill grace: one second.
pub fn warm(respond: &str, tune: impl FnOnce(Handler) -> Handler) -> (Scene, PathBuf) {
    warm_with(respond, tune, |config| config)
}

/// [`warm`], with `settings` added to the config.
pub fn warm_with(
    respond: &str,
    tune: impl FnOnce(Handler) -> Handler,
    settings: impl FnOnce(common::config::Config<'_>) -> common::config::Config<'_>,
) -> (Scene, PathBuf) {
    let s = Scene::new();
    let script = s.script(
        "p.sh",
        &format!(
            "answer() {{ printf '{{\"call\":%s,%s\\n' \"$CALL\" \"${{1#?}}\" >&3; }}\n\
             while IFS= read -r line; do\n  printf '%s %s\\n' \"$$\" \"$line\" >> \"$LOG\"\n  \
             CALL=${{line#{{\\\"call\\\":}}; CALL=${{CALL%%,*}}\n  {respond}\ndone"
        ),
    );
    let handler = tune(Handler::command(&script).persistent());
    let config = settings(s.config().kill_grace(1).handler(handler)).write();
    (s, config)
}

/// (pid, request) per call, from the job log.
pub fn calls(s: &Scene) -> Vec<(String, Value)> {
    s.log()
        .iter()
        .map(|l| {
            let (pid, json) = l.split_once(' ').expect("PID REQUEST lines");
            (pid.to_string(), serde_json::from_str(json).unwrap())
        })
        .collect()
}

/// The processes that served calls.
pub fn pids(s: &Scene) -> BTreeSet<String> {
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
    let numbers: BTreeSet<u64> = calls
        .iter()
        .map(|(_, r)| r["call"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers.len(), 5, "each request has its own call number");
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
        "case \"$line\" in *Release*) answer '{\"action\":\"release\",\"delay\":40}' ;; *) answer '{\"action\":\"fail\",\"reason\":\"nope\"}' ;; esac",
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
    let parts = [r#"job="App\\Jobs\\Slow""#, "timeout=1", r#"signal="SIG"#];
    let line = d.log_line("ran past its timeout", &parts);
    assert!(line.contains(&slow.id()), "{line}");
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

/// Answers are matched by `call`, not by order. A handler that answers one
/// job twice (both lines in one write) used to shift every later answer
/// onto the next job: `Fail` was deleted with the duplicate "done" and
/// `Ok` failed with Fail's reason. Now the extra line is a protocol error
/// (logged, the process replaced) and each job gets its own answer.
#[test]
fn a_duplicate_answer_is_a_protocol_error_not_the_next_jobs_answer() {
    let (s, config) = warm(
        &format!(
            "case \"$line\" in\n    *Twice*) a=\"{{\\\"call\\\":$CALL,\\\"action\\\":\\\"done\\\"}}\"; printf '%s\\n%s\\n' \"$a\" \"$a\" >&3 ;;\n    \
             *Fail*) answer '{{\"action\":\"fail\",\"reason\":\"nope\"}}' ;;\n    *) {DONE} ;;\n  esac"
        ),
        |h| h,
    );
    let twice = Job::laravel8("App\\Jobs\\Twice");
    let fail = Job::laravel8("App\\Jobs\\Fail");
    let ok = Job::laravel8("App\\Jobs\\Ok");
    s.push_on("default", [&twice, &fail, &ok]);
    let d = s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=3"]);
    let row = Failed::job(&fail).containing("nope");
    s.assert_state(QueueState::empty().failed([row]));
    let ran: Vec<String> = calls(&s)
        .iter()
        .filter(|(_, r)| r["mode"] == "run")
        .map(|(_, r)| r["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        ran,
        ["App\\Jobs\\Twice", "App\\Jobs\\Fail", "App\\Jobs\\Ok"],
        "each job ran once"
    );
    assert!(
        pids(&s).len() >= 2,
        "the process that broke the protocol was replaced: {:?}",
        calls(&s)
    );
    let logs = d.stderr_text();
    assert!(
        logs.contains("protocol error") && logs.contains("no request was in flight"),
        "the extra line is logged as a protocol error: {logs}"
    );
    assert!(
        logs.contains(r#"\"action\":\"done\""#),
        "with the offending line, escaped: {logs}"
    );
}

/// A line on fd 3 that is not the answer to the request in flight (here a
/// garbage line with an escape sequence, then the real answer) is a
/// protocol error: the job is released with its attempt counted (not
/// deleted with a later answer, not failed), the process is killed, and
/// the line is logged escaped.
#[test]
fn a_garbage_line_releases_the_job_in_flight() {
    let (s, config) = warm(
        &format!(
            "echo \"$$\" > \"$DIR/pid\"; printf 'garbage \\033[31mred\\n' >&3; {DONE}; sleep 300"
        ),
        |h| h,
    );
    let job = Job::laravel8("App\\Jobs\\Garbled");
    s.push(&job);
    let d = s.run(&config, &["--once", "--tries=3"]);
    // Released with its attempt counted, available at once.
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(0)));
    let logs = d.stderr_text();
    assert!(
        logs.contains("protocol error")
            && logs.contains(r#""garbage \u{1b}[31mred""#)
            && logs.contains("is not the answer to call"),
        "logged with the line escaped: {logs}"
    );
    s.wait_for_file("pid");
    common::wait_dead(s.read_pid("pid"));
}

/// A process that exits by itself after each answer (as the PHP bridge does
/// after a boot error) used to make the next job fail without running
/// ("no response on fd 3"). A process found dead, or one that dies without
/// reading the request, is replaced and the job goes to the new process: it
/// runs exactly once and no attempt is spent. The process lingers a moment
/// after its answer, so the next request is sent before it exits; that is
/// how it was meant to end, and is logged as news, not as a warning
/// (issue 22, item 8).
#[test]
fn a_process_that_exits_after_each_answer_costs_no_job_an_attempt() {
    let (s, config) = warm(&format!("{DONE}; sleep 0.05; exit 0"), |h| h);
    let jobs = Job::numbered("App\\Jobs\\Once@handle", 20);
    s.push_on("default", &jobs);
    let run = s.run(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    let stderr = run.stderr_text();
    assert!(
        !stderr.contains(" WARN "),
        "exiting after an answer is no warning: {stderr}"
    );
    s.assert_state(QueueState::empty());
    let mut ran: Vec<String> = calls(&s)
        .iter()
        .map(|(_, r)| r["id"].as_str().unwrap_or_default().to_string())
        .collect();
    ran.sort();
    let mut ids: Vec<String> = jobs.iter().map(Job::id).collect();
    ids.sort();
    assert_eq!(ran, ids, "every job ran exactly once");
    assert_eq!(pids(&s).len(), 20, "one process per job");
}

/// Peak resident memory of process `pid` in bytes (`VmHWM`).
fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

/// 64 MB on stdout and on stderr without a newline, and a 64 MB line on
/// fd 3, used to be held whole in the daemon's memory. Output lines are now
/// cut to `output_limit` (their end kept and logged, as in process mode),
/// and an answer line past its limit is a protocol error read in bounded
/// memory: the daemon's peak RSS stays far below the 64 MB it was sent.
#[test]
fn persistent_output_and_answers_are_bounded() {
    let (s, config) = warm(
        &format!(
            "case \"$line\" in\n    *Chatty*) head -c 67108864 /dev/zero | tr '\\0' o; printf 'END-OF-STDOUT\\n'; \
             head -c 67108864 /dev/zero | tr '\\0' e >&2; printf 'END-OF-STDERR\\n' >&2; {DONE} ;;\n    \
             *Gate*) touch \"$DIR/gate\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done; {DONE} ;;\n    \
             *) head -c 67108864 /dev/zero | tr '\\0' a >&3; printf '\\n' >&3; sleep 300 ;;\n  esac"
        ),
        |h| h,
    );
    let chatty = Job::laravel8("App\\Jobs\\Chatty");
    let long = Job::laravel8("App\\Jobs\\LongAnswer");
    s.push_on(
        "default",
        [&chatty, &long, &Job::laravel8("App\\Jobs\\Gate")],
    );
    // Three jobs, one at a time; the daemon is still running the last one
    // when its peak is read.
    let mut d = s.work(&config, &["--sleep=0", "--tries=3", "--max-jobs=3"]);
    s.wait_for_file("gate");
    let peak = peak_rss(d.pid().as_raw());
    s.touch("go");
    d.expect_exit(0);
    eprintln!("peak RSS of the daemon: {} KiB", peak / 1024);
    assert!(
        peak < 48 * 1024 * 1024,
        "the daemon's peak RSS was {} MB",
        peak / 1024 / 1024
    );
    let logs = d.stderr_text();
    assert!(
        logs.contains("earlier bytes cut]")
            && logs.contains("ooooEND-OF-STDOUT")
            && logs.contains("eeeeEND-OF-STDERR"),
        "the end of each over-long line is logged"
    );
    assert!(
        logs.contains("an answer line longer than 1048576 bytes"),
        "the long answer is a protocol error"
    );
    // Released with no delay, it was moved back to the ready list when
    // the daemon reserved the next job.
    let state = s.state();
    assert!(state.failed.is_empty(), "no job failed: {state:?}");
    let ready = state.queues.get("default").map(|q| q.ready.clone());
    assert_eq!(
        ready,
        Some(vec![Payload::job(&long, 1)]),
        "the job with the long answer is released: {state:?}"
    );
}

/// `decode_command = false`: the request carries the payload but no
/// `command`, though the job has one (the default carries it).
#[test]
fn decode_command_false_leaves_the_command_out_of_requests() {
    for decode in [true, false] {
        let (s, config) = warm(DONE, |h| h.decode_command(decode));
        let job = Job::laravel8("App\\Jobs\\WithCommand");
        s.push(&job);
        s.run(&config, &["--once", "--sleep=0"]);
        let calls = calls(&s);
        assert_eq!(calls.len(), 1, "{calls:?}");
        let request = &calls[0].1;
        assert!(request["payload"].is_string(), "{request}");
        assert_eq!(
            request.get("command").is_some(),
            decode,
            "decode_command = {decode}: {request}"
        );
    }
}

/// Issue 22, item 6: a job reserved while every process of its pool is
/// busy waits, reserved, and a crash of the worker then costs it an
/// attempt without a start. With one process and `--concurrency=4`, the
/// worker used to reserve 4 jobs in one pop while only 1 could start;
/// SIGKILLed then, 3 jobs went to attempt 2 never having run attempt 1.
/// With `reserve_ahead = 0` it reserves only what can start: the crash
/// costs the started job.
#[test]
fn a_crash_costs_only_the_jobs_that_started() {
    let (s, config) = warm("touch \"$DIR/started\"; sleep 300", |h| {
        h.processes(1).reserve_ahead(0)
    });
    s.push_on("default", &Job::numbered("App\\Jobs\\Hang@handle", 8));
    let mut worker = s.work(&config, &["--concurrency=4", "--sleep=0"]);
    s.wait_for_file("started");
    worker.signal(nix::sys::signal::Signal::SIGKILL);
    worker.wait_exit();

    let started = calls(&s).len();
    let reserved = s.redis.zcard("laravel_database_queues:default:reserved") as usize;
    assert_eq!(started, 1, "one process, one call");
    let burnt = reserved - started;
    assert_eq!(burnt, 0, "{reserved} reserved, {started} started");
    assert_eq!(s.redis.llen("laravel_database_queues:default"), 7);
}

/// Issue 29, item 1: with `reserve_ahead = 2` the worker keeps two jobs
/// reserved ahead of its one busy process, and no more, however many
/// `--concurrency` slots are free; a SIGKILL then costs those two an
/// attempt each (the window named in the book), the others none.
#[test]
fn a_crash_costs_the_started_job_and_the_reserve_ahead_window() {
    let (s, config) = warm("touch \"$DIR/started\"; sleep 300", |h| {
        h.processes(1).reserve_ahead(2)
    });
    crash_with_the_window_full(&s, &config);
}

/// Eight jobs for one process that hangs (it touches `started`) with
/// `reserve_ahead = 2` at `--concurrency=6`: SIGKILLs the worker once the
/// window is full, and checks that one job started, three are reserved
/// (it and the two ahead) and five were never taken.
pub fn crash_with_the_window_full(s: &Scene, config: &std::path::Path) {
    s.push_on("default", &Job::numbered("App\\Jobs\\Hang@handle", 8));
    let mut worker = s.work(config, &["--concurrency=6", "--sleep=0"]);
    s.wait_for_file("started");
    let reserved = "laravel_database_queues:default:reserved";
    common::wait_until("the window filled", || s.redis.zcard(reserved) >= 3);
    worker.signal(nix::sys::signal::Signal::SIGKILL);
    worker.wait_exit();

    assert_eq!(calls(s).len(), 1, "one process, one call");
    assert_eq!(s.redis.zcard(reserved), 3, "the running job and two ahead");
    assert_eq!(s.redis.llen("laravel_database_queues:default"), 5);
}

/// Issue 29, item 2: the job lines are buffered and written together;
/// under load each stays whole and in order: 2,000 jobs through 4 warm
/// processes at `--concurrency=16` give 4,000 `--json` lines, every one a
/// JSON object, each job's `starting` before its `success`.
#[test]
fn job_lines_stay_whole_and_in_order_under_load() {
    let (s, config) = warm(DONE, |h| h.processes(4));
    let jobs = Job::numbered("App\\Jobs\\Quick@handle", 2000);
    s.push_on("default", &jobs);
    let d = s.run(
        &config,
        &[
            "--concurrency=16",
            "--sleep=0",
            "--stop-when-empty",
            "--json",
        ],
    );
    assert_eq!(d.stdout.len(), 4000, "two lines per job");
    let mut seen: std::collections::HashMap<String, Vec<String>> = Default::default();
    for line in &d.stdout {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let uuid = event["uuid"].as_str().expect("a uuid").to_string();
        let status = event["status"].as_str().expect("a status").to_string();
        seen.entry(uuid).or_default().push(status);
    }
    assert_eq!(seen.len(), 2000, "every job has its lines");
    for (uuid, statuses) in &seen {
        assert_eq!(statuses, &["starting", "success"], "{uuid}");
    }
}

/// A job's slot is given back as its delete is sent, so that the next
/// reservation overlaps the delete's round trip; with one slot the lines
/// still come one job after the other, as `queue:work` prints them: 300
/// jobs at `--concurrency=1` give each job's `starting` and `success` in
/// turn, in the queue's order.
#[test]
fn at_concurrency_one_each_job_ends_before_the_next_starts() {
    let (s, config) = warm(DONE, |h| h);
    let jobs = Job::numbered("App\\Jobs\\Quick@handle", 300);
    s.push_on("default", &jobs);
    let d = s.run(&config, &["--sleep=0", "--stop-when-empty", "--json"]);
    let seen: Vec<(String, String)> = d
        .stdout
        .iter()
        .map(|line| {
            let event: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
            let field = |name: &str| event[name].as_str().unwrap_or_default().to_string();
            (field("uuid"), field("status"))
        })
        .collect();
    let expected: Vec<(String, String)> = jobs
        .iter()
        .flat_map(|job| ["starting", "success"].map(|status| (job.uuid(), status.to_string())))
        .collect();
    assert_eq!(seen, expected);
}

/// The jobs that gave their slot back before they were settled are at
/// most as many as the slots, and a job whose delete fails asks for a slot
/// back: when Redis refuses every delete (an ACL without `ZREM`), each is
/// retried while its reservation lasts, and the worker at
/// `--concurrency=2` runs three or four jobs, then nothing more until a
/// reservation runs out (`retry_after = 4`) and frees a slot. (The room's
/// bound alone is the unit test in `src/worker/slot.rs`.)
#[test]
fn jobs_settling_on_a_freed_slot_are_at_most_as_many_as_the_slots() {
    let retry_after = 4;
    let (s, config) = warm_with(DONE, |h| h.processes(2), |c| c.retry_after(retry_after));
    let _: () = s.redis.cmd(&["ACL", "SETUSER", "default", "-zrem"]);
    s.push_on("default", &Job::numbered("App\\Jobs\\Kept@handle", 10));
    let mut worker = s.work(&config, &["--concurrency=2", "--sleep=0"]);
    common::wait_until("three jobs ran", || calls(&s).len() >= 3);
    let third = std::time::Instant::now();
    common::wait_until("a fifth job ran", || calls(&s).len() >= 5);
    let waited = third.elapsed();
    worker.signal(nix::sys::signal::Signal::SIGKILL);
    worker.wait_exit();
    assert!(
        waited >= std::time::Duration::from_secs(2),
        "the fifth job started {waited:?} after the third, before any reservation ran out"
    );
    let log = worker.stderr_text();
    assert!(log.contains("cannot delete the job"), "{log}");
}

/// A job whose delete fails once after it gave its slot back goes on
/// trying while longer jobs hold every slot: it does not wait for a slot
/// before it tries again, so its delete lands within its reservation and
/// it runs once. `--concurrency=2`, 2 processes, none reserved ahead:
/// `Held` holds one slot; `Quick` ends,
/// its delete is refused (`ZREM` denied) and `Held2` takes the freed slot;
/// `ZREM` is allowed again while both are held.
#[test]
fn a_delete_refused_once_is_retried_while_other_jobs_hold_every_slot() {
    let respond = format!(
        "case \"$line\" in *Held*) while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done;; esac; {DONE}"
    );
    let tune = |h: Handler| h.processes(2).reserve_ahead(0);
    let (s, config) = warm_with(&respond, tune, |c| c.retry_after(30));
    let _: () = s.redis.cmd(&["ACL", "SETUSER", "default", "-zrem"]);
    let [held, quick, held2] = Job::named(["Held", "Quick", "Held2"]);
    s.push_on("default", [&held, &quick, &held2]);
    let mut worker = s.work(&config, &["--concurrency=2", "--sleep=0"]);
    worker.wait_log(&["cannot delete the job", "Quick"]);
    let _: () = s.redis.cmd(&["ACL", "SETUSER", "default", "+zrem"]);
    let key = format!("{}:reserved", common::q("default"));
    let reserved = || -> Vec<String> { s.redis.cmd(&["ZRANGE", &key, "0", "-1"]) };
    common::wait_until("Quick deleted while Held and Held2 run", || {
        !reserved().iter().any(|p| p.contains(&quick.id()))
    });
    s.touch("go");
    common::wait_until("all done", || calls(&s).len() == 3 && reserved().is_empty());
    worker.signal(nix::sys::signal::Signal::SIGTERM);
    worker.expect_exit(0);
    let ran = |job: &Job| {
        calls(&s)
            .iter()
            .filter(|(_, request)| request.to_string().contains(&job.id()))
            .count()
    };
    assert_eq!((ran(&held), ran(&quick), ran(&held2)), (1, 1, 1));
}
