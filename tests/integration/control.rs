//! Worker control (protocol §6.2, §6.3, §7, cases 22–27) and the handler
//! contract (docs/src/handlers/): signals, stop conditions, the restart key, result
//! file requests, handler metadata, routing, failed stores, fatal start-up
//! errors. Each test asserts the Redis state, the failed rows, the exit
//! status and the job log afterwards.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Daemon, Failed, GATED, Handler, Job, Payload, QueueState, Scene, Score, now};
use nix::sys::signal::Signal;
use serde_json::Value;

/// The restart key under the test config (prefix `laravel_database_`, cache
/// prefix `laravel_cache` with the Laravel ≤ 10 colon), in DB 1.
const RESTART_KEY: &str = "laravel_database_laravel_cache:illuminate:queue:restart";

/// Waits until the server has answered at least `n` GETs or MGETs. The
/// worker reads the cache only for the restart (and pause) keys, so after
/// the first read it holds its starting value and any later write is a
/// change it must see.
fn wait_for_restart_reads(s: &Scene, n: u64) {
    common::wait_until("the worker to read the restart key", || {
        let info: String = s.redis.cmd(&["INFO", "commandstats"]);
        let count = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        };
        count("cmdstat_get:calls=") + count("cmdstat_mget:calls=") >= n
    });
}

/// Writes a new value under the restart key.
fn broadcast_restart(s: &Scene, value: &str) {
    let _: () = s.redis.cache(&["SET", RESTART_KEY, value]);
}

/// A scene whose handler runs `then`, with jobs `First` and `Second` on
/// `default`, and a worker started with `args`.
fn two_jobs(then: &str, args: &[&str]) -> (Scene, Daemon, [Job; 2]) {
    let (s, config) = Scene::recording(then);
    let pair = Job::named(["First", "Second"]);
    s.push_on("default", &pair);
    let d = s.work(&config, args);
    (s, d, pair)
}

/// As [`two_jobs`] with a gated handler; the first job has started.
fn first_of_two_running(args: &[&str]) -> (Scene, Daemon, [Job; 2]) {
    let started = two_jobs(GATED, args);
    started.0.wait_for_file("started");
    started
}

/// Runs [`two_jobs`] (`then`, `args`) to its end: the worker stops with
/// `code` for `reason` after the first job.
fn stops_after_the_first_of_two(then: &str, args: &[&str], code: i32, reason: &str) {
    let (s, mut d, two) = two_jobs(then, args);
    d.expect_stop(code, reason);
    assert_only_the_first_ran(&s, &two);
}

/// The first job ran; the second is still ready, untouched.
#[track_caller]
fn assert_only_the_first_ran(s: &Scene, [first, second]: &[Job; 2]) {
    assert_eq!(s.log(), vec![first.run_line(1)], "only the first job ran");
    s.assert_state(QueueState::empty().ready([second]).notify(1));
}

// ---------------------------------------------------------------------------
// Case 24: SIGTERM, SIGINT, SIGQUIT
// ---------------------------------------------------------------------------

/// A quit signal while a job runs: the job finishes and is ZREMed, nothing
/// more is reserved (the second job stays in the ready list untouched), and
/// the worker exits 0.
fn quit_signal_mid_job(signal: Signal) {
    let (s, mut d, two) = first_of_two_running(&["--sleep=30"]);
    d.signal(signal);
    d.wait_log(&["signal received", signal.as_str()]);
    let reserved = s.redis.zcard("laravel_database_queues:default:reserved");
    assert_eq!(reserved, 1, "still running: reserved, not deleted");

    s.touch("go");
    d.expect_stop(0, "interrupted");
    assert_only_the_first_ran(&s, &two);
}

/// A quit signal while idle in a 30 s `--sleep` ends the worker at once.
fn quit_signal_idle(signal: Signal) {
    let (s, config) = Scene::recording("exit 0");
    let mut d = s.work(&config, &["--sleep=30"]);
    d.wait_log(&["worker started"]);
    let sent = Instant::now();
    d.signal(signal);
    d.expect_stop(0, "interrupted");
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?} to stop");
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran");
    s.assert_state(QueueState::empty());
}

