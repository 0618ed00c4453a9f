//! Pools of warm processes that follow the load: a persistent handler's
//! processes start as calls need them (up to `processes`), stop when idle
//! past `idle_timeout` (down to `min_processes`), and the pool is resized
//! at run time (SIGTTIN, SIGTTOU) without touching a call in flight. The
//! processes are counted in `/proc` (the daemon's live children), never
//! by timing.

use crate::common;

use std::path::PathBuf;

use common::http_server::{get, metric};
use common::laravel::{self, Transport};
use common::{Daemon, Handler, Job, Scene, q};
use nix::sys::signal::Signal;
use serde_json::json;

/// A persistent handler in sh: logs `PID NAME` per call; a job whose name
/// holds `Hold` waits for the file `go` before it answers, any other at
/// once.
fn holding(s: &Scene) -> PathBuf {
    s.script(
        "pool.sh",
        "while IFS= read -r line; do\n  \
           CALL=${line#{\\\"call\\\":}; CALL=${CALL%%,*}\n  \
           NAME=${line#*\\\"name\\\":\\\"}; NAME=${NAME%%\\\"*}\n  \
           printf '%s %s\\n' \"$$\" \"$NAME\" >> \"$LOG\"\n  \
           case \"$NAME\" in *Hold*) while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done;; esac\n  \
           printf '{\"call\":%s,\"action\":\"done\"}\\n' \"$CALL\" >&3\n\
         done",
    )
}

/// The config of a scene with the [`holding`] handler, tuned by `tune`,
/// and the metrics endpoint on a free port.
fn config(s: &Scene, tune: impl FnOnce(Handler) -> Handler) -> PathBuf {
    let handler = tune(Handler::command(&holding(s)).persistent());
    s.config()
        .kill_grace(1)
        .metrics_listen("127.0.0.1:0")
        .handler(handler)
        .write()
}

/// The live (not zombie) children of process `pid`: the handler processes
/// of a daemon.
fn children(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // After the command name (in parentheses): state, then ppid.
        let mut rest = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = rest.next().unwrap_or("");
        let ppid = rest.next().and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(pid) && !matches!(state, "Z" | "X") {
            found.push(child);
        }
    }
    found
}

/// Waits until the daemon `d` has exactly `n` live handler processes.
#[track_caller]
fn wait_for_processes(d: &Daemon, n: usize) {
    let pid = d.pid().as_raw();
    common::wait_until(&format!("{n} handler processes"), || {
        children(pid).len() == n
    });
}

/// The value of the gauge line starting with `name` on `/metrics`.
fn gauge(address: &str, name: &str) -> String {
    let text = get(address, "/metrics").1;
    metric(&text, name).unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
}

/// The pool gauges of the handler `*`: (processes, busy, size).
fn pool_gauges(address: &str) -> (String, String, String) {
    let one = |g: &str| {
        gauge(
            address,
            &format!("laravel_worker_pool_{g}{{handler=\"*\"}}"),
        )
    };
    (one("processes"), one("busy"), one("size"))
}

/// The calls logged so far whose job name holds `part`.
fn calls_of(s: &Scene, part: &str) -> usize {
    s.log().iter().filter(|l| l.contains(part)).count()
}

/// `n` jobs named `App\Jobs\<name><i>`.
fn jobs(name: &str, n: usize) -> Vec<Job> {
    (0..n)
        .map(|i| Job::laravel8(&format!("App\\Jobs\\{name}{i}")))
        .collect()
}

/// Waits until every job pushed so far is settled (nothing ready nor
/// reserved on `default`).
fn wait_settled(s: &Scene) {
    let (ready, reserved) = (q("default"), format!("{}:reserved", q("default")));
    common::wait_until("the queue to empty", || {
        let waiting: i64 = s.redis.cmd(&["LLEN", &ready]);
        let running: i64 = s.redis.cmd(&["ZCARD", &reserved]);
        waiting + running == 0
    });
}

/// A burst of three held jobs grows a pool from `min` processes to three
/// (one start per job, no more), and once they are done and idle past the
/// timeout it goes back to `min`. A job that comes then starts one
/// process.
fn burst_then_idle(min: usize) {
    let s = Scene::new();
    let config = config(&s, |h| {
        h.processes(3).min_processes(min as i64).idle_timeout(1)
    });
    let mut d = s.work(&config, &["--sleep=0.05", "--concurrency=3"]);
    let address = d.metrics_address();
    wait_for_processes(&d, min);
    assert_eq!(
        pool_gauges(&address),
        (min.to_string(), "0".into(), "3".into())
    );

    s.push_on("default", &jobs("Hold", 3));
    common::wait_until("three held calls", || calls_of(&s, "Hold") == 3);
    wait_for_processes(&d, 3);
    assert_eq!(pool_gauges(&address), ("3".into(), "3".into(), "3".into()));

    s.touch("go");
    wait_settled(&s);
    wait_for_processes(&d, min);
    common::wait_until("the gauges to follow", || {
        pool_gauges(&address) == (min.to_string(), "0".into(), "3".into())
    });

    s.push_on("default", &jobs("Quick", 1));
    common::wait_until("the quick job's call", || calls_of(&s, "Quick") == 1);
    wait_settled(&s);
    let pids: std::collections::BTreeSet<String> = s
        .log()
        .iter()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    let started = if min == 0 { 4 } else { 3.max(min) };
    assert_eq!(
        pids.len(),
        started,
        "one process per held call, and {} for the quick job: {:?}",
        if min == 0 { "a new one" } else { "a kept one" },
        s.log()
    );
    wait_for_processes(&d, min);
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
}

