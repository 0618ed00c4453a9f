//! The parity scenario with `php artisan queue:work` of the real Laravel
//! 8.83: its job kinds ([`scenario`]), dispatched by the app through its
//! bus, run round by round once by `queue:work CONNECTION` and once by the
//! daemon (through the PHP bridge, every setting read from the app), each
//! on its own queue server and Redis. The Redis queue's test
//! (`laravel_parity.rs`) compares what it leaves in Redis; a queue whose
//! jobs the test can list one by one (a database's `jobs` rows, a
//! beanstalkd's jobs) implements [`QueueUnderParity`] and is compared by
//! [`parity`]: after every round both workers leave the same job log, the
//! same jobs (queue, attempts, reserved, delay within a second), the same
//! `failed_jobs` rows and the same keys in the app's Redis cache (unique
//! locks, `job-exceptions:` counters).
//!
//! The named difference holds on every queue: the failed row of a job
//! whose `retryUntil` has passed (`too-late`) ends, in queue:work's, with
//! PHP's ` in file:line`, which the worker, having no PHP frame, cannot
//! write. What differs between two runs but not between the workers is
//! masked: the failed rows' uuid (and Redis's `id`), the scene's
//! directory in exception lines.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::laravel::{App, Transport};
use super::{RedisServer, Scene};

/// Both runs use one APP_KEY, so that serialized closures (chain catch
/// callbacks, signed with it) are the same bytes.
pub const APP_KEY: &str = "parityparityparityparityparity32";

/// Tags whose results differ by a known gap (see the module's doc).
pub const DIFFERENT: &[&str] = &["too-late"];

/// The scenario's jobs, as `test:dispatch` specs: every kind of job the
/// test app has but the timeout (a deliberate difference of its own).
pub fn scenario() -> Value {
    json!([
        {"kind": "plain", "tag": "plain", "data": {"n": 1}},
        {"kind": "string", "tag": "str", "data": {"x": "y"}},
        {"kind": "flaky", "tag": "ok", "failures": 1},
        {"kind": "flaky", "tag": "doomed", "failures": 9},
        {"kind": "string", "tag": "str-fail", "data": {"fail": true}},
        {"kind": "releasing", "tag": "rel", "release": 30},
        {"kind": "deadline", "tag": "deadline", "seconds": 3600, "failures": 1},
        {"kind": "deadline", "tag": "too-late", "seconds": -10, "failures": 0},
        {"kind": "max-exceptions", "tag": "max-ex"},
        {"kind": "unique", "tag": "uniq", "key": "k"},
        {"kind": "unique", "tag": "uniq-fail", "key": "k2", "fail": true},
        {"kind": "chain", "tag": "chain", "steps": ["a", "b"]},
        {"kind": "chain", "tag": "chain-fail", "steps": ["a", "b"], "fail": "a"},
        {"kind": "event", "tag": "order"},
        {"kind": "notification", "tag": "invoice"},
        {"kind": "encrypted", "tag": "enc", "secret": "s"},
        {"kind": "self-failing", "tag": "self"},
        {"kind": "plain", "tag": "late", "delay": 40},
    ])
}

/// The first line of both workers' failed row for the job whose
/// `retryUntil` has passed (queue:work's adds ` in file:line`): the same
/// class, in 8.x's wording.
pub const TOO_LATE: &str = "Illuminate\\Queue\\MaxAttemptsExceededException: App\\Jobs\\DeadlineJob has been attempted too many times or run too long. The job may have previously timed out.";

/// The worker options of both runs.
pub const ARGS: &[&str] = &["--stop-when-empty", "--sleep=0", "--tries=2", "--backoff=4"];

/// The tags of the scenario's jobs that end in `failed_jobs`, sorted.
pub const FAILED_TAGS: &[&str] = &[
    "chain-fail.a",
    "doomed",
    "max-ex",
    "self",
    "str-fail",
    "uniq-fail",
];

/// A round's failed_jobs rows: tag → (connection, queue, first exception
/// line, payload with its ids masked).
pub type FailedRows = BTreeMap<String, (String, String, String, String)>;

