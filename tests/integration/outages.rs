//! Redis outages while jobs are in flight (issue 9, items 5–8), with the
//! test's own redis-server frozen (SIGSTOP: a hung Redis, commands wait
//! unanswered) or shut down and started again on the same socket with its
//! data (`SHUTDOWN SAVE`: commands fail at once).
//!
//! The queue connection's command timeout is 30 s
//! (`redis::COMMAND_TIMEOUT`): a command sent to a frozen Redis
//! waits that long before it fails, so the bounds below sit well under it.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Job, Payload, QueueState, Scene, Score, alive};
use nix::sys::signal::Signal;

/// A bound for what must happen while Redis is frozen: far above the 2 s
/// the tests' reservations last and the 2 s drain deadline, far below the
/// 30 s a command sent to the frozen Redis waits before it fails (which is
/// when the old code noticed anything).
const WHILE_FROZEN: Duration = Duration::from_secs(12);

/// Polls `done` every 10 ms for at most `limit`; false when it never held.
fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Records each run in the job log; the first attempt writes its pid
/// (`pid`) and its child's (`child`), touches `started`, and runs for
/// 300 s (it can only end early by being killed); later attempts end at
/// once.
const LONG_FIRST_ATTEMPT: &str = "if [ \"$LARAVEL_WORKER_ATTEMPT\" = 1 ]; then \
     sleep 300 & echo $! > \"$DIR/child\"; echo $$ > \"$DIR/pid\"; \
     touch \"$DIR/started\"; wait; fi";

/// Item 5. retry_after = 3 (the lease lasts 2 s from each renewal); Redis
/// hangs while the handler runs, longer than the reservation. The handler
/// (and its child) are killed while Redis is still frozen, the log says
/// why, and once Redis is back the worker reclaims the job and runs it
/// again: one run at a time, the first process dead before the second
/// started.
///
/// Before: the handler ran on whatever happened (nothing stopped it), so
/// after the thaw the reclaimed copy ran beside it.
#[test]
fn a_handler_whose_reservation_expires_in_a_hang_is_stopped() {
    let s = Scene::new();
    let job = Job::laravel8("App\\Jobs\\Long");
    let config = s
        .config()
        .retry_after(3)
        .recording(LONG_FIRST_ATTEMPT)
        .write();
    s.push(&job);
    let mut d = s.work(&config, &["--json", "--tries=3"]);
    s.wait_for_file("started");
    let (pid, child) = (s.read_pid("pid"), s.read_pid("child"));

    s.redis.freeze();
    let stopped = within(WHILE_FROZEN, || !alive(pid) && !alive(child));
    // Checked after the thaw, so that a failure leaves no frozen server
    // behind a hung daemon.
    let second_run_while_frozen = s.log().len();
    s.redis.thaw();
    assert!(
        stopped,
        "the handler (pid {pid}, child {child}) still ran {WHILE_FROZEN:?} into the hang; \
         stderr:\n{}",
        d.stderr_text()
    );
    assert_eq!(second_run_while_frozen, 1, "{:?}", s.log());
    d.wait_log(&["stopping the handler", "on_lease_lost"]);
    let lost = d.wait_event("lease_lost");
    assert_eq!(lost["id"], job.id(), "{lost}");

    // Reclaimed once the reservation is due, and run again.
    let done = d.wait_event("success");
    assert_eq!(done["attempts"], 2, "{done}");
    d.signal(Signal::SIGTERM);
    d.expect_exit(0);
    s.assert_ran_then_gone(&job, 2);
}