#[test]
fn a_pool_grows_with_the_load_and_returns_to_zero_when_idle() {
    burst_then_idle(0);
}

#[test]
fn a_pool_keeps_its_minimum_started_at_once() {
    burst_then_idle(1);
}

/// A process stopped for idling is never the one running a long job: the
/// held job's process outlives the idle timeout of the other, and the job
/// ends done.
#[test]
fn a_long_job_is_not_stopped_by_the_idle_timeout() {
    let s = Scene::new();
    let config = config(&s, |h| h.processes(2).idle_timeout(1));
    let mut d = s.work(&config, &["--sleep=0.05", "--tries=1", "--concurrency=2"]);
    s.push_on("default", &jobs("Hold", 1));
    common::wait_until("the held call", || calls_of(&s, "Hold") == 1);
    s.push_on("default", &jobs("Quick", 1));
    common::wait_until("the quick call", || calls_of(&s, "Quick") == 1);
    let pid = |line: &String| -> i32 { line.split(' ').next().unwrap().parse().unwrap() };
    let log = s.log();
    let (held, quick) = (pid(&log[0]), pid(&log[1]));
    assert_ne!(
        held, quick,
        "the quick job had a process of its own: {log:?}"
    );
    // The quick job's process idles past the timeout and is stopped.
    common::wait_dead(quick);
    wait_for_processes(&d, 1);
    assert_eq!(
        children(d.pid().as_raw()),
        vec![held],
        "the held job's process lives"
    );

    s.touch("go");
    wait_settled(&s);
    assert!(s.failed_rows().is_empty(), "{:?}", s.failed_rows());
    wait_for_processes(&d, 0);
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
}

/// SIGTTOU shrinks the pool below its calls in flight: both calls run on
/// to their end and one process retires after its call; SIGTTIN grows it
/// back and two calls run at once again.
#[test]
fn resizing_at_run_time_keeps_the_calls_in_flight() {
    let s = Scene::new();
    let config = config(&s, |h| h.processes(2));
    let mut d = s.work(&config, &["--sleep=0.05", "--tries=1", "--concurrency=2"]);
    let address = d.metrics_address();
    s.push_on("default", &jobs("HoldA", 2));
    common::wait_until("two held calls", || calls_of(&s, "HoldA") == 2);

    d.signal(Signal::SIGTTOU);
    common::wait_until("the pool to shrink", || pool_gauges(&address).2 == "1");
    assert_eq!(pool_gauges(&address), ("2".into(), "2".into(), "1".into()));
    s.touch("go");
    wait_settled(&s);
    assert!(s.failed_rows().is_empty(), "{:?}", s.failed_rows());
    wait_for_processes(&d, 1);

    std::fs::remove_file(s.path("go")).unwrap();
    d.signal(Signal::SIGTTIN);
    common::wait_until("the pool to grow", || pool_gauges(&address).2 == "2");
    s.push_on("default", &jobs("HoldB", 2));
    common::wait_until("two held calls again", || calls_of(&s, "HoldB") == 2);
    wait_for_processes(&d, 2);
    s.touch("go");
    wait_settled(&s);
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
}

/// The PHP bridge's pool grows from none to three PHP processes under a
/// burst of held jobs and stops them all once idle.
#[test]
fn the_php_bridge_pool_follows_the_load() {
    let s = Scene::new();
    let Some(app) = laravel::App::new(&s) else {
        return;
    };
    let handler = app
        .handler(Transport::Persistent(3))
        .idle_timeout(1)
        .decode_command(false);
    let config = s
        .config()
        .laravel(laravel::LARAVEL)
        .handler(handler)
        .write();
    let mut d = s.work(&config, &["--sleep=0.05", "--tries=1", "--concurrency=3"]);
    let gate = s.path("go");
    app.dispatch(json!([{"kind": "hold", "tag": "h", "gate": gate, "count": 3}]));
    app.wait_for_events("handle", 3);
    wait_for_processes(&d, 3);
    let pids: std::collections::BTreeSet<i64> = app
        .records()
        .iter()
        .map(|r| r["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "three PHP processes ran the three jobs");

    s.touch("go");
    wait_settled(&s);
    wait_for_processes(&d, 0);
    assert!(s.failed_rows().is_empty(), "{:?}", s.failed_rows());
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
}
