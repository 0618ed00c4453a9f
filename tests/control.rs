//! Worker control (protocol §6.2, §6.3, §7, cases 22–27) and the handler
//! contract (product.md): signals, stop conditions, the restart key, result
//! file requests, handler metadata, routing, failed stores, fatal start-up
//! errors. Each test asserts the Redis state, the failed rows, the exit
//! status and the job log afterwards.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::payloads::Job;
use common::{Daemon, Scene, WAIT, now, q};
use nix::sys::signal::Signal;
use serde_json::Value;

/// The restart key under the test config (prefix `laravel_database_`, cache
/// prefix `laravel_cache` with the Laravel ≤ 10 colon), in DB 1.
const RESTART_KEY: &str = "laravel_database_laravel_cache:illuminate:queue:restart";

/// Handler body: mark the job as started, then wait for the `go` gate.
const GATED: &str = "touch \"$DIR/started\"; while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done";

/// A log line without its ANSI colour codes.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits for a stderr log line containing every one of `parts`.
fn wait_log(d: &mut Daemon, parts: &[&str]) -> String {
    plain(&d.wait_stderr(|l| {
        let p = plain(l);
        parts.iter().all(|part| p.contains(part))
    }))
}

/// All of stderr (after exit), without colours.
fn stderr_text(d: &Daemon) -> String {
    d.stderr
        .iter()
        .map(|l| plain(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `reason` of the "worker stopped" log line (after exit).
fn stop_reason(d: &Daemon) -> String {
    let line = d
        .stderr
        .iter()
        .map(|l| plain(l))
        .find(|l| l.contains("worker stopped"))
        .unwrap_or_else(|| panic!("no 'worker stopped' line; stderr:\n{}", stderr_text(d)));
    let at = line.find("reason=").expect("reason field") + "reason=".len();
    line[at..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_matches('"')
        .to_string()
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A config with `[queue]` (`queue_extra`), `[failed]` (`failed`) and one
/// `[[handlers]]` entry per route, in order.
fn config_routes(s: &Scene, queue_extra: &str, failed: &str, routes: &[(&str, &Path)]) -> PathBuf {
    let mut extra = format!("[queue]\n{queue_extra}\n\n[failed]\n{failed}\n");
    for (pattern, command) in routes {
        extra.push_str(&format!(
            "\n[[handlers]]\nmatch = {}\ncommand = [{}]\n",
            toml_str(pattern),
            toml_str(&command.display().to_string())
        ));
    }
    s.config(&extra)
}

/// `[failed]` body for the scene's SQLite failed_jobs table.
fn sqlite_failed(s: &Scene) -> String {
    format!("url = {}", toml_str(&s.failed_db()))
}

/// The job log line `recording_script` writes for a run of `job`.
fn run_line(job: &Job, queue: &str) -> String {
    format!(
        "run {} {} 1 {queue}",
        job.get("displayName").as_str().unwrap(),
        job.id()
    )
}

/// Runs a command on DB 1 (the cache).
fn cache_cmd<T: redis::FromRedisValue>(s: &Scene, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(&mut s.redis.conn(1)).unwrap()
}

/// Waits until the server has answered at least `n` GETs or MGETs. The
/// worker reads the cache only for the restart (and pause) keys, so after
/// the first read it holds its starting value and any later write is a
/// change it must see.
fn wait_for_restart_reads(s: &Scene, n: u64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let info: String = s.redis.cmd(&["INFO", "commandstats"]);
        let count = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        let calls = count("cmdstat_get:calls=") + count("cmdstat_mget:calls=");
        if calls >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the worker never read the restart key"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// `job` as its reserved copy must read: the same JSON with `attempts` 1.
fn reserved_value(job: &Job) -> Value {
    parse(&job.clone().set("attempts", 1.into()).build())
}

// ---------------------------------------------------------------------------
// Case 24: SIGTERM, SIGINT, SIGQUIT
// ---------------------------------------------------------------------------

/// A quit signal while a job runs: the job finishes and is ZREMed, nothing
/// more is reserved (the second job stays in the ready list untouched), and
/// the worker exits 0.
fn quit_signal_mid_job(signal: Signal) {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", GATED);
    let config = s.config_with_handler(&handler, "");
    let first = Job::laravel8("App\\Jobs\\First");
    let second = Job::laravel8("App\\Jobs\\Second");
    s.redis.push("default", &first.build());
    s.redis.push("default", &second.build());

    let mut d = s.work(&config, &["--sleep=30"]);
    s.wait_for_file("started");
    d.signal(signal);
    wait_log(&mut d, &["signal received", signal.as_str()]);
    // The job is still running: reserved, not yet deleted.
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 1);

    s.touch("go");
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "interrupted");
    assert_eq!(s.log(), vec![run_line(&first, "default")]);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    assert_eq!(s.redis.lrange(&q("default")), vec![second.build()]);
    assert_eq!(s.redis.llen(&format!("{}:notify", q("default"))), 1);
    assert_eq!(
        s.redis.keys(0),
        vec![q("default"), format!("{}:notify", q("default"))]
    );
    assert!(s.failed_rows().is_empty());
}

/// A quit signal while idle in a 30 s `--sleep` ends the worker at once.
fn quit_signal_idle(signal: Signal) {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let mut d = s.work(&config, &["--sleep=30"]);
    wait_log(&mut d, &["worker started"]);
    let sent = Instant::now();
    d.signal(signal);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?} to stop");
    assert_eq!(stop_reason(&d), "interrupted");
    assert!(s.log().is_empty());
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

#[test]
fn case24_sigterm_mid_job_finishes_the_job_then_exits_0() {
    quit_signal_mid_job(Signal::SIGTERM);
}

#[test]
fn case24_sigint_mid_job_finishes_the_job_then_exits_0() {
    quit_signal_mid_job(Signal::SIGINT);
}

#[test]
fn case24_sigquit_mid_job_finishes_the_job_then_exits_0() {
    quit_signal_mid_job(Signal::SIGQUIT);
}

#[test]
fn case24_sigterm_while_idle_exits_0_promptly() {
    quit_signal_idle(Signal::SIGTERM);
}

#[test]
fn case24_sigint_while_idle_exits_0_promptly() {
    quit_signal_idle(Signal::SIGINT);
}

#[test]
fn case24_sigquit_while_idle_exits_0_promptly() {
    quit_signal_idle(Signal::SIGQUIT);
}

// ---------------------------------------------------------------------------
// Case 25: SIGUSR2 / SIGCONT
// ---------------------------------------------------------------------------

/// SIGUSR2 sent while a job runs (so the loop is surely not mid-fetch):
/// a job pushed afterwards is never reserved; SIGTERM then ends the paused
/// worker with 0 and the job is still in the ready list, byte for byte.
#[test]
fn case25_sigusr2_stops_fetching() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", GATED);
    let config = s.config_with_handler(&handler, "");
    let first = Job::laravel8("App\\Jobs\\First");
    s.redis.push("default", &first.build());

    let mut d = s.work(&config, &["--sleep=0.1", "--json"]);
    s.wait_for_file("started");
    d.signal(Signal::SIGUSR2);
    wait_log(&mut d, &["signal received", "SIGUSR2"]);
    let later = Job::laravel8("App\\Jobs\\Later");
    s.redis.push("default", &later.build());
    s.touch("go");
    let done = d.wait_event("success");
    assert_eq!(done["uuid"], first.uuid());

    d.signal(Signal::SIGTERM);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "interrupted");
    assert_eq!(s.log(), vec![run_line(&first, "default")]);
    assert_eq!(s.redis.lrange(&q("default")), vec![later.build()]);
    assert_eq!(s.redis.llen(&format!("{}:notify", q("default"))), 1);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    let starts = d
        .events()
        .into_iter()
        .filter(|e| e["status"] == "starting")
        .count();
    assert_eq!(starts, 1, "only the first job was reserved");
}

/// After SIGCONT the paused worker reserves and runs the waiting job.
#[test]
fn case25_sigcont_resumes_fetching() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", GATED);
    let config = s.config_with_handler(&handler, "");
    let first = Job::laravel8("App\\Jobs\\First");
    s.redis.push("default", &first.build());

    // --max-jobs=2 ends the worker right after the second job.
    let mut d = s.work(&config, &["--sleep=30", "--json", "--max-jobs=2"]);
    s.wait_for_file("started");
    d.signal(Signal::SIGUSR2);
    wait_log(&mut d, &["signal received", "SIGUSR2"]);
    let later = Job::laravel8("App\\Jobs\\Later");
    s.redis.push("default", &later.build());
    s.touch("go");
    d.wait_event("success");
    assert_eq!(
        s.redis.lrange(&q("default")),
        vec![later.build()],
        "paused: not reserved"
    );

    d.signal(Signal::SIGCONT);
    wait_log(&mut d, &["signal received", "SIGCONT"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "max_jobs");
    assert_eq!(
        s.log(),
        vec![run_line(&first, "default"), run_line(&later, "default")]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

// ---------------------------------------------------------------------------
// Case 26: --memory
// ---------------------------------------------------------------------------

/// `--memory=1`: the daemon's RSS is far above 1 MB, so it stops with 12
/// after its first job, which is done (not left reserved); the next job is
/// not reserved.
#[test]
fn case26_memory_limit_exits_12_after_the_current_job() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let first = Job::laravel8("App\\Jobs\\First");
    let second = Job::laravel8("App\\Jobs\\Second");
    s.redis.push("default", &first.build());
    s.redis.push("default", &second.build());

    let mut d = s.work_until_exit(&config, &["--memory=1", "--sleep=30"]);
    assert_eq!(d.code(), Some(12), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "memory");
    assert_eq!(s.log(), vec![run_line(&first, "default")]);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
    assert_eq!(s.redis.lrange(&q("default")), vec![second.build()]);
    assert!(s.failed_rows().is_empty());
}

/// `--memory=0` turns the check off (13.x).
#[test]
fn case26_memory_zero_disables_the_check() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let job = Job::laravel8("App\\Jobs\\Only");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--memory=0", "--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "empty");
    assert_eq!(s.log(), vec![run_line(&job, "default")]);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

// ---------------------------------------------------------------------------
// Case 27: --max-jobs, --max-time, --stop-when-empty
// ---------------------------------------------------------------------------

#[test]
fn case27_max_jobs_stops_after_exactly_n_jobs() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let jobs: Vec<Job> = (0..5)
        .map(|i| Job::laravel8(&format!("App\\Jobs\\J{i}")))
        .collect();
    for job in &jobs {
        s.redis.push("default", &job.build());
    }

    let mut d = s.work_until_exit(&config, &["--max-jobs=3", "--sleep=30"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "max_jobs");
    assert_eq!(
        s.log(),
        jobs[..3]
            .iter()
            .map(|j| run_line(j, "default"))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        s.redis.lrange(&q("default")),
        vec![jobs[3].build(), jobs[4].build()]
    );
    assert_eq!(s.redis.llen(&format!("{}:notify", q("default"))), 2);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
}

#[test]
fn case27_max_time_exits_0() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let started = Instant::now();
    let mut d = s.work_until_exit(&config, &["--max-time=1", "--sleep=0.1"]);
    let took = started.elapsed();
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "max_time");
    assert!(took >= Duration::from_secs(1), "stopped after {took:?}");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    assert!(s.log().is_empty());
}

