//! The worker loop (`Worker::daemon`, protocol §6.2).
//!
//! Each iteration:
//! 1. if paused (SIGUSR2) or the app is down for maintenance (and no
//!    `--force`), sleep and check the stop conditions;
//! 2. wait for a free slot (`--concurrency`); with one slot, that is the
//!    end of the previous job, where Laravel runs `stopIfNecessary`;
//! 3. read the cache signals (restart key and pause keys, one round trip)
//!    and check the stop conditions: signal, memory, restart key,
//!    `--stop-when-empty`, `--max-time`, `--max-jobs`, `--once`;
//! 4. reserve the next job from the queues not paused, in priority order
//!    (or block/sleep when there is none);
//! 5. hand the job to a task: run handler → settle → `--rest` → free slot.
//!
//! On stop, the loop reserves nothing more and waits for the jobs in flight.
//!
//! Each iteration, and each wait (sleep, fetch, free slot, drain), beats
//! the [`Pulse`]: systemd's READY/WATCHDOG/STATUS/STOPPING and the
//! heartbeat file. Errors that repeat are logged through a
//! [`RepeatLimiter`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::process::{Verdict, decide};
use super::settle::settle;
use super::{Services, StopReason, fetch};
use crate::exception::{JobException, WORKER_STOPPED};
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

/// A running worker.
pub struct Daemon {
    services: Arc<Services>,
    queues: Vec<Arc<QueueKeys>>,
    control: watch::Receiver<Control>,
    memory: MemoryProbe,
    started: Instant,
    reserved: u64,
    /// Whether a poll has run yet (for `--once`).
    polled: bool,
    last_restart: Option<String>,
    /// Per queue (same order as `queues`), whether its pause key is set.
    paused: Vec<bool>,
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
    /// other end is [`Services::hand_back`]).
    hand_back: Option<watch::Sender<bool>>,
}

impl Daemon {
    /// A worker over `services`, steered by `control`.
    pub fn new(services: Services, control: watch::Receiver<Control>) -> Self {
        let queues = services
            .options
            .queues
            .iter()
            .map(|q| services.queue.keys(q))
            .collect();
        Daemon {
            services: Arc::new(services),
            queues,
            control,
            memory: MemoryProbe::new(),
            started: Instant::now(),
            reserved: 0,
            polled: false,
            last_restart: None,
            paused: Vec::new(),
            pulse: Pulse::silent(),
            fetch_limit: None,
            errors: RepeatLimiter::new(DEFAULT_INTERVAL),
            drain_timeout: None,
            hand_back: None,
        }
    }

    /// Gives the jobs in flight `limit` to finish once the worker stops;
    /// then `hand_back` (whose receiver is [`Services::hand_back`]) tells
    /// them to give up, and they are released. With `limit` `None` every
    /// job is awaited, as `queue:work` does.
    pub fn with_drain_timeout(
        mut self,
        limit: Option<Duration>,
        hand_back: watch::Sender<bool>,
    ) -> Self {
        self.drain_timeout = limit;
        self.hand_back = Some(hand_back);
        self
    }

