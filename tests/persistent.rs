//! Persistent handlers: warm processes serving many calls over NDJSON
//! (requests on stdin, responses on fd 3), recycled by call count and
//! memory, replaced when they crash or time out.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::payloads::Job;
use common::{Scene, q};
use serde_json::{Value, json};

/// A persistent handler in sh: logs `PID <request>` per call, then runs
/// `respond`, which must answer once with `answer '{"action":…}'` (it adds
/// the request's `call` number, the request's first key).
fn handler(s: &Scene, respond: &str) -> PathBuf {
    s.script(
        "p.sh",
        &format!(
            "answer() {{ printf '{{\"call\":%s,%s\\n' \"$CALL\" \"${{1#?}}\" >&3; }}\n\
             while IFS= read -r line; do\n  printf '%s %s\\n' \"$$\" \"$line\" >> \"$LOG\"\n  \
             CALL=${{line#{{\\\"call\\\":}}; CALL=${{CALL%%,*}}\n  {respond}\ndone"
        ),
    )
}

fn config(s: &Scene, script: &Path, extra: &str) -> PathBuf {
    let db = s.failed_db();
    s.config(&format!(
        "[worker]\nkill_grace = 1\n\n[failed]\nurl = \"{db}\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\nmode = \"persistent\"\n{extra}\n",
        script.display()
    ))
}

/// (pid, request) per call, from the job log.
fn calls(s: &Scene) -> Vec<(String, Value)> {
    s.log()
        .iter()
        .map(|l| {
            let (pid, json) = l.split_once(' ').unwrap();
            (pid.to_string(), serde_json::from_str(json).unwrap())
        })
        .collect()
}

fn pids(s: &Scene) -> BTreeSet<String> {
    calls(s).into_iter().map(|(pid, _)| pid).collect()
}

#[test]
fn one_process_serves_every_job_with_full_metadata() {
    let s = Scene::new();
    let h = handler(&s, "answer '{\"action\":\"done\"}'");
    let config = config(&s, &h, "");
    let jobs: Vec<Job> = (0..5).map(|_| Job::laravel8("App\\Jobs\\Warm")).collect();
    for job in &jobs {
        s.redis.push("default", &job.build());
    }
    let mut d = s.work_until_exit(
        &config,
        &[
            "--stop-when-empty",
            "--sleep=0",
            "--tries=3",
            "--timeout=30",
        ],
    );
    assert_eq!(d.code(), Some(0));
    let calls = calls(&s);
    assert_eq!(calls.len(), 5);
    assert_eq!(pids(&s).len(), 1, "one warm process");
    let numbers: BTreeSet<u64> = calls
        .iter()
        .map(|(_, r)| r["call"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers.len(), 5, "each request has its own call number");
    for ((_, request), job) in calls.iter().zip(&jobs) {
        assert_eq!(request["mode"], "run");
        assert_eq!(request["id"], job.id());
        assert_eq!(request["uuid"], job.uuid());
        assert_eq!(request["name"], "App\\Jobs\\Warm");
        assert_eq!(request["queue"], "default");
        assert_eq!(request["connection"], "redis");
        assert_eq!(request["attempt"], 1);
        assert_eq!(request["max_tries"], 3);
        assert_eq!(request["timeout"], 30);
        let payload: Value = serde_json::from_str(request["payload"].as_str().unwrap()).unwrap();
        assert_eq!(payload["attempts"], 1, "the reserved payload");
    }
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

#[test]
fn processes_are_recycled_after_max_jobs() {
    let s = Scene::new();
    let h = handler(&s, "answer '{\"action\":\"done\"}'");
    let config = config(&s, &h, "max_jobs = 2");
    for i in 0..5 {
        s.redis.push(
            "default",
            &Job::string("App\\Jobs\\R@handle", json!({ "i": i })).build(),
        );
    }
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    let calls = calls(&s);
    assert_eq!(calls.len(), 5);
    let per_process: Vec<&String> = calls.iter().map(|(pid, _)| pid).collect();
    assert_eq!(per_process[0], per_process[1]);
    assert_ne!(per_process[1], per_process[2]);
    assert_eq!(per_process[2], per_process[3]);
    assert_ne!(per_process[3], per_process[4]);
    assert_eq!(pids(&s).len(), 3);
}

#[test]
fn processes_above_max_memory_are_recycled() {
    let s = Scene::new();
    let h = handler(&s, "answer '{\"action\":\"done\"}'");
    // Every shell is above 1 MB resident, so each call recycles its process.
    let config = config(&s, &h, "max_memory = 1");
    for i in 0..3 {
        s.redis.push(
            "default",
            &Job::string("App\\Jobs\\M@handle", json!({ "i": i })).build(),
        );
    }
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0));
    assert_eq!(pids(&s).len(), 3);
}