/// `--max-time` reached while a job runs: Laravel's `stopIfNecessary` runs
/// after the job, so the worker exits 0 before reserving the next one.
#[test]
fn case27_max_time_reached_during_a_job_stops_before_the_next_job() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "sleep 1.5");
    let config = s.config_with_handler(&handler, "");
    let first = Job::laravel8("App\\Jobs\\First");
    let second = Job::laravel8("App\\Jobs\\Second");
    s.redis.push("default", &first.build());
    s.redis.push("default", &second.build());

    let mut d = s.work_until_exit(&config, &["--max-time=1", "--sleep=30"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "max_time");
    assert_eq!(s.log(), vec![run_line(&first, "default")]);
    assert_eq!(s.redis.lrange(&q("default")), vec![second.build()]);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
}

#[test]
fn case27_stop_when_empty_exits_0_at_the_first_empty_poll() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let a = Job::laravel8("App\\Jobs\\A");
    let b = Job::laravel13("App\\Jobs\\B");
    s.redis.push("default", &a.build());
    s.redis.push("default", &b.build());
    // A delayed job that is not due must not keep the worker alive.
    s.redis.later(
        "default",
        now() + 600,
        &Job::laravel8("App\\Jobs\\Later").build(),
    );

    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "empty");
    assert_eq!(
        s.log(),
        vec![run_line(&a, "default"), run_line(&b, "default")]
    );
    assert_eq!(s.redis.keys(0), vec![format!("{}:delayed", q("default"))]);
}

