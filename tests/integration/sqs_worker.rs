//! The worker on Amazon SQS (issue 28), end to end: the real binary on a
//! private `moto` server (skipped with a printed reason where moto is not
//! installed), real handler processes and a SQLite `failed_jobs` table.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Daemon;
use common::databases::FailedDb;
use common::sqs::Moto;

/// A payload exactly as Laravel's `createPayload` writes it for SQS: no
/// `id`, no `attempts` (SQS counts receives; the job id is the
/// `MessageId`).
pub(crate) fn payload(name: &str, uuid: &str) -> String {
    // The serialized command's class name, its length in bytes as PHP
    // counts it (one backslash each, before JSON escapes them).
    let length = format!("App\\Jobs\\{name}").len();
    format!(
        r#"{{"uuid":"{uuid}","displayName":"App\\Jobs\\{name}","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{{"commandName":"App\\Jobs\\{name}","command":"O:{length}:\"App\\Jobs\\{name}\":0:{{}}"}}}}"#
    )
}

/// A scratch directory with a config file for a worker on `moto`
/// (visibility timeout `visibility` s) with failed jobs in a SQLite
/// `failed_jobs` table, and one handler for every job: `script`, a shell
/// script run with `DIR` set to the directory, `STDIN` to a file holding
/// what it was given on stdin (the payload) and `BYTES` to its size.
struct Scene {
    dir: tempfile::TempDir,
    config: PathBuf,
    failed: FailedDb,
}

impl Scene {
    /// A scene without a cache store (`[cache] store = "none"`).
    fn new(moto: &Moto, visibility: u64, script: &str) -> Scene {
        Scene::with_cache(moto, visibility, script, |_| "store = \"none\"".to_string())
    }

    /// A scene whose `[cache]` section is what `cache` writes, given the
    /// scene directory (for a store of its own there).
    fn with_cache(
        moto: &Moto,
        visibility: u64,
        script: &str,
        cache: impl FnOnce(&Path) -> String,
    ) -> Scene {
        let dir = tempfile::Builder::new()
            .prefix("lw-sqs-")
            .tempdir()
            .unwrap();
        let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
        let script_path = dir.path().join("handler.sh");
        std::fs::write(
            &script_path,
            format!(
                "#!/bin/sh\nDIR='{}'\nSTDIN=\"$DIR/stdin.$$\"\ncat > \"$STDIN\"\n\
                 BYTES=$(wc -c < \"$STDIN\")\n{script}\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let toml = format!(
            "[queue]\nconnection = \"sqs\"\nretry_after = {visibility}\n\n\
             [sqs]\nprefix = \"{}\"\nendpoint = \"{}\"\nkey = \"test\"\nsecret = \"test\"\n\n\
             [failed]\ndriver = \"database-uuids\"\nurl = \"{}\"\n\n\
             [cache]\n{}\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"sh\", \"{}\"]\n",
            moto.prefix(),
            moto.endpoint,
            failed.url(),
            cache(dir.path()),
            script_path.display()
        );
        let config = dir.path().join("worker.toml");
        std::fs::write(&config, toml).unwrap();
        Scene {
            dir,
            config,
            failed,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `laravel-worker --config CONFIG work ARGS`.
    fn work(&self, args: &[&str]) -> Daemon {
        self.work_env(args, &[])
    }

    /// [`Scene::work`] with overflow pointers followed, as an app with
    /// `SQS_OVERFLOW_ENABLED=true` has them (Laravel 13.9+).
    fn work_overflow(&self, args: &[&str]) -> Daemon {
        self.work_env(args, &[("SQS_OVERFLOW_ENABLED", "true")])
    }

    /// [`Scene::work`] with `env` set.
    fn work_env(&self, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let config = self.config.to_str().unwrap();
        Daemon::start(&[&["--config", config, "work"][..], args].concat(), env)
    }

    /// The lines the handler appended to `ran`.
    fn ran(&self) -> Vec<String> {
        std::fs::read_to_string(self.path().join("ran"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Waits up to 60 s for `done`.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A job that succeeds is deleted; one whose handler fails is released
/// (visibility 0), received again with `ApproximateReceiveCount` 2 as its
/// attempt, and failed into `failed_jobs` with the connection `sqs` and
/// the queue URL, as `queue:work sqs --tries=2` leaves them; the job id
/// is the `MessageId`.
#[test]
fn the_worker_runs_releases_and_fails_jobs_on_sqs() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/ran\"\n\
         case \"$LARAVEL_WORKER_JOB_NAME\" in *Bad*) exit 3;; esac",
    );
    let good = moto.send(&url, &payload("Good", "u-good"), 0);
    let bad = moto.send(&url, &payload("Bad", "u-bad"), 0);
    let mut d = scene.work(&["--stop-when-empty", "--sleep=0", "--tries=2"]);
    d.expect_stop(0, "empty");
    // The start block names the prefix, the endpoint and the region.
    let queue = crate::banner::start_line(&d, "queue");
    let start = format!(
        "sqs connection \"sqs\": SQS {} (endpoint {}, region ",
        moto.prefix(),
        moto.endpoint
    );
    assert!(queue.starts_with(&start), "{queue}");
    let mut ran = scene.ran();
    ran.sort();
    assert_eq!(
        ran,
        vec![
            format!("failed App\\Jobs\\Bad {bad} 2"),
            format!("run App\\Jobs\\Bad {bad} 1"),
            format!("run App\\Jobs\\Bad {bad} 2"),
            format!("run App\\Jobs\\Good {good} 1"),
        ],
        "attempts are the receive counts, ids the MessageIds; the failed hook ran once"
    );
    assert_eq!(moto.counts(&url), (0, 0, 0), "both messages deleted");
    let rows = scene.failed.rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            rows[0].uuid.as_str(),
            rows[0].connection.as_str(),
            rows[0].queue.as_str()
        ),
        ("u-bad", "sqs", url.as_str()),
        "failed_jobs.queue is the queue URL, as SqsJob is given it"
    );
    assert_eq!(rows[0].payload, payload("Bad", "u-bad"), "the body as sent");
}

/// A payload exactly as Laravel 12.67's `createPayload` writes it for SQS:
/// the recorded Redis payload without the `id` and `attempts` only
/// `RedisQueue::createPayloadArray` adds.
fn recorded_payload(file: &str) -> String {
    let text = common::recordings::read(&format!("laravel12/payloads/{file}"));
    let text = text.trim_end();
    let start = text.find(",\"id\":\"").expect("an id");
    let end = text.find("\"attempts\":0").expect("attempts") + "\"attempts\":0".len();
    format!("{}{}", &text[..start], &text[end..])
}

/// The handler is given the message body on stdin byte for byte, as
/// `SqsJob::getRawBody` reads it: a payload exactly as Laravel's
/// `createPayload` writes it for SQS (recorded from Laravel 12.67), and
/// one carrying an `attempts` key as Vapor's and Bref's re-sent messages
/// do. The attempt is the receive count either way (Laravel's `SqsJob`
/// does not read that key: with `--tries=2` the job carrying
/// `"attempts":3` runs, as attempt 1), and the job id the `MessageId`.
#[test]
fn handlers_get_the_body_as_laravel_wrote_it() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_JOB_UUID $LARAVEL_WORKER_ATTEMPT $LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_JOB_NAME\" >> \"$DIR/ran\"\n\
         cp \"$STDIN\" \"$DIR/body-$LARAVEL_WORKER_JOB_UUID\"",
    );
    let plain = recorded_payload("plain.json");
    let uuid = "8e82685f-3a40-4631-a38f-dbb3ed97b975";
    assert!(
        plain.starts_with(&format!("{{\"uuid\":\"{uuid}\"")),
        "{plain}"
    );
    assert!(
        plain.ends_with(",\"createdAt\":1795558194,\"delay\":null}"),
        "{plain}"
    );
    let vapor = plain
        .replace(uuid, "u-vapor")
        .replace("\"delay\":null}", "\"attempts\":3,\"delay\":null}");
    let plain_id = moto.send(&url, &plain, 0);
    let vapor_id = moto.send(&url, &vapor, 0);
    scene
        .work(&["--stop-when-empty", "--sleep=0", "--tries=2"])
        .expect_stop(0, "empty");
    let mut ran = scene.ran();
    ran.sort();
    assert_eq!(
        ran,
        vec![
            format!("{uuid} 1 {plain_id} App\\Jobs\\PlainJob"),
            format!("u-vapor 1 {vapor_id} App\\Jobs\\PlainJob"),
        ]
    );
    for (uuid, body) in [(uuid, &plain), ("u-vapor", &vapor)] {
        let given = std::fs::read_to_string(scene.path().join(format!("body-{uuid}"))).unwrap();
        assert_eq!(&given, body, "the body, byte for byte");
    }
    assert_eq!(moto.counts(&url), (0, 0, 0));
    assert!(scene.failed.rows().is_empty());
}

/// A job that runs three times the visibility timeout (4 s) beside a
/// second worker on the same queue runs once: its visibility is extended
/// every 1.5 s while it runs, so SQS never shows it to the other worker
/// (moto hides and shows messages by their visibility as AWS does; the
/// test watches the handler's runs, never moto's answer to a stale
/// receipt).
#[test]
fn a_job_longer_than_the_visibility_timeout_runs_once_beside_a_second_worker() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 4);
    let scene = Scene::new(
        &moto,
        4,
        "echo \"$LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/ran\"; sleep 12; touch \"$DIR/done\"",
    );
    let mut first = scene.work(&["--sleep=1"]);
    let mut second = scene.work(&["--sleep=1"]);
    first.wait_log(&["worker started"]);
    second.wait_log(&["worker started"]);
    moto.send(&url, &payload("Long", "u-long"), 0);
    let done = scene.path().join("done");
    wait_for("the long job to end", || done.exists());
    wait_for("its message to be deleted", || {
        moto.counts(&url) == (0, 0, 0)
    });
    for d in [&mut first, &mut second] {
        d.signal(nix::sys::signal::Signal::SIGTERM);
        d.expect_exit(0);
    }
    assert_eq!(scene.ran(), vec!["1"], "one run, on the first receive");
}

