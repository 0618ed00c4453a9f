//! The worker loop's throughput paths (issue 7), on the real binary, a
//! private redis-server and real handler processes:
//!
//! - batch reservation: up to one job per free slot in one pop, from the
//!   first queue (in `--queue` order) that has any, so priority holds;
//! - batch settlement: deletes and releases pipelined; a batch that Redis
//!   stalls on or loses never loses a job;
//! - migration at most once per second per queue, except right after a
//!   release with delay 0 by this worker;
//! - the cache signals (restart and pause keys) read at most every 250 ms
//!   while jobs keep coming, so a saturated worker still notices them;
//! - the idle wait with `block_for` unset: one BLPOP on every queue's
//!   `:notify` list for up to `--sleep`, which a push ends at once,
//!   SIGTERM cuts short, and after which a worker paused by SIGUSR2
//!   meanwhile takes nothing; a job of ours released with delay 0 during
//!   it ends it too.
//!
//! The machine running the tests is small and shared, so every assertion is
//! on the order of events (log lines, Redis state, client states) rather
//! than on times. Where a time bound remains, it is many times what the
//! path needs and well below what the old path would have taken.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Daemon, Handler, Job, QueueState, RedisServer, Scene, q, wait_until};
use nix::sys::signal::Signal;
use serde_json::json;

/// The restart key under the test config (cache prefix `laravel_cache`
/// with the Laravel ≤ 10 colon, after the connection prefix), in DB 1.
const RESTART_KEY: &str = "laravel_database_laravel_cache:illuminate:queue:restart";

/// The pause key of queue `default` on connection `redis` (`queue:pause
/// redis:default`), in DB 1.
const PAUSED_DEFAULT: &str = "laravel_database_laravel_cache:illuminate:queue:paused:redis:default";

/// Pushes `jobs` onto `queue` as Laravel does (payload, then a notify
/// token), a thousand per round trip.
fn push_all(s: &Scene, queue: &str, jobs: &[Job]) {
    let key = q(queue);
    let notify = format!("{key}:notify");
    let mut conn = s.redis.conn(0);
    for chunk in jobs.chunks(1000) {
        let mut pipe = redis::pipe();
        for job in chunk {
            pipe.rpush(&key, job.build())
                .ignore()
                .rpush(&notify, 1)
                .ignore();
        }
        let () = pipe.query(&mut conn).unwrap();
    }
}

/// Whether `redis-cli` runs; prints why a test skips when it does not.
fn redis_cli_available(test: &str) -> bool {
    let ok = Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("{test}: skipped, redis-cli is not installed (apt-get install redis-tools)");
    }
    ok
}

/// The lines of `CLIENT LIST` (every client of the server).
fn clients(s: &Scene) -> Vec<String> {
    let list: String = s.redis.cmd(&["CLIENT", "LIST"]);
    list.lines().map(str::to_string).collect()
}

/// Field `name` (`cmd`, `flags`, …) of one `CLIENT LIST` line.
fn client_field<'l>(line: &'l str, name: &str) -> &'l str {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or("")
}

/// Waits until some client is blocked (flag `b`) in command `cmd`.
fn wait_for_blocked_client(s: &Scene, cmd: &str) {
    wait_until(&format!("a client blocked in {cmd}"), || {
        clients(s)
            .iter()
            .any(|c| client_field(c, "cmd") == cmd && client_field(c, "flags").contains('b'))
    });
}

/// The job ids in `lines` (`MODE NAME ID ATTEMPT QUEUE`, as
/// `Scene::recording_script` writes them) with their attempts, in order.
fn runs_by_id(lines: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut runs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 5, "a job-log line: {line:?}");
        runs.entry(parts[2].to_string())
            .or_default()
            .push(parts[3].to_string());
    }
    runs
}

// ---------------------------------------------------------------------------
// 1. Batch reservation keeps queue priority
// ---------------------------------------------------------------------------

