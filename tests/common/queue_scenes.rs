//! Scenes every queue driver but Redis plays the same way (the database,
//! SQS and beanstalkd tests): the worker's config for a queue of that
//! driver ([`write_config`]), a payload as Laravel's `createPayload`
//! writes it there ([`payload`]), and the scenes themselves, each run on a
//! [`QueueSide`]: a job run, one released and failed
//! ([`runs_releases_and_fails`]); every stop condition of `queue:work`
//! ([`every_stop_condition`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::Daemon;
use super::databases::FailedDb;

/// A payload as Laravel's `createPayload` writes it for the database,
/// SQS and beanstalkd drivers: no `id`, no `attempts` (the queue counts
/// them), an empty serialized command of class `App\Jobs\NAME`.
pub fn payload(name: &str, uuid: &str) -> String {
    format!(
        r#"{{"uuid":"{uuid}","displayName":"App\\Jobs\\{name}","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{{"commandName":"App\\Jobs\\{name}","command":"O:0:{{}}"}}}}"#
    )
}

/// Writes `dir/worker.toml` for a worker whose queue is `queue` (its
/// `[queue]` section and any other of its driver's, as TOML), with failed
/// jobs at `failed` (`database-uuids`), no cache store and one handler for
/// every job: `dir/handler.sh`, running `script` with `DIR` set to `dir`
/// after reading its stdin away. Its Redis is a socket nobody listens on:
/// a fallback that wrongly reached for Redis fails instead of finding the
/// machine's 127.0.0.1:6379, whose keys other tests may have left.
pub fn write_config(dir: &Path, queue: &str, failed: &str, script: &str) -> PathBuf {
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
        "{queue}\n\n[redis]\nurl = \"unix://{}/no-redis.sock\"\n\n\
         [failed]\ndriver = \"database-uuids\"\nurl = \"{failed}\"\n\n\
         [cache]\nstore = \"none\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"sh\", \"{}\"]\n",
        dir.display(),
        script_path.display()
    );
    let path = dir.join("worker.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// A queue as a scene sees it: jobs put on it and what it holds.
pub trait QueueSide {
    /// Puts `payload` on `queue`, available now; the job's id as the
    /// worker gives it to handlers (`LARAVEL_WORKER_JOB_ID`).
    fn put(&self, queue: &str, payload: &str) -> String;
    /// The jobs `queue` holds: `(all, of them reserved or in flight)`.
    fn left(&self, queue: &str) -> (usize, usize);
}

/// The handler of [`runs_releases_and_fails`].
pub const RUNS_SCRIPT: &str = "case \"$LARAVEL_WORKER_JOB_NAME\" in *Bad*) \
     [ \"$LARAVEL_WORKER_MODE\" = failed ] && exit 0; \
     echo \"$LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/bad\"; exit 3;; esac\n\
     echo \"$LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/ran\"";

/// A job that succeeds is deleted, run once as attempt 1 under its id;
/// one whose handler fails is released, run again as attempt 2 (the
/// queue's count), and failed into `failed_jobs` with the connection
/// `connection`, queue `default` and the payload as stored, as
/// `queue:work CONNECTION --tries=2` leaves them; `--stop-when-empty` then
/// stops the worker with the queue empty. `config` runs [`RUNS_SCRIPT`]
/// in `dir`; `what` names the queue in messages. Returns the worker,
/// exited, for the driver's own checks of its output.
pub fn runs_releases_and_fails(
    side: &dyn QueueSide,
    (dir, config, failed): (&Path, &Path, &FailedDb),
    connection: &str,
    what: &str,
) -> Daemon {
    let good = side.put("default", &payload("Good", "u-good"));
    side.put("default", &payload("Bad", "u-bad"));
    let mut d = Daemon::work(config, &["--stop-when-empty", "--sleep=0", "--tries=2"]);
    d.expect_stop(0, "empty");
    assert_eq!(side.left("default"), (0, 0), "{what}: every job settled");
    let ran = std::fs::read_to_string(dir.join("ran")).unwrap();
    assert_eq!(ran, format!("{good} 1\n"), "{what}: ran once, attempt 1");
    let bad = std::fs::read_to_string(dir.join("bad")).unwrap();
    assert_eq!(bad, "1\n2\n", "{what}: the queue's attempts");
    let rows = failed.rows();
    assert_eq!(rows.len(), 1, "{what}: {rows:?}");
    let row = &rows[0];
    assert_eq!(
        (
            row.uuid.as_str(),
            row.connection.as_str(),
            row.queue.as_str()
        ),
        ("u-bad", connection, "default"),
        "{what}"
    );
    assert_eq!(row.payload, payload("Bad", "u-bad"), "{what}: as stored");
    let out = d.stdout.join("\n");
    assert_eq!(out.matches(" DONE").count(), 1, "{what}: {out}");
    assert_eq!(out.matches(" FAIL").count(), 2, "{what}: {out}");
    d
}

/// A stop condition's case: the queue, its jobs (by name: `Slow` takes
/// 1.5 s, the others none), the worker's arguments, its exit status and
/// stop reason, and how many jobs it ran.
pub type StopCase = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    i32,
    &'static str,
    usize,
);