/// One `#[test]` per name, running `scenario(Signal::SIGNAL)`.
macro_rules! signal_tests {
    ($($name:ident: $scenario:ident($signal:ident);)*) => {
        $(
            #[test]
            fn $name() {
                $scenario(Signal::$signal);
            }
        )*
    };
}

signal_tests! {
    case24_sigterm_mid_job_finishes_the_job_then_exits_0: quit_signal_mid_job(SIGTERM);
    case24_sigint_mid_job_finishes_the_job_then_exits_0: quit_signal_mid_job(SIGINT);
    case24_sigquit_mid_job_finishes_the_job_then_exits_0: quit_signal_mid_job(SIGQUIT);
    case24_sigterm_while_idle_exits_0_promptly: quit_signal_idle(SIGTERM);
    case24_sigint_while_idle_exits_0_promptly: quit_signal_idle(SIGINT);
    case24_sigquit_while_idle_exits_0_promptly: quit_signal_idle(SIGQUIT);
}

// ---------------------------------------------------------------------------
// Case 25: SIGUSR2 / SIGCONT
// ---------------------------------------------------------------------------

/// A worker started with `args` gets SIGUSR2 while its first job runs (so
/// the loop is surely not mid-fetch); then job `Later` is pushed and the
/// first job finishes.
fn paused_during_a_job(args: &[&str]) -> (Scene, Daemon, Job, Job) {
    let (s, config) = Scene::recording(GATED);
    let [first, later] = Job::named(["First", "Later"]);
    s.push(&first);
    let mut d = s.work(&config, args);
    s.wait_for_file("started");
    d.signal(Signal::SIGUSR2);
    d.wait_log(&["signal received", "SIGUSR2"]);
    s.push(&later);
    s.touch("go");
    let done = d.wait_event("success");
    assert_eq!(done["uuid"], first.uuid(), "the first job finished: {done}");
    (s, d, first, later)
}

/// SIGUSR2 sent while a job runs: a job pushed afterwards is never
/// reserved; SIGTERM then ends the paused worker with 0 and the job is
/// still in the ready list, byte for byte.
#[test]
fn case25_sigusr2_stops_fetching() {
    let (s, mut d, first, later) = paused_during_a_job(&["--sleep=0.1", "--json"]);
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    assert_eq!(s.log(), vec![first.run_line(1)], "only the first job ran");
    s.assert_state(QueueState::empty().ready([&later]).notify(1));
    let starts = d.events_with("starting").len();
    assert_eq!(starts, 1, "only the first job was reserved");
}

/// After SIGCONT the paused worker reserves and runs the waiting job.
#[test]
fn case25_sigcont_resumes_fetching() {
    // --max-jobs=2 ends the worker right after the second job.
    let (s, mut d, first, later) = paused_during_a_job(&["--sleep=30", "--json", "--max-jobs=2"]);
    let ready = s.redis.lrange("laravel_database_queues:default");
    assert_eq!(ready, vec![later.build()], "paused: not reserved");

    d.signal(Signal::SIGCONT);
    d.wait_log(&["signal received", "SIGCONT"]);
    d.expect_stop(0, "max_jobs");
    assert_eq!(s.log(), vec![first.run_line(1), later.run_line(1)]);
    s.assert_state(QueueState::empty());
}

// ---------------------------------------------------------------------------
// Case 26: --memory
// ---------------------------------------------------------------------------

/// `--memory=1`: the daemon's RSS is far above 1 MB, so it stops with 12
/// after its first job, which is done (not left reserved); the next job is
/// not reserved.
#[test]
fn case26_memory_limit_exits_12_after_the_current_job() {
    stops_after_the_first_of_two("exit 0", &["--memory=1", "--sleep=30"], 12, "memory");
}

/// `--memory=0` turns the check off (13.x).
#[test]
fn case26_memory_zero_disables_the_check() {
    let [job] = Job::named(["Only"]);
    let (s, config) = Scene::with_job(&job, |c| c.recording("exit 0"));
    let args = ["--memory=0", "--stop-when-empty", "--sleep=0"];
    s.work_until_exit(&config, &args).expect_stop(0, "empty");
    s.assert_ran_then_gone(&job, 1);
}

// ---------------------------------------------------------------------------
// Case 27: --max-jobs, --max-time, --stop-when-empty
// ---------------------------------------------------------------------------

