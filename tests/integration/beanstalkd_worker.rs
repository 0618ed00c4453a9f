//! The worker on the beanstalkd queue (issue 46, part 4), end to end: the
//! real binary on a private beanstalkd (skipped, saying so, where Debian's
//! `beanstalkd` is not installed), real handler processes, `failed_jobs`
//! in SQLite.

use std::path::PathBuf;

use nix::sys::signal::Signal;

use crate::common;
use crate::common::Daemon;
use crate::common::beanstalkd::Beanstalkd;
use crate::common::databases::FailedDb;
use crate::common::laravel::App;
use crate::common::parity::{Round, Run, parity};
use crate::common::queue_scenes::{self, QueueSide, payload};

/// One test's beanstalkd: the server (its binlog in `dir`), failed jobs
/// in SQLite and a worker's config running one handler for every job.
struct Tube {
    dir: tempfile::TempDir,
    server: Beanstalkd,
    failed: FailedDb,
    config: PathBuf,
}

/// A [`Tube`] whose config has `retry_after` (the ttr of what the worker
/// pushes) and runs `script`, a shell script with `DIR` set to the test's
/// directory; `None` (the skip recorded) without beanstalkd.
fn tube(retry_after: u64, script: &str) -> Option<Tube> {
    let dir = tempfile::Builder::new()
        .prefix("lw-bsw-")
        .tempdir()
        .unwrap();
    let server = Beanstalkd::start(dir.path())?;
    let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
    let queue = format!(
        "[queue]\nconnection = \"beanstalkd\"\nhost = \"127.0.0.1\"\nport = {}\n\
         retry_after = {retry_after}",
        server.port
    );
    let config = queue_scenes::write_config(dir.path(), &queue, failed.url(), script);
    Some(Tube {
        dir,
        server,
        failed,
        config,
    })
}

/// The server's tubes as the scenes see them: jobs put with a ttr of
/// 60 s, counted in every state.
impl QueueSide for Beanstalkd {
    fn put(&self, tube: &str, payload: &str) -> String {
        Beanstalkd::put(self, tube, payload, 0, 60).to_string()
    }

    fn left(&self, tube: &str) -> (usize, usize) {
        let reserved = self
            .tube(tube)
            .get("current-jobs-reserved")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        (self.jobs(tube) as usize, reserved)
    }
}

/// The scene of [`queue_scenes::runs_releases_and_fails`] on a tube: the
/// good job runs under its beanstalkd id, the bad one's attempts are the
/// server's `reserves`, and it is failed with the connection `beanstalkd`.
#[test]
fn the_worker_runs_releases_and_fails_jobs() {
    let Some(Tube {
        dir,
        server,
        failed,
        config,
    }) = tube(90, queue_scenes::RUNS_SCRIPT)
    else {
        return;
    };
    let files = (dir.path(), config.as_path(), &failed);
    let d = queue_scenes::runs_releases_and_fails(&server, files, "beanstalkd", "beanstalkd");
    assert_eq!(
        crate::banner::start_line(&d, "queue"),
        format!(
            "beanstalkd connection \"beanstalkd\": beanstalkd at 127.0.0.1:{}",
            server.port
        )
    );
}