// ---------------------------------------------------------------------------
// Case 22: the restart key
// ---------------------------------------------------------------------------

/// A new value under the restart key stops an idle worker with 0.
#[test]
fn case22_restart_key_change_stops_an_idle_worker() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let mut d = s.work(&config, &["--sleep=0.1"]);
    wait_log(&mut d, &["worker started"]);
    wait_for_restart_reads(&s, 1);
    let _: () = cache_cmd(&s, &["SET", RESTART_KEY, "1900000000"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "restart_signal");
    assert!(s.log().is_empty());
}

/// `laravel-worker restart` writes the key as `queue:restart` does (plain
/// digits, the current UNIX time, no TTL) and a running worker stops.
#[test]
fn case22_restart_command_writes_the_key_and_stops_a_worker() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "exit 0");
    let config = s.config_with_handler(&handler, "");
    let mut worker = s.work(&config, &["--sleep=0.1"]);
    wait_log(&mut worker, &["worker started"]);
    wait_for_restart_reads(&s, 1);

    let before = now();
    let mut restart = Daemon::start(&["--config", config.to_str().unwrap(), "restart"], &[]);
    assert_eq!(
        restart.code(),
        Some(0),
        "stderr:\n{}",
        stderr_text(&restart)
    );
    let after = now();
    assert!(
        restart
            .stdout
            .iter()
            .any(|l| l.contains("Broadcasting queue restart signal.")),
        "stdout: {:?}",
        restart.stdout
    );
    let value: String = cache_cmd(&s, &["GET", RESTART_KEY]);
    assert!(value.bytes().all(|b| b.is_ascii_digit()), "value {value:?}");
    let at: i64 = value.parse().unwrap();
    assert!(
        (before..=after).contains(&at),
        "{at} not in {before}..={after}"
    );
    let ttl: i64 = cache_cmd(&s, &["TTL", RESTART_KEY]);
    assert_eq!(ttl, -1, "no TTL (forever)");
    assert_eq!(s.redis.keys(1), vec![RESTART_KEY.to_string()]);

    assert_eq!(worker.code(), Some(0), "stderr:\n{}", stderr_text(&worker));
    assert_eq!(stop_reason(&worker), "restart_signal");
}

