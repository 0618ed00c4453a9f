//! Mixed fleets on one `jobs` table (issue 27): laravel-worker daemons
//! beside real `php artisan queue:work database` workers of Debian's
//! Laravel 8.83. Every job is the app's own `TimedJob` on both sides (the
//! daemons run it through the persistent PHP bridge), which records a
//! start and an end line per run with the worker's process id, so a run
//! is matched to the worker that made it, and which can be told to hold
//! in the middle of its run until its worker is killed.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::databases::{FailedDb, MariaDb, Postgres};
use common::jobs_table::{JobsTable, Shape};
use common::laravel::{self, App, PhpWorker, Transport};
use common::{Daemon, Scene};
use nix::sys::signal::Signal;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

/// The jobs of the PostgreSQL fleet.
const FLEET_JOBS: usize = 20_000;

/// The jobs of the MariaDB fleet.
const MARIADB_JOBS: usize = 20_000;

/// The jobs of the SQLite fleet.
const SQLITE_JOBS: usize = 600;

/// SIGKILLs during the fleet's run, a daemon and a PHP worker in turn;
/// the first two of every four kill a worker holding a job in the middle
/// of its run, the other two a worker drawn at random, whatever it does.
const KILLS: usize = 10;

/// The seed of the kill schedule (at which point of the run; which worker
/// of the kind, for the kills at random).
const SEED: u64 = 27;

/// `retry_after` of the PostgreSQL fleet's queue (`DB_QUEUE_RETRY_AFTER`):
/// how soon the rows a killed worker held are reclaimed.
const RETRY_AFTER: &str = "5";

/// The longest a fleet may take to empty its table.
const DEADLINE: Duration = Duration::from_secs(300);

/// `queue:work`'s class for a job it runs itself.
const PHP_RUNNER: &str = "Illuminate\\Queue\\Jobs\\DatabaseJob";

/// The bridge's class for a job the daemon hands it.
const BRIDGE_RUNNER: &str = "LaravelWorker\\BridgeJob";

/// UNIX time in seconds, as PHP's `microtime(true)`.
fn wall_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `n` payloads of the app's `TimedJob` (its hold files in `gates`, if
/// any), tagged `t00000`, `t00001`, …: one dispatched by the app through
/// its bus (tag `t-----`, of the same length, so that its serialized
/// command stays valid) and copied with each tag and a uuid of its own.
/// The table is left empty.
fn timed_payloads(app: &App, jobs: &JobsTable, n: usize, gates: Option<&Path>) -> Vec<String> {
    let gates = gates.map(|g| g.to_str().unwrap());
    app.dispatch(json!([{"kind": "timed", "tag": "t-----", "gates": gates}]));
    let rows = jobs.rows();
    assert_eq!(rows.len(), 1, "the app dispatched one row: {rows:?}");
    let template = rows[0].payload.clone();
    jobs.execute("DELETE FROM jobs");
    let decoded: Value = serde_json::from_str(&template).unwrap();
    let uuid = decoded["uuid"].as_str().unwrap().to_string();
    assert_eq!(template.matches("t-----").count(), 1, "{template}");
    assert_eq!(template.matches(uuid.as_str()).count(), 1, "{template}");
    (0..n)
        .map(|i| {
            template
                .replace("t-----", &format!("t{i:05}"))
                .replace(&uuid, &format!("00000000-0000-4000-8000-{i:012}"))
        })
        .collect()
}

/// One run of a job, from its start and end records.
#[derive(Debug, Clone)]
struct Run {
    /// When the handler started (UNIX seconds).
    start: f64,
    /// When it ended; `None`: its process died first.
    end: Option<f64>,
    /// The worker's process id: `queue:work` itself, or the daemon whose
    /// bridge process ran it.
    worker: i32,
    /// Whether a daemon ran it (through the bridge).
    daemon: bool,
}