/// A job running for more than three times its ttr beside a second worker
/// on the same tube runs once: `touch` renews its reservation while it
/// runs, so the server never times it out (`timeouts` stays 0) and never
/// gives it to the other worker.
#[test]
fn a_job_running_three_times_its_ttr_runs_once() {
    let script = "echo run >> \"$DIR/runs\"; touch \"$DIR/started\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done";
    let Some(Tube {
        dir,
        server,
        failed,
        config,
    }) = tube(2, script)
    else {
        return;
    };
    let id = server.put("default", &payload("Long", "u-long"), 0, 2);
    let args = ["--sleep=0.2"];
    let mut first = Daemon::work(&config, &args);
    common::wait_until("the job to start", || dir.path().join("started").exists());
    let mut second = Daemon::work(&config, &args);
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

/// The server killed and started again on the same port (its binlog
/// keeps the jobs: without `-b` a restart would lose them and prove
/// nothing) while a job runs: the worker logs the outage, reconnects by
/// itself, and every job runs to its end; none is lost. The job running
/// across the restart lost its reservation with its connection and is
/// ready again on the new server: the worker's free slot reserves it, and
/// the reservation goes to the run still under way instead of a second
/// run (each job's runs, as the handler records their starts and ends,
/// never overlap). A job may still run again after a run whose delete the
/// outage lost (at least once).
#[test]
fn a_server_restarted_mid_run_loses_nothing() {
    let script = "echo \"start $LARAVEL_WORKER_JOB_ID\" >> \"$DIR/runs\"; \
                  echo \"$LARAVEL_WORKER_JOB_ID\" >> \"$DIR/ran\"; \
                  if [ \"$LARAVEL_WORKER_JOB_UUID\" = u-4 ]; then touch \"$DIR/fifth\"; \
                  while [ ! -f \"$DIR/go\" ]; do sleep 0.05; done; fi; \
                  echo \"end $LARAVEL_WORKER_JOB_ID\" >> \"$DIR/runs\"";
    let Some(Tube {
        dir,
        mut server,
        failed,
        config,
    }) = tube(60, script)
    else {
        return;
    };
    let ids: Vec<u64> = (0..20)
        .map(|i| server.put("default", &payload("Step", &format!("u-{i}")), 0, 60))
        .collect();
    let mut d = Daemon::work(&config, &["--sleep=0.1", "--concurrency=2"]);
    common::wait_until("the fifth job to run", || dir.path().join("fifth").exists());
    server.kill();
    d.wait_stderr(|line| line.contains("beanstalkd at 127.0.0.1"));
    server.start_again();
    let gated = ids[4];
    common::wait_until("the gated job back and reserved", || {
        server.job(gated).get("state").map(String::as_str) == Some("reserved")
    });
    std::fs::write(dir.path().join("go"), "").unwrap();
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
        ran.lines().count() <= 22,
        "at most the two interrupted ones twice: {ran}"
    );
    let runs = std::fs::read_to_string(dir.path().join("runs")).unwrap();
    let mut running = std::collections::HashSet::new();
    for line in runs.lines() {
        match line.split_once(' ') {
            Some(("start", id)) => assert!(running.insert(id), "{id} ran twice at once: {runs}"),
            Some(("end", id)) => assert!(running.remove(id), "{runs}"),
            _ => panic!("{line}"),
        }
    }
    assert_eq!(failed.rows().len(), 0);
}

/// Every stop condition of `queue:work` on beanstalkd
/// ([`queue_scenes::every_stop_condition`]), each on a tube of its own:
/// the jobs the worker did not run stay on the tube, ready (none reserved
/// and kept); `--stop-when-empty` on an empty tube stops at once; and
/// `restart` through the cache store (here Laravel's file store) stops a
/// running worker.
#[test]
fn stop_conditions_on_beanstalkd() {
    let Some(Tube {
        dir,
        server,
        failed,
        config,
    }) = tube(60, queue_scenes::STOP_SCRIPT)
    else {
        return;
    };
    let cache = dir.path().join("cache");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[cache]\nstore = \"none\"\n",
        &format!(
            "[cache]\nstore = \"file\"\npath = \"{}\"\n",
            cache.display()
        ),
    );
    std::fs::write(&config, text).unwrap();
    let work = |extra: &[&str]| Daemon::work(&config, extra);
    queue_scenes::every_stop_condition(&server, dir.path(), &work);
    work(&["--queue=empty", "--stop-when-empty", "--sleep=0"]).expect_stop(0, "empty");
    server.put("restart", &payload("Quick", "restart-0"), 0, 60);
    let mut d = work(&["--queue=restart", "--sleep=0.1"]);
    common::wait_until("the job to run", || server.jobs("restart") == 0);
    Daemon::cli(&config, &["restart"]).expect_exit(0);
    d.expect_stop(0, "restart_signal");
    assert_eq!(failed.rows().len(), 0);
}

