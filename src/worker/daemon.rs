//! The worker loop (`Worker::daemon`, protocol §6.2).
//!
//! [`Daemon::run`] starts, then turns the loop until a stop condition
//! holds, then drains. Each turn ([`Daemon::turn`]):
//! 1. [`reap`](Daemon::reap) the job tasks that ended and beat the pulse;
//! 2. if paused (SIGUSR2) or the app is down for maintenance (and no
//!    `--force`), [`idle`](Daemon::idle): sleep, then check the stop
//!    conditions;
//! 3. [`wait_for_slot`](Daemon::wait_for_slot) (`--concurrency`); with one
//!    slot, that is the end of the previous job, where Laravel runs
//!    `stopIfNecessary`;
//! 4. [`stop_reason`](Daemon::stop_reason): [`read_signals`](Daemon::read_signals)
//!    (restart key and pause keys, one round trip), then the stop
//!    conditions in Laravel's order: signal, memory, restart key,
//!    `--stop-when-empty`, `--stop-when-empty-for`, `--max-time`, `--max-jobs`, `--once`;
//! 5. [`reserve`](Daemon::reserve) the next job from the queues not
//!    paused, in priority order (or block/sleep when there is none);
//! 6. [`dispatch`](Daemon::dispatch) it to a task of its own: run handler
//!    → settle → `--rest` → free slot (see [`task`](super::task)).
//!
//! With `[worker] balance`, each queue has slots of its own
//! ([`QueueSlots`]): the loop reserves from a queue only while it has
//! room, and a task started with the loop moves the slots every cooldown
//! (see [`rebalance`](super::rebalance)). A job's end or a move wakes a
//! loop waiting for room or for work.
//!
//! On stop, [`drain`](Daemon::drain) reserves nothing more and waits for
//! the jobs in flight, up to the drain deadline.
//!
//! The loop reports through [`JobEvents`] (polled, reserved, stopping; the
//! job tasks emit settled) and never calls an observer by name. Each turn,
//! and each wait (sleep, fetch, free slot, drain), beats the [`Pulse`]:
//! systemd's READY/WATCHDOG/STATUS/STOPPING and the heartbeat file. Errors
//! that repeat are logged through a [`RepeatLimiter`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::balance::Balancer;
use super::events::{JobEvents, Pause};
use super::fetch::{self, Fetched, IdleWait};
use super::slots::QueueSlots;
use super::starts::Tally;
use super::stop::UNREACHABLE_POLLS;
use super::{Services, StopReason, task, unrecorded};
use crate::lifecycle::Pulse;
use crate::log_limit::{DEFAULT_INTERVAL, RepeatLimiter};
use crate::memory::MemoryProbe;
use crate::queue::{QueueKeys, ReservedJob};
use crate::signals::Control;

/// Pause after an error talking to Redis.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Log sites of the loop's repeated errors (see [`RepeatLimiter`]).
const RESERVE_FAILED: &str = "cannot reserve a job";
const SIGNALS_FAILED: &str = "cannot read the restart and pause signals from the cache";

/// How often, at most, the cache signals (restart and pause keys) and the
/// worker's memory are read while jobs keep coming. Laravel reads them
/// after every job; at thousands of jobs a second that is most of the
/// work, so a deploy's `queue:restart` is noticed within this bound instead.
const CHECK_EVERY: Duration = Duration::from_millis(250);

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
    /// Redis could not be reached (logged).
    Failed,
}