/// Every run the app recorded, by job tag, in the order they started.
fn runs_by_job(app: &App) -> HashMap<String, Vec<Run>> {
    let mut runs: HashMap<String, (String, Run)> = HashMap::new();
    for r in app.records() {
        let event = r["event"].as_str().unwrap_or_default();
        let id = r["run"].as_str().unwrap_or_default().to_string();
        let time = r["time"].as_f64().unwrap();
        match event {
            "start" => {
                let daemon = match r["runner"].as_str() {
                    Some(BRIDGE_RUNNER) => true,
                    Some(PHP_RUNNER) => false,
                    other => panic!("a run by {other:?}: {r}"),
                };
                let field = if daemon { "ppid" } else { "pid" };
                let run = Run {
                    start: time,
                    end: None,
                    worker: r[field].as_i64().unwrap() as i32,
                    daemon,
                };
                let tag = r["tag"].as_str().unwrap().to_string();
                assert!(runs.insert(id, (tag, run)).is_none(), "{r}");
            }
            "end" => runs.get_mut(&id).unwrap_or_else(|| panic!("{r}")).1.end = Some(time),
            // The job's failed() hook, for a job failed for good.
            "failed" => {}
            _ => panic!("the app recorded {r}"),
        }
    }
    let mut by_job: HashMap<String, Vec<Run>> = HashMap::new();
    for (tag, run) in runs.into_values() {
        by_job.entry(tag).or_default().push(run);
    }
    for runs in by_job.values_mut() {
        runs.sort_by(|a, b| a.start.total_cmp(&b.start));
    }
    by_job
}

/// The processes whose parent is `pid` (a daemon's bridge processes).
fn children(pid: i32) -> Vec<i32> {
    let mut kids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // The state and the parent follow the command name, in parentheses.
        let parent = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if parent == Some(pid) {
            kids.push(child);
        }
    }
    kids
}

/// Makes the next job a worker of `kind` (`php` or `daemon`) starts hold
/// in the middle of its run (see `tests/laravel/app/Jobs/TimedJob.php`),
/// and returns that worker's process id once it holds.
fn hold_next_job(gates: &Path, kind: &str) -> i32 {
    std::fs::write(gates.join(format!("hold-{kind}")), "").unwrap();
    let mut holder = None;
    common::wait_until(&format!("a {kind} worker to hold a job"), || {
        holder = std::fs::read_dir(gates).unwrap().flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("held-")?.parse::<i32>().ok()?;
            std::fs::remove_file(e.path()).unwrap();
            Some(pid)
        });
        holder.is_some()
    });
    holder.unwrap()
}

/// A fleet's workers, started again as they are killed.
struct Fleet<'a> {
    scene: &'a Scene,
    app: &'a App,
    config: PathBuf,
    daemon_args: Vec<String>,
    php_args: Vec<String>,
    daemons: Vec<Daemon>,
    php: Vec<PhpWorker>,
    /// Killed workers' process ids, and when each was dead (with its
    /// handler processes).
    killed: HashMap<i32, f64>,
    /// Every daemon that ran, the killed ones too (for their output).
    retired: Vec<Daemon>,
    php_kills: usize,
    daemon_kills: usize,
}

impl<'a> Fleet<'a> {
    fn start(
        scene: &'a Scene,
        app: &'a App,
        config: PathBuf,
        daemons: usize,
        php: usize,
        daemon_args: &[&str],
        php_args: &[&str],
    ) -> Self {
        let mut fleet = Fleet {
            scene,
            app,
            config,
            daemon_args: daemon_args.iter().map(|a| a.to_string()).collect(),
            php_args: php_args.iter().map(|a| a.to_string()).collect(),
            daemons: Vec::new(),
            php: Vec::new(),
            killed: HashMap::new(),
            retired: Vec::new(),
            php_kills: 0,
            daemon_kills: 0,
        };
        for _ in 0..php {
            let worker = fleet.start_php();
            fleet.php.push(worker);
        }
        // The PHP workers boot slower than the daemons: on a loaded machine
        // the daemons could drain a small table before PHP takes one job,
        // leaving the PHP side of the test empty. They start once PHP runs.
        if php > 0 {
            within_deadline("a queue:work to run a job", || {
                app.records()
                    .iter()
                    .any(|r| r["event"] == "start" && r["runner"] == PHP_RUNNER)
            });
        }
        for _ in 0..daemons {
            let daemon = fleet.start_daemon();
            fleet.daemons.push(daemon);
        }
        fleet
    }

    fn start_daemon(&self) -> Daemon {
        let args: Vec<&str> = self.daemon_args.iter().map(String::as_str).collect();
        self.scene.work(&self.config, &args)
    }

