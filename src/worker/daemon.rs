//! The worker loop (`Worker::daemon`, protocol §6.2).
//!
//! [`Daemon::run`] starts, then turns the loop until a stop condition
//! holds, then drains. Each turn ([`Daemon::turn`]):
//! 1. reap the job tasks that ended and beat the pulse;
//! 2. if paused (SIGUSR2) or the app is down for maintenance (and no
//!    `--force`), [`idle`](Daemon::idle): sleep, then check the stop
//!    conditions;
//! 3. [`wait_for_slot`](Daemon::wait_for_slot) (`--concurrency`); with one
//!    slot, that is the end of the previous job, where Laravel runs
//!    `stopIfNecessary`;
//! 4. [`stop_reason`](Daemon::stop_reason): read the cache signals
//!    ([`CacheSignals`]: restart and pause keys, one round trip) and the
//!    memory, then [`stop::decide`] in Laravel's order;
//! 5. [`reserve`](Daemon::reserve) the next jobs from the queues not
//!    paused, in priority order (or block/sleep when there is none);
//! 6. [`dispatch`](Daemon::dispatch) each to a task of its own: run
//!    handler → settle → `--rest` → free slot (see [`task`](super::task)).
//!
//! With `[worker] balance` the loop holds a [`Balanced`]: each queue has
//! slots of its own, the loop reserves from a queue only while it has
//! room, and a task moves the slots every cooldown (see
//! [`balance`](super::balance)). On stop, [`InFlight::drain`] waits for
//! the jobs in flight, up to the drain deadline.
//!
//! The loop reaches its queue only through [`crate::queue`]'s driver
//! interface, reports through [`JobEvents`] (polled, reserved, stopping;
//! the job tasks emit settled) and never calls an observer by name. Each
//! turn, and each wait (sleep, fetch, free slot, drain), beats the
//! [`Pulse`]: systemd's READY/WATCHDOG/STATUS/STOPPING and the heartbeat
//! file. Errors that repeat are logged through a [`RepeatLimiter`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::balance::{Balanced, first_or_never};
use super::cache_signals::CacheSignals;
use super::drain::{Deadline, InFlight};
use super::events::JobEvents;
use super::fetch::{self, Fetched, IdleWait, fetch_limit, idle_wait};
use super::progress::{Poll, Progress, StopInputs};
use super::received;
use super::should_run::should_run;
use super::slot::{Settling, Slot};
use super::stop::{self, StopReason};
use super::{Services, task, unrecorded};
use crate::lifecycle::Pulse;
use crate::log_limit::{DEFAULT_INTERVAL, RepeatLimiter};
use crate::queue::{QueueHandle, ReservedJob};
use crate::signals::Control;

/// Pause after an error talking to the queue.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Log site of the loop's repeated reserve error (see [`RepeatLimiter`]).
const RESERVE_FAILED: &str = "cannot reserve a job";

/// What one reservation attempt gave.
enum Reserved {
    /// Jobs, now reserved by this worker, all from one queue.
    Jobs(Vec<ReservedJob>),
    /// Every queue was empty or paused; `waited` when the fetch's idle wait
    /// (BLPOP) already took the place of `--sleep`.
    Nothing {
        /// The fetch blocked on the notify lists.
        waited: bool,
    },
    /// The queue could not be reached (logged).
    Failed,
}

/// A running worker.
pub struct Daemon {
    /// What every job task shares: queue, stores, router, listeners, flags.
    services: Arc<Services>,
    /// The queues in priority order (`--queue`), their keys built once.
    queues: Vec<Arc<QueueHandle>>,
    /// Signals received so far (quit, SIGUSR2 pause).
    control: watch::Receiver<Control>,
    /// What the stop conditions count.
    progress: Progress,
    /// `queue:restart` and `queue:pause` as last read from the cache.
    signals: CacheSignals,
    /// How a fetch waits when every queue is empty.
    idle_wait: IdleWait,
    /// How long to sleep after a fetch that waited and found nothing:
    /// `--sleep` with `block_for` set (as Laravel sleeps after its BLPOP),
    /// nothing otherwise (the BLPOP was the sleep).
    sleep_after_wait: Duration,
    /// One permit per `--concurrency` slot (`max_processes` when
    /// balanced); a job task holds its permit until it is settled and has
    /// rested (`--rest`), or until its settle write is sent (see [`Slot`]).
    permits: Arc<Semaphore>,
    /// Room for the jobs settling after they gave their slot back.
    settling: Settling,
    /// With `[worker] balance`: the slots of each queue and their rounds.
    balanced: Option<Balanced>,
    /// The job tasks not yet ended.
    in_flight: InFlight,
    /// How long a stop may take.
    deadline: Deadline,
    /// systemd notifications and the heartbeat file.
    pulse: Pulse,
    /// The longest a fetch may take before the loop counts as stuck
    /// (`None`: no limit). See [`Pulse::during`].
    fetch_limit: Option<Duration>,
    /// Repeated reserve errors, logged once and then summarised.
    errors: RepeatLimiter,
    /// Writes to the failed-job store the failures kept in the queue while
    /// it was down; runs from [`Self::start`] until the daemon is dropped.
    recorder: Option<unrecorded::Recorder>,
}