/// A running worker.
pub struct Daemon {
    /// What every job task shares: queue, stores, router, listeners, flags.
    services: Arc<Services>,
    /// The queues in priority order (`--queue`), their keys built once.
    queues: Vec<Arc<QueueKeys>>,
    /// Signals received so far (quit, SIGUSR2 pause).
    control: watch::Receiver<Control>,
    /// The worker's own resident memory, for `--memory`.
    memory: MemoryProbe,
    /// When the loop started, for `--max-time`.
    started: Instant,
    /// Jobs reserved so far, for `--max-jobs`.
    reserved: u64,
    /// Whether a poll has run yet (for `--once`).
    polled: bool,
    /// Whether the last poll reserved a job (for `--stop-when-empty`).
    found: bool,
    /// When a job last ended or started (or the loop started), for
    /// `--stop-when-empty-for` (Laravel's `lastJobProcessedAt ?? start`).
    last_job_at: Instant,
    /// The restart marker seen at start: `queue:restart` changes it.
    last_restart: Option<String>,
    /// The restart marker at the last read of the cache signals.
    restart: Option<String>,
    /// When the cache signals were last read (see [`CHECK_EVERY`]).
    signals_read: Option<Instant>,
    /// The resident memory last read, in bytes, and when.
    rss: (u64, Option<Instant>),
    /// How a fetch waits when every queue is empty.
    idle_wait: IdleWait,
    /// How long to sleep after a fetch that waited and found nothing:
    /// `--sleep` with `block_for` set (as Laravel sleeps after its BLPOP),
    /// nothing otherwise (the BLPOP was the sleep).
    sleep_after_wait: Duration,
    /// Per queue (same order as `queues`), whether its pause key is set.
    paused: Vec<bool>,
    /// Whether SIGUSR2 paused the worker, as last reported.
    signal_paused: bool,
    /// One permit per `--concurrency` slot (`max_processes` when
    /// balanced); a job task holds its permit until it is settled and has
    /// rested (`--rest`).
    slots: Arc<Semaphore>,
    /// With `[worker] balance`: the slots of each queue.
    per_queue: Option<Arc<QueueSlots>>,
    /// With `[worker] balance`, until [`Self::start`] hands it to the
    /// rounds' task.
    balancer: Option<Balancer>,
    /// The rounds' task, aborted when the loop stops.
    rounds: Option<tokio::task::JoinHandle<()>>,
    /// Whether the last poll left out a queue without room whose jobs
    /// still run (its queue is not known to be empty).
    skipped_busy: bool,
    /// When balanced, sees the room change from the last poll on.
    room_watch: Option<watch::Receiver<u64>>,
    /// The jobs reserved that have not reached their handler yet.
    starts: Tally,
    /// The jobs whose fate is not in Redis yet.
    unsettled: Tally,
    /// Polls in a row that could not reach Redis.
    failed_polls: u32,
    /// The jobs whose task has not finished settling (failed hook included).
    settling: Tally,
    /// The job tasks not yet ended.
    in_flight: JoinSet<()>,
    /// systemd notifications and the heartbeat file.
    pulse: Pulse,
    /// The longest a fetch may take before the loop counts as stuck
    /// (`None`: no limit). See [`Pulse::during`].
    fetch_limit: Option<Duration>,
    /// Repeated errors of the loop, logged once and then summarised.
    errors: RepeatLimiter,
    /// How long jobs may run on after a stop; `None` waits for them all.
    drain_timeout: Option<Duration>,
    /// Tells the jobs in flight that the drain deadline has passed (the
    /// other end is [`Services::drain_deadline`]).
    drain_deadline: Option<watch::Sender<bool>>,
    /// Writes to the failed-job store the failures kept in Redis while it
    /// was down; runs from [`Self::start`] until the daemon is dropped.
    recorder: Option<unrecorded::Recorder>,
}