/// Item 5 with `on_lease_lost = "keep"`: the same hang, but the handler is
/// left to finish; the loss is logged, and the job is settled by its one
/// run once Redis is back (this worker, busy with its one slot, reclaimed
/// nothing meanwhile).
#[test]
fn with_on_lease_lost_keep_the_handler_runs_on() {
    let s = Scene::new();
    let job = Job::laravel8("App\\Jobs\\Long");
    let config = s
        .config()
        .retry_after(3)
        .set("worker", "on_lease_lost", "keep")
        .recording(&format!("echo $$ > \"$DIR/pid\"; {}", common::GATED))
        .write();
    s.push(&job);
    let mut d = s.work(&config, &["--json", "--stop-when-empty"]);
    s.wait_for_file("started");
    let pid = s.read_pid("pid");

    s.redis.freeze();
    let said = d.wait_log_for(
        WHILE_FROZEN,
        &["reservation expired while the queue could not be reached"],
    );
    let running = alive(pid);
    s.redis.thaw();
    if let Err(why) = said {
        panic!("no word of the expired reservation while Redis hung: {why}");
    }
    assert!(
        running,
        "the handler was stopped despite on_lease_lost = \"keep\""
    );

    s.touch("go");
    d.expect_stop(0, "empty");
    assert!(
        !d.stderr_text().contains("stopping the handler"),
        "{}",
        d.stderr_text()
    );
    assert_eq!(d.event("success")["attempts"], 1);
    s.assert_ran_then_gone(&job, 1);
}

/// Item 6. retry_after = 20; the job's handler ends while Redis is down
/// (shut down, so every try fails at once) for about 5 s. The delete is
/// tried again until Redis is back: the job is deleted, ran once, and
/// nothing is left.
///
/// Before: five tries over about 1.5 s, then "could not be settled"; the
/// job stayed reserved and ran again after retry_after (and, with
/// `--stop-when-empty`, the worker left at once on the failed poll).
#[test]
fn a_delete_during_an_outage_is_retried_until_redis_is_back() {
    let mut s = Scene::new();
    let job = Job::laravel8("App\\Jobs\\Quick");
    let config = s.config().retry_after(20).recording(common::GATED).write();
    s.push(&job);
    let mut d = s.work(&config, &["--json", "--stop-when-empty"]);
    s.wait_for_file("started");

    s.redis.shutdown_save();
    s.touch("go");
    d.wait_log(&["cannot delete the job in the queue"]);
    // The outage's length is the point: well past the old ~1.5 s of tries,
    // well within the 19 s the reservation lasts.
    std::thread::sleep(Duration::from_secs(5));
    s.redis.start_again();

    d.expect_stop(0, "empty");
    let said = d.stderr_text();
    assert!(!said.contains("could not be settled"), "stderr:\n{said}");
    assert_eq!(d.events_with("success").len(), 1, "{:?}", d.stdout);
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty());
}

/// Item 7. drain_timeout = 2, a job running, Redis frozen, SIGTERM: the
/// worker exits 0 within the deadline plus slack (the bound, 8 s, leaves
/// 6 s for a loaded machine and stays far below the 30 s one command to
/// the frozen Redis waits), with an ERROR line saying the job was left
/// unsettled; the handler is dead.
///
/// The release the worker sent at the deadline's last quarter sits in the
/// frozen server's socket and runs when it is thawed, so the job ends
/// released (available at once, the attempt counted), not lost and not
/// reserved; had it not been sent, the job would have stayed reserved.
///
/// Before: the release waited for the frozen Redis, up to 30 s a try and
/// five tries (154 s measured against a 3 s deadline).
#[test]
fn the_drain_deadline_bounds_the_exit_while_redis_hangs() {
    let s = Scene::new();
    let job = Job::laravel8("App\\Jobs\\Long");
    let config = s
        .config()
        .retry_after(60)
        .drain_timeout(2)
        .recording(LONG_FIRST_ATTEMPT)
        .write();
    s.push(&job);
    let mut d = s.work(&config, &["--json", "--tries=3"]);
    s.wait_for_file("started");
    let (pid, child) = (s.read_pid("pid"), s.read_pid("child"));

    s.redis.freeze();
    let terminated = Instant::now();
    d.signal(Signal::SIGTERM);
    let exited = within(Duration::from_secs(8), || d.exited());
    let took = terminated.elapsed();
    let handler_dead = !alive(pid) && !alive(child);
    s.redis.thaw();
    assert!(
        exited,
        "still running {took:?} after SIGTERM; stderr:\n{}",
        d.stderr_text()
    );
    d.expect_exit(0);
    assert!(handler_dead, "the handler outlived the worker");
    let said = d.stderr_text();
    let error = said
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("drain deadline passed"))
        .unwrap_or_else(|| panic!("no ERROR line; stderr:\n{said}"));
    assert!(
        error.contains("jobs=1") && error.contains("stay reserved"),
        "{error}"
    );
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(0)));
}