impl Daemon {
    /// A worker over `services`, steered by `control`.
    pub fn new(services: Services, control: watch::Receiver<Control>) -> Self {
        let options = &services.options;
        let queues: Vec<_> = options
            .queues
            .iter()
            .map(|q| services.queue.handle(q))
            .collect();
        let permits = Arc::new(Semaphore::new(options.slots()));
        let settling = Settling::new(options.slots());
        let balanced =
            (options.balance.clone()).map(|policy| Balanced::new(policy, options.queues.clone()));
        let (idle_wait, sleep_after_wait) = idle_wait(services.queue.block_for(), options.sleep);
        let fetch_limit = fetch_limit(idle_wait, queues.len());
        Daemon {
            signals: CacheSignals::new(queues.len(), RepeatLimiter::new(DEFAULT_INTERVAL)),
            queues,
            services: Arc::new(services),
            control,
            progress: Progress::default(),
            idle_wait,
            sleep_after_wait,
            permits,
            settling,
            balanced,
            in_flight: InFlight::default(),
            deadline: Deadline::default(),
            pulse: Pulse::silent(),
            fetch_limit,
            errors: RepeatLimiter::new(DEFAULT_INTERVAL),
            recorder: None,
        }
    }

    /// Gives the jobs in flight `limit` to finish once the worker stops;
    /// then `deadline` (whose receiver is [`Services::drain_deadline`])
    /// tells them to give up, and they are released. With `limit` `None`
    /// every job is awaited, as `queue:work` does.
    pub fn with_drain_timeout(
        mut self,
        limit: Option<Duration>,
        deadline: watch::Sender<bool>,
    ) -> Self {
        self.deadline = Deadline {
            limit,
            passed: Some(deadline),
        };
        self
    }

    /// Reports readiness, progress and draining through `pulse`; a fetch
    /// lasting longer than it can legitimately take stops its beats (see
    /// [`fetch_limit`]).
    pub fn with_pulse(mut self, pulse: Pulse) -> Self {
        self.pulse = pulse;
        self
    }

    /// Logs a repeated loop error once, then at most one summary per
    /// `interval` (zero: every time).
    pub fn with_error_interval(mut self, interval: Duration) -> Self {
        self.errors = RepeatLimiter::new(interval);
        self.signals = CacheSignals::new(self.queues.len(), RepeatLimiter::new(interval));
        self
    }

    /// Runs until a stop condition holds, then waits for the jobs in flight.
    pub async fn run(mut self) -> StopReason {
        self.start().await;
        let reason = loop {
            if let Some(reason) = self.turn().await {
                break reason;
            }
        };
        self.drain(reason).await;
        self.services.events.stopped(reason);
        reason
    }

    /// Notes the restart marker (a later change means `queue:restart`),
    /// logs the start and tells systemd the worker is ready.
    async fn start(&mut self) {
        self.signals.start(&self.services).await;
        if self.services.queue.parks_failures() {
            self.recorder = Some(unrecorded::start(Arc::clone(&self.services)));
        }
        if let Some(balanced) = &mut self.balanced {
            balanced.start(Arc::clone(&self.services), self.queues.clone());
        }
        self.progress.start();
        let options = &self.services.options;
        tracing::info!(
            connection = %self.services.connection,
            queues = %options.queues.join(","),
            first_key = %self.queues.first().map_or(String::new(), |q| self.services.queue.location(q)),
            concurrency = options.slots(),
            "worker started"
        );
        self.pulse.ready();
    }