impl Daemon {
    /// A worker over `services`, steered by `control`.
    pub fn new(services: Services, control: watch::Receiver<Control>) -> Self {
        let queues: Vec<_> = services
            .options
            .queues
            .iter()
            .map(|q| services.queue.keys(q))
            .collect();
        let slots = Arc::new(Semaphore::new(services.options.slots()));
        let balancer = services.options.balance.clone().map(Balancer::new);
        let per_queue = balancer
            .as_ref()
            .map(|b| QueueSlots::new(services.options.queues.clone(), b.slots()));
        let (idle_wait, sleep_after_wait) =
            idle_wait(services.queue.block_for(), services.options.sleep);
        let fetch_limit = fetch_limit(idle_wait, queues.len());
        Daemon {
            paused: vec![false; queues.len()],
            signal_paused: false,
            queues,
            services: Arc::new(services),
            control,
            memory: MemoryProbe::new(),
            started: Instant::now(),
            reserved: 0,
            polled: false,
            found: true,
            last_job_at: Instant::now(),
            last_restart: None,
            restart: None,
            signals_read: None,
            rss: (0, None),
            idle_wait,
            sleep_after_wait,
            slots,
            per_queue,
            balancer,
            rounds: None,
            skipped_busy: false,
            room_watch: None,
            starts: Tally::default(),
            unsettled: Tally::default(),
            failed_polls: 0,
            settling: Tally::default(),
            in_flight: JoinSet::new(),
            pulse: Pulse::silent(),
            fetch_limit,
            errors: RepeatLimiter::new(DEFAULT_INTERVAL),
            drain_timeout: None,
            drain_deadline: None,
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
        self.drain_timeout = limit;
        self.drain_deadline = Some(deadline);
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
        self.last_restart = match self.services.cache.restart_marker().await {
            Ok(marker) => marker,
            Err(e) => {
                tracing::warn!(
                    "cannot read the restart signal from the cache: {}",
                    crate::error_chain::error_chain(e.as_ref())
                );
                None
            }
        };
        self.restart = self.last_restart.clone();
        self.recorder = Some(unrecorded::start(Arc::clone(&self.services)));
        if let (Some(balancer), Some(per_queue)) = (self.balancer.take(), &self.per_queue) {
            let rounds = super::rebalance::run(
                Arc::clone(&self.services),
                self.queues.clone(),
                Arc::clone(per_queue),
                balancer,
            );
            self.rounds = Some(tokio::spawn(rounds));
        }
        self.started = Instant::now();
        self.last_job_at = self.started;
        let options = &self.services.options;
        tracing::info!(
            connection = %self.services.connection,
            queues = %options.queues.join(","),
            first_key = %self.queues.first().map_or("", |q| q.ready.as_str()),
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
        self.report_signal_pause();
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
        if let Some(reason) = self.stop_reason(self.found).await {
            return Some(reason);
        }
        let mut permits = self.more_free_slots(permit);
        match self.reserve(permits.len()).await {
            Reserved::Jobs(jobs) => {
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
                let room = changed(self.room_watch.clone());
                self.pause_unless(sleep, room).await;
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
    /// more than the handlers can start at once (see
    /// [`Router::free_starts`](crate::handler::router::Router::free_starts)).
    fn more_free_slots(&self, permit: OwnedSemaphorePermit) -> Vec<OwnedSemaphorePermit> {
        let options = &self.services.options;
        let mut limit = options.slots().min(self.services.router.free_starts());
        if let Some(per_queue) = &self.per_queue {
            limit = limit.min(per_queue.room().iter().sum::<usize>().max(1));
        }
        if options.once {
            limit = 1;
        }
        if options.max_jobs > 0 {
            let left = options.max_jobs.saturating_sub(self.reserved).max(1);
            limit = limit.min(usize::try_from(left).unwrap_or(usize::MAX));
        }
        let mut permits = vec![permit];
        while permits.len() < limit {
            match Arc::clone(&self.slots).try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        permits
    }

    /// Collects the job tasks that have ended, noting when the last did.
    fn reap(&mut self) {
        while self.in_flight.try_join_next().is_some() {
            self.last_job_at = Instant::now();
        }
    }

    /// A balanced worker whose queues all have no slot (every
    /// `min_processes` 0 and nothing waiting at the last round) and no job
    /// running.
    fn has_no_slot(&self) -> bool {
        self.per_queue
            .as_ref()
            .is_some_and(|q| self.in_flight.is_empty() && q.room().iter().all(|&room| room == 0))
    }

    /// With no slot at all, the turn is an empty poll: wait `--sleep`
    /// (cut short when a round gives a slot), then check the stop
    /// conditions as after a poll that found nothing.
    async fn idle_without_slots(&mut self) -> Option<StopReason> {
        let moved = changed(self.per_queue.as_ref().map(|q| q.subscribe()));
        self.polled = true;
        self.found = false;
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
        self.polled = true;
        self.stop_reason(false).await
    }

    /// Waits for a free `--concurrency` slot and for every persistent pool
    /// to have a free process (a job reserved before would wait for one,
    /// reserved, and a crash meanwhile would cost it an attempt without a
    /// start). While every slot is busy,
    /// jobs run under their own limits: the loop is waiting, not stuck. A
    /// signal meanwhile ends the wait: `Err(Some(reason))` to stop,
    /// `Err(None)` to start the turn again.
    async fn wait_for_slot(&mut self) -> Result<OwnedSemaphorePermit, Option<StopReason>> {
        let slots = Arc::clone(&self.slots);
        let router = &self.services.router;
        let starts = self.starts.clone();
        let control = &mut self.control;
        let per_queue = self.per_queue.clone();
        let permit = self
            .pulse
            .during(None, async {
                let startable = async {
                    let permit = slots.acquire_owned().await;
                    if let Some(per_queue) = &per_queue {
                        per_queue.until_room().await;
                    }
                    starts.until_all_reached().await;
                    router.until_startable().await;
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
        self.room_watch = self.per_queue.as_ref().map(|q| q.subscribe());
        let room_changed = changed(self.room_watch.clone());
        let (active, counts) = self.pollable(count);
        self.polled = true;
        if active.is_empty() {
            self.found = false;
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
                () = room_changed => {}
            }
        };
        let fetch = fetch::next_jobs(
            &self.services.queue,
            &active,
            &counts,
            self.idle_wait,
            interrupted,
            move || should_run(&control, down_file.as_deref()),
        );
        let fetched = self.pulse.during(self.fetch_limit, fetch).await;
        self.services.events.polled(fetched.is_ok());
        for migrated in self.services.queue.take_migrated() {
            self.services.events.migrated(&migrated);
        }
        let reserved = match fetched {
            Ok(Fetched::Jobs(jobs)) => {
                self.errors.log_resolved(RESERVE_FAILED);
                Reserved::Jobs(jobs)
            }
            Ok(Fetched::Empty { waited }) => {
                self.errors.log_resolved(RESERVE_FAILED);
                Reserved::Nothing { waited }
            }
            Err(e) => {
                let redis = self.services.queue.describe();
                let error = format_args!("{e} (queue Redis at {redis})");
                self.errors
                    .log(tracing::Level::ERROR, RESERVE_FAILED, &error);
                Reserved::Failed
            }
        };
        // A poll that could not reach Redis says nothing about the queues:
        // `--stop-when-empty` waits for one that did, for a few polls
        // (see `UNREACHABLE_POLLS`).
        self.found = self.skipped_busy || !matches!(reserved, Reserved::Nothing { .. });
        match reserved {
            Reserved::Failed => self.failed_polls += 1,
            _ => self.failed_polls = 0,
        }
        reserved
    }

    /// The queues to poll now and how many jobs each may give: the ones
    /// not paused, up to `count` each; when balanced, only those with room,
    /// each up to its room (noting in `skipped_busy` whether one was left
    /// out while its jobs run).
    fn pollable(&mut self, count: usize) -> (Vec<Arc<QueueKeys>>, Vec<usize>) {
        let room = self.per_queue.as_ref().map(|q| (q.room(), q.running()));
        self.skipped_busy = false;
        let mut active = Vec::new();
        let mut counts = Vec::new();
        for (i, (keys, paused)) in self.queues.iter().zip(&self.paused).enumerate() {
            if *paused {
                continue;
            }
            let limit = match &room {
                Some((room, running)) if room[i] == 0 => {
                    self.skipped_busy |= running[i] > 0;
                    continue;
                }
                Some((room, _)) => count.min(room[i]),
                None => count,
            };
            active.push(Arc::clone(keys));
            counts.push(limit);
        }
        (active, counts)
    }

    /// Hands `job` to a task of its own, which holds `permit` (the slot)
    /// until the job is settled and `--rest` has passed; when balanced, it
    /// holds a slot of its queue as long.
    fn dispatch(&mut self, job: ReservedJob, permit: OwnedSemaphorePermit) {
        let queue_slot = self.per_queue.as_ref().and_then(|q| {
            let index = q.position(&job.queue.name)?;
            Some(q.take(index))
        });
        self.reserved += 1;
        self.last_job_at = Instant::now();
        self.services.events.reserved(&job);
        let services = Arc::clone(&self.services);
        let tickets = [self.starts.ticket(), self.unsettled.ticket()];
        let settling = self.settling.ticket();
        let counted = self.pulse.counter().start();
        self.in_flight.spawn(async move {
            // Boxed: the job's future is several KiB (every stage a job
            // goes through, the handler call's included); unboxed, the
            // runtime would copy it whole at each move of the task.
            Box::pin(task::run_job(job, &services, tickets)).await;
            drop(settling);
            drop(counted);
            if !services.options.rest.is_zero() {
                tokio::time::sleep(services.options.rest).await;
            }
            drop(permit);
            drop(queue_slot);
        });
    }

    /// Stops taking jobs and waits for the ones in flight; past the drain
    /// deadline, tells them to give up and waits for their release.
    async fn drain(&mut self, reason: StopReason) {
        if let Some(rounds) = self.rounds.take() {
            rounds.abort();
        }
        self.pulse.stopping(reason.as_str());
        self.services.events.stopping(reason);
        if !self.in_flight.is_empty() {
            tracing::info!(
                jobs = self.in_flight.len(),
                reason = reason.as_str(),
                "stopping: waiting for the jobs in flight"
            );
        }
        if let Some(limit) = self.drain_timeout {
            self.drain_within(limit).await;
        } else {
            self.wait_for_jobs(None).await;
        }
        self.pulse.exit();
    }

    /// The drain deadline bounds the whole exit: jobs run on until the last
    /// quarter of `limit` (at most its last 2 s); those still running are
    /// then told to give up and are released; whatever is still not settled
    /// at `limit` (Redis hung, a slow failed hook) is abandoned where it
    /// stands, so its job stays reserved and is reclaimed after
    /// `retry_after`.
    async fn drain_within(&mut self, limit: Duration) {
        let release_window = (limit / 4).min(Duration::from_secs(2));
        if self.wait_for_jobs(Some(limit - release_window)).await {
            return;
        }
        tracing::warn!(
            jobs = self.in_flight.len(),
            "drain deadline passed: releasing the jobs still running"
        );
        if let Some(deadline) = &self.drain_deadline {
            let _ = deadline.send(true);
        }
        if self.wait_for_jobs(Some(release_window)).await {
            return;
        }
        let (settling, unsettled) = (self.settling.count(), self.unsettled.count());
        self.in_flight.abort_all();
        while self.in_flight.join_next().await.is_some() {}
        report_cut(unsettled, settling.saturating_sub(unsettled));
    }

    /// Waits for every job task to end, for at most `limit` (`None`: no
    /// limit); false when the limit passed first.
    async fn wait_for_jobs(&mut self, limit: Option<Duration>) -> bool {
        let in_flight = &mut self.in_flight;
        let all = async { while in_flight.join_next().await.is_some() {} };
        match limit {
            Some(limit) => self
                .pulse
                .during(None, tokio::time::timeout(limit, all))
                .await
                .is_ok(),
            None => {
                self.pulse.during(None, all).await;
                true
            }
        }
    }

    /// `stopIfNecessary`: the first stop condition that holds, in Laravel's
    /// order. `found` says whether the last poll reserved a job.
    async fn stop_reason(&mut self, found: bool) -> Option<StopReason> {
        if self.control.borrow().quit.is_some() {
            return Some(StopReason::Interrupted);
        }
        if self.services.on_tripped.should_stop() {
            return Some(StopReason::HandlerTripped);
        }
        // While jobs keep coming, the cache and the memory are read at most
        // every CHECK_EVERY; after an empty poll, every time.
        let busy = found;
        if !busy || is_stale(self.signals_read) {
            self.restart = self.read_signals().await;
            self.signals_read = Some(Instant::now());
        }
        // Laravel checks at the end of an iteration: nothing but a signal
        // stops the worker before its first poll.
        if !self.polled {
            return None;
        }
        self.reap();
        let memory_mb = self.services.options.memory_mb;
        if memory_mb > 0 && self.rss_bytes(busy) >= memory_mb * 1024 * 1024 {
            return Some(StopReason::Memory);
        }
        let options = &self.services.options;
        if self.restart != self.last_restart {
            return Some(StopReason::Restart);
        }
        if options.stop_when_empty && !found {
            return Some(StopReason::Empty);
        }
        if options.stop_when_empty && self.failed_polls >= UNREACHABLE_POLLS {
            tracing::error!(
                redis = %self.services.queue.describe(),
                "the queue Redis did not answer {UNREACHABLE_POLLS} polls in a row; \
                 --stop-when-empty cannot tell whether the queues are empty, so the \
                 worker stops with exit status 1"
            );
            return Some(StopReason::RedisUnreachable);
        }
        if self.empty_for(found) {
            return Some(StopReason::EmptyFor);
        }
        if !options.max_time.is_zero() && self.started.elapsed() >= options.max_time {
            return Some(StopReason::MaxTime);
        }
        if options.max_jobs > 0 && self.reserved >= options.max_jobs {
            return Some(StopReason::MaxJobs);
        }
        if options.once {
            return Some(StopReason::Once);
        }
        None
    }

    /// `--stop-when-empty-for`: the last poll found nothing, no job is in
    /// flight, and none has run for the configured time. A job still
    /// running counts as work, as it would in Laravel's one-job loop.
    /// Jobs that ended must have been reaped first.
    fn empty_for(&self, found: bool) -> bool {
        let limit = self.services.options.stop_when_empty_for;
        if limit.is_zero() || found {
            return false;
        }
        self.in_flight.is_empty() && self.last_job_at.elapsed() >= limit
    }

    /// The worker's resident memory in bytes, read again unless `busy` and
    /// read less than [`CHECK_EVERY`] ago.
    fn rss_bytes(&mut self, busy: bool) -> u64 {
        let (bytes, read) = self.rss;
        if busy && !is_stale(read) {
            return bytes;
        }
        let bytes = self.memory.rss_bytes();
        self.rss = (bytes, Some(Instant::now()));
        bytes
    }

    /// Reads the cache signals: notes which queues are paused (logging
    /// changes) and returns the restart marker. On a cache error the last
    /// values stand: a cache outage must neither stop nor pause the worker.
    async fn read_signals(&mut self) -> Option<String> {
        let options = &self.services.options;
        match self
            .services
            .cache
            .signals(&self.services.connection, &options.queues)
            .await
        {
            Ok(signals) => {
                self.errors.log_resolved(SIGNALS_FAILED);
                for ((name, was), now) in
                    options.queues.iter().zip(&self.paused).zip(&signals.paused)
                {
                    if was != now {
                        let state = if *now { "paused" } else { "resumed" };
                        tracing::info!(queue = %name, "queue {state}");
                        let cause = Pause::Queue(name.clone());
                        match now {
                            true => self.services.events.paused(&cause),
                            false => self.services.events.resumed(&cause),
                        }
                    }
                }
                self.paused = signals.paused;
                if let Some(per_queue) = &self.per_queue {
                    per_queue.set_paused(&self.paused);
                }
                signals.restart
            }
            Err(e) => {
                let error = crate::error_chain::error_chain(e.as_ref());
                self.errors
                    .log(tracing::Level::WARN, SIGNALS_FAILED, &error);
                self.last_restart.clone()
            }
        }
    }

    /// Emits `paused` or `resumed` when SIGUSR2 / SIGCONT changed the
    /// worker's state since the last turn.
    fn report_signal_pause(&mut self) {
        let paused = self.control.borrow().paused;
        if paused != self.signal_paused {
            self.signal_paused = paused;
            match paused {
                true => self.services.events.paused(&Pause::Signal),
                false => self.services.events.resumed(&Pause::Signal),
            }
        }
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
    async fn wait_for_quit(&self) {
        let mut control = self.control.clone();
        let _ = control.wait_for(|c| c.quit.is_some()).await;
    }
}

/// `daemonShouldRun` (see [`Daemon::should_run`]): `control` says no
/// SIGUSR2 pause, and `down_file` (the maintenance file, `None` with
/// `--force`) does not exist.
fn should_run(control: &watch::Receiver<Control>, down_file: Option<&std::path::Path>) -> bool {
    if control.borrow().paused {
        return false;
    }
    match down_file {
        Some(file) if file.exists() => {
            tracing::debug!("the application is down for maintenance");
            false
        }
        _ => true,
    }
}

/// Resolves when `changes` sees a change it has not seen yet (for a
/// balanced worker: a job ended or the slots moved); never for `None`.
async fn changed(changes: Option<watch::Receiver<u64>>) {
    match changes {
        Some(mut changes) => {
            let _ = changes.changed().await;
        }
        None => std::future::pending().await,
    }
}

/// True when `read` is unset or [`CHECK_EVERY`] old.
fn is_stale(read: Option<Instant>) -> bool {
    read.is_none_or(|at| at.elapsed() >= CHECK_EVERY)
}

/// How a fetch waits when every queue is empty, and how long the loop then
/// sleeps, from the connection's `block_for` (seconds) and `--sleep`.
///
/// | `block_for` | wait                          | sleep after |
/// |-------------|-------------------------------|-------------|
/// | unset       | BLPOP up to `--sleep`         | none        |
/// | `0`         | BLPOP without a limit         | `--sleep`   |
/// | `n`         | BLPOP up to `n` s             | `--sleep`   |
///
/// With `block_for` unset Laravel sleeps `--sleep` between empty polls; a
/// BLPOP on the notify lists for the same time wakes as soon as a job is
/// pushed (the same wait a PHP worker with `block_for` does, so it stays
/// compatible), which turns a 1.5 s average pickup into about a
/// millisecond. `--sleep=0` polls again at once, as in Laravel.
pub fn idle_wait(block_for: Option<u64>, sleep: Duration) -> (IdleWait, Duration) {
    match block_for {
        None if sleep.is_zero() => (IdleWait::None, Duration::ZERO),
        None => (IdleWait::Block(Some(sleep)), Duration::ZERO),
        Some(0) => (IdleWait::Block(None), sleep),
        Some(n) => (IdleWait::Block(Some(Duration::from_secs(n))), sleep),
    }
}

/// The longest one fetch can legitimately take, after which the loop counts
/// as stuck (no more watchdog pings): every queue polled before and after
/// the wait, each pop within the command timeout, plus the idle wait and
/// the command timeout it is allowed on top. `None` for a wait without a
/// limit (`block_for = 0`).
pub fn fetch_limit(idle: IdleWait, queues: usize) -> Option<Duration> {
    use crate::queue::COMMAND_TIMEOUT;
    let wait = match idle {
        IdleWait::Block(None) => return None,
        IdleWait::Block(Some(wait)) => wait.saturating_add(COMMAND_TIMEOUT),
        IdleWait::None => Duration::ZERO,
    };
    let polls = u32::try_from(queues.saturating_mul(2)).unwrap_or(u32::MAX);
    Some(COMMAND_TIMEOUT.saturating_mul(polls).saturating_add(wait))
}

/// Logs the job tasks the drain deadline cut: `unsettled` jobs whose fate
/// never reached Redis (they stay reserved), and `hooks` jobs already
/// settled (recorded as failed) whose failed hook was cut short.
fn report_cut(unsettled: usize, hooks: usize) {
    if unsettled > 0 {
        tracing::error!(
            jobs = unsettled,
            "drain deadline passed before these jobs could be settled; \
             they stay reserved and are reclaimed after retry_after \
             (unless a release or delete already sent still reaches Redis)"
        );
    }
    if hooks > 0 {
        tracing::warn!(
            jobs = hooks,
            "drain deadline passed while the failed hook of these jobs ran; \
             they were already recorded as failed and removed from the queue, \
             their hook was cut short"
        );
    }
}
