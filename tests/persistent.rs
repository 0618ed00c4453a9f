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
/// `respond` (which must write one JSON line to fd 3).
fn handler(s: &Scene, respond: &str) -> PathBuf {
    s.script(
        "p.sh",
        &format!("while IFS= read -r line; do\n  printf '%s %s\\n' \"$$\" \"$line\" >> \"$LOG\"\n  {respond}\ndone"),
    )
}

fn config(s: &Scene, script: &Path, extra: &str) -> PathBuf {
    let db = s.failed_db();
    s.config_toml(&format!(
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
    let h = handler(&s, "echo '{\"action\":\"done\"}' >&3");
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
    let h = handler(&s, "echo '{\"action\":\"done\"}' >&3");
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
    let h = handler(&s, "echo '{\"action\":\"done\"}' >&3");
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
        "case \"$line\" in *Release*) echo '{\"action\":\"release\",\"delay\":40}' >&3 ;; *) echo '{\"action\":\"fail\",\"reason\":\"nope\"}' >&3 ;; esac",
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
        "case \"$line\" in *Crash*) echo 'fatal: out of cheese' >&2; exit 7 ;; *) echo '{\"action\":\"done\"}' >&3 ;; esac",
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
        "case \"$line\" in *Slow*) sleep 300 ;; *) echo '{\"action\":\"done\"}' >&3 ;; esac",
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
        "touch \"$DIR/started.$$\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done; echo '{\"action\":\"done\"}' >&3",
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