/// The test tag inside a payload (string job data, or the serialized
/// command's `tag` property). The test jobs declare `tag` last (the
/// RecordsRuns trait, used last), so it is the last `tag` in the text:
/// earlier ones belong to chained jobs and closures nested in it.
pub fn tag_of(payload: &Value) -> String {
    if let Some(tag) = payload["data"]["tag"].as_str() {
        return tag.to_string();
    }
    let command = payload["data"]["command"].as_str().unwrap();
    let rest = &command[command.rfind("s:3:\"tag\";s:").unwrap() + 12..];
    let rest = &rest[rest.find(':').unwrap() + 2..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// A round's job log records, without what changes from run to run
/// (time, pid, runner), sorted: the workers run jobs in parallel.
pub fn round_records(new: &[Value]) -> Vec<String> {
    let mut records: Vec<String> = new
        .iter()
        .map(|r| {
            let mut r = r.clone();
            for volatile in ["time", "pid", "runner"] {
                r.as_object_mut().unwrap().remove(volatile);
            }
            r.to_string()
        })
        .collect();
    records.sort();
    records
}

/// The keys of databases 0 and 1 (queue and cache), each
/// `job-exceptions:<uuid>` key's uuid masked.
pub fn cache_keys(redis: &RedisServer) -> (Vec<String>, Vec<String>) {
    let mask = |keys: Vec<String>| -> Vec<String> {
        keys.into_iter()
            .map(|k| match k.find("job-exceptions:") {
                Some(at) => format!("{}job-exceptions:<uuid>", &k[..at]),
                None => k,
            })
            .collect()
    };
    (mask(redis.keys(0)), mask(redis.keys(1)))
}

/// Drops the named differences ([`DIFFERENT`]) from a round's job
/// records and failed rows, returning them apart.
pub fn split_named_differences(records: &mut Vec<String>, failed: &mut FailedRows) -> Vec<String> {
    let mut apart = vec![];
    records.retain(|r| {
        let v: Value = serde_json::from_str(r).unwrap();
        let different = v["event"] == "failed" && DIFFERENT.contains(&v["tag"].as_str().unwrap());
        if different {
            apart.push(r.clone());
        }
        !different
    });
    for tag in DIFFERENT {
        if let Some(row) = failed.remove(*tag) {
            apart.push(format!("{tag}: {}", row.2));
        }
    }
    apart
}

/// One job a queue holds after a round.
#[derive(Debug, Clone)]
pub struct JobLeft {
    /// Its payload, as stored.
    pub payload: String,
    /// Its queue (a table's `queue` column, a tube).
    pub queue: String,
    /// Its attempts so far (a row's `attempts`, the server's `reserves`).
    pub attempts: i64,
    /// Whether it is reserved.
    pub reserved: bool,
    /// Seconds it was last pushed or released with (its delay).
    pub delay: i64,
}

/// A queue the parity scenario runs on, whose jobs the test lists one by
/// one.
pub trait QueueUnderParity {
    /// Every job the queue holds.
    fn jobs_left(&self) -> Vec<JobLeft>;
    /// Makes every job it holds available now (between rounds).
    fn make_due(&self);
}

/// What one round left behind, normalized so that two runs compare.
#[derive(Debug, PartialEq)]
pub struct Round {
    /// Everything the jobs recorded, without times, pids and the class
    /// that ran the job.
    pub records: Vec<String>,
    /// The jobs left: tag → (queue, attempts, reserved).
    pub rows: BTreeMap<String, (String, i64, bool)>,
    /// Each job's delay, seconds.
    pub delays: BTreeMap<String, i64>,
    /// failed_jobs: tag → (connection, queue, first exception line,
    /// payload with the uuid masked).
    pub failed: FailedRows,
    /// The keys of Redis DB 0 (locks) and DB 1 (the cache), uuids masked.
    pub keys: (Vec<String>, Vec<String>),
}

/// A run's side of the scenario: its scene, app and queue.
pub struct Run<'a> {
    pub s: &'a Scene,
    pub app: &'a App,
    pub queue: &'a dyn QueueUnderParity,
    pub failed: &'a super::databases::FailedDb,
}

impl Run<'_> {
    fn observe(&self, previous: usize) -> Round {
        let scene = self.app.scene().display().to_string();
        let all = self.app.records();
        let records = round_records(&all[previous..]);
        let (mut rows, mut delays) = (BTreeMap::new(), BTreeMap::new());
        for job in self.queue.jobs_left() {
            let tag = tag_of(&serde_json::from_str(&job.payload).unwrap());
            delays.insert(tag.clone(), job.delay);
            let left = (job.queue, job.attempts, job.reserved);
            assert!(
                rows.insert(tag.clone(), left).is_none(),
                "two jobs of {tag}"
            );
        }
        let failed = self
            .failed
            .rows()
            .into_iter()
            .map(|row| {
                let p: Value = serde_json::from_str(&row.payload).unwrap();
                let first_line = row.exception.lines().next().unwrap_or_default();
                let first_line = first_line.replace(&scene, "<scene>");
                let payload = row.payload.replace(&row.uuid, "<uuid>");
                (tag_of(&p), (row.connection, row.queue, first_line, payload))
            })
            .collect();
        Round {
            records,
            rows,
            delays,
            failed,
            keys: cache_keys(&self.s.redis),
        }
    }

    /// Dispatches the scenario and runs it in three rounds on
    /// `connection` with `php` (`queue:work`) or the daemon, making every
    /// job left available between rounds.
    pub fn rounds(&self, connection: &str, php: bool) -> Vec<Round> {
        self.app.set_env("APP_KEY", APP_KEY);
        self.app.dispatch(scenario());
        let config = self.app.config_from_app(self.s, Transport::Persistent(1));
        let flag = self.app.app_flag();
        let mut rounds = vec![];
        for _ in 0..3 {
            let before = self.app.records().len();
            if php {
                let mut worker = self.app.queue_work_on(connection, ARGS);
                let status = worker.wait();
                assert!(
                    status.success(),
                    "queue:work: {status}\n{}",
                    worker.output()
                );
            } else {
                let args = [ARGS, &[connection, flag.as_str()]].concat();
                self.s.work(&config, &args).expect_stop(0, "empty");
            }
            rounds.push(self.observe(before));
            self.queue.make_due();
        }
        rounds
    }
}