/// A push with a delay is held back by SQS (`DelaySeconds`) and then run;
/// a delay above SQS's 900 s is refused with a message saying so, and
/// nothing is sent.
#[test]
fn a_delayed_push_is_held_back_then_run_and_a_delay_above_900_s_is_refused() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_JOB_NAME\" >> \"$DIR/ran\"",
    );
    let config = scene.config.to_str().unwrap();
    let mut refused = Daemon::run(
        &[
            "--config",
            config,
            "push",
            "--job",
            "App\\Jobs\\Late",
            "--delay",
            "901",
            "default",
        ],
        &[],
    );
    refused.expect_exit(1);
    assert!(
        refused.stderr_text().contains("at most 900 s"),
        "{}",
        refused.stderr_text()
    );
    assert_eq!(moto.counts(&url), (0, 0, 0), "nothing sent");
    Daemon::run(
        &[
            "--config",
            config,
            "push",
            "--job",
            "App\\Jobs\\Soon",
            "--delay",
            "2",
            "default",
        ],
        &[],
    )
    .expect_exit(0);
    assert_eq!(moto.counts(&url), (0, 1, 0), "delayed by SQS");
    let mut d = scene.work(&["--sleep=1"]);
    wait_for("the delayed job to run", || !scene.ran().is_empty());
    wait_for("its message to be deleted", || {
        moto.counts(&url) == (0, 0, 0)
    });
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
    assert_eq!(scene.ran(), vec!["App\\Jobs\\Soon"]);
}

/// An idle worker long-polls every `--queue` queue at once: a message sent
/// to the second queue while it waits is received by that poll and run.
#[test]
fn an_idle_worker_long_polls_every_queue_and_picks_up_a_push() {
    let Some(moto) = Moto::start() else { return };
    moto.create_queue("high", 30);
    let low = moto.create_queue("low", 30);
    let scene = Scene::new(&moto, 30, "echo \"$LARAVEL_WORKER_QUEUE\" >> \"$DIR/ran\"");
    let mut d = scene.work(&["--queue=high,low", "--sleep=3"]);
    d.wait_log(&["worker started"]);
    moto.send(&low, &payload("Idle", "u-idle"), 0);
    wait_for("the job to run", || !scene.ran().is_empty());
    wait_for("its message to be deleted", || {
        moto.counts(&low) == (0, 0, 0)
    });
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
    assert_eq!(scene.ran().len(), 1, "{:?}", scene.ran());
}

/// A worker stopping while idle waits for the long poll it has in flight
/// (SQS would go on with it after the worker left, taking a message sent
/// meanwhile for nobody: it came back after the visibility timeout with a
/// receive counted, and failed unrun at `--tries=1`): a message sent just
/// after a SIGTERM is received by that poll and run, then the worker exits
/// 0; after `--max-jobs` the message a poll brings is handed back unrun,
/// visible again at once.
#[test]
fn a_worker_stopping_while_idle_runs_what_its_long_poll_brings() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_JOB_UUID\" >> \"$DIR/ran\"",
    );
    let config = scene.config.to_str().unwrap();
    let polls = ("RUST_LOG", "info,laravel_worker::queue::sqs::receive=debug");
    let args = ["--config", config, "work", "--sleep=3", "--tries=1"];
    let mut d = Daemon::start(&args, &[polls]);
    d.wait_log(&["long poll sent"]);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.wait_log(&["signal received", "SIGTERM"]);
    moto.send(&url, &payload("Late", "u-late"), 0);
    d.expect_stop(0, "interrupted");
    assert_eq!(scene.ran(), vec!["u-late"], "the job the poll brought ran");
    assert_eq!(moto.counts(&url), (0, 0, 0), "and was deleted");

    // --max-jobs=1: the first job ends the run; a second queue's poll,
    // in flight meanwhile, brings a message that is handed back.
    let other = moto.create_queue("other", 30);
    let args = [
        "--config",
        config,
        "work",
        "--queue=default,other",
        "--sleep=3",
    ];
    let mut d = Daemon::start(
        &[&args[..], &["--max-jobs=1", "--tries=1"]].concat(),
        &[polls],
    );
    d.wait_log(&["long poll sent", "other"]);
    moto.send(&url, &payload("First", "u-first"), 0);
    moto.send(&other, &payload("Second", "u-second"), 0);
    d.expect_stop(0, "max_jobs");
    let ran = scene.ran();
    assert_eq!(ran.len(), 2, "one more job ran: {ran:?}");
    let left = moto.counts(&url).0 + moto.counts(&other).0;
    let in_flight = moto.counts(&url).2 + moto.counts(&other).2;
    assert_eq!((left, in_flight), (1, 0), "the other handed back, visible");
}

