//! A pool of warm processes: the processes of one persistent handler,
//! which follow the load between a minimum and a size.
//!
//! - **Size** (`[[handlers]] processes`): the most calls in flight, and so
//!   the most processes. A process is started when a call finds none idle
//!   (a job arriving at an empty pool waits for one start, not more).
//! - **Minimum** (`min_processes`, default 0): processes started when the
//!   pool starts and kept however idle; one that ends is replaced.
//! - **Idle timeout** (`idle_timeout`, seconds, default none): a process
//!   idle that long is retired (stdin closed, then its group killed after
//!   the kill grace), down to the minimum. Calls take the most recently
//!   idle process, so the ones a lighter load no longer needs age out.
//! - **Recycling** (`max_jobs`, `max_memory`): a process due is retired
//!   when it hands a call back.
//!
//! [`Pool::resize`] changes the size while the worker runs: growing lets
//! more calls start at once, their processes started on demand; shrinking
//! retires idle processes at once and the others only as their calls end,
//! never a process in the middle of a call. [`Pool::stats`] tells its
//! counts (size, minimum, alive, busy, idle) to whoever watches (the
//! metrics gauges, an autoscaler in the worker).
//!
//! In a pipelined pool (`pipeline = true`), a call that finds every
//! process busy may also take a place behind one ([`Pool::take`], see
//! [`super::pipeline`]).
//!
//! A keeper task ([`Pool::start`]) retires the idle processes and starts
//! the minimum; without an idle timeout and with a minimum of 0 (the
//! defaults) it never has anything to do and processes live until the
//! worker exits, as they always have.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::call_permits::{Acquired, CallPermit, CallPermits, Waiting};
use super::pipeline::{Behind, Pipeline};
use super::warm::{Census, Handoff, Process, Spawn};

/// How long the keeper waits before trying again to start the minimum
/// after a process could not be started.
const START_RETRY: Duration = Duration::from_secs(5);

/// How a pool follows the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Most processes (and calls in flight); at least 1.
    pub size: usize,
    /// Processes kept however idle (at most `size`).
    pub min: usize,
    /// Idle time after which a process above the minimum is retired;
    /// `None` keeps them.
    pub idle_timeout: Option<Duration>,
    /// Calls before a process is replaced; 0 = never.
    pub max_jobs: u64,
    /// Resident MB above which a process is replaced after a call; 0 = never.
    pub max_memory_mb: u64,
    /// Time between SIGTERM and SIGKILL when a process must go.
    pub kill_grace: Duration,
    /// Calls that may wait for a busy process (`reserve_ahead`): the
    /// worker reserves that many jobs ahead of the free processes, so the
    /// next job is ready as a call ends; `None`: one per process (the size).
    pub reserve_ahead: Option<usize>,
    /// Whether a busy process is sent its next request before it answers
    /// (`pipeline`, see [`super::pipeline`]).
    pub pipeline: bool,
}

/// What a call gets from [`Pool::take`].
#[derive(Debug)]
pub enum Taken {
    /// A permit: the call checks out a process ([`Pool::checkout`]).
    Free(CallPermit),
    /// A place behind a busy process, the call counted among the waiting
    /// until the process is handed to it.
    Behind(Behind<Handoff>, Waiting),
}

/// A pool's counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Most calls in flight (and processes) now.
    pub size: usize,
    /// Processes kept however idle.
    pub min: usize,
    /// Processes started and not yet ended (retiring ones included).
    pub alive: usize,
    /// Calls in flight (above `size` for a while after a shrink).
    pub busy: usize,
    /// Processes waiting for a call.
    pub idle: usize,
}

/// The warm processes of one persistent handler.
#[derive(Debug)]
pub struct Pool {
    spawn: Spawn,
    settings: PoolSettings,
    permits: Arc<CallPermits>,
    /// The places behind busy processes, when pipelined.
    pipeline: Option<Arc<Pipeline<Handoff>>>,
    min: AtomicUsize,
    census: Arc<Census>,
    /// Idle processes, longest idle first.
    idle: Mutex<VecDeque<Idle>>,
    /// Wakes the keeper: a deadline or the minimum may have changed.
    changed: Arc<Notify>,
    keeper: AtomicBool,
}

/// A process waiting for a call, since when.
#[derive(Debug)]
struct Idle {
    process: Process,
    since: Instant,
}