#[test]
fn responses_release_and_fail_the_job() {
    let s = Scene::new();
    let h = handler(
        &s,
        "case \"$line\" in *Release*) answer '{\"action\":\"release\",\"delay\":40}' ;; *) answer '{\"action\":\"fail\",\"reason\":\"nope\"}' ;; esac",
    );
    let config = config(&s, &h, "");
    let release = Job::laravel13("App\\Jobs\\Release");
    let fail = Job::laravel13("App\\Jobs\\Fail");
    s.redis.push("default", &release.build());
    s.redis.push("default", &fail.build());
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0", "--tries=3"]);
    assert_eq!(d.code(), Some(0));
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    assert!(delayed[0].0.contains(&release.id()) && delayed[0].0.contains(r#""attempts":1"#));
    assert!((delayed[0].1 - (common::now() + 40)).abs() <= 2);
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, fail.uuid());
    assert!(
        rows[0]
            .exception
            .starts_with("Illuminate\\Queue\\ManuallyFailedException: nope")
    );
    assert_eq!(pids(&s).len(), 1);
}

/// A process that dies mid-call costs that job one attempt (an exception,
/// with its stderr) and is replaced for the next job.
#[test]
fn a_crashed_process_is_an_exception_and_is_replaced() {
    let s = Scene::new();
    let h = handler(
        &s,
        "case \"$line\" in *Crash*) echo 'fatal: out of cheese' >&2; exit 7 ;; *) answer '{\"action\":\"done\"}' ;; esac",
    );
    let config = config(&s, &h, "");
    let crash = Job::laravel8("App\\Jobs\\Crash");
    let after = Job::laravel8("App\\Jobs\\After");
    s.redis.push("default", &crash.build());
    s.redis.push("default", &after.build());
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    assert_eq!(d.code(), Some(0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, crash.uuid());
    assert!(
        rows[0].exception.contains("exited with status 7"),
        "{}",
        rows[0].exception
    );
    assert!(
        rows[0].exception.contains("fatal: out of cheese"),
        "{}",
        rows[0].exception
    );
    let calls = calls(&s);
    let run: Vec<&Value> = calls
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r["mode"] == "run")
        .collect();
    assert_eq!(run.len(), 2);
    let failed_hook = calls
        .iter()
        .find(|(_, r)| r["mode"] == "failed")
        .expect("failed hook call");
    assert_eq!(failed_hook.1["id"], crash.id());
    assert!(
        failed_hook.1["exception"]
            .as_str()
            .unwrap()
            .contains("out of cheese")
    );
    assert!(pids(&s).len() >= 2, "replaced after the crash");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// A call past its time limit: the process group is killed, the job is
/// treated as timed out, and a fresh process serves the next job.
#[test]
fn a_timed_out_call_kills_the_process_and_the_next_job_gets_a_new_one() {
    let s = Scene::new();
    let h = handler(
        &s,
        "case \"$line\" in *Slow*) sleep 300 ;; *) answer '{\"action\":\"done\"}' ;; esac",
    );
    let config = config(&s, &h, "");
    let slow = Job::laravel8("App\\Jobs\\Slow");
    let next = Job::laravel8("App\\Jobs\\Next");
    s.redis.push("default", &slow.build());
    s.redis.push("default", &next.build());
    let mut d = s.work_until_exit(
        &config,
        &[
            "--stop-when-empty",
            "--sleep=0",
            "--tries=3",
            "--timeout=1",
            "--backoff=60",
            "--json",
        ],
    );
    assert_eq!(d.code(), Some(0));
    let released = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "released_after_exception")
        .unwrap();
    assert_eq!(
        released["exception"],
        "Illuminate\\Queue\\TimeoutExceededException"
    );
    let calls = calls(&s);
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].0, calls[1].0, "a new process after the timeout");
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    assert!(delayed[0].0.contains(&slow.id()));
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
}