/// An overflow pointer whose cache store cannot be reached (a SQLite cache
/// table in a folder that does not exist) is no verdict on the job: it is
/// neither run nor failed, but handed back, and SQS shows it again after
/// the visibility timeout, for when the store is back.
#[test]
fn an_overflow_pointer_whose_store_cannot_be_reached_is_handed_back() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let script = "echo \"$LARAVEL_WORKER_JOB_NAME\" >> \"$DIR/ran\"";
    let scene = Scene::with_cache(&moto, 30, script, |dir| {
        let missing = dir.join("no-such-dir/cache.sqlite");
        format!(
            "store = \"database\"\nurl = \"sqlite://{}\"\nprefix = \"laravel-cache-\"",
            missing.display()
        )
    });
    moto.send(&url, &pointer("u-away"), 0);
    let mut d = scene.work_overflow(&["--stop-when-empty", "--sleep=0", "--tries=1"]);
    d.expect_stop(0, "empty");
    assert!(scene.ran().is_empty(), "never run: {:?}", scene.ran());
    assert_eq!(scene.failed.rows().len(), 0, "not failed");
    assert_eq!(moto.counts(&url), (0, 0, 1), "handed back, hidden for now");
    let log = d.stderr_text();
    let said = log
        .lines()
        .find(|l| l.contains("cannot read the job's payload"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(said.contains(&pointer_key("u-away")), "{said}");
    assert_eq!(
        said.matches("unable to open database file").count(),
        1,
        "the cause once: {said}"
    );
}

/// A FIFO queue: `push` sends with a message group (the queue name) and a
/// fresh deduplication id (a UUID) each time, as Laravel 12.27+ sends a
/// string job (SQS refuses a FIFO send without a group), and the worker
/// consumes the messages in order.
#[test]
fn fifo_queues_are_pushed_to_and_consumed_in_order() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("orders.fifo", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_JOB_NAME\" >> \"$DIR/ran\"",
    );
    let config = scene.config.to_str().unwrap();
    for n in 1..=3 {
        let job = format!("App\\Jobs\\Order{n}");
        Daemon::run(
            &["--config", config, "push", "--job", &job, "orders.fifo"],
            &[],
        )
        .expect_exit(0);
    }
    assert_eq!(moto.counts(&url), (3, 0, 0));
    // The ids, on another queue (moto reorders a FIFO queue's messages
    // once they are received and made visible again; AWS does not).
    let audit = moto.create_queue("audit.fifo", 30);
    for _ in 0..2 {
        Daemon::run(
            &[
                "--config",
                config,
                "push",
                "--job",
                "App\\Jobs\\Audit",
                "audit.fifo",
            ],
            &[],
        )
        .expect_exit(0);
    }
    let ids = moto.fifo_ids(&audit);
    assert_eq!(ids.len(), 2, "{ids:?}");
    for (group, dedup) in &ids {
        assert_eq!(group, "audit.fifo", "the queue name is the group");
        assert!(uuid::Uuid::parse_str(dedup).is_ok(), "a UUID: {dedup}");
    }
    assert_ne!(ids[0].1, ids[1].1, "a fresh deduplication id each");
    scene
        .work(&["--queue=orders.fifo", "--stop-when-empty", "--sleep=0"])
        .expect_stop(0, "empty");
    assert_eq!(
        scene.ran(),
        vec![
            "App\\Jobs\\Order1",
            "App\\Jobs\\Order2",
            "App\\Jobs\\Order3"
        ]
    );
    assert_eq!(moto.counts(&url), (0, 0, 0));
}

/// SQS stopped for 5 s while jobs run (the server frozen: connections
/// hang, then time out or resume) loses nothing: every job runs once and
/// the queue ends empty.
#[test]
fn sqs_stopped_for_5_s_loses_nothing() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_JOB_UUID\" >> \"$DIR/ran\"; sleep 0.05",
    );
    for n in 0..30 {
        moto.send(&url, &payload("Outage", &format!("u-{n}")), 0);
    }
    let mut d = scene.work(&["--concurrency=4", "--sleep=1"]);
    wait_for("some jobs to run", || scene.ran().len() >= 5);
    moto.pause(true);
    std::thread::sleep(Duration::from_secs(5));
    moto.pause(false);
    wait_for("every job to run", || scene.ran().len() >= 30);
    wait_for("the queue to empty", || moto.counts(&url) == (0, 0, 0));
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
    let mut ran = scene.ran();
    ran.sort();
    let mut expected: Vec<String> = (0..30).map(|n| format!("u-{n}")).collect();
    expected.sort();
    assert_eq!(ran, expected, "each job once");
}

/// The admin commands on SQS: `monitor` reads the queue's attributes
/// (visible, delayed, in flight), `clear` purges the queue, and `retry`
/// sends a failed job back to the queue URL its `failed_jobs` row names.
#[test]
fn monitor_clear_and_retry_on_sqs() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(&moto, 30, "exit 3");
    let config = scene.config.to_str().unwrap();
    moto.send(&url, &payload("A", "u-a"), 0);
    moto.send(&url, &payload("B", "u-b"), 0);
    moto.send(&url, &payload("C", "u-c"), 60);
    let mut monitor = Daemon::run(&["--config", config, "monitor", "default", "--json"], &[]);
    monitor.expect_exit(0);
    let out = monitor.stdout.join("\n");
    let reports: serde_json::Value = serde_json::from_str(&out).expect(&out);
    let report = &reports[0];
    assert_eq!(
        (&report["pending"], &report["delayed"], &report["reserved"]),
        (
            &serde_json::json!(2),
            &serde_json::json!(1),
            &serde_json::json!(0)
        ),
        "{out}"
    );
    Daemon::run(&["--config", config, "clear", "--force"], &[]).expect_exit(0);
    assert_eq!(moto.counts(&url), (0, 0, 0), "purged");

    moto.send(&url, &payload("Bad", "u-bad"), 0);
    scene
        .work(&["--stop-when-empty", "--sleep=0", "--tries=1"])
        .expect_stop(0, "empty");
    assert_eq!(scene.failed.rows()[0].queue, url);
    assert_eq!(moto.counts(&url), (0, 0, 0));
    Daemon::run(&["--config", config, "retry", "all"], &[]).expect_exit(0);
    assert_eq!(moto.counts(&url), (1, 0, 0), "back on the queue URL");
    assert_eq!(moto.receive(&url, 30)[0].0, payload("Bad", "u-bad"));
}

