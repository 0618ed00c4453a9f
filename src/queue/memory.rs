//! [`MemoryQueue`]: a queue held in this process, implementing the whole
//! [`Driver`] core in a few lines: what the seam promises, and nothing a
//! server adds.
//!
//! It drives the unit tests of the worker loop and the seam's contract
//! test (the same checks run on every real driver). Each reservation gets
//! a fresh token, so a write naming a reservation that was reclaimed,
//! released or deleted since finds it gone and changes nothing, as on
//! Redis (the member no longer in `:reserved`) or a table (the guard on
//! `reserved_at`). [`MemoryQueue::fail_next`] makes the next calls of one
//! operation fail with a chosen [`ErrorKind`], as an outage or a refusal
//! would.
//!
//! Not a queue to run jobs with: nothing is shared between processes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::ReservedJob;
use super::clock::now;
use super::companion::Ending;
use super::driver::{Call, Driver};
use super::error::{ErrorKind, QueueError, QueueResult};
use super::handle::QueueHandle;
use super::job::{DriverHandle, Lease, Reservation};
use super::payload::Payload;
use super::sizes::{HeadAge, QueueSizes};

/// The operations [`MemoryQueue::fail_next`] can make fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`Driver::pop`].
    Pop,
    /// [`Driver::delete`].
    Delete,
    /// [`Driver::release`].
    Release,
    /// [`Driver::hand_back`].
    HandBack,
    /// [`Driver::renew`].
    Renew,
}

/// A queue in memory (see the module's documentation).
pub struct MemoryQueue {
    /// Seconds a reservation lasts before a pop reclaims it (`None`: never).
    retry_after: Option<u64>,
    state: Mutex<State>,
}

/// Every queue's jobs, and the faults still to come.
#[derive(Default)]
struct State {
    queues: HashMap<String, Jobs>,
    /// The last token given to a reservation.
    last_token: u64,
    /// The last job id given.
    last_id: u64,
    /// Calls still to fail, per operation, with the kind they fail with.
    faults: HashMap<Operation, (ErrorKind, usize)>,
}

/// One queue's jobs, by state.
#[derive(Default)]
struct Jobs {
    ready: VecDeque<Stored>,
    /// Jobs not due yet, with when they are (UNIX seconds).
    delayed: Vec<(i64, Stored)>,
    /// Reserved jobs by token, with when the reservation lapses.
    reserved: HashMap<u64, (Stored, Option<Instant>)>,
}

/// A job as the queue holds it.
#[derive(Clone)]
struct Stored {
    id: u64,
    payload: Bytes,
    /// Reservations so far (Laravel's `attempts`).
    attempts: u64,
}

/// What names a reservation to the memory queue.
#[derive(Debug)]
struct Token {
    queue: String,
    token: u64,
}

impl MemoryQueue {
    /// An empty queue whose reservations last `retry_after` seconds
    /// (`None`: for ever).
    pub fn new(retry_after: Option<u64>) -> Self {
        MemoryQueue {
            retry_after,
            state: Mutex::new(State::default()),
        }
    }

    /// Makes the next `times` calls of `operation` fail with `kind`, as
    /// an outage ([`ErrorKind::Unavailable`]) or a refusal would.
    pub fn fail_next(&self, operation: Operation, kind: ErrorKind, times: usize) {
        self.state().faults.insert(operation, (kind, times));
    }

    /// Ends every reservation of `queue` now, as a lapsed lease that
    /// another worker reclaimed: the jobs are ready again, their attempts
    /// kept.
    pub fn reclaim(&self, queue: &str) {
        let mut state = self.state();
        let jobs = state.queues.entry(queue.to_string()).or_default();
        let mut lapsed: Vec<Stored> = jobs.reserved.drain().map(|(_, (job, _))| job).collect();
        lapsed.sort_by_key(|job| job.id);
        jobs.ready.extend(lapsed);
    }