/// Beside the real `php artisan queue:work beanstalkd` of Laravel 8.83 on
/// the same tube: jobs the app dispatched (through pheanstalk) run here,
/// through the bridge, with the attempts and `failed_jobs` row Laravel
/// gives them (connection `beanstalkd`, queue `default`); the failed job
/// pushed back by our `retry` then runs in `queue:work`, which records the
/// same row. The worker reads the connection (host, port) from the app.
#[test]
fn jobs_run_alike_beside_php_queue_work() {
    use common::laravel::Transport;
    let s = common::Scene::new();
    let Some((app, server)) = app_on_beanstalkd(&s) else {
        return;
    };
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

/// The test app in `s` with its queue connection `beanstalkd` on a
/// private server; `None` (the skip recorded) without PHP and Laravel,
/// Debian's pheanstalk or beanstalkd.
fn app_on_beanstalkd(s: &common::Scene) -> Option<(App, Beanstalkd)> {
    let app = App::new(s)?;
    if !pheanstalk_installed() {
        return None;
    }
    let server = Beanstalkd::start(s.dir.path())?;
    app.set_env("QUEUE_CONNECTION", "beanstalkd");
    app.set_env("BEANSTALKD_QUEUE_HOST", "127.0.0.1");
    app.set_env("BEANSTALKD_QUEUE_PORT", &server.port.to_string());
    Some((app, server))
}

/// The parity scenario's rounds ([`common::parity`]) on a beanstalkd of
/// their own, with `php` (`queue:work beanstalkd`) or the daemon; `None`
/// (the skip recorded) where a part is missing.
fn parity_rounds(php: bool) -> Option<Vec<Round>> {
    let s = common::Scene::new();
    let (app, server) = app_on_beanstalkd(&s)?;
    let failed = FailedDb::Sqlite(format!("sqlite://{}", s.path("failed.sqlite").display()));
    let run = Run {
        s: &s,
        app: &app,
        queue: &server,
        failed: &failed,
    };
    Some(run.rounds("beanstalkd", php))
}

/// Parity with `php artisan queue:work beanstalkd` of the real Laravel
/// 8.83 (Debian's pheanstalk): the parity scenario's job kinds, run round
/// by round once by queue:work and once by the daemon (through the
/// bridge, every setting read from the app), each on its own beanstalkd
/// and Redis, leave after every round the same job log, the same jobs on
/// the tube (attempts as `reserves`, state, the delay each was put or
/// released with), the same `failed_jobs` rows (connection `beanstalkd`)
/// and the same keys in the app's Redis cache. Delayed jobs are kicked
/// between rounds.
#[test]
fn the_daemon_and_queue_work_beanstalkd_leave_the_same_jobs() {
    let Some(php) = parity_rounds(true) else {
        return;
    };
    let ours = parity_rounds(false).expect("checked before");
    parity(php, ours, "beanstalkd", "beanstalkd");
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
    use common::laravel::Transport;
    let s = common::Scene::new();
    let Some((app, server)) = app_on_beanstalkd(&s) else {
        return;
    };
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
    let Some(Tube {
        dir,
        server,
        failed,
        config,
    }) = tube(60, "touch \"$DIR/ran\"")
    else {
        return;
    };
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("match = \"*\"", "match = \"App\\\\Jobs\\\\Known\"");
    let text = text.replace(
        "retry_after = 60\n",
        "retry_after = 60\nunmatched = \"release\"\nunmatched_release_delay = 60\n",
    );
    std::fs::write(&config, text).unwrap();
    let original = server.put("default", &payload("Unknown", "u-unknown"), 0, 60);
    let mut d = Daemon::work(&config, &["--stop-when-empty", "--sleep=0"]);
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