/// Moto's queues as the scenes see them, each made (visibility 30 s) at
/// its first put; a job's id is its `MessageId`.
struct SqsSide<'a> {
    moto: &'a Moto,
    urls: std::cell::RefCell<std::collections::HashMap<String, String>>,
}

impl SqsSide<'_> {
    fn url(&self, queue: &str) -> String {
        let mut urls = self.urls.borrow_mut();
        let url = urls
            .entry(queue.to_string())
            .or_insert_with(|| self.moto.create_queue(queue, 30));
        url.clone()
    }
}

impl common::queue_scenes::QueueSide for SqsSide<'_> {
    fn put(&self, queue: &str, payload: &str) -> String {
        self.moto.send(&self.url(queue), payload, 0)
    }

    /// Visible, delayed and in flight; of them in flight.
    fn left(&self, queue: &str) -> (usize, usize) {
        let (visible, delayed, in_flight) = self.moto.counts(&self.url(queue));
        ((visible + delayed + in_flight) as usize, in_flight as usize)
    }
}

/// Every stop condition of `queue:work` on SQS
/// ([`common::queue_scenes::every_stop_condition`]), each on a queue of
/// its own: the worker leaves the messages it did not run visible
/// (nothing received and kept in flight). (`--stop-when-empty` ends most
/// tests here; `restart` is in
/// [`restart_pause_and_max_exceptions_through_the_cache_on_sqs`].)
#[test]
fn every_stop_condition_on_sqs_leaves_the_unrun_messages_visible() {
    let Some(moto) = Moto::start() else { return };
    let scene = Scene::new(&moto, 30, common::queue_scenes::STOP_SCRIPT);
    let side = SqsSide {
        moto: &moto,
        urls: Default::default(),
    };
    common::queue_scenes::every_stop_condition(&side, scene.path(), &|args| scene.work(args));
}