/// An unchanged key (even written again with the same value) does not stop
/// the worker: it runs to its `--max-jobs` end.
#[test]
fn case22_unchanged_restart_key_does_not_stop_the_worker() {
    let s = Scene::new();
    let _: () = cache_cmd(&s, &["SET", RESTART_KEY, "1700000000"]);
    let handler = s.recording_script("h.sh", GATED);
    let config = s.config_with_handler(&handler, "");
    let jobs: Vec<Job> = (0..3)
        .map(|i| Job::laravel8(&format!("App\\Jobs\\J{i}")))
        .collect();
    for job in &jobs {
        s.redis.push("default", &job.build());
    }

    let mut d = s.work(&config, &["--max-jobs=3", "--sleep=0.1"]);
    s.wait_for_file("started");
    let _: () = cache_cmd(&s, &["SET", RESTART_KEY, "1700000000"]);
    s.touch("go");
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "max_jobs");
    assert_eq!(
        s.log(),
        jobs.iter()
            .map(|j| run_line(j, "default"))
            .collect::<Vec<_>>()
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// Case 22 proper: a restart written while a job runs lets that job finish,
/// then the worker exits 0 without reserving another job (Laravel checks
/// `stopIfNecessary` after every job, before the next pop).
#[test]
fn case22_restart_during_a_job_stops_before_the_next_job() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", GATED);
    let config = s.config_with_handler(&handler, "");
    let first = Job::laravel8("App\\Jobs\\First");
    let second = Job::laravel8("App\\Jobs\\Second");
    s.redis.push("default", &first.build());
    s.redis.push("default", &second.build());

    let mut d = s.work(&config, &["--sleep=30"]);
    s.wait_for_file("started");
    let _: () = cache_cmd(&s, &["SET", RESTART_KEY, "1900000000"]);
    // While jobs keep coming the worker reads the restart key at most every
    // 250 ms (README, "Differences"): a job that lasts longer than that is
    // always followed by a read before the next reservation.
    std::thread::sleep(std::time::Duration::from_millis(300));
    s.touch("go");
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(stop_reason(&d), "restart_signal");
    assert_eq!(s.log(), vec![run_line(&first, "default")]);
    assert_eq!(s.redis.lrange(&q("default")), vec![second.build()]);
    assert_eq!(s.redis.zcard(&format!("{}:reserved", q("default"))), 0);
}