/// `--queue=high,default --concurrency=8` with 24 jobs on each queue: the
/// first pop asks for 8 jobs, later ones for as many slots as are free, and
/// whatever the batch sizes, every `high` job is reserved before any
/// `default` one.
///
/// The handler records, as it starts, how many jobs `high` still has
/// ready (`LLEN`, through redis-cli): a `default` job must never start
/// while that is not zero. The start order itself is the worker's
/// `starting` events (`--json`, Laravel's `JobProcessing`), emitted by the
/// loop as it hands each reserved job to its slot; the handler processes
/// of one batch are started at once, so the order in which they reach
/// their first line is the kernel's, not the worker's.
#[test]
fn batch_reservation_takes_every_high_job_before_any_default_job() {
    if !redis_cli_available("batch_reservation_takes_every_high_job_before_any_default_job") {
        return;
    }
    let s = Scene::new();
    let high_ready = q("high");
    let config = s
        .config()
        .recording(&format!(
            "echo \"$LARAVEL_WORKER_QUEUE $LARAVEL_WORKER_JOB_ID \
             $(redis-cli -s '{socket}' LLEN {high_ready})\" >> \"$DIR/starts.log\"",
            socket = s.redis.socket.display()
        ))
        .write();
    let high = Job::numbered("App\\Jobs\\High@handle", 24);
    let default = Job::numbered("App\\Jobs\\Default@handle", 24);
    push_all(&s, "high", &high);
    push_all(&s, "default", &default);

    let mut d = s.work(&config, &common::DRAIN_HIGH_THEN_DEFAULT);
    d.expect_stop(0, "empty");

    // Reservation order: all of high, then all of default, each queue in
    // its list order.
    let started: Vec<(String, String)> = d
        .events_with("starting")
        .iter()
        .map(|e| {
            (
                e["queue"].as_str().unwrap_or_default().to_string(),
                e["id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = high
        .iter()
        .map(|j| ("high".to_string(), j.id()))
        .chain(default.iter().map(|j| ("default".to_string(), j.id())))
        .collect();
    assert_eq!(started, expected, "the order the worker started jobs in");

    // No default job started while high had a job ready.
    let starts = std::fs::read_to_string(s.path("starts.log")).unwrap();
    let early: Vec<&str> = starts
        .lines()
        .filter(|l| l.starts_with("default ") && !l.ends_with(" 0"))
        .collect();
    assert!(
        early.is_empty(),
        "default jobs started while high had jobs ready (QUEUE ID LLEN): {early:?}"
    );

    // Each job ran once, on its own queue; nothing is left.
    let mut ran: Vec<String> = s.log();
    ran.sort();
    let mut lines: Vec<String> = high
        .iter()
        .map(|j| j.line("run", 1, "high"))
        .chain(default.iter().map(|j| j.line("run", 1, "default")))
        .collect();
    lines.sort();
    assert_eq!(ran, lines, "one run per job");
    s.assert_state(QueueState::empty());
}

// ---------------------------------------------------------------------------
// 2. A batch of settles that Redis stalls on or loses loses no job
// ---------------------------------------------------------------------------

/// Handler body: jobs named `…Early` wait for the gate `go.early`, the
/// others for `go.late`, on their first attempt only; later attempts run
/// straight through.
const TWO_GATES: &str = "if [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ]; then\n\
     case \"$LARAVEL_WORKER_JOB_NAME\" in\n\
       *Early) gate=go.early ;;\n\
       *) gate=go.late ;;\n\
     esac\n\
     while [ ! -f \"$DIR/$gate\" ]; do sleep 0.01; done\n\
     fi";

/// Four `Early` and four `Late` jobs on `default`, a worker at
/// `--concurrency=8` running all eight (each holding at its gate), with
/// `retry_after` in seconds and `args` added. Returns the scene, the
/// worker, and the two groups.
fn eight_gated_jobs(
    retry_after: i64,
    args: &[&str],
) -> (Scene, common::Daemon, Vec<Job>, Vec<Job>) {
    let s = Scene::new();
    let config = s
        .config()
        .retry_after(retry_after)
        .recording(TWO_GATES)
        .write();
    let early: Vec<Job> = (0..4).map(|_| Job::laravel8("App\\Jobs\\Early")).collect();
    let late: Vec<Job> = (0..4).map(|_| Job::laravel8("App\\Jobs\\Late")).collect();
    push_all(&s, "default", &early);
    push_all(&s, "default", &late);
    let mut all = vec!["--concurrency=8", "--tries=3", "--sleep=1"];
    all.extend_from_slice(args);
    let d = s.work(&config, &all);
    wait_until("all eight jobs to start", || s.log().len() == 8);
    (s, d, early, late)
}

/// Lets the `Early` jobs finish and waits until they are deleted, so only
/// the four `Late` reservations are left.
fn finish_early(s: &Scene) {
    s.touch("go.early");
    let reserved = format!("{}:reserved", q("default"));
    wait_until("the early jobs to be deleted", || {
        s.redis.zcard(&reserved) == 4
    });
}

/// Asserts that every `Early` job ran once, and every `Late` job ran once
/// unless its first settle was given up on (`given_up`) or found the
/// reservation gone (`gone`), in which case it was reclaimed after
/// `retry_after` and ran a second time, and only then.
fn assert_each_ended_once(
    s: &Scene,
    early: &[Job],
    late: &[Job],
    given_up: &BTreeSet<String>,
    gone: &BTreeSet<String>,
) {
    let runs = runs_by_id(&s.log());
    let mut expected = BTreeMap::new();
    for job in early {
        expected.insert(job.id(), vec!["1".to_string()]);
    }
    for job in late {
        let again = given_up.contains(&job.id()) || gone.contains(&job.id());
        let attempts: &[&str] = if again { &["1", "2"] } else { &["1"] };
        expected.insert(job.id(), attempts.iter().map(|a| a.to_string()).collect());
    }
    assert_eq!(runs, expected, "attempts run per job id");
    // Deleted, each of them: nothing ready, delayed, reserved or failed.
    s.assert_state(QueueState::empty());
}

/// The ids of the jobs the worker's log says `message` about.
fn ids_logged(d: &common::Daemon, message: &str) -> BTreeSet<String> {
    d.stderr_text()
        .lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| l.split(" id=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|id| id.trim_matches('"').to_string())
        .collect()
}

/// Redis stalls (`CLIENT PAUSE … WRITE`) while the deletes of eight jobs
/// that end together are on their way: the deletes wait in Redis (the test
/// sees a client blocked in ZREM) and go through when Redis resumes. Each
/// job runs once and is deleted.
///
/// Every slot stays busy until a delete is answered, so the loop sends no
/// pop meanwhile; and with `retry_after` at 90 s no lease renewal falls in
/// the window: the ZREMs are the first writes the pause holds on the
/// command connection.
#[test]
fn a_settle_batch_that_redis_stalls_on_goes_through_once() {
    let (s, mut d, early, late) = eight_gated_jobs(90, &["--stop-when-empty"]);
    let _: () = s.redis.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]);
    s.touch("go.early");
    s.touch("go.late");
    wait_for_blocked_client(&s, "zrem");
    let _: () = s.redis.cmd(&["CLIENT", "UNPAUSE"]);
    d.expect_stop(0, "empty");
    assert_each_ended_once(&s, &early, &late, &BTreeSet::new(), &BTreeSet::new());
}

/// Redis dies (SIGKILL) after the early jobs were deleted and before the
/// late ones finish; their batch of deletes fails, and so does every retry,
/// so the worker leaves them reserved. Redis comes back from its last
/// snapshot (taken just before it died, as the early deletes had landed);
/// the late jobs are reclaimed once `retry_after` has passed, run again
/// (attempt 2) and are deleted. Nothing is lost, nothing runs a third time.
#[test]
fn a_settle_batch_lost_with_redis_leaves_its_jobs_to_be_reclaimed() {
    // --max-jobs: 8 first runs and the 4 runs of the reclaimed jobs.
    let (s, mut d, early, late) = eight_gated_jobs(3, &["--max-jobs=12"]);
    finish_early(&s);
    let _: () = s.redis.cmd(&["SAVE"]);
    let Scene { dir, redis } = s;
    drop(redis);
    std::fs::write(dir.path().join("go.late"), "").unwrap();
    // Each late job's settle gives up after its tries.
    for job in &late {
        d.wait_log(&["could not be settled", &job.id()]);
    }
    let s = Scene {
        redis: RedisServer::start(dir.path()),
        dir,
    };
    d.expect_stop(0, "max_jobs");
    let given_up = ids_logged(&d, "could not be settled");
    let expected: BTreeSet<String> = late.iter().map(Job::id).collect();
    assert_eq!(given_up, expected, "the settles given up on");
    assert_each_ended_once(&s, &early, &late, &given_up, &BTreeSet::new());
}

/// As above, but Redis is back as soon as the first delete of the batch
/// has failed, while the worker still retries: each late job is deleted by
/// a retry, or, if its tries ran out first (or its reservation, restored
/// from the snapshot, expired before the retry), reclaimed and run once
/// more. Either way it ends exactly once, and the log says which way.
#[test]
fn redis_back_while_a_settle_batch_retries_ends_each_job_once() {
    let (s, mut d, early, late) = eight_gated_jobs(3, &[]);
    finish_early(&s);
    let _: () = s.redis.cmd(&["SAVE"]);
    let Scene { dir, redis } = s;
    drop(redis);
    std::fs::write(dir.path().join("go.late"), "").unwrap();
    d.wait_log(&["cannot delete the job in the queue"]);
    let s = Scene {
        redis: RedisServer::start(dir.path()),
        dir,
    };
    // Done when nothing is reserved, ready or delayed any more: a job
    // running or waiting for a retry of its settle is still reserved.
    wait_until("every job to be deleted", || {
        s.redis.keys(0).iter().all(|k| k.ends_with(":notify"))
    });
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    let given_up = ids_logged(&d, "could not be settled");
    let gone = ids_logged(&d, "the reservation was already gone");
    let late_ids: BTreeSet<String> = late.iter().map(Job::id).collect();
    assert!(
        given_up.is_subset(&late_ids) && gone.is_subset(&late_ids),
        "only late jobs can have lost a settle: given up {given_up:?}, gone {gone:?}"
    );
    assert_each_ended_once(&s, &early, &late, &given_up, &gone);
}

// ---------------------------------------------------------------------------
// 3. A release with delay 0 is picked up without waiting for a tick
// ---------------------------------------------------------------------------

/// A lone job that asks for a release with delay 0 (through the result
/// file) on attempts 1 to 9 and is done on attempt 10, run one at a time
/// with `--stop-when-empty`: the worker stops at the first poll that finds
/// nothing. Each release lands in `:delayed` at the current second while
/// the ready list is empty; the next poll must migrate it although a
/// migration already ran in that second (the loop turns many times a
/// second), or it finds nothing and stops with the job left behind. So all
/// ten attempts run, one after the other, and the job is deleted.
#[test]
fn a_release_with_delay_0_is_picked_up_by_the_next_poll() {
    let (s, config) = Scene::recording(
        "if [ \"$LARAVEL_WORKER_ATTEMPT\" -lt 10 ]; then\n\
           echo '{\"action\":\"release\",\"delay\":0}' > \"$LARAVEL_WORKER_RESULT\"\n\
         fi",
    );
    let job = Job::laravel8("App\\Jobs\\Again");
    s.push(&job);
    let mut d = s.run(
        &config,
        &["--stop-when-empty", "--sleep=0", "--tries=10", "--json"],
    );
    d.expect_stop(0, "empty");
    let expected: Vec<String> = (1..=10).map(|a| job.run_line(a)).collect();
    assert_eq!(s.log(), expected, "ten attempts, in order");
    // A release the job asked for is a `success` with result `released`,
    // as in Laravel; the tenth attempt deletes it.
    let results: Vec<(String, i64)> = d
        .events_with("success")
        .iter()
        .map(|e| {
            (
                e["result"].as_str().unwrap_or_default().to_string(),
                e["attempts"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    let expected: Vec<(String, i64)> = (1..=10)
        .map(|a| (if a < 10 { "released" } else { "deleted" }.to_string(), a))
        .collect();
    assert_eq!(results, expected, "results and attempts, in order");
    s.assert_state(QueueState::empty());
}

/// With `--concurrency=2` the loop does not wait for the running job: the
/// queue being empty, it waits on the notify lists for up to `--sleep`
/// (60 s here). A job released with delay 0 meanwhile goes to `:delayed`,
/// which has no notify token, so nothing would end that wait: the release
/// must migrate it at once (pushing its token), and attempt 2 starts long
/// before the 60 s are up (the harness waits 30 s at most).
#[test]
fn a_release_with_delay_0_ends_the_idle_wait_of_the_loop() {
    let (s, config) = Scene::recording(
        "if [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ]; then\n\
           while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done\n\
           echo '{\"action\":\"release\",\"delay\":0}' > \"$LARAVEL_WORKER_RESULT\"\n\
         else\n\
           touch \"$DIR/second\"\n\
         fi",
    );
    let job = Job::laravel8("App\\Jobs\\Again");
    s.push(&job);
    let mut d = s.work(&config, &["--concurrency=2", "--sleep=60", "--tries=2"]);
    s.wait_for_file("jobs.log");
    // The first attempt runs; the loop, with a slot free, waits in BLPOP.
    wait_for_blocked_client(&s, "blpop");
    s.touch("go");
    s.wait_for_file("second");
    assert_eq!(
        s.log(),
        vec![job.run_line(1), job.run_line(2)],
        "two attempts"
    );
    wait_until("the job to be deleted", || s.redis.keys(0).is_empty());
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    s.assert_state(QueueState::empty());
}

// ---------------------------------------------------------------------------
// 4. The restart and pause keys reach a saturated worker
// ---------------------------------------------------------------------------

/// How many no-op jobs the saturated worker is given.
const BACKLOG: usize = 20_000;

/// A scene whose handler is a warm sh process (4 of them) that logs
/// `QUEUE ID` per call and answers done at once; `BACKLOG` jobs on
/// `default`, returned in push order.
fn saturated_scene() -> (Scene, PathBuf, Vec<Job>) {
    let s = Scene::new();
    let script = s.script(
        "noop.sh",
        r#"while IFS= read -r line; do
  CALL=${line#{\"call\":}; CALL=${CALL%%,*}
  rest=${line#*\"id\":\"}; ID=${rest%%\"*}
  rest=${line#*\"queue\":\"}; QUEUE=${rest%%\"*}
  printf '%s %s\n' "$QUEUE" "$ID" >> "$LOG"
  printf '{"call":%s,"action":"done"}\n' "$CALL" >&3
done"#,
    );
    let config = s
        .config()
        .handler(Handler::command(&script).persistent().processes(4))
        .write();
    let jobs: Vec<Job> = (0..BACKLOG)
        .map(|i| Job::string("App\\Jobs\\Noop@handle", json!({ "i": i })))
        .collect();
    push_all(&s, "default", &jobs);
    (s, config, jobs)
}

/// Waits until the worker has taken at least `n` jobs from `default`.
fn wait_taken(s: &Scene, n: usize) {
    let ready = q("default");
    wait_until(&format!("{n} jobs to be taken"), || {
        usize::try_from(s.redis.llen(&ready)).unwrap_or(0) <= BACKLOG - n
    });
}

/// The `QUEUE ID` lines of the job log, as (queue, id).
fn noop_calls(s: &Scene) -> Vec<(String, String)> {
    s.log()
        .iter()
        .map(|l| {
            let (queue, id) = l.split_once(' ').expect("QUEUE ID lines");
            (queue.to_string(), id.to_string())
        })
        .collect()
}

/// Asserts that the jobs left on `default` are the last `left` of `jobs`,
/// untouched and in order, each with its notify token; that the others ran
/// exactly once each (they are the first ones: pops take from the head);
/// and that nothing is reserved or delayed.
fn assert_head_ran_tail_left(s: &Scene, jobs: &[Job], ran_elsewhere: &[(String, String)]) {
    let ready = s.redis.lrange(&q("default"));
    let left = ready.len();
    let tail: Vec<String> = jobs[jobs.len() - left..].iter().map(Job::build).collect();
    assert!(
        ready == tail,
        "the jobs left are the last {left}, untouched"
    );
    assert_eq!(
        s.redis.llen(&format!("{}:notify", q("default"))),
        i64::try_from(left).unwrap(),
        "one notify token per job left"
    );
    let mut ran = noop_calls(s);
    ran.retain(|call| !ran_elsewhere.contains(call));
    let mut ran_ids: Vec<String> = ran
        .into_iter()
        .map(|(queue, id)| {
            assert_eq!(queue, "default", "a call of {id}");
            id
        })
        .collect();
    ran_ids.sort();
    let mut taken: Vec<String> = jobs[..jobs.len() - left].iter().map(Job::id).collect();
    taken.sort();
    assert!(
        ran_ids == taken,
        "the first {} jobs ran once each ({} calls)",
        taken.len(),
        ran_ids.len()
    );
    let mut keys = s.redis.keys(0);
    keys.retain(|k| !k.ends_with(":notify") && *k != q("default"));
    assert_eq!(keys, Vec::<String>::new(), "nothing reserved or delayed");
}

/// `queue:restart` while 16 slots are kept busy by a backlog of 20,000
/// no-op jobs: the worker reads the restart key at most every 250 ms while
/// jobs keep coming (never less often), so it stops (exit 0,
/// `restart_signal`) with most of the backlog still queued, after settling
/// what it had taken. Before that bound existed it read the key before each
/// job; a worker that never read it while busy would run the whole backlog
/// first, and this test would find nothing left.
#[test]
fn the_restart_key_stops_a_saturated_worker() {
    let (s, config, jobs) = saturated_scene();
    let mut d = s.work(&config, &["--concurrency=16", "--sleep=0"]);
    // Saturated from the first batch; a few hundred calls in, the worker
    // has read the key at start long before this write.
    wait_taken(&s, 500);
    let _: () = s.redis.cache(&["SET", RESTART_KEY, "1900000000"]);
    d.expect_stop(0, "restart_signal");
    let left = s.redis.llen(&q("default"));
    // The backlog left takes the worker seconds; the key is noticed within
    // 250 ms (plus one turn of the loop).
    assert!(left > 0, "the worker ran the whole backlog before stopping");
    eprintln!("restart noticed with {left} of {BACKLOG} jobs left");
    assert_head_ran_tail_left(&s, &jobs, &[]);
}

/// `queue:pause redis:default` while a backlog of 20,000 no-op jobs keeps
/// 16 slots busy: the worker notices it while saturated (it logs "queue
/// paused" with jobs still on `default`), takes nothing more from
/// `default` while serving `other`, the next queue in `--queue` (a job
/// pushed there runs), and leaves the rest of `default` untouched.
#[test]
fn a_pause_key_stops_a_saturated_worker_taking_from_that_queue() {
    let (s, config, jobs) = saturated_scene();
    let args = ["--queue=default,other", "--concurrency=16", "--sleep=3"];
    let mut d = s.work(&config, &args);
    wait_taken(&s, 500);
    let _: () = s.redis.cache(&["SET", PAUSED_DEFAULT, "b:1;"]);
    d.wait_log(&["queue paused", "default"]);
    // The jobs reserved before the pause was read finish; then nothing of
    // default is reserved any more.
    let reserved = format!("{}:reserved", q("default"));
    wait_until("the jobs taken before the pause to finish", || {
        s.redis.zcard(&reserved) == 0
    });
    let left = s.redis.llen(&q("default"));
    assert!(left > 0, "the worker ran the whole backlog before pausing");
    eprintln!("pause noticed with {left} of {BACKLOG} jobs left");

    // The worker still polls: a job on `other` runs, and `default` stays
    // as it was.
    let marker = Job::string("App\\Jobs\\Marker@handle", json!({}));
    push_all(&s, "other", std::slice::from_ref(&marker));
    let marker_call = ("other".to_string(), marker.id());
    wait_until("the job on `other` to run", || {
        noop_calls(&s).contains(&marker_call)
    });
    wait_until("the job on `other` to be deleted", || {
        !s.redis.exists(&q("other")) && !s.redis.exists(&format!("{}:reserved", q("other")))
    });
    assert_eq!(s.redis.llen(&q("default")), left, "default untouched");

    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    assert_head_ran_tail_left(&s, &jobs, &[marker_call]);
}

// ---------------------------------------------------------------------------
// 5. The idle wait with block_for unset: BLPOP, woken by a push, cut by
//    SIGTERM
// ---------------------------------------------------------------------------

/// With `block_for` unset and `--queue=high,default`, an idle worker waits
/// in one BLPOP (seen in `CLIENT LIST`: a client blocked in `blpop`)
/// rather than sleeping, and a job pushed onto `default`, the second queue,
/// wakes it: the job runs although `--sleep` is 60 s, longer than the
/// harness waits for anything (30 s). Then it waits in BLPOP again.
#[test]
fn the_idle_wait_is_a_blpop_that_a_push_to_any_queue_ends() {
    let (s, config) = Scene::recording("touch \"$DIR/started\"");
    let mut d = s.work(&config, &["--queue=high,default", "--sleep=60"]);
    wait_for_blocked_client(&s, "blpop");
    let job = Job::laravel8("App\\Jobs\\Wake");
    let pushed = Instant::now();
    s.push(&job);
    s.wait_for_file("started");
    eprintln!("picked up {:?} after the push", pushed.elapsed());
    // A later line (the job's DONE) shows it was settled; the worker is
    // then idle in BLPOP again.
    d.wait_stdout(|l| l.contains("App\\Jobs\\Wake") && l.contains("DONE"));
    wait_for_blocked_client(&s, "blpop");
    assert_eq!(s.log(), vec![job.run_line(1)], "the job ran once");
    s.assert_state(QueueState::empty());
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
}

/// SIGTERM ends an idle worker's BLPOP at once: with `--sleep=60` (and
/// `block_for` unset) the worker is blocked for up to 60 s, yet it exits 0
/// within a few seconds of the signal. The bound (10 s) is there only to
/// tell "at once" from "at the end of the wait"; exiting takes
/// milliseconds, and the harness itself gives up after 30 s.
#[test]
fn sigterm_stops_a_worker_idle_in_blpop_at_once() {
    let (s, config) = Scene::recording("exit 0");
    let mut d = s.work(&config, &["--sleep=60"]);
    wait_for_blocked_client(&s, "blpop");
    let signalled = Instant::now();
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "SIGTERM ended a 60 s idle wait after {took:?}"
    );
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran");
    s.assert_state(QueueState::empty());
}

/// Starts `work ARGS` (a recording handler), waits until it blocks in its
/// idle BLPOP, pauses it with SIGUSR2, then pushes the job
/// `App\Jobs\NAME` (returned) and waits until
/// the wait has taken the push's notify token.
fn push_to_a_paused_wait(name: &str, args: &[&str]) -> (Scene, Daemon, Job) {
    let job = Job::laravel8(&format!("App\\Jobs\\{name}"));
    let (s, config) = Scene::recording("exit 0");
    let mut d = s.work(&config, args);
    wait_for_blocked_client(&s, "blpop");
    d.signal(Signal::SIGUSR2);
    d.wait_log(&["signal received", "SIGUSR2"]);
    s.push(&job);
    let notify = format!("{}:notify", q("default"));
    wait_until("the wait to take the token", || s.redis.llen(&notify) == 0);
    (s, d, job)
}

/// SIGUSR2 while the worker waits in BLPOP: the wait goes on, but when a
/// push ends it the paused worker does not poll, so the job is not
/// reserved. The test sees the wait take the push's notify token, then
/// sends SIGTERM: a fetch that went on to poll would already have
/// reserved the job (a pop in flight is never abandoned) and run it while
/// draining.
#[test]
fn sigusr2_during_the_idle_wait_keeps_the_job_that_ends_it_queued() {
    let (s, mut d, job) = push_to_a_paused_wait("WhilePaused", &["--sleep=60", "--json"]);
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    assert_eq!(s.log(), Vec::<String>::new(), "no job ran");
    assert_eq!(d.events_with("starting").len(), 0, "no job was reserved");
    s.assert_state(QueueState::empty().ready([&job]));
}

/// The job that ended a paused worker's wait (its token taken) runs after
/// SIGCONT: the first poll finds it without a token.
#[test]
fn sigcont_after_a_paused_wait_takes_the_job_that_ended_it() {
    let (s, mut d, job) = push_to_a_paused_wait("AfterPause", &["--sleep=60", "--max-jobs=1"]);
    d.signal(Signal::SIGCONT);
    d.expect_stop(0, "max_jobs");
    s.assert_ran_then_gone(&job, 1);
}

/// Issue 29, item 2: the pop goes as `EVALSHA`. A Redis that forgot the
/// script (`SCRIPT FLUSH`, as after a restart or a failover) answers
/// `NOSCRIPT`, and the pop goes again as text: no job is lost, none runs
/// twice, and the worker goes on.
#[test]
fn a_script_flush_costs_no_job() {
    let (s, config) = Scene::recording("");
    let first = Job::laravel8("App\\Jobs\\First");
    let second = Job::laravel8("App\\Jobs\\Second");
    s.push(&first);
    let mut d = s.work(&config, &["--sleep=0.05"]);
    wait_until("the first job ran", || s.log().len() == 1);
    let _: String = s.redis.cmd(&["SCRIPT", "FLUSH"]);
    s.push(&second);
    wait_until("the second job ran", || s.log().len() == 2);
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    assert_eq!(s.log(), [first.run_line(1), second.run_line(1)]);
    s.assert_state(QueueState::empty());
}
