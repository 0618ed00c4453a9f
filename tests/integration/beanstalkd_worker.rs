//! The worker on the beanstalkd queue (issue 46, part 4), end to end: the
//! real binary on a private beanstalkd (skipped, saying so, where Debian's
//! `beanstalkd` is not installed), real handler processes, `failed_jobs`
//! in SQLite.

use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

use crate::common;
use crate::common::Daemon;
use crate::common::beanstalkd::Beanstalkd;
use crate::common::databases::FailedDb;

/// A payload as Laravel's `createPayload` writes it for beanstalkd: no
/// `id`, no `attempts` (the server counts reserves).
fn payload(name: &str, uuid: &str) -> String {
    format!(
        r#"{{"uuid":"{uuid}","displayName":"App\\Jobs\\{name}","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{{"commandName":"App\\Jobs\\{name}","command":"O:0:{{}}"}}}}"#
    )
}

/// A config file for a worker on `server` (`retry_after` the ttr) with
/// failed jobs in `failed`, and one handler for every job: `script`, a
/// shell script run with `DIR` set to `dir`.
fn config(
    dir: &Path,
    server: &Beanstalkd,
    failed: &str,
    retry_after: u64,
    script: &str,
) -> PathBuf {
    let script_path = dir.join("handler.sh");
    std::fs::write(
        &script_path,
        format!(
            "#!/bin/sh\nDIR='{}'\ncat > /dev/null\n{script}\n",
            dir.display()
        ),
    )
    .unwrap();
    let toml = format!(
        "[queue]\nconnection = \"beanstalkd\"\nhost = \"127.0.0.1\"\nport = {}\n\
         retry_after = {retry_after}\n\n\
         [redis]\nurl = \"unix://{}/no-redis.sock\"\n\n\
         [failed]\ndriver = \"database-uuids\"\nurl = \"{failed}\"\n\n\
         [cache]\nstore = \"none\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"sh\", \"{}\"]\n",
        server.port,
        dir.display(),
        script_path.display()
    );
    let path = dir.join("worker.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lw-bsw-")
        .tempdir()
        .unwrap()
}

/// A job that succeeds is deleted, run once as attempt 1 under its
/// beanstalkd id; one whose handler fails is released, reserved again
/// (attempt 2, the server's `reserves`), and failed into `failed_jobs`
/// with the connection `beanstalkd`, its queue and the payload as stored,
/// as `queue:work beanstalkd --tries=2` leaves them; `--stop-when-empty`
/// then stops the worker with the tube empty.
#[test]
fn the_worker_runs_releases_and_fails_jobs() {
    let dir = scratch();
    let Some(server) = Beanstalkd::start(dir.path()) else {
        return;
    };
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let script = "case \"$LARAVEL_WORKER_JOB_NAME\" in *Bad*) \
                  [ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0; \
                  echo \"$LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/bad\"; exit 3;; esac\n\
                  echo \"$LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/ran\"";
    let config = config(dir.path(), &server, failed.url(), 90, script);
    let good = server.put("default", &payload("Good", "u-good"), 0, 90);
    server.put("default", &payload("Bad", "u-bad"), 0, 90);
    let args = ["--config", config.to_str().unwrap(), "work"];
    let mut d = Daemon::start(
        &[&args[..], &["--stop-when-empty", "--sleep=0", "--tries=2"]].concat(),
        &[],
    );
    d.expect_stop(0, "empty");
    assert_eq!(
        crate::banner::start_line(&d, "queue"),
        format!(
            "beanstalkd connection \"beanstalkd\": beanstalkd at 127.0.0.1:{}",
            server.port
        )
    );
    assert_eq!(server.jobs("default"), 0, "every job settled");
    let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap();
    assert_eq!(
        ran,
        format!("{good} 1\n"),
        "the good job ran once, attempt 1"
    );
    let bad = std::fs::read_to_string(dir.path().join("bad")).unwrap();
    assert_eq!(
        bad,
        "1\n2\n",
        "attempts from the server's reserves; {}\n{}",
        d.stdout.join("\n"),
        d.stderr_text()
    );
    let rows = failed.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            rows[0].uuid.as_str(),
            rows[0].connection.as_str(),
            rows[0].queue.as_str()
        ),
        ("u-bad", "beanstalkd", "default")
    );
    assert_eq!(
        rows[0].payload,
        payload("Bad", "u-bad"),
        "the bytes as stored"
    );
    let out = d.stdout.join("\n");
    assert_eq!(out.matches(" DONE").count(), 1, "{out}");
    assert_eq!(out.matches(" FAIL").count(), 2, "{out}");
}