/// Item 8. `--stop-when-empty` with three jobs queued; Redis goes down
/// after the first (while the worker rests, `--rest`), so the next poll
/// fails. The worker does not call that "empty": it keeps polling, runs
/// the two jobs left once Redis is back (with its data), and only then
/// exits "empty".
///
/// Before: a poll that could not reach Redis counted as an empty one, so
/// the worker exited "empty" with two jobs still queued.
#[test]
fn stop_when_empty_waits_out_an_outage() {
    let mut s = Scene::new();
    let jobs = Job::named(["One", "Two", "Three"]);
    let config = s.config().retry_after(60).recording("").write();
    s.push_on("default", &jobs);
    // The rest holds the loop for 1.5 s after each job: Redis is shut down
    // within the first one (a few milliseconds after the job's line).
    let mut d = s.work(&config, &["--json", "--stop-when-empty", "--rest=1.5"]);
    d.wait_event("success");
    s.redis.shutdown_save();
    assert_eq!(s.log(), vec![jobs[0].run_line(1)]);
    d.wait_log(&["cannot reserve a job"]);
    s.redis.start_again();

    d.expect_stop(0, "empty");
    assert_eq!(
        d.event_fields("success", "job"),
        ["App\\Jobs\\One", "App\\Jobs\\Two", "App\\Jobs\\Three"],
        "{:?}",
        d.stdout
    );
    assert_eq!(
        s.log(),
        jobs.iter().map(|j| j.run_line(1)).collect::<Vec<_>>()
    );
    s.assert_state(QueueState::empty());
}

/// Issue 22, item 5: `--stop-when-empty` while Redis stays down. A poll
/// that cannot reach Redis says nothing about the queues, but the worker
/// must not wait for ever either: after 5 failed polls in a row it stops
/// with exit status 1, reason `lost_connection`, and says which Redis.
///
/// Before: it polled (and logged) until it was killed.
#[test]
fn stop_when_empty_ends_when_redis_stays_unreachable() {
    let mut s = Scene::new();
    let jobs = Job::named(["One", "Two"]);
    let config = s.config().retry_after(60).recording("").write();
    s.push_on("default", &jobs);
    let mut d = s.work(&config, &["--json", "--stop-when-empty", "--rest=1.5"]);
    d.wait_event("success");
    s.redis.shutdown_save();

    d.expect_stop(1, "lost_connection");
    let said = d.log_line("did not answer 5 polls in a row", &["redis.sock"]);
    assert!(said.contains("--stop-when-empty"), "{said}");
    assert_eq!(
        s.log(),
        vec![jobs[0].run_line(1)],
        "one job ran, one is left"
    );
}

/// Issue 32 item 7: `--stop-when-empty-for` while Redis stays down ends as
/// `--stop-when-empty` does: after 5 failed polls in a row, and no job for
/// the given time, exit status 1, reason `lost_connection`.
///
/// Before: still running after 90 s with a limit of 3 s.
#[test]
fn stop_when_empty_for_ends_when_redis_stays_unreachable() {
    let mut s = Scene::new();
    let jobs = Job::named(["One"]);
    let config = s.config().retry_after(60).recording("").write();
    s.push_on("default", &jobs);
    let mut d = s.work(&config, &["--json", "--stop-when-empty-for=2"]);
    d.wait_event("success");
    s.redis.shutdown_save();

    d.expect_stop(1, "lost_connection");
    let said = d.log_line("did not answer 5 polls in a row", &["redis.sock"]);
    assert!(said.contains("--stop-when-empty-for"), "{said}");
}

/// A unix-socket relay in front of the private Redis that can lose one
/// answer: once armed, it passes the next command it gets on to Redis,
/// then closes that connection instead of passing the answer back (a
/// reply lost in a network failure: the command ran, the client saw an
/// error).
struct ReplyCutter {
    path: PathBuf,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
}