    /// One turn of the loop (the body of `Worker::daemon`'s `while`);
    /// `Some` when the worker must stop.
    async fn turn(&mut self) -> Option<StopReason> {
        self.reap();
        self.pulse.beat();
        let paused = self.control.borrow().paused;
        self.signals.report_signal_pause(&self.services, paused);
        if !self.should_run() {
            return self.idle().await;
        }
        if self.has_no_slot() {
            return self.idle_without_slots().await;
        }
        let permit = match self.wait_for_slot().await {
            Ok(permit) => permit,
            Err(stop) => return stop,
        };
        if let Some(reason) = self.stop_reason(self.progress.found()).await {
            return Some(reason);
        }
        let mut permits = self.more_free_slots(permit);
        match self.reserve(permits.len()).await {
            Reserved::Jobs(jobs) => {
                if self.services.options.slots() == 1 {
                    self.settling.until_none().await;
                }
                for job in jobs {
                    // The fetch never returns more jobs than permits.
                    let Some(permit) = permits.pop() else { break };
                    self.dispatch(job, permit);
                }
            }
            Reserved::Nothing { waited } => {
                drop(permits);
                let sleep = if waited {
                    self.sleep_after_wait
                } else {
                    self.services.options.sleep
                };
                let room = self.balanced.as_ref().map(Balanced::room_changed);
                let ran_out = self
                    .in_flight
                    .ran_out(self.services.options.stop_when_empty);
                self.pause_unless(sleep, first_or_never(room, ran_out))
                    .await;
            }
            Reserved::Failed => {
                drop(permits);
                self.pause(ERROR_PAUSE).await;
            }
        }
        None
    }