// ---------------------------------------------------------------------------
// Handler requests through $LARAVEL_WORKER_RESULT
// ---------------------------------------------------------------------------

/// `release` with a delay: the reserved copy (attempts 1) goes to
/// `:delayed` at now + 30, no failed row. The handler exits 0, which alone
/// would have deleted the job.
#[test]
fn request_release_puts_the_job_in_delayed_with_the_attempt_counted() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "echo '{\"action\":\"release\",\"delay\":30}' > \"$LARAVEL_WORKER_RESULT\"\nexit 0",
    );
    let config = s.config_with_handler(&handler, "");
    let job = Job::laravel8("App\\Jobs\\Later");
    s.redis.push("default", &job.build());

    let before = now();
    let mut d = s.work_until_exit(&config, &["--once"]);
    let after = now();
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(s.log(), vec![run_line(&job, "default")]);
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    assert_eq!(parse(&delayed[0].0), reserved_value(&job));
    assert!(
        (before + 30..=after + 30).contains(&delayed[0].1),
        "score {} not in {}..={}",
        delayed[0].1,
        before + 30,
        after + 30
    );
    assert_eq!(s.redis.keys(0), vec![format!("{}:delayed", q("default"))]);
    assert!(s.failed_rows().is_empty());
}

/// `fail` with a reason: a failed row with ManuallyFailedException and the
/// reason; the failed hook is not called (the job failed itself).
#[test]
fn request_fail_records_a_manually_failed_row_without_the_hook() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "echo '{\"action\":\"fail\",\"reason\":\"bad input\"}' > \"$LARAVEL_WORKER_RESULT\"\nexit 0",
    );
    let config = s.config_with_handler(&handler, "");
    let job = Job::laravel8("App\\Jobs\\Picky");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--once", "--tries=3"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(
        s.log(),
        vec![run_line(&job, "default")],
        "no failed-mode call"
    );
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert_eq!(rows[0].connection, "redis");
    assert_eq!(rows[0].queue, "default");
    assert_eq!(rows[0].payload, job.build());
    assert!(
        rows[0]
            .exception
            .starts_with("Illuminate\\Queue\\ManuallyFailedException: bad input"),
        "{}",
        rows[0].exception
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// `delete`: gone, no failed row, even though the handler exits 3 (which
/// alone would have failed it with --tries=1).
#[test]
fn request_delete_removes_the_job_without_a_failed_row() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "echo '{\"action\":\"delete\"}' > \"$LARAVEL_WORKER_RESULT\"\nexit 3",
    );
    let config = s.config_with_handler(&handler, "");
    let job = Job::laravel8("App\\Jobs\\Gone");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--once"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(s.log(), vec![run_line(&job, "default")]);
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