/// A job running for more than three times its ttr beside a second worker
/// on the same tube runs once: `touch` renews its reservation while it
/// runs, so the server never times it out (`timeouts` stays 0) and never
/// gives it to the other worker.
#[test]
fn a_job_running_three_times_its_ttr_runs_once() {
    let dir = scratch();
    let Some(server) = Beanstalkd::start(dir.path()) else {
        return;
    };
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let script = "echo run >> \"$DIR/runs\"; touch \"$DIR/started\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done";
    let config = config(dir.path(), &server, failed.url(), 2, script);
    let id = server.put("default", &payload("Long", "u-long"), 0, 2);
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.2"];
    let mut first = Daemon::start(&args, &[]);
    common::wait_until("the job to start", || dir.path().join("started").exists());
    let mut second = Daemon::start(&args, &[]);
    // The server's own clock: the job is older than 3 x ttr, reserved all
    // along, never timed out.
    common::wait_until("the job to be 3 x ttr old", || {
        server
            .job(id)
            .get("age")
            .and_then(|a| a.parse::<u64>().ok())
            .is_some_and(|age| age >= 6)
    });
    let stats = server.job(id);
    assert_eq!(stats.get("state").map(String::as_str), Some("reserved"));
    assert_eq!(stats.get("timeouts").map(String::as_str), Some("0"));
    assert_eq!(stats.get("reserves").map(String::as_str), Some("1"));
    std::fs::write(dir.path().join("go"), "").unwrap();
    common::wait_until("the job to be deleted", || server.jobs("default") == 0);
    for d in [&mut first, &mut second] {
        d.signal(Signal::SIGTERM);
        d.expect_exit(0);
    }
    let runs = std::fs::read_to_string(dir.path().join("runs")).unwrap();
    assert_eq!(runs, "run\n", "the job ran once");
    assert_eq!(failed.rows().len(), 0);
}

/// The server stopped and started again (its binlog keeps the jobs) while
/// a job runs: the worker logs the outage, reconnects by itself, and every
/// job runs to its end; none is lost. The job running across the restart
/// lost its reservation with its connection, so it may run again (at
/// least once).
#[test]
fn a_server_restarted_mid_run_loses_nothing() {
    let dir = scratch();
    let Some(mut server) = Beanstalkd::start(dir.path()) else {
        return;
    };
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let script = "echo \"$LARAVEL_WORKER_JOB_ID\" >> \"$DIR/ran\"; \
                  if [ \"$(wc -l < \"$DIR/ran\")\" -eq 5 ]; then touch \"$DIR/fifth\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done; fi";
    let config = config(dir.path(), &server, failed.url(), 60, script);
    let ids: Vec<u64> = (0..20)
        .map(|i| server.put("default", &payload("Step", &format!("u-{i}")), 0, 60))
        .collect();
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0.1"];
    let mut d = Daemon::start(&args, &[]);
    common::wait_until("the fifth job to run", || dir.path().join("fifth").exists());
    server.stop();
    std::fs::write(dir.path().join("go"), "").unwrap();
    d.wait_stderr(|line| line.contains("beanstalkd at 127.0.0.1"));
    server.start_again();
    common::wait_until("every job to be deleted", || server.jobs("default") == 0);
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    let ran = std::fs::read_to_string(dir.path().join("ran")).unwrap();
    let mut seen: Vec<u64> = ran.lines().map(|l| l.parse().unwrap()).collect();
    seen.sort_unstable();
    seen.dedup();
    let mut expected = ids.clone();
    expected.sort_unstable();
    assert_eq!(seen, expected, "every job ran: {ran}");
    assert!(
        ran.lines().count() <= 21,
        "at most the interrupted one twice: {ran}"
    );
    assert_eq!(failed.rows().len(), 0);
}