/// `processes = 2` with `--concurrency=2`: two calls run at once, in two
/// processes.
#[test]
fn two_processes_serve_two_jobs_at_once() {
    let s = Scene::new();
    let h = handler(
        &s,
        "touch \"$DIR/started.$$\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done; answer '{\"action\":\"done\"}'",
    );
    let config = config(&s, &h, "processes = 2");
    for i in 0..2 {
        s.redis.push(
            "default",
            &Job::string("App\\Jobs\\P@handle", json!({ "i": i })).build(),
        );
    }
    let mut d = s.work(&config, &["--concurrency=2", "--max-jobs=2", "--json"]);
    let deadline = std::time::Instant::now() + common::WAIT;
    loop {
        let started = std::fs::read_dir(s.dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("started.")
            })
            .count();
        if started == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "both calls never ran at once"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    s.touch("go");
    assert_eq!(d.code(), Some(0));
    assert_eq!(pids(&s).len(), 2);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// The stderr (log) lines of a finished daemon, joined.
fn logs(d: &common::Daemon) -> String {
    d.stderr.join("\n")
}

/// Answers are matched by `call`, not by order. A handler that answers one
/// job twice (both lines in one write) used to shift every later answer
/// onto the next job: `Fail` was deleted with the duplicate "done" and
/// `Ok` failed with Fail's reason. Now the extra line is a protocol error
/// (logged, the process replaced) and each job gets its own answer.
#[test]
fn a_duplicate_answer_is_a_protocol_error_not_the_next_jobs_answer() {
    let s = Scene::new();
    let h = handler(
        &s,
        "case \"$line\" in\n    *Twice*) a=\"{\\\"call\\\":$CALL,\\\"action\\\":\\\"done\\\"}\"; printf '%s\\n%s\\n' \"$a\" \"$a\" >&3 ;;\n    \
         *Fail*) answer '{\"action\":\"fail\",\"reason\":\"nope\"}' ;;\n    *) answer '{\"action\":\"done\"}' ;;\n  esac",
    );
    let config = config(&s, &h, "");
    let twice = Job::laravel8("App\\Jobs\\Twice");
    let fail = Job::laravel8("App\\Jobs\\Fail");
    let ok = Job::laravel8("App\\Jobs\\Ok");
    for job in [&twice, &fail, &ok] {
        s.redis.push("default", &job.build());
    }
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0", "--tries=3"]);
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let rows = s.failed_rows();
    let failed: Vec<&str> = rows.iter().map(|r| r.uuid.as_str()).collect();
    assert_eq!(failed, [fail.uuid()], "only Fail failed: {rows:?}");
    assert!(
        rows[0].exception.contains("nope"),
        "with its own reason: {}",
        rows[0].exception
    );
    let ran: Vec<String> = calls(&s)
        .iter()
        .filter(|(_, r)| r["mode"] == "run")
        .map(|(_, r)| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ran,
        ["App\\Jobs\\Twice", "App\\Jobs\\Fail", "App\\Jobs\\Ok"],
        "each job ran once"
    );
    assert!(
        pids(&s).len() >= 2,
        "the process that broke the protocol was replaced"
    );
    let logs = logs(&d);
    assert!(
        logs.contains("protocol error") && logs.contains("no request was in flight"),
        "the extra line is logged as a protocol error: {logs}"
    );
    assert!(
        logs.contains(r#"\"action\":\"done\""#),
        "with the offending line, escaped: {logs}"
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// A line on fd 3 that is not the answer to the request in flight (here a
/// garbage line with an escape sequence, then the real answer) is a
/// protocol error: the job is released with its attempt counted (not
/// deleted with a later answer, not failed), the process is killed, and
/// the line is logged escaped.
#[test]
fn a_garbage_line_releases_the_job_in_flight() {
    let s = Scene::new();
    let h = handler(
        &s,
        "echo \"$$\" > \"$DIR/pid\"; printf 'garbage \\033[31mred\\n' >&3; answer '{\"action\":\"done\"}'; sleep 300",
    );
    let config = config(&s, &h, "");
    let job = Job::laravel8("App\\Jobs\\Garbled");
    s.redis.push("default", &job.build());
    let mut d = s.work_until_exit(&config, &["--once", "--tries=3"]);
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1, "released: {delayed:?}");
    let member: Value = serde_json::from_str(&delayed[0].0).unwrap();
    assert_eq!(
        (member["uuid"].as_str(), member["attempts"].as_u64()),
        (Some(job.uuid().as_str()), Some(1)),
        "the attempt counts"
    );
    assert!(
        (delayed[0].1 - common::now()).abs() <= 2,
        "available at once"
    );
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    assert!(s.failed_rows().is_empty(), "not failed");
    let logs = logs(&d);
    assert!(
        logs.contains("protocol error")
            && logs.contains(r#""garbage \u{1b}[31mred""#)
            && logs.contains("is not the answer to call"),
        "logged with the line escaped: {logs}"
    );
    s.wait_for_file("pid");
    let pid: i32 = std::fs::read_to_string(s.path("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    common::wait_dead(pid);
}

/// A process that exits by itself after each answer (as the PHP bridge does
/// after a boot error) used to make the next job fail without running
/// ("no response on fd 3"). A process found dead, or one that dies without
/// reading the request, is replaced and the job goes to the new process: it
/// runs exactly once and no attempt is spent.
#[test]
fn a_process_that_exits_after_each_answer_costs_no_job_an_attempt() {
    let s = Scene::new();
    let h = handler(&s, "answer '{\"action\":\"done\"}'; exit 0");
    let config = config(&s, &h, "");
    let jobs: Vec<Job> = (0..20)
        .map(|i| Job::string("App\\Jobs\\Once@handle", json!({ "i": i })))
        .collect();
    for job in &jobs {
        s.redis.push("default", &job.build());
    }
    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0", "--tries=1"]);
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    let rows = s.failed_rows();
    assert!(
        rows.is_empty(),
        "{} jobs failed, first: {:?}",
        rows.len(),
        rows.first()
    );
    let mut ran: Vec<String> = calls(&s)
        .iter()
        .map(|(_, r)| r["id"].as_str().unwrap().to_string())
        .collect();
    ran.sort();
    let mut ids: Vec<String> = jobs.iter().map(Job::id).collect();
    ids.sort();
    assert_eq!(ran, ids, "every job ran exactly once");
    assert_eq!(pids(&s).len(), 20, "one process per job");
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
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
    let s = Scene::new();
    let h = handler(
        &s,
        "case \"$line\" in\n    *Chatty*) head -c 67108864 /dev/zero | tr '\\0' o; printf 'END-OF-STDOUT\\n'; \
         head -c 67108864 /dev/zero | tr '\\0' e >&2; printf 'END-OF-STDERR\\n' >&2; answer '{\"action\":\"done\"}' ;;\n    \
         *Gate*) touch \"$DIR/gate\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done; answer '{\"action\":\"done\"}' ;;\n    \
         *) head -c 67108864 /dev/zero | tr '\\0' a >&3; printf '\\n' >&3; sleep 300 ;;\n  esac",
    );
    let config = config(&s, &h, "");
    let chatty = Job::laravel8("App\\Jobs\\Chatty");
    let long = Job::laravel8("App\\Jobs\\LongAnswer");
    for job in [&chatty, &long, &Job::laravel8("App\\Jobs\\Gate")] {
        s.redis.push("default", &job.build());
    }
    // Three jobs, one at a time; the daemon is still running the last one
    // when its peak is read.
    let mut d = s.work(&config, &["--sleep=0", "--tries=3", "--max-jobs=3"]);
    s.wait_for_file("gate");
    let peak = peak_rss(d.pid().as_raw());
    s.touch("go");
    assert_eq!(d.code(), Some(0), "{}", logs(&d));
    eprintln!("peak RSS of the daemon: {} KiB", peak / 1024);
    assert!(
        peak < 48 * 1024 * 1024,
        "the daemon's peak RSS was {} MB",
        peak / 1024 / 1024
    );
    let logs = logs(&d);
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
    assert!(s.failed_rows().is_empty());
    // Released with no delay, it was moved back to the ready list when
    // the daemon reserved the next job.
    let ready = s.redis.lrange(&q("default"));
    assert!(
        ready.len() == 1 && ready[0].contains(&long.uuid()) && ready[0].contains(r#""attempts":1"#),
        "the job with the long answer is released: {ready:?}"
    );
}
