//! The worker loop driven against the memory queue (`queue::memory`), as
//! Laravel tests its `Worker` against a fake connection: the stop
//! conditions, the settle's retries by error kind, and what a stop does
//! with the jobs it holds. Handlers are real processes (`sh`); the cache
//! is a folder, the failed-job store discards.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Daemon, Services, StopReason, WorkerOptions};
use crate::cache::CacheStore;
use crate::cache::file::FileCache;
use crate::failed::FailedJobStore;
use crate::handler::Handler;
use crate::handler::process_group::Environment;
use crate::handler::router::{Route, Router, Unmatched};
use crate::handler::subprocess::{SubprocessHandler, result_dir};
use crate::queue::Queue;
use crate::queue::contract::payload;
use crate::queue::driver::Driver;
use crate::queue::error::ErrorKind;
use crate::queue::memory::{MemoryQueue, Operation};
use crate::signals::Control;

/// A worker over `memory`, its jobs run by `sh -c script`, with `options`
/// (queue `default` unless they name others).
struct Scene {
    memory: Arc<MemoryQueue>,
    quit: watch::Sender<Control>,
    _cache: tempfile::TempDir,
}

impl Scene {
    fn new() -> Self {
        Scene {
            memory: Arc::new(MemoryQueue::new(Some(60))),
            quit: watch::channel(Control::default()).0,
            _cache: tempfile::tempdir().expect("a temporary folder"),
        }
    }

    fn queue(&self) -> Queue {
        Queue::shared(Arc::clone(&self.memory) as Arc<dyn Driver>)
    }

    async fn push(&self, jobs: u32) {
        let keys = self.memory.handle("default");
        for n in 0..jobs {
            self.memory.push(&keys, &payload(n)).await.expect("push");
        }
    }

    fn daemon(&self, script: &str, options: WorkerOptions) -> Daemon {
        self.daemon_heard_by(script, options, super::Listeners::new())
    }

    fn daemon_heard_by(
        &self,
        script: &str,
        options: WorkerOptions,
        events: super::Listeners,
    ) -> Daemon {
        let handler = SubprocessHandler::new(
            vec!["sh".into(), "-c".into(), script.into()],
            Duration::from_secs(1),
            64 * 1024,
            Arc::new(result_dir().expect("a result folder")),
            Environment::default(),
        );
        let route = Route::new("*", Arc::new(Handler::Subprocess(handler)), None);
        let services = Services {
            queue: self.queue(),
            connection: "memory".into(),
            cache: CacheStore::File(FileCache::new(self._cache.path())),
            failed: FailedJobStore::Null,
            router: Router::new(vec![route], Unmatched::Fail),
            events,
            options: WorkerOptions {
                queues: vec!["default".into()],
                sleep: Duration::from_millis(10),
                // `--memory` reads this process's resident set, which is
                // every test's of the binary: Laravel's 128 MB default
                // stopped these loops when the whole suite ran at once.
                memory_mb: 0,
                ..options
            },
            down_file: None,
            drain_deadline: watch::channel(false).1,
            on_lease_lost: Default::default(),
            laravel: crate::exception::LaravelVersion::NEWEST,
            on_tripped: Default::default(),
            bookkeeping: Default::default(),
        };
        Daemon::new(services, self.quit.subscribe())
    }

    /// Attempts of the jobs of `default`: ready, delayed, reserved.
    fn attempts(&self) -> [Vec<u64>; 3] {
        self.memory.attempts("default")
    }
}

/// No job left in the queue.
const NONE: [Vec<u64>; 3] = [Vec::new(), Vec::new(), Vec::new()];

fn stop_when_empty() -> WorkerOptions {
    WorkerOptions {
        stop_when_empty: true,
        ..WorkerOptions::default()
    }
}

#[tokio::test]
async fn an_empty_queue_ends_stop_when_empty() {
    let scene = Scene::new();
    let reason = scene.daemon("exit 0", stop_when_empty()).run().await;
    assert_eq!(reason, StopReason::Empty);
}