#[test]
fn case27_max_jobs_stops_after_exactly_n_jobs() {
    let (s, config) = Scene::recording("exit 0");
    let five = Job::named(["J0", "J1", "J2", "J3", "J4"]);
    s.push_on("default", &five);
    let mut d = s.work_until_exit(&config, &["--max-jobs=3", "--sleep=30"]);
    d.expect_stop(0, "max_jobs");
    let ran: Vec<String> = five[..3].iter().map(|j| j.run_line(1)).collect();
    assert_eq!(s.log(), ran, "the first three jobs ran");
    s.assert_state(QueueState::empty().ready(&five[3..]).notify(2));
}

#[test]
fn case27_max_time_exits_0() {
    let (s, config) = Scene::recording("exit 0");
    let started = Instant::now();
    let mut d = s.work_until_exit(&config, &["--max-time=1", "--sleep=0.1"]);
    let took = started.elapsed();
    d.expect_stop(0, "max_time");
    assert!(took >= Duration::from_secs(1), "stopped after {took:?}");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran");
}

/// `--max-time` reached while a job runs: Laravel's `stopIfNecessary` runs
/// after the job, so the worker exits 0 before reserving the next one.
#[test]
fn case27_max_time_reached_during_a_job_stops_before_the_next_job() {
    stops_after_the_first_of_two("sleep 1.5", &["--max-time=1", "--sleep=30"], 0, "max_time");
}

#[test]
fn case27_stop_when_empty_exits_0_at_the_first_empty_poll() {
    let (s, config) = Scene::recording("exit 0");
    let a = Job::laravel8("App\\Jobs\\A");
    let b = Job::laravel13("App\\Jobs\\B");
    s.push_on("default", [&a, &b]);
    // A delayed job that is not due must not keep the worker alive.
    let [later] = Job::named(["Later"]);
    let at = now() + 600;
    s.redis.later("default", at, &later.build());

    let mut d = s.work_until_exit(&config, &["--stop-when-empty", "--sleep=0"]);
    d.expect_stop(0, "empty");
    assert_eq!(s.log(), vec![a.run_line(1), b.run_line(1)]);
    s.assert_state(QueueState::empty().delayed(&later, Score::At(at)));
}

/// `--stop-when-empty-for=N` (Laravel 13.10+): a job running longer than N
/// keeps the worker; it exits 0 with `empty_for` once N seconds have passed
/// with no job, counted from the end of the last one.
#[test]
fn case27_stop_when_empty_for_counts_from_the_last_job() {
    let (s, config) = Scene::recording("sleep 1.5");
    let [job] = Job::named(["Slow"]);
    s.push(&job);
    let started = Instant::now();
    let args = ["--stop-when-empty-for=1", "--sleep=0.1"];
    let mut d = s.work_until_exit(&config, &args);
    let took = started.elapsed();
    d.expect_stop(0, "empty_for");
    assert_eq!(s.log(), vec![job.run_line(1)], "the job ran once");
    assert!(
        took >= Duration::from_millis(2500),
        "stopped after {took:?}"
    );
    s.assert_state(QueueState::empty());
}

// ---------------------------------------------------------------------------
// Case 22: the restart key
// ---------------------------------------------------------------------------

/// An idle worker (`--sleep=0.1`) that has read the restart key once.
fn idle_worker(s: &Scene, config: &std::path::Path) -> Daemon {
    let mut d = s.work(config, &["--sleep=0.1"]);
    d.wait_log(&["worker started"]);
    wait_for_restart_reads(s, 1);
    d
}

/// A new value under the restart key stops an idle worker with 0.
#[test]
fn case22_restart_key_change_stops_an_idle_worker() {
    let (s, config) = Scene::recording("exit 0");
    let mut d = idle_worker(&s, &config);
    broadcast_restart(&s, "1900000000");
    d.expect_stop(0, "restart_signal");
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran");
}