// ---------------------------------------------------------------------------
// Handler metadata
// ---------------------------------------------------------------------------

/// The environment and stdin a subprocess handler gets.
#[test]
fn handler_gets_metadata_env_and_the_reserved_payload_on_stdin() {
    let s = Scene::new();
    let handler = s.script(
        "h.sh",
        &format!(
            "env | grep '^LARAVEL_WORKER_' > \"$DIR/env.txt\"\ncat > \"$DIR/stdin.json\"\n{GATED}"
        ),
    );
    let config = s.config_with_handler(&handler, "connection = \"redis-main\"");
    let job = Job::laravel13("App\\Jobs\\SendInvoice");
    s.redis.push("emails", &job.build());

    let mut d = s.work(
        &config,
        &["--queue=emails", "--tries=3", "--timeout=77", "--once"],
    );
    s.wait_for_file("started");
    let reserved = s.redis.zrange(&format!("{}:reserved", q("emails")));
    assert_eq!(reserved.len(), 1);
    s.touch("go");
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));

    let env: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(s.path("env.txt"))
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
    let expect = [
        ("LARAVEL_WORKER_MODE", "run".to_string()),
        ("LARAVEL_WORKER_JOB_ID", job.id()),
        ("LARAVEL_WORKER_JOB_UUID", job.uuid()),
        (
            "LARAVEL_WORKER_JOB_NAME",
            "App\\Jobs\\SendInvoice".to_string(),
        ),
        ("LARAVEL_WORKER_QUEUE", "emails".to_string()),
        ("LARAVEL_WORKER_CONNECTION", "redis-main".to_string()),
        ("LARAVEL_WORKER_ATTEMPT", "1".to_string()),
        ("LARAVEL_WORKER_MAX_TRIES", "3".to_string()),
        ("LARAVEL_WORKER_TIMEOUT", "77".to_string()),
    ];
    for (key, value) in &expect {
        assert_eq!(env.get(*key), Some(value), "{key}; env: {env:?}");
    }
    assert!(
        env.get("LARAVEL_WORKER_RESULT")
            .is_some_and(|p| !p.is_empty()),
        "env: {env:?}"
    );
    assert!(
        !env.contains_key("LARAVEL_WORKER_EXCEPTION"),
        "run mode: {env:?}"
    );

    // stdin is the reserved string, byte for byte, with attempts 1.
    let stdin = std::fs::read_to_string(s.path("stdin.json")).unwrap();
    assert_eq!(stdin, reserved[0].0);
    assert_eq!(parse(&stdin), reserved_value(&job));
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

/// The first matching `[[handlers]]` entry wins.
#[test]
fn routing_first_match_wins() {
    let s = Scene::new();
    let mail = s.script(
        "mail.sh",
        "echo \"mail $LARAVEL_WORKER_JOB_NAME\" >> \"$LOG\"",
    );
    let any = s.script(
        "any.sh",
        "echo \"any $LARAVEL_WORKER_JOB_NAME\" >> \"$LOG\"",
    );
    let config = config_routes(
        &s,
        "",
        &sqlite_failed(&s),
        &[("App\\Jobs\\Mail*", &mail), ("*", &any)],
    );
    for name in [
        "App\\Jobs\\MailInvoice",
        "App\\Jobs\\Report",
        "App\\Jobs\\Mailer\\Digest",
        "App\\Jobs\\SendMail",
    ] {
        s.redis.push("default", &Job::laravel8(name).build());
    }

    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(
        s.log(),
        vec![
            "mail App\\Jobs\\MailInvoice",
            "any App\\Jobs\\Report",
            "mail App\\Jobs\\Mailer\\Digest",
            "any App\\Jobs\\SendMail",
        ]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.failed_rows().is_empty());
}