    /// Reports readiness, progress and draining through `pulse`; a fetch
    /// lasting longer than `fetch_limit` stops its beats.
    pub fn with_pulse(mut self, pulse: Pulse, fetch_limit: Option<Duration>) -> Self {
        self.pulse = pulse;
        self.fetch_limit = fetch_limit;
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
        self.last_restart = match self.services.cache.restart_marker().await {
            Ok(marker) => marker,
            Err(e) => {
                tracing::warn!("cannot read the restart signal from the cache: {e:#}");
                None
            }
        };
        self.paused = vec![false; self.queues.len()];
        self.started = Instant::now();
        let options = self.services.options.clone();
        tracing::info!(
            connection = %self.services.connection,
            queues = %options.queues.join(","),
            first_key = %self.queues.first().map_or("", |q| q.ready.as_str()),
            concurrency = options.concurrency,
            "worker started"
        );
        let slots = Arc::new(Semaphore::new(options.concurrency.max(1)));
        let mut in_flight = JoinSet::new();
        let counter = self.pulse.counter();
        self.pulse.ready();
        // Whether the last poll reserved a job (`--stop-when-empty`).
        let mut found = true;

        let reason = loop {
            while in_flight.try_join_next().is_some() {}
            self.pulse.beat();

            if !self.should_run() {
                self.pause(options.sleep.max(Duration::from_secs(1))).await;
                self.polled = true;
                if let Some(reason) = self.stop_reason(false).await {
                    break reason;
                }
                continue;
            }

            // While every slot is busy, jobs run under their own limits:
            // the loop is waiting, not stuck.
            let permit = self
                .pulse
                .during(None, async {
                    tokio::select! {
                        permit = Arc::clone(&slots).acquire_owned() => Some(permit),
                        _ = self.control.changed() => None,
                    }
                })
                .await;
            let permit = match permit {
                Some(permit) => permit,
                None => match self.stop_reason(true).await {
                    Some(reason) => break reason,
                    None => continue,
                },
            };
            let Ok(permit) = permit else {
                break StopReason::Interrupted;
            };
            if let Some(reason) = self.stop_reason(found).await {
                break reason;
            }

            let active: Vec<Arc<QueueKeys>> = self
                .queues
                .iter()
                .zip(&self.paused)
                .filter(|(_, paused)| !**paused)
                .map(|(q, _)| Arc::clone(q))
                .collect();
            let fetched = if active.is_empty() {
                Ok(None)
            } else {
                let fetch = fetch::next_job(&self.services.queue, &active, self.wait_for_quit());
                self.pulse.during(self.fetch_limit, fetch).await
            };
            self.polled = true;
            found = match fetched {
                Ok(Some(job)) => {
                    self.errors.log_resolved(RESERVE_FAILED);
                    self.services.metrics.poll_result(true);
                    self.services.metrics.job_started();
                    self.reserved += 1;
                    self.services.reporter.starting(&job);
                    let services = Arc::clone(&self.services);
                    let counted = counter.start();
                    in_flight.spawn(async move {
                        run_job(job, &services).await;
                        drop(counted);
                        if !services.options.rest.is_zero() {
                            tokio::time::sleep(services.options.rest).await;
                        }
                        drop(permit);
                    });
                    true
                }
                Ok(None) => {
                    self.errors.log_resolved(RESERVE_FAILED);
                    if !active.is_empty() {
                        self.services.metrics.poll_result(true);
                    }
                    drop(permit);
                    self.pause(options.sleep).await;
                    false
                }
                Err(e) => {
                    drop(permit);
                    self.services.metrics.poll_result(false);
                    self.errors.log(tracing::Level::ERROR, RESERVE_FAILED, &e);
                    self.pause(ERROR_PAUSE).await;
                    false
                }
            };
        };

        self.pulse.stopping(reason.as_str());
        self.services.metrics.stopping();
        if !in_flight.is_empty() {
            tracing::info!(
                jobs = in_flight.len(),
                reason = reason.as_str(),
                "stopping: waiting for the jobs in flight"
            );
        }
        let drain = async { while in_flight.join_next().await.is_some() {} };
        let drained = match self.drain_timeout {
            Some(limit) => self
                .pulse
                .during(None, tokio::time::timeout(limit, drain))
                .await
                .is_ok(),
            None => {
                self.pulse.during(None, drain).await;
                true
            }
        };
        if !drained {
            tracing::warn!(
                jobs = in_flight.len(),
                "drain deadline passed: handing the jobs in flight back"
            );
            if let Some(hand_back) = &self.hand_back {
                let _ = hand_back.send(true);
            }
            self.pulse
                .during(None, async {
                    while in_flight.join_next().await.is_some() {}
                })
                .await;
        }
        self.pulse.exit();
        reason
    }

    /// `stopIfNecessary`: the first stop condition that holds, in Laravel's
    /// order. `found` says whether the last poll reserved a job.
    async fn stop_reason(&mut self, found: bool) -> Option<StopReason> {
        if self.control.borrow().quit.is_some() {
            return Some(StopReason::Interrupted);
        }
        // Laravel checks at the end of an iteration: nothing but a signal
        // stops the worker before its first poll.
        let restart = self.read_signals().await;
        if !self.polled {
            return None;
        }
        let options = &self.services.options;
        if options.memory_mb > 0 && self.memory.rss_bytes() >= options.memory_mb * 1024 * 1024 {
            return Some(StopReason::Memory);
        }
        if restart != self.last_restart {
            return Some(StopReason::Restart);
        }
        if options.stop_when_empty && !found {
            return Some(StopReason::Empty);
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
                    }
                }
                self.paused = signals.paused;
                signals.restart
            }
            Err(e) => {
                self.errors
                    .log(tracing::Level::WARN, SIGNALS_FAILED, &format_args!("{e:#}"));
                self.last_restart.clone()
            }
        }
    }

    /// `daemonShouldRun`: not paused by SIGUSR2, and not down for
    /// maintenance (unless `--force`).
    fn should_run(&self) -> bool {
        if self.control.borrow().paused {
            return false;
        }
        match &self.services.down_file {
            Some(file) if file.exists() => {
                tracing::debug!("the application is down for maintenance");
                false
            }
            _ => true,
        }
    }

    /// Sleeps for `duration`, cut short by a signal.
    async fn pause(&mut self, duration: Duration) {
        if duration.is_zero() {
            return;
        }
        let control = &mut self.control;
        self.pulse
            .during(None, async {
                tokio::select! {
                    _ = tokio::time::sleep(duration) => {}
                    _ = control.changed() => {}
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

/// One job, start to end: decide (runs the handler), settle, report.
///
/// If the drain deadline passes first, the handler call is abandoned (its
/// process group is killed as the call is dropped) and the job released at
/// once, the attempt counted, as a reclaim after a crash would count it.
async fn run_job(job: ReservedJob, services: &Services) {
    let started = Instant::now();
    let mut hand_back = services.hand_back.clone();
    let deadline = async move {
        if hand_back.wait_for(|&now| now).await.is_err() {
            // No deadline can come any more.
            std::future::pending::<()>().await;
        }
    };
    let verdict = tokio::select! {
        verdict = decide(&job, services) => verdict,
        () = deadline => Verdict::Release {
            delay: 0,
            exception: Some(JobException::new(
                WORKER_STOPPED,
                format!("{} was still running when the worker's drain deadline passed.", job.display_name()),
            )),
        },
    };
    settle(&job, &verdict, services).await;
    services
        .metrics
        .job_settled(&job.queue.name, &verdict, started.elapsed());
    services
        .reporter
        .finished(&job, &verdict, started.elapsed());
    crate::memory::after_job(job, &services.queue).await;
}