/// `laravel-worker restart` writes the key as `queue:restart` does (plain
/// digits, the current UNIX time, no TTL) and a running worker stops.
#[test]
fn case22_restart_command_writes_the_key_and_stops_a_worker() {
    let (s, config) = Scene::recording("exit 0");
    let mut worker = idle_worker(&s, &config);

    let before = now();
    let mut restart = Daemon::run(&["--config", config.to_str().unwrap(), "restart"], &[]);
    restart.expect_exit(0);
    let after = now();
    assert!(
        restart
            .stdout
            .iter()
            .any(|l| l.contains("Broadcasting queue restart signal.")),
        "stdout: {:?}",
        restart.stdout
    );
    let value: String = s.redis.cache(&["GET", RESTART_KEY]);
    assert!(value.bytes().all(|b| b.is_ascii_digit()), "value {value:?}");
    let at: i64 = value.parse().unwrap();
    assert!(
        (before..=after).contains(&at),
        "{at} not in {before}..={after}"
    );
    let ttl: i64 = s.redis.cache(&["TTL", RESTART_KEY]);
    assert_eq!(ttl, -1, "no TTL (forever)");
    assert_eq!(s.redis.keys(1), vec![RESTART_KEY.to_string()], "cache keys");

    worker.expect_stop(0, "restart_signal");
}

/// An unchanged key (even written again with the same value) does not stop
/// the worker: it runs to its `--max-jobs` end.
#[test]
fn case22_unchanged_restart_key_does_not_stop_the_worker() {
    let (s, config) = Scene::recording(GATED);
    broadcast_restart(&s, "1700000000");
    let three = Job::named(["J0", "J1", "J2"]);
    s.push_on("default", &three);

    let mut d = s.work(&config, &["--max-jobs=3", "--sleep=0.1"]);
    s.wait_for_file("started");
    broadcast_restart(&s, "1700000000");
    s.touch("go");
    d.expect_stop(0, "max_jobs");
    let ran: Vec<String> = three.iter().map(|j| j.run_line(1)).collect();
    assert_eq!(s.log(), ran, "every job ran");
    s.assert_state(QueueState::empty());
}

/// Case 22 proper: a restart written while a job runs lets that job finish,
/// then the worker exits 0 without reserving another job (Laravel checks
/// `stopIfNecessary` after every job, before the next pop).
#[test]
fn case22_restart_during_a_job_stops_before_the_next_job() {
    let (s, mut d, two) = first_of_two_running(&["--sleep=30"]);
    broadcast_restart(&s, "1900000000");
    // While jobs keep coming the worker reads the restart key at most every
    // 250 ms (README, "Differences"): a job that lasts longer than that is
    // always followed by a read before the next reservation.
    std::thread::sleep(std::time::Duration::from_millis(300));
    s.touch("go");
    d.expect_stop(0, "restart_signal");
    assert_only_the_first_ran(&s, &two);
}

// ---------------------------------------------------------------------------
// Handler requests through $LARAVEL_WORKER_RESULT
// ---------------------------------------------------------------------------

/// Runs one job `App\Jobs\<name>` with `work --once ARGS` through a handler
/// that asks for `request` in the result file and exits `code`. Returns the
/// scene, the job and the UNIX seconds before and after the run.
fn one_request(name: &str, request: &str, code: i32, args: &[&str]) -> (Scene, Job, i64, i64) {
    let (s, config) = Scene::recording(&format!(
        "echo '{request}' > \"$LARAVEL_WORKER_RESULT\"\nexit {code}"
    ));
    let [job] = Job::named([name]);
    s.push(&job);
    let before = now();
    let mut all = vec!["--once"];
    all.extend_from_slice(args);
    s.run(&config, &all);
    let after = now();
    assert_eq!(
        s.log(),
        vec![job.run_line(1)],
        "one call, no failed-mode call"
    );
    (s, job, before, after)
}

