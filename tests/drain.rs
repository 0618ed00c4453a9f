//! The drain deadline (`[worker] drain_timeout`): after SIGTERM, jobs still
//! running when the deadline passes are handed back at once (released, the
//! attempt counted) and their handlers' process groups are killed, so the
//! worker stops in time and nothing is left running or reserved.

mod common;

use std::path::{Path, PathBuf};

use common::payloads::Job;
use common::{Scene, now, q};
use nix::sys::signal::Signal;

fn config(s: &Scene, handler: &Path, handler_extra: &str) -> PathBuf {
    let db = s.failed_db();
    s.config_toml(&format!(
        "[worker]\ndrain_timeout = 1\nkill_grace = 1\n\n[failed]\nurl = \"{db}\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"{}\"]\n{handler_extra}\n",
        handler.display()
    ))
}

fn pid(s: &Scene, name: &str) -> i32 {
    std::fs::read_to_string(s.path(name))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// One process per job: the handler and the child it started are killed,
/// the job is released with attempts 1, and the worker exits 0.
#[test]
fn a_job_running_past_the_drain_deadline_is_released() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "sleep 300 & echo $! > \"$DIR/child\"; echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; wait",
    );
    let config = config(&s, &handler, "");
    let job = Job::laravel8("App\\Jobs\\Endless");
    s.redis.push("default", &job.build());

    let mut d = s.work(&config, &["--json", "--tries=3"]);
    d.wait_event("starting");
    s.wait_for_file("started");
    d.signal(Signal::SIGTERM);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    assert!(d.stderr.iter().any(|l| l.contains("drain deadline passed")));
    common::wait_dead(pid(&s, "pid"));
    common::wait_dead(pid(&s, "child"));

    let released = d
        .events()
        .into_iter()
        .find(|e| e["status"] == "released_after_exception")
        .unwrap();
    assert_eq!(
        released["exception"],
        "LaravelWorker\\WorkerStoppedException"
    );
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    assert!(delayed[0].0.contains(&job.id()) && delayed[0].0.contains(r#""attempts":1"#));
    assert!((delayed[0].1 - now()).abs() <= 2, "available again at once");
    assert!(s.failed_rows().is_empty());
}

/// Persistent mode: the busy process is killed and the job released.
#[test]
fn a_persistent_call_past_the_drain_deadline_is_released() {
    let s = Scene::new();
    let handler = s.script(
        "p.sh",
        "while IFS= read -r line; do echo $$ > \"$DIR/pid\"; touch \"$DIR/started\"; sleep 300; done",
    );
    let config = config(&s, &handler, "mode = \"persistent\"");
    let job = Job::laravel13("App\\Jobs\\Endless");
    s.redis.push("default", &job.build());

    let mut d = s.work(&config, &["--json", "--tries=3"]);
    s.wait_for_file("started");
    d.signal(Signal::SIGTERM);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", d.stderr.join("\n"));
    common::wait_dead(pid(&s, "pid"));
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    assert!(delayed[0].0.contains(&job.id()));
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
}

/// A job that finishes within the deadline is simply done.
#[test]
fn a_job_finishing_within_the_drain_deadline_is_done() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done",
    );
    let config = config(&s, &handler, "");
    s.redis
        .push("default", &Job::laravel8("App\\Jobs\\Quick").build());
    let mut d = s.work(&config, &["--json"]);
    s.wait_for_file("started");
    d.signal(Signal::SIGTERM);
    d.wait_stderr(|l| l.contains("signal received"));
    s.touch("go");
    assert_eq!(d.code(), Some(0));
    assert!(d.events().iter().any(|e| e["status"] == "success"));
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}