    fn start_php(&self) -> PhpWorker {
        let args: Vec<&str> = self.php_args.iter().map(String::as_str).collect();
        self.app.queue_work_on("database", &args)
    }

    /// SIGKILLs daemon `i` (its bridge processes die with it), waits until
    /// they are all gone, and starts another.
    fn kill_daemon(&mut self, i: usize) {
        let pid = self.daemons[i].pid().as_raw();
        let handlers = children(pid);
        self.daemons[i].signal(Signal::SIGKILL);
        self.daemons[i].wait_exit();
        for child in handlers {
            common::wait_dead(child);
        }
        self.killed.insert(pid, wall_clock());
        let next = self.start_daemon();
        self.retired
            .push(std::mem::replace(&mut self.daemons[i], next));
        self.daemon_kills += 1;
    }

    /// The index of the daemon `pid`.
    fn daemon_index(&self, pid: i32) -> usize {
        self.daemons
            .iter()
            .position(|d| d.pid().as_raw() == pid)
            .unwrap_or_else(|| panic!("no daemon {pid}"))
    }

    /// The index of the PHP worker `pid`.
    fn php_index(&self, pid: i32) -> usize {
        self.php
            .iter()
            .position(|p| p.pid() == pid)
            .unwrap_or_else(|| panic!("no queue:work {pid}"))
    }

    /// SIGKILLs PHP worker `i`, waits until it is gone, and starts another.
    fn kill_php(&mut self, i: usize) {
        let pid = self.php[i].pid();
        self.php[i].signal(Signal::SIGKILL);
        self.php[i].wait();
        self.killed.insert(pid, wall_clock());
        self.php[i] = self.start_php();
        self.php_kills += 1;
    }

    /// Stops every worker with SIGTERM, as a deploy would: each finishes
    /// its job and exits 0.
    fn stop(&mut self) {
        for d in &self.daemons {
            d.signal(Signal::SIGTERM);
        }
        for p in &self.php {
            p.signal(Signal::SIGTERM);
        }
        for d in &mut self.daemons {
            d.expect_exit(0);
        }
        for p in &mut self.php {
            let status = p.wait();
            assert!(status.success(), "queue:work: {status}\n{}", p.output());
        }
        self.retired.append(&mut self.daemons);
    }

    /// What every daemon printed on stdout (its job lines).
    fn daemon_stdout(&self) -> String {
        let lines: Vec<&str> = self
            .retired
            .iter()
            .flat_map(|d| d.stdout.iter().map(String::as_str))
            .collect();
        lines.join("\n")
    }

    /// What every daemon logged.
    fn daemon_logs(&self) -> String {
        let logs: Vec<String> = self.retired.iter().map(Daemon::stderr_text).collect();
        logs.join("\n")
    }
}