/// `release` with a delay: the reserved copy (attempts 1) goes to
/// `:delayed` at now + 30, no failed row. The handler exits 0, which alone
/// would have deleted the job.
#[test]
fn request_release_puts_the_job_in_delayed_with_the_attempt_counted() {
    let (s, job, before, after) =
        one_request("Later", r#"{"action":"release","delay":30}"#, 0, &[]);
    let released = QueueState::empty().delayed(Payload::reserved(&job, 1), Score::In(30));
    s.assert_state_in(before..=after, released);
}

/// `fail` with a reason: a failed row with ManuallyFailedException and the
/// reason; the failed hook is not called (the job failed itself).
#[test]
fn request_fail_records_a_manually_failed_row_without_the_hook() {
    let request = r#"{"action":"fail","reason":"bad input"}"#;
    let (s, job, ..) = one_request("Picky", request, 0, &["--tries=3"]);
    let row = Failed::job(&job)
        .payload(&job)
        .exception("Illuminate\\Queue\\ManuallyFailedException: bad input");
    s.assert_state(QueueState::empty().failed([row]));
}

/// `delete`: gone, no failed row, even though the handler exits 3 (which
/// alone would have failed it with --tries=1).
#[test]
fn request_delete_removes_the_job_without_a_failed_row() {
    let (s, ..) = one_request("Gone", r#"{"action":"delete"}"#, 3, &[]);
    s.assert_state(QueueState::empty());
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
    let config = s
        .config()
        .command(&handler)
        .connection("redis-main")
        .write();
    let job = Job::laravel13("App\\Jobs\\SendInvoice");
    s.push_on("emails", [&job]);

    let args = ["--queue=emails", "--tries=3", "--timeout=77", "--once"];
    let mut d = s.work(&config, &args);
    s.wait_for_file("started");
    let reserved = s.redis.zrange("laravel_database_queues:emails:reserved");
    assert_eq!(reserved.len(), 1, "reserved while it runs: {reserved:?}");
    s.touch("go");
    d.expect_exit(0);

    let env: std::collections::BTreeMap<String, String> = s
        .read("env.txt")
        .lines()
        .map(|l| l.split_once('=').expect("NAME=value lines"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let expect = [
        ("LARAVEL_WORKER_MODE", "run".to_string()),
        ("LARAVEL_WORKER_JOB_ID", job.id()),
        ("LARAVEL_WORKER_JOB_UUID", job.uuid()),
        ("LARAVEL_WORKER_JOB_NAME", "App\\Jobs\\SendInvoice".into()),
        ("LARAVEL_WORKER_QUEUE", "emails".into()),
        ("LARAVEL_WORKER_CONNECTION", "redis-main".into()),
        ("LARAVEL_WORKER_ATTEMPT", "1".into()),
        ("LARAVEL_WORKER_MAX_TRIES", "3".into()),
        ("LARAVEL_WORKER_TIMEOUT", "77".into()),
        ("LARAVEL_WORKER_VERSION", env!("CARGO_PKG_VERSION").into()),
    ];
    for (key, value) in &expect {
        assert_eq!(env.get(*key), Some(value), "{key}; env: {env:?}");
    }
    assert!(
        env.get("LARAVEL_WORKER_RESULT")
            .is_some_and(|p| !p.is_empty()),
        "a result file path; env: {env:?}"
    );
    assert!(
        !env.contains_key("LARAVEL_WORKER_EXCEPTION"),
        "no exception in run mode: {env:?}"
    );

    // stdin is the reserved string, byte for byte, with attempts 1.
    let stdin = std::fs::read_to_string(s.path("stdin.json")).unwrap();
    assert_eq!(stdin, reserved[0].0, "stdin is the reserved member");
    assert_eq!(
        Payload::Bytes(stdin),
        Payload::reserved(&job, 1),
        "stdin is the payload with attempts 1"
    );
    s.assert_state(QueueState::empty());
}

// ---------------------------------------------------------------------------
// Routing
// ---------------------------------------------------------------------------

/// A config whose handlers record `<tag> <name>`: `mail.sh` for names
/// matching `App\Jobs\Mail*`, then `any.sh` for everything when `any`.
fn mail_routes(s: &Scene, any: bool) -> common::Config<'_> {
    let route = |tag: &str| {
        let script = s.script(
            &format!("{tag}.sh"),
            &format!("echo \"{tag} $LARAVEL_WORKER_JOB_NAME\" >> \"$LOG\""),
        );
        Handler::command(&script)
    };
    let config = s
        .config()
        .handler(route("mail").matching("App\\Jobs\\Mail*"));
    if any {
        config.handler(route("any"))
    } else {
        config
    }
}

/// The first matching `[[handlers]]` entry wins.
#[test]
fn routing_first_match_wins() {
    let s = Scene::new();
    let config = mail_routes(&s, true).write();
    let names = ["MailInvoice", "Report", "Mailer\\Digest", "SendMail"];
    s.push_on("default", &Job::named(names));

    s.run(&config, &["--stop-when-empty", "--sleep=0"]);
    assert_eq!(
        s.log(),
        vec![
            "mail App\\Jobs\\MailInvoice",
            "any App\\Jobs\\Report",
            "mail App\\Jobs\\Mailer\\Digest",
            "any App\\Jobs\\SendMail",
        ]
    );
    s.assert_state(QueueState::empty());
}

/// No handler matches and the policy is the default: the job fails with
/// NoHandlerException.
#[test]
fn routing_unmatched_fails_by_default() {
    let s = Scene::new();
    let config = mail_routes(&s, false).write();
    let [job] = Job::named(["Report"]);
    s.push(&job);

    s.run(&config, &["--once", "--tries=5"]);
    assert_eq!(s.log(), Vec::<String>::new(), "no handler ran");
    let row = Failed::job(&job).payload(&job).exception(
        "LaravelWorker\\NoHandlerException: No handler is configured for App\\Jobs\\Report.",
    );
    s.assert_state(QueueState::empty().failed([row]));
}

/// `unmatched = "release"`: the job goes back to `:delayed` at now + 60
/// with its original string (attempts 0: this reservation is not counted).
#[test]
fn routing_unmatched_release_hands_the_job_back_uncounted() {
    let s = Scene::new();
    let config = mail_routes(&s, false).unmatched_release(60).write();
    let [job] = Job::named(["Report"]);
    s.push(&job);

    let before = now();
    s.run(&config, &["--once"]);
    let after = now();
    assert_eq!(s.log(), Vec::<String>::new(), "no handler ran");
    // The original bytes, attempts 0.
    let released = QueueState::empty().delayed(&job, Score::In(60));
    s.assert_state_in(before..=after, released);
}

// ---------------------------------------------------------------------------
// Failed stores
// ---------------------------------------------------------------------------

/// A scene whose handler fails every run (stderr `boom`) and succeeds in
/// failed mode, with `[failed] driver = DRIVER`; job `Flaky` is run once.
/// Returns the UNIX seconds before and after the run.
fn fail_one_job(driver: &str) -> (Scene, Job, i64, i64) {
    let s = Scene::new();
    let handler = s.recording_script(
        "h.sh",
        "[ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0\necho boom >&2\nexit 1",
    );
    let config = s.config().command(&handler).failed_driver(driver).write();
    let [job] = Job::named(["Flaky"]);
    s.push(&job);
    let before = now();
    s.run(&config, &["--once"]);
    let after = now();
    let calls = vec![job.run_line(1), job.failed_line(1)];
    assert_eq!(s.log(), calls, "run, then the failed hook");
    (s, job, before, after)
}

/// `driver = "redis"`: a JSON record in the hash (field = uuid) and the
/// uuid in the time index; the failed hook still runs.
#[test]
fn failed_store_redis_writes_hash_and_index() {
    let (s, job, before, after) = fail_one_job("redis");
    let hash = "laravel_database_laravel-worker:failed_jobs";
    let index = format!("{hash}:index");
    s.assert_state(QueueState::empty().other_keys([hash, &index]));
    let records: std::collections::BTreeMap<String, String> = s.redis.cmd(&["HGETALL", hash]);
    assert_eq!(
        records.keys().collect::<Vec<_>>(),
        vec![&job.uuid()],
        "one record, under the uuid"
    );
    let record: Value = serde_json::from_str(&records[&job.uuid()]).unwrap();
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
    assert!(
        (before..=after).contains(&failed_at),
        "failed_at {failed_at} not in {before}..={after}"
    );

    let indexed = s.redis.zrange(&index);
    assert_eq!(indexed, vec![(job.uuid(), failed_at)], "the time index");
}

/// `driver = "null"`: nothing is written anywhere and the job is removed.
#[test]
fn failed_store_null_discards() {
    let (s, ..) = fail_one_job("null");
    s.assert_state(QueueState::empty());
    assert!(s.redis.keys(1).is_empty(), "left: {:?}", s.redis.keys(1));
    assert!(!s.path("failed.sqlite").exists(), "no SQLite file written");
}

// ---------------------------------------------------------------------------
// Fatal start-up errors
// ---------------------------------------------------------------------------

/// SIGTTIN and SIGTTOU while the worker starts (here: while it retries an
/// unreachable Redis) do not stop the process: it goes on and exits 1 as
/// without them (their default action froze it until SIGCONT).
#[test]
fn resize_signals_during_start_up_do_not_freeze_the_worker() {
    let s = Scene::new();
    let config = s
        .config()
        .redis_socket(&s.path("no-such-dir/redis.sock"))
        .failed_driver("null")
        .write_as("dead.toml");
    let mut d = s.work(&config, &[]);
    d.wait_log(&["cannot connect to the queue Redis"]);
    d.signal(nix::sys::signal::Signal::SIGTTIN);
    d.signal(nix::sys::signal::Signal::SIGTTOU);
    d.expect_exit(1);
    assert!(d.stderr_text().contains("unreachable after 5 tries"));
}

/// Redis unreachable at start: a few tries, then exit 1 with a clear error.
#[test]
fn dead_redis_at_startup_exits_1() {
    let s = Scene::new();
    let config = s
        .config()
        .redis_socket(&s.path("no-such-dir/redis.sock"))
        .failed_driver("null")
        .write_as("dead.toml");

    let err = s.work_exits(&config, 1);
    assert!(
        err.contains("ERROR") && err.contains("the queue Redis is unreachable after 5 tries"),
        "an ERROR saying Redis is unreachable: {err}"
    );
    assert_eq!(
        err.matches("cannot connect to the queue Redis").count(),
        4,
        "retried before giving up: {err}"
    );
    assert!(!err.contains("worker started"), "the worker started: {err}");
    // The fatal line says its cause once ("No such file or directory"),
    // not "cause: cause".
    let fatal = err
        .lines()
        .find(|l| l.contains("unreachable after"))
        .unwrap();
    let (_, cause) = fatal.split_once("): ").unwrap();
    assert!(!cause.contains(": "), "the cause said twice: {fatal}");
    // Every line names the address it tried (the socket path here).
    let socket = s.path("no-such-dir/redis.sock").display().to_string();
    let tries: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot connect") || l.contains("unreachable"))
        .collect();
    assert!(
        !tries.is_empty() && tries.iter().all(|l| l.contains(&socket)),
        "each connection error names {socket}: {tries:#?}"
    );
}

/// The cache Redis unreachable at start: the error names its address,
/// not the queue Redis's.
#[test]
fn dead_cache_redis_at_startup_names_its_address() {
    let s = Scene::new();
    let dead = s.path("no-such-dir/cache.sock");
    let config = s
        .config()
        .set("cache", "url", format!("unix://{}?db=1", dead.display()))
        .failed_driver("null")
        .write_as("dead-cache.toml");

    let err = s.work_exits(&config, 1);
    assert!(
        err.contains("cannot connect to the cache Redis")
            && err.contains(&dead.display().to_string()),
        "the error names the cache Redis's address: {err}"
    );
}

/// A Redis that wants a password when none is configured: exit 1 at start
/// with the server's NOAUTH answer and its address (before: the worker ran
/// on, logging `cannot reserve a job` forever).
#[test]
fn a_redis_that_wants_a_password_exits_1_at_start() {
    let s = Scene::new();
    let config = s.config().failed_driver("null").write_as("noauth.toml");
    let _: () = s.redis.cmd(&["CONFIG", "SET", "requirepass", "s3cret"]);

    let err = s.work_exits(&config, 1);
    let socket = s.redis.socket.display().to_string();
    assert!(
        err.contains("NOAUTH") && err.contains(&socket),
        "the error gives the server's answer and address: {err}"
    );
    assert!(!err.contains("s3cret"), "no password in the log: {err}");
}

/// An unknown key in the config file: exit 1, and the error names it.
#[test]
fn unknown_config_key_exits_1_naming_it() {
    for (section, key, value) in [("queue", "retry_afterr", 90), ("", "bogus_setting", 1)] {
        let s = Scene::new();
        let config: PathBuf = s
            .config()
            .set(section, key, value)
            .failed_driver("null")
            .write();
        let mut d = s.work_until_exit(&config, &["--once"]);
        d.expect_exit(1);
        let err = d.stderr_text();
        assert!(err.contains(key), "{key} not named: {err}");
        assert!(err.contains("unknown field"), "no 'unknown field': {err}");
        assert!(!err.contains("worker started"), "the worker started: {err}");
        s.assert_state(QueueState::empty());
    }
}
