//! Reserving the next jobs (`Worker::getNextJob` + `Queue::pop`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::queue::{COMMAND_TIMEOUT, Queue, QueueHandle, ReservedJob};

/// How long to wait for work when every queue is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleWait {
    /// Do not wait (`--sleep=0` with no `block_for`): poll again at once.
    None,
    /// BLPOP on the notify lists for at most this long (`None`: for ever,
    /// as `block_for = 0`).
    Block(Option<Duration>),
}

/// What one fetch gave.
#[derive(Debug)]
pub enum Fetched {
    /// The jobs reserved, all from one queue, in list order.
    Jobs(Vec<ReservedJob>),
    /// Nothing to do; `waited` tells whether the idle wait already took
    /// the place of the loop's `--sleep`.
    Empty {
        /// True when the fetch blocked on the notify lists (whether or
        /// not a token came).
        waited: bool,
    },
}

/// Polls `queues` in priority order and reserves up to `counts[i]` jobs
/// from the first queue `i` that has any: a lower queue gives jobs only when every
/// queue before it came back empty in this same fetch.
///
/// When all are empty and `idle` says to block, waits on all their notify
/// lists at once (BLPOP takes the keys in priority order) and, if a token
/// arrives, polls once more. Laravel 13 blocks only on the first queue; one
/// wait on all of them wakes for work on any queue and still serves them
/// in order.
///
/// Only the wait is cut short by `interrupted`: a pop in flight always
/// completes, so a job the queue has reserved is never dropped on the floor.
///
/// After the wait, the poll runs only if `may_take` still holds: a worker
/// paused (SIGUSR2) or put in maintenance mode while it waited takes
/// nothing. The jobs stay in the ready list without the token the wait
/// took, and the first poll after the pause finds them.
///
/// # Errors
/// Any queue error (the caller logs it and pauses).
pub async fn next_jobs(
    queue: &Queue,
    queues: &[Arc<QueueHandle>],
    counts: &[usize],
    idle: IdleWait,
    horizon: Option<Duration>,
    interrupted: impl Future<Output = ()>,
    may_take: impl Fn() -> bool,
) -> crate::queue::QueueResult<Fetched> {
    // From before the first pop, so that a job of ours released with delay
    // 0 meanwhile gets the token that ends the wait below.
    let _waiting = matches!(idle, IdleWait::Block(_)).then(|| queue.waiting_for_jobs());
    let jobs = poll(queue, queues, counts).await?;
    if !jobs.is_empty() {
        return Ok(Fetched::Jobs(jobs));
    }
    let IdleWait::Block(wait) = idle else {
        return Ok(Fetched::Empty { waited: false });
    };
    let woken = tokio::select! {
        woken = queue.block_on_notify(queues, wait, horizon) => woken?,
        () = interrupted => false,
    };
    if woken && may_take() {
        let jobs = poll(queue, queues, counts).await?;
        if !jobs.is_empty() {
            return Ok(Fetched::Jobs(jobs));
        }
    }
    Ok(Fetched::Empty { waited: true })
}

async fn poll(
    queue: &Queue,
    queues: &[Arc<QueueHandle>],
    counts: &[usize],
) -> crate::queue::QueueResult<Vec<ReservedJob>> {
    for (keys, &count) in queues.iter().zip(counts) {
        let jobs = queue.pop(keys, count).await?;
        if !jobs.is_empty() {
            return Ok(jobs);
        }
    }
    Ok(Vec::new())
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
    let wait = match idle {
        IdleWait::Block(None) => return None,
        IdleWait::Block(Some(wait)) => wait.saturating_add(COMMAND_TIMEOUT),
        IdleWait::None => Duration::ZERO,
    };
    let polls = u32::try_from(queues.saturating_mul(2)).unwrap_or(u32::MAX);
    Some(COMMAND_TIMEOUT.saturating_mul(polls).saturating_add(wait))
}
