//! Balanced slots per queue (`[worker] balance`), on a real Redis with real
//! handler processes: a burst moves slots to its queue and back, the
//! minimums hold, a scale-down never stops a running job, and a steady
//! load does not make the slots swing.
//!
//! Every wait is on an event: a log line ("slots rebalanced", the debug
//! line of each round), a file a handler writes, a Redis key.

use crate::common;

use common::http_server::{get, metric};
use common::{Daemon, Job, Scene, q};

/// The handler: notes `started.QUEUE.ID`, takes 50 ms more when `slow`
/// exists, waits for the gate `go.QUEUE` when that queue is gated
/// (`gate.QUEUE` exists), then notes `done.ID`.
const GATED_BY_QUEUE: &str = r#"Q="$LARAVEL_WORKER_QUEUE"; ID="$LARAVEL_WORKER_JOB_ID"
touch "$DIR/started.$Q.$ID"
if [ -f "$DIR/slow" ]; then sleep 0.05; fi
if [ -f "$DIR/gate.$Q" ]; then
  while [ ! -f "$DIR/go.$Q" ]; do sleep 0.01; done
fi
touch "$DIR/done.$ID""#;

/// Log filter that adds the balancer's debug line per round.
const ROUNDS_LOGGED: (&str, &str) = (
    "RUST_LOG",
    "info,laravel_worker::worker::balance::rounds=debug",
);

/// A balanced worker over `--queue=a,b` with `max_processes` slots in all,
/// a 1 s cooldown and `extra` keys in `[worker]`.
fn balanced(s: &Scene, max_processes: i64, extra: &[(&str, toml::Value)]) -> Daemon {
    let mut config = s
        .config()
        .script(GATED_BY_QUEUE)
        .metrics_listen("127.0.0.1:0")
        .set("worker", "balance", "auto")
        .set("worker", "max_processes", max_processes)
        .set("worker", "balance_cooldown", 1);
    for (key, value) in extra {
        config = config.set("worker", key, value.clone());
    }
    let config = config.write();
    let mut args = vec!["--config", config.to_str().unwrap(), "work"];
    args.extend(["--queue=a,b", "--sleep=1", "--json"]);
    Daemon::start(&args, &[ROUNDS_LOGGED])
}

/// Files in the scene directory whose name starts with `prefix`.
fn count(s: &Scene, prefix: &str) -> usize {
    std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(prefix))
        })
        .count()
}

/// `laravel_worker_queue_slots{queue="QUEUE"}` on `/metrics`.
fn slots_gauge(address: &str, queue: &str) -> Option<i64> {
    let text = get(address, "/metrics").1;
    let needle = format!("laravel_worker_queue_slots{{queue=\"{queue}\"}} ");
    metric(&text, &needle)?.parse().ok()
}