/// No handler matches and the policy is the default: the job fails with
/// NoHandlerException.
#[test]
fn routing_unmatched_fails_by_default() {
    let s = Scene::new();
    let mail = s.recording_script("mail.sh", "exit 0");
    let config = config_routes(&s, "", &sqlite_failed(&s), &[("App\\Jobs\\Mail*", &mail)]);
    let job = Job::laravel8("App\\Jobs\\Report");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--once", "--tries=5"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert!(s.log().is_empty(), "no handler ran: {:?}", s.log());
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, job.uuid());
    assert_eq!(rows[0].queue, "default");
    assert_eq!(rows[0].payload, job.build());
    assert!(
        rows[0].exception.starts_with(
            "LaravelWorker\\NoHandlerException: No handler is configured for App\\Jobs\\Report."
        ),
        "{}",
        rows[0].exception
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
}

/// `unmatched = "release"`: the job goes back to `:delayed` at now + 60
/// with its original string (attempts 0: this reservation is not counted).
#[test]
fn routing_unmatched_release_hands_the_job_back_uncounted() {
    let s = Scene::new();
    let mail = s.recording_script("mail.sh", "exit 0");
    let config = config_routes(
        &s,
        "unmatched = \"release\"\nunmatched_release_delay = 60",
        &sqlite_failed(&s),
        &[("App\\Jobs\\Mail*", &mail)],
    );
    let job = Job::laravel8("App\\Jobs\\Report");
    s.redis.push("default", &job.build());

    let before = now();
    let mut d = s.work_until_exit(&config, &["--once"]);
    let after = now();
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert!(s.log().is_empty(), "no handler ran: {:?}", s.log());
    let delayed = s.redis.zrange(&format!("{}:delayed", q("default")));
    assert_eq!(delayed.len(), 1);
    assert_eq!(delayed[0].0, job.build(), "the original bytes, attempts 0");
    assert!(
        (before + 60..=after + 60).contains(&delayed[0].1),
        "score {} not in {}..={}",
        delayed[0].1,
        before + 60,
        after + 60
    );
    assert_eq!(s.redis.keys(0), vec![format!("{}:delayed", q("default"))]);
    assert!(s.failed_rows().is_empty());
}

// ---------------------------------------------------------------------------
// Failed stores
// ---------------------------------------------------------------------------

/// `driver = "redis"`: a JSON record in the hash (field = uuid) and the
/// uuid in the time index; the failed hook still runs.
#[test]
fn failed_store_redis_writes_hash_and_index() {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "[ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0\necho boom >&2\nexit 1",
    );
    let config = config_routes(&s, "", "driver = \"redis\"", &[("*", &handler)]);
    let job = Job::laravel8("App\\Jobs\\Flaky");
    s.redis.push("default", &job.build());

    let before = now();
    let mut d = s.work_until_exit(&config, &["--once"]);
    let after = now();
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(
        s.log(),
        vec![
            run_line(&job, "default"),
            format!("failed App\\Jobs\\Flaky {} 1 default", job.id()),
        ]
    );

    let hash = "laravel_database_laravel-worker:failed_jobs";
    let index = format!("{hash}:index");
    assert_eq!(s.redis.keys(0), vec![hash.to_string(), index.clone()]);
    let records: std::collections::BTreeMap<String, String> = s.redis.cmd(&["HGETALL", hash]);
    assert_eq!(records.keys().collect::<Vec<_>>(), vec![&job.uuid()]);
    let record = parse(&records[&job.uuid()]);
    let mut fields: Vec<&str> = record
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "connection",
            "exception",
            "failed_at",
            "payload",
            "queue",
            "uuid"
        ]
    );
    assert_eq!(record["uuid"], job.uuid());
    assert_eq!(record["connection"], "redis");
    assert_eq!(record["queue"], "default");
    assert_eq!(record["payload"], job.build());
    let exception = record["exception"].as_str().unwrap();
    assert!(
        exception.starts_with(
            "LaravelWorker\\HandlerFailedException: App\\Jobs\\Flaky exited with status 1"
        ),
        "{exception}"
    );
    assert!(exception.contains("boom"), "stderr tail kept: {exception}");
    let failed_at = chrono::NaiveDateTime::parse_from_str(
        record["failed_at"].as_str().unwrap(),
        "%Y-%m-%d %H:%M:%S",
    )
    .unwrap()
    .and_utc()
    .timestamp();
    assert!((before..=after).contains(&failed_at), "{failed_at}");

    let indexed = s.redis.zrange(&index);
    assert_eq!(indexed.len(), 1);
    assert_eq!(indexed[0].0, job.uuid());
    assert_eq!(indexed[0].1, failed_at);
}