/// The payload's own limits hold on SQS as on Redis: a job over its
/// `timeout` is stopped and, out of tries, failed; a job past its
/// `retryUntil` fails without running.
#[test]
fn timeout_and_retry_until_on_sqs() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_UUID\" >> \"$DIR/ran\"\n\
         [ \"$LARAVEL_WORKER_MODE\" = run ] && sleep 30; true",
    );
    let slow = payload("Slow", "u-slow")
        .replace(r#""maxTries":null"#, r#""maxTries":1"#)
        .replace(r#""timeout":null"#, r#""timeout":1"#);
    let expired = payload("Expired", "u-expired").replace(
        r#""retryUntil":null"#,
        &format!(r#""retryUntil":{}"#, common::now() - 60),
    );
    moto.send(&url, &slow, 0);
    moto.send(&url, &expired, 0);
    scene
        .work(&["--stop-when-empty", "--sleep=0"])
        .expect_stop(0, "empty");
    assert_eq!(moto.counts(&url), (0, 0, 0));
    let mut failed: Vec<String> = scene.failed.rows().into_iter().map(|r| r.uuid).collect();
    failed.sort();
    assert_eq!(failed, vec!["u-expired", "u-slow"]);
    let ran = scene.ran();
    assert!(ran.contains(&"run u-slow".to_string()), "{ran:?}");
    assert!(!ran.contains(&"run u-expired".to_string()), "{ran:?}");
}

/// A cache store of the app's, private to a test: Laravel's Redis store
/// (the 12.x skeleton's `laravel-database-` and `laravel-cache-`
/// prefixes, cache database 1) or its database store (a SQLite `cache`
/// table, Laravel 11+'s default).
enum AppCache {
    Redis(common::RedisServer),
    Table(PathBuf),
}

impl AppCache {
    /// The store, in a directory of its own under `dir`.
    fn start(redis: bool, dir: &Path) -> AppCache {
        let dir = dir.join("cache");
        std::fs::create_dir(&dir).unwrap();
        if redis {
            return AppCache::Redis(common::RedisServer::start(&dir));
        }
        let path = dir.join("cache.sqlite");
        common::sqlite::execute(
            &path,
            "create table \"cache\" (\"key\" varchar not null, \"value\" text not null, \
             \"expiration\" integer not null, primary key (\"key\"))",
            &[],
        );
        AppCache::Table(path)
    }

    /// The worker's `[cache]` section for this store.
    fn toml(&self) -> String {
        match self {
            AppCache::Redis(redis) => format!(
                "store = \"redis\"\nurl = \"{}\"\nredis_prefix = \"laravel-database-\"\n\
                 prefix = \"laravel-cache-\"",
                redis.url(1)
            ),
            AppCache::Table(path) => format!(
                "store = \"database\"\nurl = \"sqlite://{}\"\nprefix = \"laravel-cache-\"",
                path.display()
            ),
        }
    }

    /// `Cache::put($key, $payload)` as Laravel's store writes it: the
    /// PHP-serialized string, for ever.
    fn put(&self, key: &str, payload: &str) {
        let value = format!("s:{}:\"{payload}\";", payload.len());
        match self {
            AppCache::Redis(redis) => {
                let full = format!("laravel-database-laravel-cache-{key}");
                redis.cache::<()>(&["SET", &full, &value]);
            }
            AppCache::Table(path) => common::sqlite::execute(
                path,
                "insert into cache (\"key\", value, expiration) values (?, ?, ?)",
                &[
                    &format!("laravel-cache-{key}"),
                    &value,
                    &(common::now() + 315_360_000).to_string(),
                ],
            ),
        }
    }

    /// Whether the store holds `key`.
    fn has(&self, key: &str) -> bool {
        match self {
            AppCache::Redis(redis) => {
                redis.cache::<i64>(&["EXISTS", &format!("laravel-database-laravel-cache-{key}")])
                    == 1
            }
            AppCache::Table(path) => common::sqlite::strings(path, "select \"key\" from cache")
                .contains(&format!("laravel-cache-{key}")),
        }
    }
}

/// A payload as `createPayload` writes it whose command carries a string
/// property of `size` bytes: a job too large for an SQS message.
fn large_payload(name: &str, uuid: &str, size: usize) -> String {
    let class = format!("App\\Jobs\\{name}");
    let command = format!(
        "O:{}:\"{class}\":1:{{s:4:\"blob\";s:{size}:\"{}\";}}",
        class.len(),
        "x".repeat(size)
    );
    let command = serde_json::to_string(&command).unwrap();
    let small = payload(name, uuid);
    let plain = format!(
        "\"command\":\"O:{}:\\\"App\\\\Jobs\\\\{name}\\\":0:{{}}\"",
        class.len()
    );
    assert!(small.contains(&plain), "{small}");
    small.replace(&plain, &format!("\"command\":{command}"))
}

/// The cache key Laravel 13.9+ puts an overflow payload under,
/// `laravel:sqs-payloads:{uuid}`, with a UUID made from `tag` (the same
/// tag, the same UUID).
fn pointer_key(tag: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tag.hash(&mut hasher);
    let h = hasher.finish();
    format!(
        "laravel:sqs-payloads:{:08x}-0000-4000-8000-{:012x}",
        h >> 32,
        h & 0xffff_ffff_ffff
    )
}

/// The body Laravel 13.9+ sends in place of a payload it put in a cache
/// store (`SqsQueue::overflow`) under [`pointer_key`]`(tag)`.
fn pointer(tag: &str) -> String {
    pointer_body(&pointer_key(tag))
}

/// `{"@pointer": key}`.
fn pointer_body(key: &str) -> String {
    format!(r#"{{"@pointer":"{key}"}}"#)
}

/// Overflow pointer bodies (Laravel 13.9+) on `cache`: a job whose payload
/// (over 1 MiB) is in the cache store runs with that payload, and the
/// payload is forgotten once the job is deleted; a release keeps it for
/// the next receive; a job that fails is recorded with its real payload,
/// as Laravel records `getRawBody()`, and its payload forgotten. A pointer
/// whose payload is not in the store, or read by a worker without a cache
/// store, is never run: the job fails at once, its `failed_jobs` row keeps
/// the pointer body and the exception names the pointer and what is
/// missing.
fn overflow_pointers_on(redis: bool) {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let script = "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_ATTEMPT $BYTES\" >> \"$DIR/ran\"\n\
         [ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n\
         case \"$LARAVEL_WORKER_JOB_NAME\" in\n\
         *Bad) exit 3;;\n\
         *Flaky) [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ] && exit 3;;\n\
         esac\n\
         true";
    let mut cache = None;
    let scene = Scene::with_cache(&moto, 30, script, |dir| {
        let store = AppCache::start(redis, dir);
        let toml = store.toml();
        cache = Some(store);
        toml
    });
    let cache = cache.unwrap();
    let big = large_payload("Big", "u-big", 1_100_000);
    let flaky = large_payload("Flaky", "u-flaky", 1000);
    let bad = large_payload("Bad", "u-bad", 1000);
    for (uuid, payload) in [("u-big", &big), ("u-flaky", &flaky), ("u-bad", &bad)] {
        cache.put(&pointer_key(uuid), payload);
        moto.send(&url, &pointer(uuid), 0);
    }
    moto.send(&url, &pointer("u-gone"), 0);

    scene
        .work_overflow(&["--stop-when-empty", "--sleep=0", "--tries=2"])
        .expect_stop(0, "empty");
    let mut ran = scene.ran();
    ran.sort();
    let n = |p: &str| p.len();
    assert_eq!(
        ran,
        vec![
            format!("failed App\\Jobs\\Bad 2 {}", n(&bad)),
            format!("run App\\Jobs\\Bad 1 {}", n(&bad)),
            format!("run App\\Jobs\\Bad 2 {}", n(&bad)),
            format!("run App\\Jobs\\Big 1 {}", n(&big)),
            format!("run App\\Jobs\\Flaky 1 {}", n(&flaky)),
            format!("run App\\Jobs\\Flaky 2 {}", n(&flaky)),
        ],
        "each handler got the payload from the store, the released one twice; the \
         missing one never ran"
    );
    assert_eq!(moto.counts(&url), (0, 0, 0), "every message deleted");
    for uuid in ["u-big", "u-flaky", "u-bad"] {
        assert!(
            !cache.has(&pointer_key(uuid)),
            "{uuid}'s payload forgotten once its job was deleted"
        );
    }
    let mut rows = scene.failed.rows();
    rows.sort_by_key(|r| r.payload.len());
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (gone, failed) = (&rows[0], &rows[1]);
    assert_eq!(
        (failed.uuid.as_str(), failed.payload.as_str()),
        ("u-bad", bad.as_str()),
        "a failed job is recorded with its real payload"
    );
    assert_eq!(gone.payload, pointer("u-gone"), "the pointer is kept");
    let store = if redis { "redis" } else { "database" };
    for part in [
        "LaravelWorker\\OverflowPayloadMissingException",
        &format!("\"{}\"", pointer_key("u-gone")),
        &format!("the {store} cache store has no such key"),
        &format!("laravel-cache-{}", pointer_key("u-gone")),
    ] {
        assert!(
            gone.exception.contains(part),
            "{part:?} in {}",
            gone.exception
        );
    }

    // A worker without a cache store cannot follow a pointer: it fails the
    // job, saying so, and leaves the payload where it is.
    cache.put(&pointer_key("u-kept"), &big);
    moto.send(&url, &pointer("u-kept"), 0);
    let blind = Scene::new(&moto, 30, script);
    blind
        .work_overflow(&["--stop-when-empty", "--sleep=0", "--tries=2"])
        .expect_stop(0, "empty");
    assert!(blind.ran().is_empty(), "{:?}", blind.ran());
    let rows = blind.failed.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].payload, pointer("u-kept"));
    assert!(
        rows[0].exception.contains("this worker has no cache store"),
        "{}",
        rows[0].exception
    );
    assert!(cache.has(&pointer_key("u-kept")), "the payload stays");
}

/// Issue 47, 5: a message body `{"@pointer": KEY}` is followed only to
/// Laravel's own keys (`laravel:sqs-payloads:{uuid}`) and only where
/// overflow is on (`SQS_OVERFLOW_ENABLED`, off by default as in Laravel).
/// Anyone who may send to the queue can write such a body: a pointer to
/// another cache entry (here one holding a job's payload), even with
/// overflow on, and Laravel's own pointer with overflow off, are payloads
/// like any other. The entries they name are neither read (no handler nor
/// `failed_jobs` row gets what they hold) nor forgotten.
#[test]
fn a_pointer_is_followed_only_to_laravel_s_keys_with_overflow_on() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let script = "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME\" >> \"$DIR/ran\"\n\
         cat \"$STDIN\" >> \"$DIR/bodies\"";
    let mut cache = None;
    let scene = Scene::with_cache(&moto, 30, script, |dir| {
        let store = AppCache::start(false, dir);
        let toml = store.toml();
        cache = Some(store);
        toml
    });
    let cache = cache.unwrap();
    cache.put("secret-key", &payload("Secret", "u-secret"));
    cache.put(&pointer_key("u-off"), &payload("Off", "u-off"));
    let bodies = || std::fs::read_to_string(scene.path().join("bodies")).unwrap_or_default();

    // Overflow on: a pointer to a key that is not Laravel's is a payload.
    moto.send(&url, &pointer_body("secret-key"), 0);
    scene
        .work_overflow(&["--stop-when-empty", "--sleep=0", "--tries=1"])
        .expect_stop(0, "empty");
    // Overflow off (the default): Laravel's own pointer is a payload too.
    moto.send(&url, &pointer("u-off"), 0);
    scene
        .work(&["--stop-when-empty", "--sleep=0", "--tries=1"])
        .expect_stop(0, "empty");

    assert_eq!(moto.counts(&url), (0, 0, 0), "both messages settled");
    let ran = scene.ran();
    assert!(
        !ran.iter()
            .any(|l| l.contains("Secret") || l.contains("Off")),
        "no cache entry ran as a job: {ran:?}"
    );
    let given = bodies();
    assert!(
        !given.contains("App\\\\Jobs"),
        "no handler was given a cache entry: {given}"
    );
    for row in scene.failed.rows() {
        assert!(
            !row.payload.contains("App\\\\Jobs"),
            "failed_jobs holds no cache entry: {row:?}"
        );
        assert!(
            row.payload == pointer_body("secret-key") || row.payload == pointer("u-off"),
            "{row:?}"
        );
    }
    assert!(
        cache.has("secret-key"),
        "an entry not ours is never forgotten"
    );
    assert!(
        cache.has(&pointer_key("u-off")),
        "nor is a payload when overflow is off"
    );
}