#[tokio::test]
async fn every_job_runs_once_and_is_deleted() {
    let scene = Scene::new();
    scene.push(3).await;
    let reason = scene.daemon("exit 0", stop_when_empty()).run().await;
    assert_eq!(reason, StopReason::Empty);
    assert_eq!(scene.attempts(), NONE);
}

#[tokio::test]
async fn max_jobs_stops_after_that_many_and_leaves_the_rest() {
    let scene = Scene::new();
    scene.push(5).await;
    let options = WorkerOptions {
        max_jobs: 2,
        ..WorkerOptions::default()
    };
    let reason = scene.daemon("exit 0", options).run().await;
    assert_eq!(reason, StopReason::MaxJobs);
    assert_eq!(scene.attempts(), [vec![0, 0, 0], vec![], vec![]]);
}

#[tokio::test]
async fn once_runs_one_job() {
    let scene = Scene::new();
    scene.push(2).await;
    let options = WorkerOptions {
        once: true,
        ..WorkerOptions::default()
    };
    let reason = scene.daemon("exit 0", options).run().await;
    assert_eq!(reason, StopReason::Once);
    assert_eq!(scene.attempts(), [vec![0], vec![], vec![]]);
}

#[tokio::test]
async fn a_failing_job_is_released_with_its_attempt_counted() {
    let scene = Scene::new();
    scene.push(1).await;
    let options = WorkerOptions {
        once: true,
        tries: 3,
        backoff: vec![600],
        ..WorkerOptions::default()
    };
    scene.daemon("exit 1", options).run().await;
    assert_eq!(scene.attempts(), [vec![], vec![1], vec![]]);
}

#[tokio::test]
async fn a_delete_the_queue_cannot_take_yet_is_tried_again() {
    let scene = Scene::new();
    scene.push(1).await;
    scene
        .memory
        .fail_next(Operation::Delete, ErrorKind::Unavailable, 2);
    let reason = scene.daemon("exit 0", stop_when_empty()).run().await;
    assert_eq!(reason, StopReason::Empty);
    assert_eq!(scene.attempts(), NONE, "deleted on the third try");
}

#[tokio::test]
async fn a_delete_the_queue_refuses_is_not_tried_again() {
    let scene = Scene::new();
    scene.push(1).await;
    scene
        .memory
        .fail_next(Operation::Delete, ErrorKind::Refused, 1);
    let reason = scene.daemon("exit 0", stop_when_empty()).run().await;
    assert_eq!(reason, StopReason::Empty);
    // One refusal: the job stays reserved, to come back after retry_after.
    assert_eq!(scene.attempts(), [vec![], vec![], vec![1]]);
}

#[tokio::test]
async fn a_queue_that_cannot_be_reached_ends_stop_when_empty() {
    let scene = Scene::new();
    scene.push(1).await;
    scene
        .memory
        .fail_next(Operation::Pop, ErrorKind::Unavailable, usize::MAX);
    let daemon = scene
        .daemon("exit 0", stop_when_empty())
        .with_error_interval(Duration::ZERO);
    let reason = daemon.run().await;
    assert_eq!(reason, StopReason::QueueUnreachable);
    assert_eq!(
        scene.attempts(),
        [vec![0], vec![], vec![]],
        "the job is untouched"
    );
}

/// Sends SIGTERM's quit as soon as a job is reserved.
struct QuitOnReserve(watch::Sender<Control>);

impl super::JobEvents for QuitOnReserve {
    fn reserved(&self, _job: &crate::queue::ReservedJob) {
        self.0.send_modify(|control| control.quit = Some("SIGTERM"));
    }
}

#[tokio::test]
async fn a_quit_signal_stops_the_loop_and_the_job_in_flight_finishes() {
    let scene = Scene::new();
    scene.push(2).await;
    let quit = Arc::new(QuitOnReserve(scene.quit.clone()));
    let events = super::Listeners::new().with(quit);
    let daemon = scene.daemon_heard_by("sleep 0.2", WorkerOptions::default(), events);
    assert_eq!(daemon.run().await, StopReason::Interrupted);
    // The first job finished; the second was never reserved.
    assert_eq!(scene.attempts(), [vec![0], vec![], vec![]]);
}