    /// The attempts of every job of `queue`, by state: ready, delayed,
    /// reserved (each in id order).
    pub fn attempts(&self, queue: &str) -> [Vec<u64>; 3] {
        let mut state = self.state();
        let jobs = state.queues.entry(queue.to_string()).or_default();
        let mut reserved: Vec<&Stored> = jobs.reserved.values().map(|(job, _)| job).collect();
        reserved.sort_by_key(|job| job.id);
        [
            jobs.ready.iter().map(|job| job.attempts).collect(),
            jobs.delayed.iter().map(|(_, job)| job.attempts).collect(),
            reserved.iter().map(|job| job.attempts).collect(),
        ]
    }

    fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The fault due for this call of `operation`, if any.
    fn fault(&self, operation: Operation) -> QueueResult<()> {
        let mut state = self.state();
        let Some((kind, left)) = state.faults.get_mut(&operation) else {
            return Ok(());
        };
        if *left == 0 {
            return Ok(());
        }
        *left -= 1;
        Err(QueueError::Other {
            kind: *kind,
            message: format!("the memory queue was told to fail this {operation:?}"),
        })
    }

    /// Runs `write` on the reservation `job` names, when it is still held:
    /// `write` gets the queue's jobs and the reserved job, taken out.
    fn settle(
        &self,
        operation: Operation,
        job: &ReservedJob,
        write: impl FnOnce(&mut Jobs, Stored, u64),
    ) -> QueueResult<bool> {
        self.fault(operation)?;
        let Some(token) = token_of(job) else {
            return Ok(false);
        };
        let mut state = self.state();
        let jobs = state.queues.entry(token.queue.clone()).or_default();
        match jobs.reserved.remove(&token.token) {
            Some((stored, _)) => {
                write(jobs, stored, token.token);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn reserve(&self, queue: &Arc<QueueHandle>, count: usize) -> QueueResult<Vec<ReservedJob>> {
        self.fault(Operation::Pop)?;
        let (sent, at) = (Instant::now(), now());
        let until = self.lapses_from(sent);
        let mut state = self.state();
        let mut token = state.last_token;
        let jobs = state.queues.entry(queue.name.clone()).or_default();
        jobs.reclaim_lapsed(sent);
        jobs.make_due_ready(at);
        let mut popped = Vec::new();
        while popped.len() < count.max(1) {
            let Some(mut stored) = jobs.ready.pop_front() else {
                break;
            };
            stored.attempts += 1;
            token += 1;
            jobs.reserved.insert(token, (stored.clone(), until));
            popped.push(self.job(queue, stored, token, sent));
        }
        state.last_token = token;
        Ok(popped)
    }

    fn job(
        &self,
        queue: &Arc<QueueHandle>,
        stored: Stored,
        token: u64,
        sent: Instant,
    ) -> ReservedJob {
        ReservedJob {
            queue: Arc::clone(queue),
            payload: Payload::parse_stored(stored.payload.clone()),
            reserved: stored.payload.clone(),
            raw: stored.payload,
            lease: Lease::new(self.retry_after, sent),
            reservation: Reservation::Handle(DriverHandle {
                id: stored.id.to_string(),
                attempt: stored.attempts,
                data: Arc::new(Token {
                    queue: queue.name.clone(),
                    token,
                }),
            }),
        }
    }

    fn lapses_from(&self, from: Instant) -> Option<Instant> {
        self.retry_after.map(|s| from + Duration::from_secs(s))
    }

    fn store(&self, queue: &str, payload: &str, available_at: Option<i64>) {
        let mut state = self.state();
        state.last_id += 1;
        let stored = Stored {
            id: state.last_id,
            payload: Bytes::copy_from_slice(payload.as_bytes()),
            attempts: 0,
        };
        let jobs = state.queues.entry(queue.to_string()).or_default();
        match available_at {
            Some(at) => jobs.delayed.push((at, stored)),
            None => jobs.ready.push_back(stored),
        }
    }
}

impl Jobs {
    /// Reservations past their time go back to the ready jobs (Laravel's
    /// `migrateExpiredJobs` from `:reserved`).
    fn reclaim_lapsed(&mut self, now: Instant) {
        let lapsed: Vec<u64> = (self.reserved.iter())
            .filter(|(_, (_, until))| until.is_some_and(|until| until <= now))
            .map(|(token, _)| *token)
            .collect();
        for token in lapsed {
            if let Some((job, _)) = self.reserved.remove(&token) {
                self.ready.push_back(job);
            }
        }
    }

    /// Delayed jobs now due join the ready ones.
    fn make_due_ready(&mut self, now: i64) {
        let (due, later): (Vec<_>, Vec<_>) = self.delayed.drain(..).partition(|(at, _)| *at <= now);
        self.delayed = later;
        self.ready.extend(due.into_iter().map(|(_, job)| job));
    }
}

/// The memory queue's token in `job`, if it reserved it.
fn token_of(job: &ReservedJob) -> Option<&Token> {
    match &job.reservation {
        Reservation::Handle(handle) => handle.data::<Token>(),
        _ => None,
    }
}

impl Driver for MemoryQueue {
    fn describe(&self) -> String {
        "memory (this process)".to_string()
    }

    fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    fn pop<'a>(&'a self, queue: &'a Arc<QueueHandle>, count: usize) -> Call<'a, Vec<ReservedJob>> {
        Box::pin(async move { self.reserve(queue, count) })
    }

    fn delete<'a>(&'a self, job: &'a ReservedJob, _ended: Ending<'a>) -> Call<'a, bool> {
        Box::pin(async move { self.settle(Operation::Delete, job, |_, _, _| {}) })
    }

    fn release<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        let at = now().saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
        Box::pin(async move {
            self.settle(Operation::Release, job, |jobs, stored, _| {
                jobs.delayed.push((at, stored));
            })
        })
    }