/// `driver = "null"`: nothing is written anywhere and the job is removed.
#[test]
fn failed_store_null_discards() {
    let s = Scene::new();
    let handler = s.recording_script("h.sh", "[ \"$LARAVEL_WORKER_MODE\" = failed ] || exit 1");
    let config = config_routes(&s, "", "driver = \"null\"", &[("*", &handler)]);
    let job = Job::laravel8("App\\Jobs\\Flaky");
    s.redis.push("default", &job.build());

    let mut d = s.work_until_exit(&config, &["--once"]);
    assert_eq!(d.code(), Some(0), "stderr:\n{}", stderr_text(&d));
    assert_eq!(
        s.log(),
        vec![
            run_line(&job, "default"),
            format!("failed App\\Jobs\\Flaky {} 1 default", job.id()),
        ]
    );
    assert!(s.redis.keys(0).is_empty(), "left: {:?}", s.redis.keys(0));
    assert!(s.redis.keys(1).is_empty(), "left: {:?}", s.redis.keys(1));
    assert!(!s.path("failed.sqlite").exists());
}

// ---------------------------------------------------------------------------
// Fatal start-up errors
// ---------------------------------------------------------------------------

/// Redis unreachable at start: a few tries, then exit 1 with a clear error.
#[test]
fn dead_redis_at_startup_exits_1() {
    let s = Scene::new();
    let socket = s.path("no-such-dir/redis.sock");
    let path = s.path("dead.toml");
    std::fs::write(
        &path,
        format!(
            "[redis]\nurl = \"unix://{0}?db=0\"\nprefix = \"laravel_database_\"\n\n\
             [cache]\nurl = \"unix://{0}?db=1\"\nprefix = \"laravel_cache\"\ncolon = true\n\n\
             [failed]\ndriver = \"null\"\n",
            socket.display()
        ),
    )
    .unwrap();

    let mut d = Daemon::start(&["--config", path.to_str().unwrap(), "work"], &[]);
    assert_eq!(d.code(), Some(1), "stderr:\n{}", stderr_text(&d));
    let err = stderr_text(&d);
    assert!(
        err.contains("ERROR") && err.contains("the queue Redis is unreachable after 5 tries"),
        "{err}"
    );
    assert_eq!(
        err.matches("cannot connect to the queue Redis").count(),
        4,
        "retried before giving up: {err}"
    );
    assert!(!err.contains("worker started"), "{err}");
}

/// An unknown key in the config file: exit 1, and the error names it.
#[test]
fn unknown_config_key_exits_1_naming_it() {
    for (extra, key) in [
        (
            "[queue]\nretry_afterr = 90\n\n[failed]\ndriver = \"null\"",
            "retry_afterr",
        ),
        (
            "bogus_setting = 1\n\n[failed]\ndriver = \"null\"",
            "bogus_setting",
        ),
    ] {
        let s = Scene::new();
        // A top-level key must come before the first table.
        let path = if extra.starts_with('[') {
            s.config(extra)
        } else {
            let path = s.path("top.toml");
            let body = std::fs::read_to_string(s.config("")).unwrap();
            std::fs::write(&path, format!("{extra}\n{body}")).unwrap();
            path
        };
        let mut d = s.work_until_exit(&path, &["--once"]);
        assert_eq!(d.code(), Some(1), "stderr:\n{}", stderr_text(&d));
        let err = stderr_text(&d);
        assert!(err.contains(key), "{key} not named: {err}");
        assert!(err.contains("unknown field"), "{err}");
        assert!(!err.contains("worker started"), "{err}");
        assert!(s.redis.keys(0).is_empty());
    }
}