impl ReplyCutter {
    /// Listens on `relay.sock` in `dir`, relaying to `upstream`.
    fn start(dir: &Path, upstream: &Path) -> Self {
        let path = dir.join("relay.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let upstream = upstream.to_path_buf();
        let (armed_, cuts_) = (Arc::clone(&armed), Arc::clone(&cuts));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = UnixStream::connect(&upstream) else {
                    continue;
                };
                Self::relay(client, server, Arc::clone(&armed_), Arc::clone(&cuts_));
            }
        });
        ReplyCutter { path, armed, cuts }
    }

    /// Pumps both ways between `client` and `server` until either ends.
    fn relay(
        client: UnixStream,
        server: UnixStream,
        armed: Arc<AtomicBool>,
        cuts: Arc<AtomicUsize>,
    ) {
        let cut = Arc::new(AtomicBool::new(false));
        let (mut from_client, mut to_server) =
            (client.try_clone().unwrap(), server.try_clone().unwrap());
        let cut_ = Arc::clone(&cut);
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n @ 1..) = from_client.read(&mut buf) {
                // Marked before the command goes on, so its answer is
                // surely dropped.
                if armed.swap(false, Ordering::SeqCst) {
                    cut_.store(true, Ordering::SeqCst);
                    cuts.fetch_add(1, Ordering::SeqCst);
                }
                if to_server.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to_server.shutdown(std::net::Shutdown::Both);
        });
        let (mut from_server, mut to_client) = (server, client);
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n @ 1..) = from_server.read(&mut buf) {
                if cut.load(Ordering::SeqCst) {
                    break;
                }
                if to_client.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to_client.shutdown(std::net::Shutdown::Both);
            let _ = from_server.shutdown(std::net::Shutdown::Both);
        });
    }

    /// Loses the answer to the next command.
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }
}

/// Item 8, the lost reply. The delete of a finished job reaches Redis but
/// its answer is lost; the retry finds the reservation gone. That is
/// logged as what most likely happened (INFO: the earlier try went
/// through), not blamed on another worker; the job ran once and is gone.
///
/// Before: a WARN line saying another worker had reclaimed the job.
#[test]
fn a_lost_delete_reply_is_not_blamed_on_another_worker() {
    let s = Scene::new();
    let relay = ReplyCutter::start(s.dir.path(), &s.redis.socket);
    let job = Job::laravel8("App\\Jobs\\Quick");
    // Only the queue connection goes through the relay; retry_after = 60
    // leaves no renewal in the job's run, so the next command on it after
    // the handler ends is the delete.
    let config = s
        .config()
        .set(
            "redis",
            "url",
            format!("unix://{}?db=0", relay.path.display()),
        )
        .retry_after(60)
        .recording(common::GATED)
        .write();
    s.push(&job);
    let mut d = s.work(&config, &["--json", "--stop-when-empty"]);
    s.wait_for_file("started");
    relay.arm();
    s.touch("go");

    d.expect_stop(0, "empty");
    assert_eq!(relay.cuts.load(Ordering::SeqCst), 1);
    let said = d.stderr_text();
    let lost = said
        .lines()
        .find(|l| l.contains("the earlier try most likely went through"))
        .unwrap_or_else(|| panic!("no word of the lost reply; stderr:\n{said}"));
    assert!(lost.contains("INFO"), "{lost}");
    assert!(!said.contains("was reclaimed"), "stderr:\n{said}");
    assert!(!said.contains("another worker"), "stderr:\n{said}");
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty());
}

/// A cache Redis that goes away while the worker runs neither stops nor
/// pauses it (protocol §7.3, cache errors): the error is logged, the last
/// signals seen stand, and a job pushed meanwhile still runs.
#[test]
fn a_cache_outage_neither_stops_nor_pauses_the_worker() {
    let s = Scene::new();
    let dir = s.path("cache");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cache = common::RedisServer::start(&dir);
    let config = s
        .config()
        .set("cache", "url", cache.url(1))
        .recording("exit 0")
        .write();
    let mut d = s.work(&config, &["--json", "--sleep=0.1"]);
    let before = Job::laravel8("App\\Jobs\\Before");
    s.push(&before);
    d.wait_event("success");
    cache.shutdown_save();
    d.wait_log(&["cannot read the restart and pause signals from the cache"]);
    let after = Job::laravel8("App\\Jobs\\After");
    s.push(&after);
    common::wait_until("the job pushed during the outage to run", || {
        s.log().len() == 2
    });
    d.signal(Signal::SIGTERM);
    d.expect_stop(0, "interrupted");
    assert_eq!(s.log(), vec![before.run_line(1), after.run_line(1)]);
    s.assert_state(QueueState::empty());
}