    fn hand_back<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        let at = now().saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
        Box::pin(async move {
            self.settle(Operation::HandBack, job, |jobs, mut stored, _| {
                stored.attempts = stored.attempts.saturating_sub(1);
                jobs.delayed.push((at, stored));
            })
        })
    }

    fn renew<'a>(&'a self, job: &'a ReservedJob) -> Call<'a, bool> {
        let until = self.lapses_from(Instant::now());
        Box::pin(async move {
            self.settle(Operation::Renew, job, |jobs, stored, token| {
                jobs.reserved.insert(token, (stored, until));
            })
        })
    }

    fn push<'a>(&'a self, queue: &'a QueueHandle, payload: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.store(&queue.name, payload, None);
            Ok(())
        })
    }

    fn later<'a>(
        &'a self,
        queue: &'a QueueHandle,
        available_at: i64,
        payload: &'a str,
    ) -> Call<'a, ()> {
        Box::pin(async move {
            self.store(&queue.name, payload, Some(available_at));
            Ok(())
        })
    }

    fn sizes<'a>(&'a self, queue: &'a QueueHandle, _head: HeadAge) -> Call<'a, QueueSizes> {
        Box::pin(async move {
            let at = now();
            let mut state = self.state();
            let jobs = state.queues.entry(queue.name.clone()).or_default();
            let due = jobs.delayed.iter().filter(|(when, _)| *when <= at).count();
            Ok(QueueSizes {
                pending: jobs.ready.len() as u64,
                delayed: jobs.delayed.len() as u64,
                delayed_due: due as u64,
                reserved: jobs.reserved.len() as u64,
                oldest_pending: None,
                head_bytes: 0,
            })
        })
    }

    fn clear<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, u64> {
        Box::pin(async move {
            let jobs = self.state().queues.remove(&queue.name).unwrap_or_default();
            let count = jobs.ready.len() + jobs.delayed.len() + jobs.reserved.len();
            Ok(count as u64)
        })
    }
}