/// The stop conditions whose worker ends by itself: `--once` runs one
/// job; `--max-jobs=2` with four free slots takes and runs two;
/// `--max-time=1` stops once the running job (1.5 s) ends; `--memory=1`
/// stops with 12 after the first job.
pub const STOP_CASES: [StopCase; 4] = [
    ("once", &["Quick", "Quick"], &["--once"], 0, "once", 1),
    (
        "max_jobs",
        &["Quick", "Quick", "Quick"],
        &["--max-jobs=2", "--concurrency=4"],
        0,
        "max_jobs",
        2,
    ),
    (
        "max_time",
        &["Slow", "Quick"],
        &["--max-time=1"],
        0,
        "max_time",
        1,
    ),
    (
        "memory",
        &["Quick", "Quick"],
        &["--memory=1"],
        12,
        "memory",
        1,
    ),
];

/// The handler of [`every_stop_condition`]: records the queue and uuid,
/// then a `Slow` job sleeps 1.5 s and a `Gated` one waits for `DIR/go`.
pub const STOP_SCRIPT: &str = "echo \"$LARAVEL_WORKER_QUEUE $LARAVEL_WORKER_JOB_UUID\" >> \"$DIR/ran\"\n\
     case \"$LARAVEL_WORKER_JOB_NAME\" in\n\
     *Slow) sleep 1.5;;\n\
     *Gated) touch \"$DIR/started-$LARAVEL_WORKER_QUEUE\"; \
     while [ ! -e \"$DIR/go\" ]; do sleep 0.05; done;;\n\
     esac";

/// Every stop condition of `queue:work`, each on a queue of its own: the
/// worker exits with the status and logs the stop reason it does on
/// Redis, and the jobs it did not run stay on the queue, available (none
/// reserved and kept): the [`STOP_CASES`]; SIGTERM and SIGQUIT while a job
/// runs let it finish and be deleted, then the worker exits 0;
/// `--stop-when-empty-for=2` runs what there is, then stops after 2 s
/// without a job. `work(args)` starts a worker (`--sleep=1` and `args`)
/// whose handler is [`STOP_SCRIPT`] in `dir`.
pub fn every_stop_condition(side: &dyn QueueSide, dir: &Path, work: &dyn Fn(&[&str]) -> Daemon) {
    let fill = |name: &str, kinds: &[&str]| {
        for (n, kind) in kinds.iter().enumerate() {
            side.put(name, &payload(kind, &format!("{name}-{n}")));
        }
    };
    let ran_on = |name: &str| -> Vec<String> {
        std::fs::read_to_string(dir.join("ran"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
            .collect()
    };
    let worker = |extra: &[&str]| work(&[&["--sleep=1"][..], extra].concat());
    for (name, kinds, args, code, reason, runs) in STOP_CASES {
        fill(name, kinds);
        let on = format!("--queue={name}");
        worker(&[&[on.as_str()][..], args].concat()).expect_stop(code, reason);
        let ran = ran_on(name);
        let distinct: HashSet<&String> = ran.iter().collect();
        assert_eq!((ran.len(), distinct.len()), (runs, runs), "{name}: {ran:?}");
        let rest = (kinds.len() - runs, 0);
        assert_eq!(side.left(name), rest, "{name}: the rest available");
    }
    for (name, signal) in [("term", Signal::SIGTERM), ("quit", Signal::SIGQUIT)] {
        let _ = std::fs::remove_file(dir.join("go"));
        fill(name, &["Gated", "Quick"]);
        let mut d = worker(&[&format!("--queue={name}")]);
        let started = dir.join(format!("started-{name}"));
        super::wait_until("the gated job to start", || started.exists());
        d.signal(signal);
        d.wait_log(&["signal received", signal.as_str()]);
        assert_eq!(side.left(name), (2, 1), "{name}: the running job kept");
        std::fs::write(dir.join("go"), "").unwrap();
        d.expect_stop(0, "interrupted");
        assert_eq!(ran_on(name), vec![format!("{name}-0")]);
        assert_eq!(side.left(name), (1, 0), "{name}: it ended, deleted");
    }
    fill("empty_for", &["Quick"]);
    let started = Instant::now();
    worker(&["--queue=empty_for", "--stop-when-empty-for=2"]).expect_stop(0, "empty_for");
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(2), "stopped after {took:?}");
    assert_eq!(ran_on("empty_for"), vec!["empty_for-0"]);
    assert_eq!(side.left("empty_for"), (0, 0));
}