/// Waits until `done` holds, polling every 100 ms; fails the test, saying
/// it waited for `what`, after [`DEADLINE`] (a fleet's run, longer than
/// one wait of [`common::wait_until`] may last on a busy machine).
fn within_deadline(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < DEADLINE,
            "waited {DEADLINE:?} for {what} in vain"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `jobs` is empty, calling `at_progress` with the number of
/// rows gone at each poll; fails the test after [`DEADLINE`].
fn until_empty(jobs: &JobsTable, total: usize, mut at_progress: impl FnMut(usize)) {
    let started = Instant::now();
    loop {
        let left = jobs.count() as usize;
        if left == 0 {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{left} of {total} rows left after {DEADLINE:?}"
        );
        at_progress(total.saturating_sub(left));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The size of a mixed fleet's run.
struct Plan {
    /// Jobs in the table at the start.
    jobs: usize,
    /// Daemons (`--concurrency=2`, two warm bridge processes each).
    daemons: usize,
    /// PHP `queue:work database` workers.
    php: usize,
}

/// What a mixed fleet's run did, and what its workers wrote.
struct Report {
    elapsed: Duration,
    by_daemons: usize,
    by_php: usize,
    daemon_kills: usize,
    php_kills: usize,
    /// Kills of a worker holding a job in the middle of its run.
    held: usize,
    /// Runs cut by a kill.
    cut: usize,
    /// Runs of a job after its first.
    duplicates: usize,
    /// Every daemon's log, the killed ones' too.
    daemon_logs: String,
    /// What every `queue:work` printed, the killed ones' too, and the
    /// app's `laravel.log`.
    php_logs: String,
}

impl Report {
    fn summary(&self, jobs: usize) -> String {
        format!(
            "{jobs} jobs in {:.1?}: {} runs by the daemons, {} by queue:work; {} daemon and {} \
             PHP kills ({} in a held job); {} runs cut by a kill, {} runs again after a kill",
            self.elapsed,
            self.by_daemons,
            self.by_php,
            self.daemon_kills,
            self.php_kills,
            self.held,
            self.cut,
            self.duplicates
        )
    }
}

/// Runs the mixed fleet of issue 27 on `jobs`, the table the app's
/// `database` queue connection uses (`retry_after` [`RETRY_AFTER`]):
/// `plan.daemons` daemons and `plan.php` PHP `queue:work database`,
/// `plan.jobs` jobs of the app's `TimedJob`, and [`KILLS`] SIGKILLs, a
/// daemon and a PHP worker in turn, at points of the run drawn from a
/// seeded generator: six kill the worker of the kind that holds a job in
/// the middle of its run (the job waits for it), four a worker drawn at
/// random, whatever it is doing; each killed worker is started again at
/// once. Asserts that every job runs to its end; that the runs of one job
/// never overlap in time (a run cut by its worker's death ended, at the
/// latest, when the worker and its bridge processes were gone, before the
/// next run started); that a job runs more than once only when every run
/// before its last was made by a worker killed after that run started;
/// and that nothing fails.
fn mixed_fleet(s: &Scene, app: &App, jobs: &JobsTable, plan: &Plan) -> Report {
    let gates = s.path("gates");
    std::fs::create_dir(&gates).unwrap();
    let payloads = timed_payloads(app, jobs, plan.jobs, Some(&gates));
    jobs.insert_many("default", &payloads, common::now());

    let config = app.config_from_app(s, Transport::Persistent(2));
    let flag = app.app_flag();
    let daemon_args = [
        "database",
        "--concurrency=2",
        "--sleep=0.2",
        "--tries=0",
        flag.as_str(),
    ];
    let php_args = ["--sleep=1", "--tries=0"];
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    // Kill points: rows gone, spread over the first 80% of the run.
    let mut points: Vec<usize> = (0..KILLS)
        .map(|_| rng.random_range(plan.jobs / 20..plan.jobs * 4 / 5))
        .collect();
    points.sort_unstable();
    let started = Instant::now();
    let mut fleet = Fleet::start(
        s,
        app,
        config,
        plan.daemons,
        plan.php,
        &daemon_args,
        &php_args,
    );
    let (mut next_kill, mut held) = (0, 0);
    until_empty(jobs, plan.jobs, |gone| {
        while next_kill < KILLS && gone >= points[next_kill] {
            let daemon = next_kill % 2 == 0;
            let mid_job = next_kill % 4 < 2;
            let victim = match (daemon, mid_job) {
                (true, true) => fleet.daemon_index(hold_next_job(&gates, "daemon")),
                (false, true) => fleet.php_index(hold_next_job(&gates, "php")),
                (true, false) => rng.random_range(0..plan.daemons),
                (false, false) => rng.random_range(0..plan.php),
            };
            held += usize::from(mid_job);
            if daemon {
                fleet.kill_daemon(victim);
            } else {
                fleet.kill_php(victim);
            }
            next_kill += 1;
        }
    });
    let elapsed = started.elapsed();
    fleet.stop();
    assert_eq!(
        (fleet.daemon_kills, fleet.php_kills),
        (KILLS / 2, KILLS / 2)
    );

    let failed = FailedDb::Sqlite(format!("sqlite://{}", s.path("failed.sqlite").display()));
    assert_eq!(failed.rows().len(), 0, "nothing failed");
    // Job lines as Laravel 8.83's queue:work writes them (the app's version).
    let out = fleet.daemon_stdout();
    assert!(
        out.contains("] Processed:") && !out.contains("] Failed:"),
        "a daemon failed a job:\n{out}"
    );
    let php_logs = php_logs(s, app);
    assert!(
        !php_logs.contains("] Failed:"),
        "queue:work failed a job:\n{php_logs}"
    );

    let (by_daemons, by_php, cut, duplicates) = check_runs(app, &fleet, plan.jobs);
    assert!(
        cut >= held,
        "{held} workers killed in a job, {cut} runs cut"
    );
    Report {
        elapsed,
        by_daemons,
        by_php,
        daemon_kills: fleet.daemon_kills,
        php_kills: fleet.php_kills,
        held,
        cut,
        duplicates,
        daemon_logs: fleet.daemon_logs(),
        php_logs,
    }
}

/// What every `queue:work` of the scene printed (`queue-work-N.out`),
/// and the app's `laravel.log`.
fn php_logs(s: &Scene, app: &App) -> String {
    let mut logs = String::new();
    for entry in std::fs::read_dir(s.dir.path()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("queue-work-") && name.ends_with(".out") {
            logs += &std::fs::read_to_string(entry.path()).unwrap_or_default();
        }
    }
    logs + &std::fs::read_to_string(app.dir.join("storage/logs/laravel.log")).unwrap_or_default()
}

/// Checks every job's runs (see [`mixed_fleet`]) and returns the runs by
/// the daemons, by queue:work, those cut by a kill and those of a job
/// after its first.
fn check_runs(app: &App, fleet: &Fleet<'_>, jobs: usize) -> (usize, usize, usize, usize) {
    let by_job = runs_by_job(app);
    assert_eq!(by_job.len(), jobs, "every job started");
    let (mut duplicates, mut cut, mut by_daemons, mut by_php) = (0, 0, 0, 0);
    for (tag, runs) in &by_job {
        assert!(
            runs.iter().any(|r| r.end.is_some()),
            "{tag} never ran to its end: {runs:?}"
        );
        for r in runs {
            cut += usize::from(r.end.is_none());
            if r.daemon {
                by_daemons += 1;
            } else {
                by_php += 1;
            }
        }
        duplicates += runs.len() - 1;
        for pair in runs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let death = fleet.killed.get(&a.worker).copied();
            assert!(
                death.is_some_and(|t| a.start < t),
                "{tag} ran again, but its earlier run's worker was not killed after it: {runs:?}"
            );
            let over = a.end.or(death).unwrap();
            assert!(
                over <= b.start,
                "two runs of {tag} overlap ({over} > {}): {runs:?}",
                b.start
            );
        }
    }
    assert!(by_daemons > 0 && by_php > 0, "{by_daemons} {by_php}");
    (by_daemons, by_php, cut, duplicates)
}

/// The mixed fleet of issue 27 on one PostgreSQL table: two daemons and
/// two PHP `queue:work database`, 20,000 jobs, `retry_after` 5 s, ten
/// SIGKILLs of both kinds (see [`mixed_fleet`]): no job is lost, none
/// fails, no two runs of a job overlap, and a job runs again only after a
/// kill.
#[test]
fn a_mixed_fleet_with_kills_of_both_kinds_loses_no_job_and_never_overlaps() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    if !laravel::have_extension(
        "pdo_pgsql",
        "php-pgsql",
        "the mixed fleet runs queue:work database on PostgreSQL",
    ) {
        return;
    }
    let Some(pg) = Postgres::start() else {
        return;
    };
    let jobs = JobsTable::postgres(&pg, "app");
    for (name, value) in [
        ("QUEUE_CONNECTION", "database"),
        ("DB_QUEUE_CONNECTION", "pgsql"),
        ("PG_HOST", pg.socket_dir().to_str().unwrap()),
        ("PG_DATABASE", "app"),
        ("DB_QUEUE_RETRY_AFTER", RETRY_AFTER),
    ] {
        app.set_env(name, value);
    }
    let plan = Plan {
        jobs: FLEET_JOBS,
        daemons: 2,
        php: 2,
    };
    let report = mixed_fleet(&s, &app, &jobs, &plan);
    eprintln!("{}", report.summary(plan.jobs));
}

/// Lines of `logs` that tell of a deadlock (MariaDB's error 1213,
/// SQLSTATE 40001).
fn deadlocks(logs: &str) -> Vec<&str> {
    logs.lines()
        .filter(|l| {
            // PDO: "SQLSTATE[40001]: Serialization failure: 1213 Deadlock
            // found …"; sqlx: "1213 (40001): Deadlock found …". Bare
            // numbers would match process ids.
            let l = l.to_ascii_lowercase();
            ["deadlock", "[40001]", "(40001)", "1213 ("]
                .iter()
                .any(|sign| l.contains(sign))
        })
        .collect()
}

/// The mixed fleet on one MariaDB table (InnoDB, `FOR UPDATE SKIP
/// LOCKED`), with the benchmark goal's workers: four daemons and two PHP
/// `queue:work database`, [`MARIADB_JOBS`] jobs, ten SIGKILLs of both
/// kinds (see [`mixed_fleet`]). As on PostgreSQL: no job lost, none
/// failed, no overlap, duplicates only after a kill. And no deadlock: no
/// line of a daemon's log, of a `queue:work`'s output or of the app's
/// `laravel.log` tells of one (error 1213, SQLSTATE 40001).
#[test]
fn a_mixed_fleet_on_mariadb_loses_no_job_and_meets_no_deadlock() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    if !laravel::have_extension(
        "pdo_mysql",
        "php-mysql",
        "the mixed fleet runs queue:work database on MariaDB",
    ) {
        return;
    }
    let Some(m) = MariaDb::start() else {
        return;
    };
    let jobs = JobsTable::mariadb(&m, "app", Shape::Before13_6);
    for (name, value) in [
        ("QUEUE_CONNECTION", "database"),
        ("DB_QUEUE_CONNECTION", "mysql"),
        ("MY_SOCKET", m.socket().to_str().unwrap()),
        ("MY_DATABASE", "app"),
        ("DB_QUEUE_RETRY_AFTER", RETRY_AFTER),
    ] {
        app.set_env(name, value);
    }
    let plan = Plan {
        jobs: MARIADB_JOBS,
        daemons: 4,
        php: 2,
    };
    let report = mixed_fleet(&s, &app, &jobs, &plan);
    let ours = deadlocks(&report.daemon_logs);
    let php = deadlocks(&report.php_logs);
    eprintln!(
        "{}; deadlocks: {} in the daemons' logs, {} in queue:work's",
        report.summary(plan.jobs),
        ours.len(),
        php.len()
    );
    assert!(
        ours.is_empty(),
        "a daemon met a deadlock:\n{}",
        ours.join("\n")
    );
    assert!(
        php.is_empty(),
        "queue:work met a deadlock:\n{}",
        php.join("\n")
    );
}