/// [`overflow_pointers_on`] Laravel's Redis cache store.
#[test]
fn overflow_pointers_are_read_from_a_redis_cache_store() {
    overflow_pointers_on(true);
}

/// [`overflow_pointers_on`] Laravel's database cache store.
#[test]
fn overflow_pointers_are_read_from_a_database_cache_store() {
    overflow_pointers_on(false);
}

/// `--app` on the Laravel test app (8.83, its `sqs` connection as the
/// skeleton writes it, with 13.x's `overflow`): the worker reads the
/// queues' prefix, queue, credentials and endpoint as the app resolves
/// them (written in its `config/queue.php`, not its `.env`), and runs a
/// job from them. The app's `overflow.store`
/// (`SQS_OVERFLOW_STORE=file`) is not its default cache store (Redis),
/// which the worker reads: a pointer job fails at once, the exception
/// naming the pointer and the store the worker does not read.
#[test]
fn the_app_s_sqs_connection_is_read_with_app() {
    let Some(moto) = Moto::start() else { return };
    let s = common::Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    let url = moto.create_queue("orders", 30);
    // Written in the app's config/queue.php, not its .env: only the app's
    // own answer has them.
    for (from, to) in [
        (
            "env('SQS_PREFIX', 'https://sqs.us-east-1.amazonaws.com/your-account-id')",
            format!("'{}'", moto.prefix()),
        ),
        ("env('SQS_QUEUE', 'default')", "'orders'".to_string()),
        ("env('AWS_ACCESS_KEY_ID')", "'test'".to_string()),
        ("env('AWS_SECRET_ACCESS_KEY')", "'test'".to_string()),
        ("env('AWS_ENDPOINT_URL')", format!("'{}'", moto.endpoint)),
        ("env('SQS_OVERFLOW_STORE')", "'file'".to_string()),
        ("env('SQS_OVERFLOW_ENABLED', false)", "true".to_string()),
    ] {
        app.edit_config("queue.php", from, &to);
    }
    let handler = s.script(
        "h.sh",
        "echo \"$LARAVEL_WORKER_CONNECTION $LARAVEL_WORKER_QUEUE $LARAVEL_WORKER_JOB_NAME\" >> \"$DIR/ran\"",
    );
    let config = s.path("sqs-from-app.toml");
    std::fs::write(
        &config,
        format!(
            "[[handlers]]\nmatch = \"*\"\ncommand = [\"sh\", \"{}\"]\n",
            handler.display()
        ),
    )
    .unwrap();
    moto.send(&url, &payload("FromApp", "u-app"), 0);
    moto.send(&url, &pointer("u-elsewhere"), 0);
    let flag = app.app_flag();
    s.run(&config, &["sqs", &flag, "--stop-when-empty", "--sleep=0"]);
    assert_eq!(
        s.read("ran").lines().collect::<Vec<_>>(),
        vec!["sqs orders App\\Jobs\\FromApp"]
    );
    assert_eq!(moto.counts(&url), (0, 0, 0));
    let rows = s.failed_rows();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].payload, pointer("u-elsewhere"));
    for part in [
        &format!("\"{}\"", pointer_key("u-elsewhere")),
        "its cache store \"file\"",
    ] {
        assert!(
            rows[0].exception.contains(part),
            "{part:?} in {}",
            rows[0].exception
        );
    }
}

/// A job the Laravel test app (8.83) dispatched, run in the app through
/// the PHP bridge on SQS: the app's own SQS connection needs the AWS PHP
/// SDK, which is not installed here, so the app dispatches the job to its
/// Redis queue and the test sends that payload to SQS as `SqsQueue` writes
/// it (the same JSON, without the `id` and `attempts` only
/// `RedisQueue::createPayloadArray` adds). The worker, reading the app's
/// `sqs` connection (`--app`), hands the body to the bridge, and the job's
/// `handle()` runs in the app: its record names the job's tag, its data,
/// attempt 1 (the receive count) and the bridge's job class; the message
/// is deleted and nothing failed. The job's `$this->job->getQueue()` is the
/// queue's name (`LARAVEL_WORKER_QUEUE`), where Laravel's `SqsJob` gives
/// the queue URL.
#[test]
fn a_job_the_app_dispatched_runs_in_the_app_through_the_bridge_on_sqs() {
    let Some(moto) = Moto::start() else { return };
    let s = common::Scene::new();
    let Some(app) = common::laravel::App::new(&s) else {
        return;
    };
    let url = moto.create_queue("default", 30);
    for (from, to) in [
        (
            "env('SQS_PREFIX', 'https://sqs.us-east-1.amazonaws.com/your-account-id')",
            format!("'{}'", moto.prefix()),
        ),
        ("env('AWS_ACCESS_KEY_ID')", "'test'".to_string()),
        ("env('AWS_SECRET_ACCESS_KEY')", "'test'".to_string()),
        ("env('AWS_ENDPOINT_URL')", format!("'{}'", moto.endpoint)),
    ] {
        app.edit_config("queue.php", from, &to);
    }
    app.dispatch(serde_json::json!([{"kind": "plain", "tag": "on-sqs", "data": {"n": 7}}]));
    let queued = s.redis.lrange("laravel_database_queues:default");
    assert_eq!(queued.len(), 1, "{queued:?}");
    let redis_payload = &queued[0];
    let start = redis_payload.find(",\"id\":\"").expect("an id");
    let end = redis_payload.find("\"attempts\":0").expect("attempts") + "\"attempts\":0".len();
    let body = format!("{}{}", &redis_payload[..start], &redis_payload[end..]);
    let parsed: serde_json::Value = serde_json::from_str(&body).expect(&body);
    assert_eq!(parsed["displayName"], "App\\Jobs\\PlainJob");
    assert!(parsed.get("id").is_none() && parsed.get("attempts").is_none());
    let id = moto.send(&url, &body, 0);

    let config = app.config_from_app(&s, common::laravel::Transport::PerJob);
    let flag = app.app_flag();
    s.run(&config, &["sqs", &flag, "--stop-when-empty", "--sleep=0"]);
    let runs = app.events("handle", "on-sqs");
    assert_eq!(runs.len(), 1, "{:?}", app.records());
    let run = &runs[0];
    assert_eq!(run["attempt"], 1, "{run}");
    assert_eq!(run["data"], serde_json::json!({"n": 7}), "{run}");
    assert_eq!(run["runner"], "LaravelWorker\\BridgeJob", "{run}");
    assert_eq!(run["queue"], "default", "the name, not the URL: {run}");
    assert_eq!(moto.counts(&url), (0, 0, 0), "message {id} deleted");
    assert!(s.failed_rows().is_empty());
}

