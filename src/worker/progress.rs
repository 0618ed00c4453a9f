//! [`Progress`]: what the loop counts for its stop conditions (jobs
//! reserved, the last poll, when the last job ran, the worker's memory),
//! owned in one place and read as one [`Seen`] by the stop decision.

use std::time::{Duration, Instant};

use super::stop::Seen;
use crate::memory::MemoryProbe;

/// How often, at most, the worker's memory is read while jobs keep coming
/// (Laravel reads it after every job; see the loop's `CHECK_EVERY`).
pub const MEMORY_EVERY: Duration = Duration::from_millis(250);

/// What the last poll gave, as the stop conditions need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// It reserved jobs, or left out a queue whose jobs still run: the
    /// queues are not known to be empty.
    Found,
    /// Every queue it polled was empty (or paused).
    Empty,
    /// The queue could not be reached: nothing is known of the queues.
    Failed,
}

/// The loop's counters for its stop conditions.
pub struct Progress {
    started: Instant,
    reserved: u64,
    polled: bool,
    found: bool,
    last_job_at: Instant,
    failed_polls: u32,
    memory: MemoryProbe,
    /// The resident memory last read, in bytes, and when.
    rss: (u64, Option<Instant>),
}

impl Default for Progress {
    fn default() -> Self {
        Progress {
            started: Instant::now(),
            reserved: 0,
            polled: false,
            found: true,
            last_job_at: Instant::now(),
            failed_polls: 0,
            memory: MemoryProbe::new(),
            rss: (0, None),
        }
    }
}

/// What the loop read for a stop decision, beside [`Progress`]'s own
/// counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct StopInputs {
    /// SIGTERM, SIGINT or SIGQUIT arrived.
    pub quit: bool,
    /// A handler tripped and asked the worker to stop.
    pub tripped: bool,
    /// `queue:restart` was signalled since the start.
    pub restarted: bool,
    /// A job is still running.
    pub in_flight: bool,
    /// `--memory` is on: read the resident memory.
    pub read_memory: bool,
    /// The last poll found a job: the memory reading is taken again only
    /// after [`MEMORY_EVERY`].
    pub busy: bool,
}

impl Progress {
    /// The loop starts now (for `--max-time` and `--stop-when-empty-for`).
    pub fn start(&mut self) {
        self.started = Instant::now();
        self.last_job_at = self.started;
    }

    /// A job was reserved and handed to its task.
    pub fn job_started(&mut self) {
        self.reserved += 1;
        self.last_job_at = Instant::now();
    }

    /// A job's task ended.
    pub fn job_ended(&mut self) {
        self.last_job_at = Instant::now();
    }

    /// A poll ran and gave `poll`. A failed poll says nothing about the
    /// queues, so it counts as found (see [`Poll::Failed`]).
    pub fn polled(&mut self, poll: Poll) {
        self.polled = true;
        self.found = poll != Poll::Empty;
        match poll {
            Poll::Failed => self.failed_polls += 1,
            Poll::Found | Poll::Empty => self.failed_polls = 0,
        }
    }

    /// A turn that could not poll (paused, down for maintenance) ran: it
    /// counts as an iteration, the last poll's result stands.
    pub fn idled(&mut self) {
        self.polled = true;
    }

    /// Jobs reserved so far (`--max-jobs`).
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Whether the last poll found work (or could not tell).
    pub fn found(&self) -> bool {
        self.found
    }

    /// How long a receive may stay in flight before a foreseen stop (see
    /// [`super::stop::poll_horizon`]), as of now.
    pub fn poll_horizon(&self, options: &super::options::WorkerOptions) -> Option<Duration> {
        if !super::stop::foresees_a_stop(options) {
            return None;
        }
        let (idle_for, ran_for) = (self.last_job_at.elapsed(), self.started.elapsed());
        super::stop::poll_horizon(options, idle_for, ran_for)
    }

    /// What the stop decision needs: these counters, and what the loop
    /// read (`inputs`).
    pub fn seen(&mut self, inputs: StopInputs) -> Seen {
        Seen {
            quit: inputs.quit,
            tripped: inputs.tripped,
            polled: self.polled,
            rss_bytes: if inputs.read_memory {
                self.rss_bytes(inputs.busy)
            } else {
                0
            },
            restarted: inputs.restarted,
            found: self.found,
            failed_polls: self.failed_polls,
            idle_for: (!inputs.in_flight).then(|| self.last_job_at.elapsed()),
            ran_for: self.started.elapsed(),
            reserved: self.reserved,
        }
    }

    fn rss_bytes(&mut self, busy: bool) -> u64 {
        let (bytes, read) = self.rss;
        if busy && read.is_some_and(|at| at.elapsed() < MEMORY_EVERY) {
            return bytes;
        }
        let bytes = self.memory.rss_bytes();
        self.rss = (bytes, Some(Instant::now()));
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_poll_counts_as_found_and_is_counted_in_a_row() {
        let mut p = Progress::default();
        p.polled(Poll::Failed);
        p.polled(Poll::Failed);
        let seen = p.seen(StopInputs::default());
        assert!(seen.found && seen.polled);
        assert_eq!(seen.failed_polls, 2);
        p.polled(Poll::Empty);
        let seen = p.seen(StopInputs::default());
        assert!(!seen.found);
        assert_eq!(seen.failed_polls, 0);
    }

    #[test]
    fn a_job_in_flight_is_never_idle() {
        let mut p = Progress::default();
        p.job_started();
        assert_eq!(
            p.seen(StopInputs {
                in_flight: true,
                ..StopInputs::default()
            })
            .idle_for,
            None
        );
        assert_eq!(p.seen(StopInputs::default()).reserved, 1);
    }
}