/// Compares the rounds of `queue:work` (`php`) and the daemon (`ours`) on
/// `connection` (`what` names the queue in messages), and checks that the
/// scenario did what it is meant to: the first round left released and
/// delayed jobs, the last drained them, and the named difference is as
/// it is today.
pub fn parity(mut php: Vec<Round>, mut ours: Vec<Round>, connection: &str, what: &str) {
    let (mut php_apart, mut our_apart) = (vec![], vec![]);
    for (i, (p, o)) in php.iter_mut().zip(ours.iter_mut()).enumerate() {
        php_apart.extend(split_named_differences(&mut p.records, &mut p.failed));
        our_apart.extend(split_named_differences(&mut o.records, &mut o.failed));
        assert_eq!(
            p.delays.keys().collect::<Vec<_>>(),
            o.delays.keys().collect::<Vec<_>>(),
            "{what}, round {i}: the jobs left"
        );
        for (tag, delay) in &p.delays {
            let ours = o.delays[tag];
            assert!(
                (delay - ours).abs() <= 1,
                "{what}, round {i}: {tag} available after {delay} s vs {ours} s"
            );
        }
        assert_eq!(p.records, o.records, "{what}, round {i}: job records");
        assert_eq!(p.rows, o.rows, "{what}, round {i}: jobs left");
        assert_eq!(p.failed, o.failed, "{what}, round {i}: failed_jobs");
        assert_eq!(p.keys, o.keys, "{what}, round {i}: Redis keys");
    }
    let first: Vec<&String> = php[0].rows.keys().collect();
    assert!(first.contains(&&"rel".to_string()), "{what}: {first:?}");
    assert!(first.contains(&&"late".to_string()), "{what}: {first:?}");
    assert_eq!(php[0].rows["rel"], ("default".to_string(), 1, false));
    // The flaky job: its own $backoff ([2, 5]: 2 s after its first
    // failure) over --backoff=4.
    for (tag, delay) in [("rel", 30), ("late", 40), ("ok", 2)] {
        let got = php[0].delays[tag];
        assert!((got - delay).abs() <= 1, "{what}: {tag} delayed {got} s");
    }
    assert!(php[2].rows.is_empty(), "{what}: drained: {:?}", php[2].rows);
    let failed_tags: Vec<&str> = php[2].failed.keys().map(String::as_str).collect();
    assert_eq!(failed_tags, FAILED_TAGS, "{what}");
    for (_, (conn, queue, _, _)) in php[2].failed.iter() {
        assert_eq!((conn.as_str(), queue.as_str()), (connection, "default"));
    }
    // retryUntil passed: the same class and wording; PHP's line adds the
    // file and line it was thrown at.
    let row = |apart: &[String]| {
        apart
            .iter()
            .find(|r| r.starts_with("too-late: "))
            .cloned()
            .unwrap_or_else(|| panic!("{what}: no too-late row in {apart:?}"))
    };
    let message = format!("too-late: {TOO_LATE}");
    let php_row = row(&php_apart);
    assert!(
        php_row.starts_with(&format!("{message} in ")),
        "{what}: queue:work's row: {php_row}"
    );
    assert_eq!(row(&our_apart), message, "{what}: our row");
    let records: usize = php.iter().map(|r| r.records.len()).sum();
    eprintln!(
        "{what}: {records} job records, jobs left after each round {:?}, {} failed rows, \
         the same for queue:work and the daemon",
        php.iter().map(|r| r.rows.len()).collect::<Vec<_>>(),
        php[2].failed.len() + 1
    );
}