/// The Redis parity tests' job kinds on SQS, beside the ones above: a job
/// that throws is released with its payload's `backoff` as the visibility
/// (not received again before it), and fails on its payload's `maxTries`
/// (2, whatever `--tries` says); a job whose handler asks to be released
/// with a delay is held back that long, as `release($delay)`.
#[test]
fn backoff_max_tries_and_release_delay_on_sqs() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let scene = Scene::new(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_ATTEMPT $(date +%s.%N)\" >> \"$DIR/ran\"\n\
         [ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n\
         case \"$LARAVEL_WORKER_JOB_NAME\" in\n\
         *Throws) exit 3;;\n\
         *Later) [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ] && \\\n\
         echo '{\"action\":\"release\",\"delay\":2}' > \"$LARAVEL_WORKER_RESULT\";;\n\
         esac\n\
         true",
    );
    let throws = payload("Throws", "u-throws")
        .replace(r#""maxTries":null"#, r#""maxTries":2"#)
        .replace(r#""backoff":null"#, r#""backoff":"2""#);
    moto.send(&url, &throws, 0);
    moto.send(&url, &payload("Later", "u-later"), 0);
    // Not --stop-when-empty: a released message is in flight, and the
    // queue looks empty until it is visible again (as to queue:work).
    let mut d = scene.work(&["--sleep=1", "--tries=5"]);
    wait_for("every run", || scene.ran().len() == 5);
    wait_for("the queue to empty", || moto.counts(&url) == (0, 0, 0));
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
    let ran = scene.ran();
    let runs = |name: &str| -> Vec<(String, f64)> {
        ran.iter()
            .filter(|l| l.contains(name))
            .map(|l| {
                let parts: Vec<&str> = l.split(' ').collect();
                (
                    format!("{} {}", parts[0], parts[2]),
                    parts[3].parse().unwrap(),
                )
            })
            .collect()
    };
    let throws = runs("Throws");
    assert_eq!(
        throws.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(),
        vec!["run 1", "run 2", "failed 2"],
        "failed on maxTries 2: {ran:?}"
    );
    assert!(
        throws[1].1 - throws[0].1 >= 2.0,
        "the 2 s backoff: {throws:?}"
    );
    let later = runs("Later");
    assert_eq!(
        later.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>(),
        vec!["run 1", "run 2"],
        "{ran:?}"
    );
    assert!(
        later[1].1 - later[0].1 >= 2.0,
        "released for 2 s: {later:?}"
    );
    let rows = scene.failed.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].uuid, "u-throws");
}

/// `restart`, `pause`/`resume` and maxExceptions through the app's cache
/// store (Redis) on SQS: the exception counter `job-exceptions:{uuid}`
/// fails a job on its `maxExceptions` (2, with `maxTries` 10) and is
/// forgotten; a queue paused as `queue:pause sqs:default` writes it is
/// not served (its message stays visible) until resumed; `restart`
/// stops a running worker.
#[test]
fn restart_pause_and_max_exceptions_through_the_cache_on_sqs() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let mut cache = None;
    let scene = Scene::with_cache(
        &moto,
        30,
        "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_ATTEMPT\" >> \"$DIR/ran\"\n\
         case \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME\" in \"run \"*Flaky) exit 3;; esac",
        |dir| {
            let store = AppCache::start(true, dir);
            let toml = store.toml();
            cache = Some(store);
            toml
        },
    );
    let cache = cache.unwrap();
    let config = scene.config.to_str().unwrap();

    let flaky = payload("Flaky", "u-flaky")
        .replace(r#""maxTries":null"#, r#""maxTries":10"#)
        .replace(r#""maxExceptions":null"#, r#""maxExceptions":2"#);
    moto.send(&url, &flaky, 0);
    scene
        .work(&["--stop-when-empty", "--sleep=0"])
        .expect_stop(0, "empty");
    assert_eq!(
        scene.ran(),
        vec![
            "run App\\Jobs\\Flaky 1",
            "run App\\Jobs\\Flaky 2",
            "failed App\\Jobs\\Flaky 2"
        ]
    );
    assert!(
        !cache.has("job-exceptions:u-flaky"),
        "the counter forgotten"
    );
    assert_eq!(scene.failed.rows()[0].uuid, "u-flaky");

    Daemon::run(&["--config", config, "pause", "sqs:default"], &[]).expect_exit(0);
    assert!(cache.has("illuminate:queue:paused:sqs:default"));
    moto.send(&url, &payload("Held", "u-held"), 0);
    scene
        .work(&["--stop-when-empty", "--sleep=0"])
        .expect_stop(0, "empty");
    assert_eq!(scene.ran().len(), 3, "nothing ran while paused");
    assert_eq!(moto.counts(&url), (1, 0, 0), "the message left visible");
    Daemon::run(&["--config", config, "resume", "sqs:default"], &[]).expect_exit(0);

    let mut d = scene.work(&["--sleep=1"]);
    wait_for("the resumed queue to be served", || scene.ran().len() == 4);
    Daemon::run(&["--config", config, "restart"], &[]).expect_exit(0);
    d.expect_stop(0, "restart_signal");
    assert_eq!(scene.ran()[3], "run App\\Jobs\\Held 1");
    assert_eq!(moto.counts(&url), (0, 0, 0));
}

/// The book's KEDA recipe for SQS (`aws-sqs-queue`, its default formula:
/// `ApproximateNumberOfMessages + ApproximateNumberOfMessagesNotVisible`)
/// counts what the worker's backlog gauge counts for the queue: messages
/// visible and in flight, not those sent with a delay. The queue is paused
/// so that the worker takes nothing meanwhile.
#[test]
fn the_keda_trigger_counts_the_backlog_the_gauge_counts() {
    let Some(moto) = Moto::start() else { return };
    let url = moto.create_queue("default", 30);
    let mut cache = None;
    let scene = Scene::with_cache(&moto, 30, "true", |dir| {
        let store = AppCache::start(true, dir);
        let toml = format!(
            "{}\n\n[metrics]\nlisten = \"127.0.0.1:0\"\nbacklog_interval = 1",
            store.toml()
        );
        cache = Some(store);
        toml
    });
    let config = scene.config.to_str().unwrap();
    Daemon::run(&["--config", config, "pause", "sqs:default"], &[]).expect_exit(0);
    moto.send(&url, &payload("Running", "u-running"), 0);
    assert_eq!(moto.receive(&url, 600).len(), 1, "one in flight");
    for n in 0..2 {
        moto.send(&url, &payload("Ready", &format!("u-{n}")), 0);
    }
    moto.send(&url, &payload("Later", "u-later"), 600);
    let (visible, delayed, in_flight) = moto.counts(&url);
    assert_eq!((visible, delayed, in_flight), (2, 1, 1));
    let keda = visible + in_flight;

    let mut d = scene.work(&["--sleep=0.1"]);
    let address = d.metrics_address();
    let gauge = |text: &str, name: &str| -> Option<u64> {
        let needle = format!("laravel_worker_queue_{name}{{queue=\"default\"}} ");
        common::http_server::metric(text, &needle)?.parse().ok()
    };
    let mut text = String::new();
    common::wait_until("the backlog gauge", || {
        text = common::http_server::get(&address, "/metrics").1;
        gauge(&text, "backlog").is_some()
    });
    assert_eq!(gauge(&text, "backlog"), Some(keda), "{text}");
    assert_eq!(moto.counts(&url), (visible, delayed, in_flight), "paused");
    d.signal(nix::sys::signal::Signal::SIGTERM);
    d.expect_exit(0);
    drop(cache);
}

/// A config file for a worker on SQS with `sqs` as its `[sqs]` section,
/// no failed store, no cache and a handler that does nothing.
fn sqs_config(dir: &Path, name: &str, sqs: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "[queue]\nconnection = \"sqs\"\n\n[sqs]\n{sqs}\n\n[failed]\ndriver = \"null\"\n\n\
             [cache]\nstore = \"none\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"true\"]\n"
        ),
    )
    .unwrap();
    path
}