/// Four daemons (`--concurrency=2`, one warm bridge process each) and one
/// PHP `queue:work database` on the app's SQLite file (rollback journal,
/// as Laravel's skeleton makes it), 600 jobs, `--tries=1` (artisan's
/// default) on both sides, `retry_after` 60 s. The daemons take the file's
/// write lock before they read (`BEGIN IMMEDIATE`) and wait for it up to
/// 60 s: none of them meets "database is locked" and no job fails. PHP
/// opens its transactions deferred, so its reserve or its delete is
/// refused at once when a daemon wrote in between; Laravel 8.83 logs the
/// refusal and fails no job for it. A refused reserve changes nothing; a
/// refused delete leaves the row of a job PHP ran to its end reserved:
/// those are the only rows left (at most one per refused delete in the
/// app's log), and every job ran once, to its end. Once their reservation
/// has expired (moved back here, as if `retry_after` had passed), a daemon
/// with `--tries=1` reclaims each of them past its tries and fails it with
/// `MaxAttemptsExceededException` without running it again, as
/// `queue:work` would.
#[test]
fn sqlite_with_four_daemons_and_a_php_worker_fails_no_job_on_our_locks() {
    let s = Scene::new();
    let Some(app) = App::new(&s) else {
        return;
    };
    // The app's default database (DB_DATABASE) holds jobs beside failed_jobs.
    let jobs = JobsTable::sqlite(&s.path("failed.sqlite"));
    app.set_env("QUEUE_CONNECTION", "database");
    app.set_env("DB_QUEUE_RETRY_AFTER", "60");
    let payloads = timed_payloads(&app, &jobs, SQLITE_JOBS, None);
    jobs.insert_many("default", &payloads, common::now());

    let config = app.config_from_app(&s, Transport::Persistent(1));
    let flag = app.app_flag();
    let daemon_args = [
        "database",
        "--concurrency=2",
        "--sleep=0.2",
        "--tries=1",
        flag.as_str(),
    ];
    let php_args = ["--sleep=1", "--tries=1"];
    let started = Instant::now();
    let mut fleet = Fleet::start(&s, &app, config.clone(), 4, 1, &daemon_args, &php_args);
    within_deadline("every job to run to its end", || {
        app.records().iter().filter(|r| r["event"] == "end").count() >= SQLITE_JOBS
    });
    let elapsed = started.elapsed();
    fleet.stop();

    let logs = fleet.daemon_logs();
    assert!(
        !logs.contains("database is locked") && !logs.contains("ERROR"),
        "a daemon met an error:\n{logs}"
    );
    let failed = FailedDb::Sqlite(format!("sqlite://{}", s.path("failed.sqlite").display()));
    assert_eq!(failed.rows().len(), 0, "a job failed");
    // Job lines as Laravel 8.83's queue:work writes them, on both sides.
    let out = fleet.daemon_stdout();
    let php_out = fleet.php[0].output();
    assert!(out.contains("] Processed:"), "{out}");
    assert!(!out.contains("] Failed:"), "a daemon failed a job:\n{out}");
    assert!(
        !php_out.contains("] Failed:"),
        "queue:work failed a job:\n{php_out}"
    );
    let laravel_log =
        std::fs::read_to_string(app.dir.join("storage/logs/laravel.log")).unwrap_or_default();
    let refusals: Vec<&str> = laravel_log
        .lines()
        .filter(|l| l.contains(".ERROR: ") && l.contains("database is locked"))
        .collect();
    let refused_deletes = refusals
        .iter()
        .filter(|l| l.contains("delete from"))
        .count();

    let by_job = runs_by_job(&app);
    assert_eq!(by_job.len(), SQLITE_JOBS, "every job ran");
    let (mut by_daemons, mut by_php) = (0, 0);
    for (tag, runs) in &by_job {
        assert!(
            runs.len() == 1 && runs[0].end.is_some(),
            "{tag} did not run once to its end: {runs:?}"
        );
        if runs[0].daemon {
            by_daemons += 1;
        } else {
            by_php += 1;
        }
    }
    assert!(by_daemons > 0 && by_php > 0, "{by_daemons} {by_php}");
    // The uuid's last digits are the job's number (see timed_payloads).
    let number = |payload: &str| -> usize {
        let uuid = serde_json::from_str::<Value>(payload).unwrap()["uuid"]
            .as_str()
            .unwrap()
            .to_string();
        uuid.rsplit('-').next().unwrap().parse().unwrap()
    };
    let left = jobs.rows();
    for row in &left {
        let runs = &by_job[&format!("t{:05}", number(&row.payload))];
        assert!(
            row.reserved_at.is_some() && row.attempts == 1 && !runs[0].daemon,
            "a row left that is not one of PHP's refused deletes: {row:?} {runs:?}"
        );
    }
    assert!(
        left.len() <= refused_deletes,
        "{} rows left, {refused_deletes} deletes refused:\n{laravel_log}",
        left.len()
    );

    // Past retry_after, a daemon with --tries=1 fails them without running them.
    jobs.execute("UPDATE jobs SET reserved_at = reserved_at - 60");
    let mut sweeper = s.work(
        &config,
        &["database", "--stop-when-empty", "--tries=1", &flag],
    );
    sweeper.expect_stop(0, "empty");
    let failed_rows = failed.rows();
    assert_eq!(failed_rows.len(), left.len(), "{failed_rows:?}");
    for row in &failed_rows {
        assert!(
            row.exception
                .starts_with("Illuminate\\Queue\\MaxAttemptsExceededException"),
            "{row:?}"
        );
    }
    assert_eq!(
        sweeper.stdout.join("\n").matches("] Failed:").count(),
        left.len()
    );
    assert_eq!(
        runs_by_job(&app).values().map(Vec::len).sum::<usize>(),
        SQLITE_JOBS
    );
    eprintln!(
        "{SQLITE_JOBS} jobs in {elapsed:.1?}: {by_daemons} run by the daemons, {by_php} by \
         queue:work; PHP met \"database is locked\" {} times ({refused_deletes} deletes); \
         {} rows of jobs PHP ran left reserved, failed past --tries=1 when reclaimed",
        refusals.len(),
        left.len()
    );
}
