//! The worker on Amazon SQS (issue 28), end to end: the real binary on a
//! private `moto` server (skipped with a printed reason where moto is not
//! installed), real handler processes and a SQLite `failed_jobs` table.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Daemon;
use common::databases::FailedDb;
use common::sqs::Moto;

/// A payload exactly as Laravel's `createPayload` writes it for SQS: no
/// `id`, no `attempts` (SQS counts receives; the job id is the
/// `MessageId`).
fn payload(name: &str, uuid: &str) -> String {
    format!(
        r#"{{"uuid":"{uuid}","displayName":"App\\Jobs\\{name}","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"maxExceptions":null,"failOnTimeout":false,"backoff":null,"timeout":null,"retryUntil":null,"data":{{"commandName":"App\\Jobs\\{name}","command":"O:0:{{}}"}}}}"#
    )
}

/// A scratch directory with a config file for a worker on `moto`
/// (visibility timeout `visibility` s) with failed jobs in a SQLite
/// `failed_jobs` table, and one handler for every job: `script`, a shell
/// script run with `DIR` set to the directory.
struct Scene {
    dir: tempfile::TempDir,
    config: PathBuf,
    failed: FailedDb,
}

impl Scene {
    fn new(moto: &Moto, visibility: u64, script: &str) -> Scene {
        let dir = tempfile::Builder::new()
            .prefix("lw-sqs-")
            .tempdir()
            .unwrap();
        let failed = FailedDb::sqlite(&dir.path().join("failed.sqlite"));
        let script_path = dir.path().join("handler.sh");
        std::fs::write(
            &script_path,
            format!(
                "#!/bin/sh\nDIR='{}'\ncat > /dev/null\n{script}\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let toml = format!(
            "[queue]\nconnection = \"sqs\"\nretry_after = {visibility}\n\n\
             [sqs]\nprefix = \"{}\"\nendpoint = \"{}\"\nkey = \"test\"\nsecret = \"test\"\n\n\
             [failed]\ndriver = \"database-uuids\"\nurl = \"{}\"\n\n\
             [cache]\nstore = \"none\"\n\n[[handlers]]\nmatch = \"*\"\ncommand = [\"sh\", \"{}\"]\n",
            moto.prefix(),
            moto.endpoint,
            failed.url(),
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
        let config = self.config.to_str().unwrap();
        Daemon::start(&[&["--config", config, "work"][..], args].concat(), &[])
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