/// Issue 47, 12: settings every SQS call would fail on are refused at
/// start, exit status 1, the message naming the key: a user name or
/// password in the prefix or endpoint (never shown), an empty or non-URL
/// prefix, an empty or invalid region, an `ftp://` endpoint, a key
/// without its secret, a missing `AWS_PROFILE` when the default chain
/// would read it. None needs SQS: nothing is called.
#[test]
fn sqs_settings_every_call_would_fail_on_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let ok = "prefix = \"http://127.0.0.1:9/123456789012\"\nendpoint = \"http://127.0.0.1:9\"";
    let keys = "key = \"test\"\nsecret = \"test\"";
    let cases = [
        (
            "prefix = \"https://lw:Sup3rPw@sqs.us-east-1.amazonaws.com/1\"".to_string(),
            "[sqs] prefix (SQS_PREFIX) holds a user name or password",
        ),
        (
            "prefix = \"http://127.0.0.1:9/1\"\nendpoint = \"http://lw:Sup3r/Pw@127.0.0.1:9\""
                .to_string(),
            "[sqs] endpoint (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL) holds a user name",
        ),
        (
            "prefix = \"\"".to_string(),
            "[sqs] prefix (SQS_PREFIX) is empty",
        ),
        ("prefix = \"queues\"".to_string(), "is not a URL"),
        (format!("{ok}\nregion = \"\""), "AWS_DEFAULT_REGION"),
        (
            format!("{ok}\nregion = \"us east 1\""),
            "is not an AWS region",
        ),
        (
            "prefix = \"http://127.0.0.1:9/1\"\nendpoint = \"ftp://127.0.0.1:9\"".to_string(),
            "the scheme must be http:// or https://",
        ),
        (
            format!("{ok}\nkey = \"AKIALW\""),
            "[sqs] key (AWS_ACCESS_KEY_ID) is set without [sqs] secret",
        ),
    ];
    for (i, (sqs, says)) in cases.iter().enumerate() {
        let sqs = if sqs.contains("key =") || sqs.contains("secret =") {
            sqs.clone()
        } else {
            format!("{sqs}\n{keys}")
        };
        let config = sqs_config(dir.path(), &format!("c{i}.toml"), &sqs);
        let mut d = Daemon::work(&config, &["--stop-when-empty"]);
        let code = d.code();
        let said = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
        assert_eq!(code, Some(1), "{sqs}:\n{said}");
        assert!(said.contains(says), "{sqs}: no {says:?} in:\n{said}");
        assert!(
            !said.contains("Sup3r"),
            "{sqs}: the password is in:\n{said}"
        );
    }

    // SQS_PREFIX from the environment, with a password.
    let config = sqs_config(dir.path(), "env.toml", keys);
    let mut d = Daemon::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "work",
            "--stop-when-empty",
        ],
        &[(
            "SQS_PREFIX",
            "https://lw:Sup3rPw@sqs.us-east-1.amazonaws.com/1",
        )],
    );
    let code = d.code();
    let said = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("SQS_PREFIX") && !said.contains("Sup3r"),
        "{said}"
    );

    // No key and secret: the default chain would read AWS_PROFILE's profile.
    let config = sqs_config(dir.path(), "profile.toml", ok);
    let mut d = Daemon::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "work",
            "--stop-when-empty",
        ],
        &[
            ("AWS_PROFILE", "lw-no-such-profile"),
            (
                "AWS_CONFIG_FILE",
                dir.path().join("aws-config").to_str().unwrap(),
            ),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                dir.path().join("aws-credentials").to_str().unwrap(),
            ),
        ],
    );
    let code = d.code();
    let said = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("AWS_PROFILE=\"lw-no-such-profile\" names a profile that is in neither"),
        "{said}"
    );
}

/// Issue 47, 12: an error of the SDK is one readable line (the cause of a
/// failed connection), never its debug dump of the request and answer,
/// and the queue is named once ("SQS …", not "SQS SQS …").
#[test]
fn sqs_errors_are_one_readable_line() {
    let Some(moto) = Moto::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let refusing = format!("http://127.0.0.1:{}", common::redis_topologies::free_port());
    let config = sqs_config(
        dir.path(),
        "errors.toml",
        &format!(
            "prefix = \"{}\"\nendpoint = \"{refusing}\"\nkey = \"test\"\nsecret = \"test\"",
            moto.prefix()
        ),
    );
    let mut d = Daemon::start(
        &[
            "--config",
            config.to_str().unwrap(),
            "work",
            "--queue=no-such-queue",
            "--sleep=1",
        ],
        &[],
    );
    let line = d.wait_log(&["cannot reserve a job"]);
    let _ = nix::sys::signal::kill(d.pid(), nix::sys::signal::Signal::SIGTERM);
    d.wait_exit();
    assert!(line.contains("Connection refused"), "{line}");
    assert!(line.len() < 700, "{} characters: {line}", line.len());
    for dump in [
        "SQS SQS",
        "ServiceError",
        "DispatchFailure(",
        "raw:",
        "Os {",
    ] {
        assert!(!line.contains(dump), "{dump:?} in {line}");
    }
}

/// Issue 44: a queue SQS does not have is refused at start, exit status
/// 1, in one line naming the queue, its URL and what to check (before:
/// every poll logged AWS's error, and `--stop-when-empty` ended as a lost
/// connection after 5 polls). Laravel never creates an SQS queue.
#[test]
fn a_missing_sqs_queue_is_refused_at_start_in_one_line() {
    let Some(moto) = Moto::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    moto.create_queue("default", 30);
    let config = sqs_config(
        dir.path(),
        "missing.toml",
        &format!(
            "prefix = \"{}\"\nendpoint = \"{}\"\nkey = \"test\"\nsecret = \"test\"",
            moto.prefix(),
            moto.endpoint
        ),
    );
    let mut d = Daemon::run(
        &[
            "--config",
            config.to_str().unwrap(),
            "work",
            "--queue=default,no-such-queue",
            "--stop-when-empty",
        ],
        &[],
    );
    d.expect_exit(1);
    let log = d.stderr_text();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("does not exist"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    let url = format!("{}/no-such-queue", moto.prefix());
    assert!(
        said[0].contains("\"no-such-queue\"") && said[0].contains(&url),
        "{}",
        said[0]
    );
    assert!(said[0].contains("create it"), "{}", said[0]);
    assert!(!log.contains("lost_connection"), "{log}");
    assert!(said[0].len() < 700, "{}", said[0]);
}