/// `--max-jobs` stops the worker after that many jobs, the others left
/// ready on the tube; a worker on an empty tube with `--stop-when-empty`
/// stops at once.
#[test]
fn stop_conditions_on_beanstalkd() {
    let dir = scratch();
    let Some(server) = Beanstalkd::start(dir.path()) else {
        return;
    };
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let config = config(dir.path(), &server, failed.url(), 60, "true");
    for i in 0..5 {
        server.put("default", &payload("Step", &format!("u-{i}")), 0, 60);
    }
    let args = ["--config", config.to_str().unwrap(), "work", "--sleep=0"];
    let mut d = Daemon::start(&[&args[..], &["--max-jobs=2"]].concat(), &[]);
    d.expect_stop(0, "max_jobs");
    assert_eq!(server.jobs("default"), 3, "three left");
    let stats = server.tube("default");
    assert_eq!(
        stats.get("current-jobs-ready").map(String::as_str),
        Some("3")
    );
    let mut d = Daemon::start(
        &[&args[..], &["--queue=empty", "--stop-when-empty"]].concat(),
        &[],
    );
    d.expect_stop(0, "empty");
}

/// Beside the real `php artisan queue:work beanstalkd` of Laravel 8.83 on
/// the same tube: jobs the app dispatched (through pheanstalk) run here,
/// through the bridge, with the attempts and `failed_jobs` row Laravel
/// gives them (connection `beanstalkd`, queue `default`); the failed job
/// pushed back by our `retry` then runs in `queue:work`, which records the
/// same row. The worker reads the connection (host, port) from the app.
#[test]
fn jobs_run_alike_beside_php_queue_work() {
    use common::laravel::{App, Transport};
    let s = common::Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    if !pheanstalk_installed() {
        return;
    }
    let Some(server) = Beanstalkd::start(s.dir.path()) else {
        return;
    };
    app.set_env("QUEUE_CONNECTION", "beanstalkd");
    app.set_env("BEANSTALKD_QUEUE_HOST", "127.0.0.1");
    app.set_env("BEANSTALKD_QUEUE_PORT", &server.port.to_string());
    app.dispatch(serde_json::json!([
        {"kind": "plain", "tag": "a"},
        {"kind": "releasing", "tag": "r", "release": 0},
        {"kind": "self-failing", "tag": "b"},
    ]));
    assert_eq!(server.jobs("default"), 3, "pushed by the app");
    let config = app.config_from_app(&s, Transport::PerJob);
    let flag = app.app_flag();
    let args = ["--stop-when-empty", "--sleep=0", flag.as_str()];
    s.work(&config, &args).expect_stop(0, "empty");
    assert_eq!(server.jobs("default"), 0);
    assert_eq!(app.attempts("a"), vec![1]);
    assert_eq!(app.attempts("r"), vec![1, 2], "released, then run again");
    assert_eq!(app.attempts("b"), vec![1]);
    let ours = s.failed_rows();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(
        (ours[0].connection.as_str(), ours[0].queue.as_str()),
        ("beanstalkd", "default")
    );
    // Ours pushed, PHP's run: `retry` puts the failed job back on the tube.
    Daemon::cli(&config, &["retry", "all", flag.as_str()]).expect_exit(0);
    assert_eq!(server.jobs("default"), 1, "pushed back by retry");
    let mut php = app.queue_work_on("beanstalkd", &["--stop-when-empty", "--sleep=0"]);
    assert!(php.wait().success(), "{}", php.output());
    assert_eq!(server.jobs("default"), 0);
    assert_eq!(
        app.attempts("b"),
        vec![1, 1],
        "queue:work ran it, attempt 1"
    );
    let theirs = s.failed_rows();
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    assert_eq!(
        (
            theirs[0].uuid.as_str(),
            theirs[0].connection.as_str(),
            theirs[0].queue.as_str(),
        ),
        (ours[0].uuid.as_str(), "beanstalkd", "default"),
        "the row Laravel records is the one we recorded"
    );
    let first_line = |e: &str| e.lines().next().unwrap_or_default().to_string();
    assert_eq!(
        first_line(&theirs[0].exception),
        first_line(&ours[0].exception)
    );
}