impl Pool {
    /// A pool running `spawn`'s command as `settings` say. No process is
    /// started before [`Pool::start`] or the first call.
    pub fn new(spawn: Spawn, settings: PoolSettings) -> Self {
        Pool {
            spawn,
            permits: Arc::new(CallPermits::new(settings.size)),
            pipeline: settings.pipeline.then(Arc::default),
            min: AtomicUsize::new(settings.min),
            settings,
            census: Arc::default(),
            idle: Mutex::new(VecDeque::new()),
            changed: Arc::new(Notify::new()),
            keeper: AtomicBool::new(false),
        }
    }

    /// The program run (for messages).
    pub fn program(&self) -> &str {
        &self.spawn.command[0]
    }

    /// Its counts now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            size: self.permits.size(),
            min: self.min.load(Ordering::SeqCst),
            alive: self.census.alive(),
            busy: self.permits.taken(),
            idle: self.idle().len(),
        }
    }

    /// Sets the size (at least 1) while calls run: see the module docs.
    /// The minimum is lowered to the size when above it.
    pub fn resize(&self, size: usize) {
        let size = size.max(1);
        self.permits.resize(size);
        let _ = self
            .min
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
                (m > size).then_some(size)
            });
        let mut idle = self.idle();
        while self.census.members() > size {
            let Some(oldest) = idle.pop_front() else {
                break;
            };
            oldest.process.retire(self.settings.kill_grace);
        }
        drop(idle);
        self.changed.notify_one();
    }

    /// Starts the keeper (once; later calls do nothing): it starts the
    /// minimum and retires processes idle past the timeout.
    pub fn start(self: &Arc<Self>) {
        if !self.keeper.swap(true, Ordering::SeqCst) {
            tokio::spawn(keep(Arc::downgrade(self), Arc::clone(&self.changed)));
        }
    }

    /// How many more calls may come now: free processes plus the places
    /// left among the `reserve_ahead` calls allowed to wait for one.
    pub fn room(&self) -> usize {
        self.permits.room(self.ahead())
    }

    /// Resolves once [`Self::room`] is above 0.
    pub async fn until_room(&self) {
        self.permits.until_room(self.ahead()).await;
    }

    /// `reserve_ahead`, its default being the size now.
    fn ahead(&self) -> usize {
        self.settings
            .reserve_ahead
            .unwrap_or_else(|| self.permits.size())
    }

    /// Waits for a slot for one call: a free permit or, when pipelined,
    /// a place behind a busy process, whichever comes first.
    pub async fn take(&self) -> Taken {
        let Some(pipeline) = &self.pipeline else {
            return Taken::Free(self.permits.acquire().await);
        };
        match self.permits.acquire_or(|| pipeline.take_place()).await {
            Acquired::Permit(permit) => Taken::Free(permit),
            Acquired::Other(behind, waiting) => Taken::Behind(behind, waiting),
        }
    }

    /// Offers a place behind the call now in flight on `process` (its
    /// request written), when the pool is pipelined and the process will
    /// take another call after this one: not due for recycling, and not
    /// above the size.
    pub fn offer_place(&self, process: &mut Process) {
        let Some(pipeline) = &self.pipeline else {
            return;
        };
        let s = &self.settings;
        let worn = s.max_jobs > 0 && process.calls + 2 > s.max_jobs;
        if worn
            || self.census.members() > self.permits.size()
            || process.above_memory(s.max_memory_mb)
        {
            return;
        }
        process.set_lead(pipeline.open(process.pid, process.input()));
        self.permits.announce();
    }

    /// Ends the call whose answer is in: hands `process` and `permit` to
    /// the call behind it, if one took its place, else takes the process
    /// back ([`Self::check_in`]) and frees the permit.
    pub fn finish(&self, mut process: Process, permit: CallPermit) {
        let Some(behind) = process.close_lead() else {
            self.check_in(process);
            return;
        };
        if let Err(handoff) = behind.send(Handoff { process, permit }) {
            // The call behind is gone (abandoned), its request perhaps in
            // the pipe: the process would run it for nobody. Dropping it
            // kills its group.
            tracing::info!(
                pid = handoff.process.pid,
                "the call behind was abandoned; ending its handler process"
            );
            drop(handoff);
            self.changed.notify_one();
        }
    }

    fn idle(&self) -> MutexGuard<'_, VecDeque<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently idle process that is still alive and in step, or
    /// a new one. Idle processes found dead or broken are retired on the
    /// way.
    ///
    /// # Errors
    /// No process is idle and a new one cannot be started.
    pub fn checkout(&self) -> std::io::Result<Process> {
        loop {
            let Some(Idle { mut process, .. }) = self.idle().pop_back() else {
                let process = Process::spawn(&self.spawn, &self.census)?;
                self.changed.notify_one();
                return Ok(process);
            };
            match process.unusable() {
                None => return Ok(process),
                Some(why) => {
                    tracing::info!(
                        pid = process.pid,
                        "idle handler process {why}; replacing it"
                    );
                    self.retire(process);
                }
            }
        }
    }

    /// Takes back a process whose call has ended: idle again, or retired
    /// when recycling says so or the pool has shrunk below its members.
    pub fn check_in(&self, process: Process) {
        let s = &self.settings;
        let worn = s.max_jobs > 0 && process.calls >= s.max_jobs;
        let heavy = process.above_memory(s.max_memory_mb);
        if worn || heavy {
            tracing::info!(
                calls = process.calls,
                worn,
                heavy,
                "recycling a handler process"
            );
            self.retire(process);
        } else if self.census.members() > self.permits.size() {
            tracing::info!(pid = process.pid, "the pool shrank: retiring a process");
            self.retire(process);
        } else {
            let mut idle = self.idle();
            let was_empty = idle.is_empty();
            idle.push_back(Idle {
                process,
                since: Instant::now(),
            });
            if was_empty {
                self.changed.notify_one();
            }
        }
    }

    /// Retires a process (see [`Process::retire`]); the keeper starts a new
    /// one if the pool falls below its minimum.
    pub fn retire(&self, process: Process) {
        process.retire(self.settings.kill_grace);
        self.changed.notify_one();
    }

    /// Ends a process at once (it broke the protocol or died mid-call).
    /// A call behind it hears of it once it has ended.
    pub async fn end(&self, mut process: Process) {
        let behind = process.close_lead();
        process.end().await;
        drop(behind);
        self.changed.notify_one();
    }

    /// Stops a process whose call ran past its time limit (SIGTERM, then
    /// SIGKILL after `grace`); returns the last signal sent. A call behind
    /// it hears of it once it has ended.
    pub async fn kill(&self, mut process: Process, grace: Duration) -> nix::sys::signal::Signal {
        let behind = process.close_lead();
        let signal = process.kill(grace).await;
        drop(behind);
        self.changed.notify_one();
        signal
    }

    /// One round of the keeper: retires the processes idle past the
    /// timeout down to the minimum, starts processes up to it, and says
    /// when to look again (`None`: when woken).
    fn tend(&self) -> Option<Instant> {
        let now = Instant::now();
        let min = self.min.load(Ordering::SeqCst).min(self.permits.size());
        let mut idle = self.idle();
        let mut next = None;
        if let Some(timeout) = self.settings.idle_timeout {
            while self.census.members() > min {
                match idle.front() {
                    Some(oldest) if oldest.since + timeout <= now => {}
                    Some(oldest) => {
                        next = Some(oldest.since + timeout);
                        break;
                    }
                    None => break,
                }
                if let Some(oldest) = idle.pop_front() {
                    tracing::info!(pid = oldest.process.pid, "retiring an idle handler process");
                    oldest.process.retire(self.settings.kill_grace);
                }
            }
        }
        while self.census.members() < min {
            match Process::spawn(&self.spawn, &self.census) {
                Ok(process) => idle.push_back(Idle {
                    process,
                    since: now,
                }),
                Err(e) => {
                    tracing::warn!(
                        program = self.program(),
                        "cannot start a handler process: {e}"
                    );
                    return Some(
                        next.map_or(now + START_RETRY, |n: Instant| n.min(now + START_RETRY)),
                    );
                }
            }
        }
        next
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // The keeper finds the pool gone and ends.
        self.changed.notify_one();
    }
}

/// The keeper of a pool: tends it each time it is woken or a deadline
/// passes, until the pool is dropped.
async fn keep(pool: Weak<Pool>, changed: Arc<Notify>) {
    loop {
        let woken = changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let next = match pool.upgrade() {
            Some(pool) => pool.tend(),
            None => return,
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = woken => {}
                }
            }
            None => woken.await,
        }
    }
}
