//! Two daemons drain 10,000 SQS jobs while each is SIGKILLed at random
//! moments and started again (issue 28): nothing lost, no job run twice at
//! once, and a job run again only after a kill of the daemon that ran it.
//!
//! The queue is fed as it drains, never holding more than [`BACKLOG`]
//! messages: moto's `ReceiveMessage` costs in proportion to every message
//! of the queue (visible, delayed and in flight). For each message it
//! hands out it checks the retention period through
//! `get_queue_attributes`, which builds the queue's whole attribute map
//! three times, each time counting the visible, delayed and in-flight
//! messages by walking the queue; `DeleteMessage` walks it too. Measured
//! with boto3 on this machine (a receive of 10): 27 ms with 30 messages
//! queued, 73 ms with 100, 264 ms with 400, 1.6 s with 3,000; so 10,000
//! jobs pushed at once drain at a few jobs a second, and the same drain
//! with the backlog bounded runs at the daemons' pace.
//!
//! On failure, `SQS_FLEET_KEEP=1` keeps the scratch directory: the runs,
//! and each daemon's log and `--json` job lines (`daemon-PID.log`,
//! `daemon-PID.out`); `SQS_FLEET_SEED` replays the kill moments.

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::Daemon;
use common::databases::FailedDb;
use common::sqs::Moto;
use nix::sys::signal::Signal;

use crate::sqs_worker::payload;

/// Jobs drained.
const JOBS: usize = 10_000;
/// The most messages the feeder lets the queue hold (visible and in
/// flight), as it counts them: pushed, less the runs that ended.
const BACKLOG: usize = 80;
/// `--concurrency` of each daemon.
const CONCURRENCY: usize = 16;
/// SIGKILLs, shared between the two daemons.
const KILLS: usize = 8;
/// The visibility timeout (s): what a killed daemon held shows again
/// after it.
const VISIBILITY: u64 = 3;

/// The handler: writes `run UUID ATTEMPT DAEMON_PID` to `runs` as it
/// starts, then takes the job's `flock` without waiting: held, it runs
/// (20 ms) and writes the UUID to `done`; refused (another run of the job
/// holds it), it writes the UUID to `overlap`. A run's lock is held until
/// its shell and its `sleep` end, even when its daemon is killed.
const HANDLER: &str = "#!/bin/sh\n\
     read -r _ || true\n\
     [ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n\
     U=\"$LARAVEL_WORKER_JOB_UUID\"\n\
     echo \"run $U $LARAVEL_WORKER_ATTEMPT $PPID\" >> \"$DIR/runs\"\n\
     exec 9>\"$DIR/lock-$U\"\n\
     if flock -n 9; then sleep 0.02; echo \"$U\" >> \"$DIR/done\"; \
     else echo \"$U $LARAVEL_WORKER_ATTEMPT $PPID\" >> \"$DIR/overlap\"; fi\n";

/// The scratch directory, the worker's config and its failed-job table.
struct Fleet {
    dir: tempfile::TempDir,
    config: PathBuf,
    failed: FailedDb,
}