/// The slot moves logged so far, as `a=N,b=M`.
fn moves(d: &Daemon) -> Vec<String> {
    d.stderr_text()
        .lines()
        .filter(|l| l.contains("slots rebalanced"))
        .filter_map(|l| l.split("slots=").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// How often the slots of `a` change direction in `moves` (`a=N,b=M`):
/// 2, 3, 4, 3 is one reversal; 2, 3, 2, 3 is two.
fn reversals(moves: &[String]) -> usize {
    let a_slots: Vec<i64> = moves
        .iter()
        .filter_map(|m| m.strip_prefix("a=")?.split(',').next()?.parse().ok())
        .collect();
    let steps: Vec<i64> = a_slots.windows(2).map(|w| (w[1] - w[0]).signum()).collect();
    let directions: Vec<i64> = steps.into_iter().filter(|s| *s != 0).collect();
    directions.windows(2).filter(|w| w[0] != w[1]).count()
}

/// Waits for the `n`-th round (counted from the start).
fn wait_rounds(d: &mut Daemon, n: usize) {
    common::wait_until(&format!("{n} balancing rounds"), || {
        // Collects the log lines that came meanwhile (none matches).
        let _ = d.wait_log_for(std::time::Duration::from_millis(50), &["\u{0}"]);
        d.stderr_text().matches("balance round").count() >= n
    });
}

#[test]
fn a_burst_moves_slots_to_its_queue_and_back_while_the_other_keeps_its_minimum() {
    let s = Scene::new();
    s.touch("gate.a");
    s.push_on("a", &Job::numbered("Burst", 20));
    let mut d = balanced(&s, 4, &[]);
    let address = d.metrics_address();
    // One slot per round, up to all but b's minimum.
    d.wait_log(&["slots rebalanced", "a=2,b=1"]);
    d.wait_log(&["slots rebalanced", "a=3,b=1"]);
    common::wait_until("3 jobs of a running", || count(&s, "started.a.") == 3);
    assert_eq!(slots_gauge(&address, "a"), Some(3));
    assert_eq!(slots_gauge(&address, "b"), Some(1));
    // b keeps its slot: its jobs run while a's burst holds the others
    // (with balance off, the 4 slots would all wait on a's gate).
    let b_jobs = Job::numbered("Quick", 2);
    s.push_on("b", &b_jobs);
    for job in &b_jobs {
        s.wait_for_file(&format!("done.{}", job.id()));
    }
    assert_eq!(count(&s, "started.a."), 3, "a has 3 slots, no more");
    // The burst ends: the slots go back to the minimum.
    s.touch("go.a");
    d.wait_log(&["slots rebalanced", "a=1,b=1"]);
    common::wait_until("the gauge back at 1", || {
        slots_gauge(&address, "a") == Some(1)
    });
    assert_eq!(s.redis.llen(&q("a")), 0);
    assert_eq!(count(&s, "done."), 22);
    assert_eq!(moves(&d), ["a=2,b=1", "a=3,b=1", "a=2,b=1", "a=1,b=1"]);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

#[test]
fn an_idle_worker_starts_and_stays_at_the_minimum() {
    let s = Scene::new();
    let mut d = balanced(&s, 6, &[("min_processes", 2.into())]);
    let address = d.metrics_address();
    wait_rounds(&mut d, 5);
    assert_eq!(moves(&d), Vec::<String>::new(), "no slot moved");
    assert_eq!(slots_gauge(&address, "a"), Some(2));
    assert_eq!(slots_gauge(&address, "b"), Some(2));
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

/// With `min_processes = 0` an idle worker holds no slot, the first job
/// gets one at the next round, and `--stop-when-empty` still stops it.
#[test]
fn a_queue_without_slots_gets_one_when_a_job_comes() {
    let s = Scene::new();
    let mut d = balanced(&s, 4, &[("min_processes", 0.into())]);
    wait_rounds(&mut d, 2);
    let job = Job::laravel13("App\\Jobs\\First");
    s.push_on("b", [&job]);
    s.wait_for_file(&format!("done.{}", job.id()));
    d.wait_log(&["slots rebalanced", "a=0,b=0"]);
    assert_eq!(moves(&d), ["a=0,b=1", "a=0,b=0"]);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);

    let config = s
        .config()
        .script(GATED_BY_QUEUE)
        .set("worker", "balance", "auto")
        .set("worker", "min_processes", 0)
        .write();
    let mut d = s.work(
        &config,
        &["--queue=a,b", "--stop-when-empty", "--sleep=0.1"],
    );
    d.expect_stop(0, "empty");
}

/// Issue 32 item 6: with every `min_processes = 0` a worker starts with no
/// slot; `--stop-when-empty` and `--once` wait for the round that gives
/// the waiting jobs slots and run them, instead of leaving at once.
#[test]
fn stop_when_empty_and_once_run_the_jobs_waiting_without_slots() {
    let s = Scene::new();
    let jobs = Job::numbered("Waiting", 3);
    s.push_on("b", &jobs);
    let config = s
        .config()
        .script(GATED_BY_QUEUE)
        .set("worker", "balance", "auto")
        .set("worker", "min_processes", 0)
        .set("worker", "balance_cooldown", 1)
        .write();
    let args = ["--queue=a,b", "--once", "--sleep=0.1"];
    s.work(&config, &args).expect_stop(0, "once");
    assert_eq!(count(&s, "done."), 1, "--once ran one job");
    let args = ["--queue=a,b", "--stop-when-empty", "--sleep=0.1"];
    s.work(&config, &args).expect_stop(0, "empty");
    assert_eq!(count(&s, "done."), 3, "--stop-when-empty ran them all");
}

#[test]
fn simple_splits_the_slots_evenly_and_never_moves_them() {
    let s = Scene::new();
    s.push_on("a", &Job::numbered("Burst", 5));
    let mut d = balanced(&s, 5, &[("balance", "simple".into())]);
    let address = d.metrics_address();
    common::wait_until("the gauges", || slots_gauge(&address, "b").is_some());
    assert_eq!(
        slots_gauge(&address, "a"),
        Some(3),
        "the first queue gets the remainder"
    );
    assert_eq!(slots_gauge(&address, "b"), Some(2));
    common::wait_until("a's jobs done", || count(&s, "done.") == 5);
    assert_eq!(moves(&d), Vec::<String>::new());
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}

/// Two long jobs on a hold both of a's slots when the work moves to b: a
/// gives one slot up while both still run, and neither is stopped; b's
/// new slot starts a job only when one of them has ended (never more than
/// `max_processes` jobs at once).
#[test]
fn a_scale_down_never_stops_a_running_job() {
    let s = Scene::new();
    s.touch("gate.a");
    s.touch("gate.b");
    let long = Job::numbered("Long", 2);
    s.push_on("a", &long);
    let mut d = balanced(&s, 3, &[("auto_scaling_strategy", "size".into())]);
    d.wait_log(&["slots rebalanced", "a=2,b=1"]);
    common::wait_until("both long jobs running", || count(&s, "started.a.") == 2);
    s.push_on("b", &Job::numbered("Waiting", 10));
    d.wait_log(&["slots rebalanced", "a=1,b=2"]);
    common::wait_until("b's first job running", || count(&s, "started.b.") == 1);
    let rounds = d.stderr_text().matches("balance round").count();
    wait_rounds(&mut d, rounds + 2);
    assert_eq!(count(&s, "done."), 0, "the long jobs still run");
    assert_eq!(count(&s, "started.b."), 1, "3 jobs in flight at most");
    s.touch("go.a");
    for job in &long {
        s.wait_for_file(&format!("done.{}", job.id()));
    }
    common::wait_until("b's second slot used", || count(&s, "started.b.") == 2);
    s.touch("go.b");
    common::wait_until("every job done", || count(&s, "done.") == 12);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
    let successes = d.events_with("success").len();
    assert_eq!(successes, 12, "{}", d.stderr_text());
    assert!(
        d.events_with("failed").is_empty() && d.events_with("released_after_exception").is_empty()
    );
}

/// Jobs pushed at a steady pace for 16 rounds: the slots rise to what the
/// load needs and settle; they do not swing back and forth.
///
/// The count they settle on depends on how fast this machine runs the
/// handler (a loaded machine needs more slots for the same 40 jobs/s), and
/// that speed can change once while the test runs (other tests start or
/// end), so the test counts reversals of direction, not moves: a rise then
/// a fall is one; a balancer that swings reverses at nearly every round.
#[test]
fn a_steady_load_does_not_swing_the_slots() {
    let s = Scene::new();
    s.touch("slow");
    let mut d = balanced(&s, 6, &[]);
    let pushing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let pushing = std::sync::Arc::clone(&pushing);
        let url = s.redis.url(0);
        std::thread::spawn(move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut n = 0;
            while pushing.load(std::sync::atomic::Ordering::Relaxed) {
                // Load generation, not a wait: 40 jobs/s on a, 10 on b.
                for (queue, every) in [("a", 1), ("b", 4)] {
                    if n % every == 0 {
                        let job = Job::laravel13("App\\Jobs\\Steady").build();
                        let _: () = redis::pipe()
                            .rpush(q(queue), job)
                            .rpush(format!("{}:notify", q(queue)), 1)
                            .query(&mut conn)
                            .unwrap();
                    }
                }
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
        })
    };
    wait_rounds(&mut d, 16);
    pushing.store(false, std::sync::atomic::Ordering::Relaxed);
    feeder.join().unwrap();
    let moved = moves(&d);
    let turns = reversals(&moved);
    assert!(turns <= 2, "{turns} reversals in 16 rounds: {moved:?}");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
}