    /// `permit` and every other slot free right now, as many as this turn
    /// may fill: one for `--once`, no more than `--max-jobs` leaves, and no
    /// more than the handlers have room for (free processes plus their
    /// `reserve_ahead` windows, see
    /// [`Router::room`](crate::handler::router::Router::room)).
    fn more_free_slots(&self, permit: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
        let options = &self.services.options;
        let mut limit = options.slots().min(self.services.router.room());
        if let Some(balanced) = &self.balanced {
            limit = limit.min(balanced.room().max(1));
        }
        if options.once {
            limit = 1;
        }
        if options.max_jobs > 0 {
            let left = options
                .max_jobs
                .saturating_sub(self.progress.reserved())
                .max(1);
            limit = limit.min(usize::try_from(left).unwrap_or(usize::MAX));
        }
        let mut permits = vec![permit];
        while permits.len() < limit {
            match Arc::clone(&self.permits).try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        permits
    }

    /// Collects the job tasks that have ended, noting when the last did.
    fn reap(&mut self) {
        if self.in_flight.reap() {
            self.progress.job_ended();
        }
    }

    /// A balanced worker whose queues all have no slot (every
    /// `min_processes` 0 and nothing waiting at the last round) and no job
    /// running.
    fn has_no_slot(&self) -> bool {
        (self.balanced.as_ref()).is_some_and(|b| self.in_flight.is_empty() && b.no_room())
    }

    /// With no slot at all, the turn asks the queues whether jobs wait:
    /// when none do, it counts as an empty poll (the stop conditions then
    /// hold as after one); when some do, it is no poll at all, and the loop
    /// waits for the round that gives them slots (so `--once` and
    /// `--stop-when-empty` run them rather than leave). Either way it waits
    /// `--sleep` at most, cut short when a round gives a slot.
    async fn idle_without_slots(&mut self) -> Option<StopReason> {
        let moved = self.balanced.as_ref().map(Balanced::moved)?;
        let waiting = super::balance::rounds::pending(&self.services, &self.queues).await;
        let poll = match waiting {
            Ok(pending) if pending.iter().all(|&n| n == 0) => Some(Poll::Empty),
            Ok(_) => None,
            Err(_) => Some(Poll::Failed),
        };
        if let Some(poll) = poll {
            self.progress.polled(poll);
        }
        if !self.has_no_slot() {
            return None;
        }
        self.pause_unless(self.services.options.sleep, moved).await;
        self.stop_reason(false).await
    }

    /// `pauseWorker`: paused or down for maintenance, so sleep (at least
    /// a second), then check the stop conditions as after an empty poll.
    async fn idle(&mut self) -> Option<StopReason> {
        self.pause(self.services.options.sleep.max(Duration::from_secs(1)))
            .await;
        self.progress.idled();
        self.stop_reason(false).await
    }

    /// Waits for a free `--concurrency` slot, for every job reserved
    /// before to have reached its handler, and for every persistent pool
    /// to have room: a free process or a place among the `reserve_ahead`
    /// jobs allowed to wait for one (a job waiting so is reserved, and a
    /// crash meanwhile costs it an attempt without a start: the window
    /// bounds how many). While every slot is busy,
    /// jobs run under their own limits: the loop is waiting, not stuck. A
    /// signal meanwhile ends the wait: `Err(Some(reason))` to stop,
    /// `Err(None)` to start the turn again.
    async fn wait_for_slot(&mut self) -> Result<OwnedSemaphorePermit, Option<StopReason>> {
        let permits = Arc::clone(&self.permits);
        let router = &self.services.router;
        let started = self.in_flight.until_all_started();
        let control = &mut self.control;
        let balanced = self.balanced.as_ref();
        let permit = self
            .pulse
            .during(None, async {
                let startable = async {
                    let permit = permits.acquire_owned().await;
                    if let Some(balanced) = balanced {
                        balanced.until_room().await;
                    }
                    started.await;
                    router.until_room().await;
                    permit
                };
                tokio::select! {
                    permit = startable => Some(permit),
                    _ = control.changed() => None,
                }
            })
            .await;
        match permit {
            Some(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; if it were, nothing could run.
            Some(Err(_)) => Err(Some(StopReason::Interrupted)),
            None => Err(self.stop_reason(true).await),
        }
    }

    /// Reserves up to `count` jobs from the queues not paused, in priority
    /// order (`getNextJob`); when all are empty, waits as `--sleep` and
    /// `block_for` say (see [`fetch::next_jobs`]).
    async fn reserve(&mut self, count: usize) -> Reserved {
        // Before the room is read, so that a job ending after it ends the
        // idle wait.
        let room_changed = self.balanced.as_mut().map(Balanced::watch_room);
        let (active, counts, skipped_busy) = self.pollable(count);
        // `--stop-when-empty` while jobs run: the poll cannot tell.
        let ran_out = self
            .in_flight
            .ran_out(self.services.options.stop_when_empty);
        let running = ran_out.is_some();
        if active.is_empty() {
            self.progress.polled(poll_of(
                &Reserved::Nothing { waited: false },
                skipped_busy || running,
            ));
            return Reserved::Nothing { waited: false };
        }
        // A SIGUSR2 or maintenance mode that comes during the idle wait
        // keeps the fetch from taking the job that ends it.
        let control = self.control.clone();
        let down_file = self.services.down_file.clone();
        let quit = self.wait_for_quit();
        let interrupted = async move {
            tokio::select! {
                () = quit => {}
                () = first_or_never(room_changed, ran_out) => {}
            }
        };
        let fetch = fetch::next_jobs(
            &self.services.queue,
            &active,
            &counts,
            self.idle_wait,
            self.progress.poll_horizon(&self.services.options),
            interrupted,
            move || should_run(&control, down_file.as_deref()),
        );
        let fetched = self.pulse.during(self.fetch_limit, fetch).await;
        self.services.events.polled(fetched.is_ok());
        for migrated in self.services.queue.take_migrated() {
            self.services.events.migrated(&migrated);
        }
        let reserved = self.reserved(fetched);
        self.progress
            .polled(poll_of(&reserved, skipped_busy || running));
        reserved
    }

    /// What a fetch gave, its error logged.
    fn reserved(&mut self, fetched: crate::queue::QueueResult<Fetched>) -> Reserved {
        match fetched {
            Ok(Fetched::Jobs(jobs)) => {
                self.errors.log_resolved(RESERVE_FAILED);
                Reserved::Jobs(jobs)
            }
            Ok(Fetched::Empty { waited }) => {
                self.errors.log_resolved(RESERVE_FAILED);
                Reserved::Nothing { waited }
            }
            Err(e) => {
                let queue = self.services.queue.at();
                let error = format_args!("{e} (queue {queue})");
                self.errors
                    .log(tracing::Level::ERROR, RESERVE_FAILED, &error);
                Reserved::Failed
            }
        }
    }

    /// The queues to poll now and how many jobs each may give: the ones
    /// not paused, up to `count` each; when balanced, only those with room,
    /// each up to its room, and whether one was left out while its jobs run.
    fn pollable(&self, count: usize) -> (Vec<Arc<QueueHandle>>, Vec<usize>, bool) {
        let paused = self.signals.paused();
        let pollable = match &self.balanced {
            Some(balanced) => balanced.pollable(paused, count),
            None => super::balance::Pollable::unbalanced(paused, count),
        };
        let active = pollable.queues.iter().map(|&i| Arc::clone(&self.queues[i]));
        (active.collect(), pollable.counts, pollable.skipped_busy)
    }

    /// Hands `job` to a task of its own, which holds `permit` (the slot)
    /// until the job is settled and `--rest` has passed; when balanced, it
    /// holds a slot of its queue as long.
    fn dispatch(&mut self, job: ReservedJob, permit: OwnedSemaphorePermit) {
        let queue_slot = self.balanced.as_ref().and_then(|b| b.take(&job.queue.name));
        let slot = Slot::new(permit, queue_slot, self.settling.clone());
        self.progress.job_started();
        self.services.events.reserved(&job);
        let services = Arc::clone(&self.services);
        let (tickets, settling) = self.in_flight.tickets();
        let counted = self.pulse.counter().start();
        self.in_flight.spawn(async move {
            // Boxed: the job's future is several KiB (every stage a job
            // goes through, the handler call's included); unboxed, the
            // runtime would copy it whole at each move of the task.
            let slot = Box::pin(task::run_job(job, &services, tickets, slot)).await;
            drop(settling);
            drop(counted);
            if !services.options.rest.is_zero() {
                tokio::time::sleep(services.options.rest).await;
            }
            drop(slot);
        });
    }

    /// Stops taking jobs and waits for the ones in flight, within the drain
    /// deadline (see [`InFlight::drain`]).
    async fn drain(&mut self, reason: StopReason) {
        if let Some(balanced) = &mut self.balanced {
            balanced.stop();
        }
        self.pulse.stopping(reason.as_str());
        self.services.events.stopping(reason);
        let stopped = std::time::Instant::now();
        let (queue, limit) = (&self.services.queue, self.deadline.limit);
        let take = received::take(queue, &self.queues, &self.permits, limit, reason);
        for (job, permit) in self.pulse.during(None, take).await {
            self.dispatch(job, permit);
        }
        self.deadline.shorten_by(stopped.elapsed());
        self.in_flight.drain(&self.deadline, &self.pulse).await;
        self.pulse.exit();
    }

    /// `stopIfNecessary`: reads what the stop conditions need (the cache
    /// signals, the memory; while jobs keep coming, at most every
    /// [`CHECK_EVERY`](super::cache_signals::CHECK_EVERY)), then
    /// [`stop::decide`]. `found` says whether the last poll reserved a job.
    async fn stop_reason(&mut self, found: bool) -> Option<StopReason> {
        if self.signals.refresh(&self.services, found).await
            && let Some(balanced) = &self.balanced
        {
            balanced.set_paused(self.signals.paused());
        }
        self.reap();
        let seen = self.progress.seen(StopInputs {
            quit: self.control.borrow().quit.is_some(),
            tripped: self.services.on_tripped.should_stop(),
            restarted: self.signals.restarted(),
            in_flight: !self.in_flight.is_empty(),
            read_memory: self.services.options.memory_mb > 0,
            busy: found,
        });
        let reason = stop::decide(&self.services.options, &seen);
        if reason == Some(StopReason::QueueUnreachable) {
            stop::explain_unreachable(&self.services.queue.describe());
        }
        reason
    }

    /// `daemonShouldRun`: not paused by SIGUSR2, and not down for
    /// maintenance (unless `--force`).
    fn should_run(&self) -> bool {
        should_run(&self.control, self.services.down_file.as_deref())
    }

    /// Sleeps for `duration`, cut short by a signal.
    async fn pause(&mut self, duration: Duration) {
        self.pause_unless(duration, std::future::pending()).await;
    }

    /// Sleeps for `duration`, cut short by a signal or by `wake`.
    async fn pause_unless(
        &mut self,
        duration: Duration,
        wake: impl std::future::Future<Output = ()>,
    ) {
        if duration.is_zero() {
            return;
        }
        let control = &mut self.control;
        self.pulse
            .during(None, async {
                tokio::select! {
                    _ = tokio::time::sleep(duration) => {}
                    _ = control.changed() => {}
                    () = wake => {}
                }
            })
            .await;
    }

    /// Resolves once a quit signal has been received.
    fn wait_for_quit(&self) -> impl std::future::Future<Output = ()> + use<> {
        let mut control = self.control.clone();
        async move {
            let _ = control.wait_for(|c| c.quit.is_some()).await;
        }
    }
}

/// What a reservation attempt tells the stop conditions: with
/// `inconclusive` (a queue left out while its jobs ran, or jobs running
/// with `--stop-when-empty`) the queues are not known to be empty.
fn poll_of(reserved: &Reserved, inconclusive: bool) -> Poll {
    match reserved {
        Reserved::Failed => Poll::Failed,
        Reserved::Nothing { .. } if !inconclusive => Poll::Empty,
        Reserved::Jobs(_) | Reserved::Nothing { .. } => Poll::Found,
    }
}