impl Fleet {
    fn new(moto: &Moto) -> Fleet {
        let dir = tempfile::Builder::new()
            .prefix("lw-sqs-fleet-")
            .tempdir()
            .unwrap();
        let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
        let handler = dir.path().join("handler.sh");
        let script = HANDLER.replace("$DIR", &dir.path().display().to_string());
        std::fs::write(&handler, script).unwrap();
        let config = dir.path().join("worker.toml");
        std::fs::write(
            &config,
            format!(
                "[queue]\nconnection = \"sqs\"\nretry_after = {VISIBILITY}\n\n\
                 [sqs]\nprefix = \"{}\"\nendpoint = \"{}\"\nkey = \"test\"\nsecret = \"test\"\n\n\
                 [failed]\ndriver = \"database-uuids\"\nurl = \"{}\"\n\n\
                 [cache]\nstore = \"none\"\n\n\
                 [[handlers]]\nmatch = \"*\"\ncommand = [\"sh\", \"{}\"]\n",
                moto.prefix(),
                moto.endpoint,
                failed.url(),
                handler.display()
            ),
        )
        .unwrap();
        Fleet {
            dir,
            config,
            failed,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn work(&self) -> Daemon {
        let concurrency = format!("--concurrency={CONCURRENCY}");
        let config = self.config.to_str().unwrap();
        Daemon::start(
            &[
                "--config",
                config,
                "work",
                &concurrency,
                "--sleep=1",
                "--tries=0",
                "--json",
            ],
            &[],
        )
    }

    /// Runs that ended (a job run twice counts twice): `done` holds one
    /// 8-byte line per run.
    fn ended(&self) -> usize {
        std::fs::metadata(self.path("done")).map_or(0, |m| m.len() as usize / 8)
    }

    /// Appends `line` to `runs`, where the handlers write theirs (each
    /// write one append, so the file's order is the order of the events).
    fn mark(&self, line: &str) {
        let mut runs = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("runs"))
            .unwrap();
        runs.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

/// Job `n`'s UUID: 7 bytes, so that a `done` line is 8.
fn uuid(n: usize) -> String {
    format!("u-{n:05}")
}

/// Pushes the jobs in `SendMessageBatch` waves of 10 while fewer than
/// [`BACKLOG`] are outstanding.
fn feed(moto: &Moto, url: &str, fleet: &Fleet) {
    let mut pushed = 0;
    while pushed < JOBS {
        if pushed.saturating_sub(fleet.ended()) + 10 > BACKLOG {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let wave: Vec<String> = (pushed..(pushed + 10).min(JOBS))
            .map(|n| payload("Fleet", &uuid(n)))
            .collect();
        moto.send_batch(url, &wave);
        pushed += wave.len();
    }
}

/// A small xorshift generator: the kill moments, from a seed printed so
/// that a run can be replayed.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `KILLS` kills: `(ended runs at which to kill, which daemon)`, in order,
/// between 5 % and 90 % of the drain.
fn kill_plan(random: &mut Random) -> Vec<(usize, usize)> {
    let span = (JOBS * 85 / 100) as u64;
    let mut plan: Vec<(usize, usize)> = (0..KILLS)
        .map(|k| (JOBS / 20 + random.below(span) as usize, k % 2))
        .collect();
    plan.sort();
    plan
}

/// Every run in `runs`, in order: `(uuid, attempt, daemon pid)`, with the
/// kills as `("kill", 0, pid)`.
fn read_runs(fleet: &Fleet) -> Vec<(String, u64, i32)> {
    let text = std::fs::read_to_string(fleet.path("runs")).unwrap();
    text.lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[..] {
                ["run", uuid, attempt, pid] => (
                    uuid.to_string(),
                    attempt.parse().unwrap(),
                    pid.parse().unwrap(),
                ),
                ["kill", pid] => ("kill".to_string(), 0, pid.parse().unwrap()),
                _ => panic!("a line of runs: {line:?}"),
            }
        })
        .collect()
}

/// Checks the runs and returns how many ran again per kill (by the
/// killed daemon's pid): every job ran; each run but a job's last was on
/// a daemon killed before the job's next run started, and the next run
/// was on a later receive (a larger receive count).
fn check_runs(fleet: &Fleet, daemons: &[i32]) -> HashMap<i32, usize> {
    let runs = read_runs(fleet);
    let killed_at: HashMap<i32, usize> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.0 == "kill")
        .map(|(at, r)| (r.2, at))
        .collect();
    let mut by_job: HashMap<&str, Vec<(usize, u64, i32)>> = HashMap::new();
    for (at, (uuid, attempt, pid)) in runs.iter().enumerate() {
        if uuid != "kill" {
            assert!(daemons.contains(pid), "run by an unknown pid: {uuid} {pid}");
            by_job.entry(uuid).or_default().push((at, *attempt, *pid));
        }
    }
    assert_eq!(by_job.len(), JOBS, "every job ran");
    let mut again = HashMap::<i32, usize>::new();
    for (uuid, job_runs) in &by_job {
        for pair in job_runs.windows(2) {
            let ((_, attempt, pid), (next_at, next_attempt, _)) = (pair[0], pair[1]);
            let killed = killed_at.get(&pid).copied();
            assert!(
                killed.is_some_and(|k| k < next_at) && next_attempt > attempt,
                "{uuid} ran again, but not on a later receive after its daemon {pid} was \
                 killed: runs (line, receive count, pid) {job_runs:?}, kill at line {killed:?}"
            );
            *again.entry(pid).or_default() += 1;
        }
    }
    again
}

/// Two daemons (`--concurrency=16`, visibility 3 s) drain 10,000 jobs fed in
/// waves of 10 (never more than 80 outstanding) while each is SIGKILLed
/// at random moments (8 kills in all, the kills' seed printed) and
/// started again at once. Nothing is lost: every job ran and the queue
/// ends empty (what a killed daemon held shows again once its visibility
/// lapses). No job ever ran twice at once: each run holds a `flock` on its
/// job's lock file while it runs, and a run refused the lock records an
/// overlap; none does. A job ran again only after a kill: every run but a
/// job's last was on a daemon killed before the job's next run started
/// (the handlers and the test append to one file, in order), the next run
/// on a later receive, and no kill made more than `--concurrency` + 1 jobs run
/// again (the slots' jobs, running or awaiting their delete, and one
/// message a long poll held).
#[test]
fn sigkills_of_two_daemons_during_10_000_jobs_lose_nothing_and_never_overlap() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", VISIBILITY);
    let mut fleet = Fleet::new(&moto);
    if std::env::var_os("SQS_FLEET_KEEP").is_some() {
        eprintln!("sqs_fleet: keeping {}", fleet.dir.path().display());
        fleet.dir.disable_cleanup(true);
    }
    let seed = std::env::var("SQS_FLEET_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64) | 1
        });
    eprintln!("sqs_fleet: kill seed {seed} (SQS_FLEET_SEED={seed} replays the kill moments)");
    let plan = kill_plan(&mut Random(seed));
    let started = Instant::now();
    let mut daemons = [fleet.work(), fleet.work()];
    let mut pids: Vec<i32> = daemons.iter().map(|d| d.pid().as_raw()).collect();
    std::thread::scope(|scope| {
        let feeder = scope.spawn(|| feed(&moto, &url, &fleet));
        let mut next = 0;
        let mut last = (0, Instant::now());
        while fleet.ended() < JOBS || distinct_done(&fleet) < JOBS {
            let ended = fleet.ended();
            if ended != last.0 {
                last = (ended, Instant::now());
            }
            assert!(
                last.1.elapsed() < Duration::from_secs(60),
                "no run ended for 60 s at {ended} runs ended"
            );
            if let Some(&(at, which)) = plan.get(next).filter(|(at, _)| ended >= *at) {
                let pid = daemons[which].pid().as_raw();
                fleet.mark(&format!("kill {pid}"));
                daemons[which].signal(Signal::SIGKILL);
                let _ = daemons[which].wait_exit();
                dump(&fleet, &daemons[which]);
                eprintln!("sqs_fleet: killed daemon {which} (pid {pid}) at {at} runs ended");
                daemons[which] = fleet.work();
                pids.push(daemons[which].pid().as_raw());
                next += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        feeder.join().unwrap();
    });
    common::wait_until("the queue to empty", || moto.counts(&url) == (0, 0, 0));
    let drained = started.elapsed();
    for d in &mut daemons {
        d.signal(Signal::SIGTERM);
        d.expect_stop(0, "interrupted");
    }
    assert_eq!(kills_marked(&fleet), KILLS, "every planned kill happened");
    for d in &daemons {
        dump(&fleet, d);
    }
    assert!(
        !fleet.path("overlap").exists(),
        "jobs ran twice at once (UUID, receive count, pid): {:?}",
        std::fs::read_to_string(fleet.path("overlap"))
    );
    let again = check_runs(&fleet, &pids);
    eprintln!(
        "sqs_fleet: {JOBS} jobs in {drained:.1?} ({:.0} jobs/s), {KILLS} kills, {} runs again, \
         per killed daemon: {again:?}",
        JOBS as f64 / drained.as_secs_f64(),
        again.values().sum::<usize>()
    );
    assert!(
        again.values().all(|&n| n <= CONCURRENCY + 1),
        "a kill made at most its slots' jobs and one held message run again: {again:?}"
    );
    assert!(fleet.failed.rows().is_empty(), "no job failed");
}

/// Distinct jobs that ended.
fn distinct_done(fleet: &Fleet) -> usize {
    let text = std::fs::read_to_string(fleet.path("done")).unwrap_or_default();
    text.lines().collect::<std::collections::HashSet<_>>().len()
}

/// Kills marked in `runs`.
fn kills_marked(fleet: &Fleet) -> usize {
    read_runs(fleet).iter().filter(|r| r.0 == "kill").count()
}

/// Writes daemon `d`'s log and stdout (its `--json` job lines) to the
/// scratch directory, for a failure's post-mortem.
fn dump(fleet: &Fleet, d: &Daemon) {
    std::fs::write(
        fleet.path(&format!("daemon-{}.log", d.pid())),
        d.stderr_text(),
    )
    .unwrap();
    std::fs::write(
        fleet.path(&format!("daemon-{}.out", d.pid())),
        d.stdout.join("\n"),
    )
    .unwrap();
}