/// Whether Debian's pheanstalk is there for the app's beanstalkd
/// connection; else the skip is recorded.
fn pheanstalk_installed() -> bool {
    let found = std::process::Command::new("php")
        .args([
            "-r",
            "exit(stream_resolve_include_path('Pheanstalk/autoload.php') ? 0 : 3);",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        common::skip::note(
            "php-pda-pheanstalk",
            "queue:work beanstalkd beside the worker is not tested",
        );
    }
    found
}

/// The fleet's jobs.
const FLEET_JOBS: usize = 300;

/// A mixed fleet on one tube: two daemons (the app's `TimedJob` through
/// the persistent bridge) and two `php artisan queue:work beanstalkd`;
/// once a third of the jobs ran, a daemon and a PHP worker are SIGKILLed
/// and one of each started in their place. beanstalkd gives a killed
/// worker's reservations back at once (they end with its connections):
/// no job is lost (each ran to its end at least once, the tube ends
/// empty), and no two runs of a job that both ended overlap in time.
#[test]
fn a_mixed_fleet_with_kills_of_both_kinds_loses_no_job_and_never_overlaps() {
    use common::laravel::{App, Transport};
    let s = common::Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    if !pheanstalk_installed() {
        return;
    }
    let Some(server) = Beanstalkd::start(s.dir.path()) else {
        return;
    };
    app.set_env("QUEUE_CONNECTION", "beanstalkd");
    app.set_env("BEANSTALKD_QUEUE_HOST", "127.0.0.1");
    app.set_env("BEANSTALKD_QUEUE_PORT", &server.port.to_string());
    // One job dispatched by the app, copied with a tag of the same length
    // (its serialized command stays valid) and a uuid of its own.
    app.dispatch(serde_json::json!([{"kind": "timed", "tag": "t-----"}]));
    let template = server.take_ready("default");
    let uuid = serde_json::from_str::<serde_json::Value>(&template).unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    for i in 0..FLEET_JOBS {
        let body = template
            .replace("t-----", &format!("t{i:05}"))
            .replace(&uuid, &format!("00000000-0000-4000-8000-{i:012}"));
        server.put("default", &body, 0, 90);
    }
    let config = app.config_from_app(&s, Transport::Persistent(2));
    let flag = app.app_flag();
    // Three tries: a run a kill cut short counts its attempt, as in
    // Laravel (a job reserved by the killed worker counts one too).
    let daemon_args = ["--sleep=0.1", "--concurrency=2", "--tries=3", flag.as_str()];
    // Each stops once it finds the tube without a ready job.
    let php_args = ["--sleep=0.1", "--tries=3", "--stop-when-empty"];
    let mut daemons = vec![s.work(&config, &daemon_args), s.work(&config, &daemon_args)];
    let mut php = vec![
        app.queue_work_on("beanstalkd", &php_args),
        app.queue_work_on("beanstalkd", &php_args),
    ];
    let ended = |app: &App| app.records().iter().filter(|r| r["event"] == "end").count();
    common::wait_until("a third of the jobs to run", || {
        ended(&app) >= FLEET_JOBS / 3
    });
    let mut killed = daemons.remove(0);
    killed.signal(Signal::SIGKILL);
    killed.wait_exit();
    php[0].signal(Signal::SIGKILL);
    php[0].wait();
    let mut again = s.work(&config, &daemon_args);
    again.wait_log(&["worker started"]);
    daemons.push(again);
    php.push(app.queue_work_on("beanstalkd", &php_args));
    common::wait_until("the tube to be empty", || server.jobs("default") == 0);
    for d in &mut daemons {
        d.signal(Signal::SIGTERM);
        d.expect_exit(0);
    }
    for p in php.iter_mut().skip(1) {
        assert!(p.wait().success(), "{}", p.output());
    }
    let runs = ended_runs(&app);
    for i in 0..FLEET_JOBS {
        let tag = format!("t{i:05}");
        let intervals = runs.get(&tag).cloned().unwrap_or_default();
        assert!(
            intervals.iter().any(|(_, end)| end.is_some()),
            "{tag} never ran to its end: {intervals:?}"
        );
        let done: Vec<(f64, f64)> = intervals
            .iter()
            .filter_map(|(start, end)| end.map(|end| (*start, end)))
            .collect();
        for pair in done.windows(2) {
            assert!(pair[1].0 >= pair[0].1, "{tag}: runs overlap: {done:?}");
        }
    }
    assert_eq!(s.failed_rows().len(), 0);
}

/// Each job's runs as the app recorded them (start, end if it ended), by
/// tag, in the order they started.
fn ended_runs(
    app: &common::laravel::App,
) -> std::collections::HashMap<String, Vec<(f64, Option<f64>)>> {
    let mut by_run: std::collections::HashMap<String, (String, f64, Option<f64>)> =
        std::collections::HashMap::new();
    for r in app.records() {
        let run = r["run"].as_str().unwrap_or_default().to_string();
        let time = r["time"].as_f64().unwrap();
        match r["event"].as_str() {
            Some("start") => {
                let tag = r["tag"].as_str().unwrap().to_string();
                by_run.insert(run, (tag, time, None));
            }
            Some("end") => by_run.get_mut(&run).unwrap_or_else(|| panic!("{r}")).2 = Some(time),
            _ => {}
        }
    }
    let mut by_tag: std::collections::HashMap<String, Vec<(f64, Option<f64>)>> =
        std::collections::HashMap::new();
    for (tag, start, end) in by_run.into_values() {
        by_tag.entry(tag).or_default().push((start, end));
    }
    for runs in by_tag.values_mut() {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    by_tag
}

/// A job no handler matches, with `[queue] unmatched = "release"`, is
/// handed back uncounted: it never ran, so it is put back as a copy (due
/// in `unmatched_release_delay`) whose `reserves` is 0, and the original
/// is deleted; `--stop-when-empty` then stops with it delayed on the tube.
#[test]
fn an_unmatched_job_is_handed_back_uncounted() {
    let dir = scratch();
    let Some(server) = Beanstalkd::start(dir.path()) else {
        return;
    };
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let config = config(dir.path(), &server, failed.url(), 60, "touch \"$DIR/ran\"");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("match = \"*\"", "match = \"App\\\\Jobs\\\\Known\"");
    let text = text.replace(
        "retry_after = 60\n",
        "retry_after = 60\nunmatched = \"release\"\nunmatched_release_delay = 60\n",
    );
    std::fs::write(&config, text).unwrap();
    let original = server.put("default", &payload("Unknown", "u-unknown"), 0, 60);
    let args = ["--config", config.to_str().unwrap(), "work"];
    let mut d = Daemon::start(
        &[&args[..], &["--stop-when-empty", "--sleep=0"]].concat(),
        &[],
    );
    d.expect_stop(0, "empty");
    assert!(!dir.path().join("ran").exists(), "no handler ran");
    assert!(server.job(original).is_empty(), "the original is deleted");
    let copy = server.peek_delayed("default").expect("a delayed copy");
    let stats = server.job(copy);
    assert_eq!(
        stats.get("reserves").map(String::as_str),
        Some("0"),
        "{stats:?}"
    );
    assert_eq!(
        stats.get("delay").map(String::as_str),
        Some("60"),
        "{stats:?}"
    );
    assert_eq!(
        stats.get("pri").map(String::as_str),
        Some("1024"),
        "{stats:?}"
    );
    assert_eq!(failed.rows().len(), 0);
}
