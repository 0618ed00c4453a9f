//! The live slots per queue of a balanced worker (`[worker] balance`).
//!
//! [`QueueSlots`] holds, per queue of `--queue`, the slots the
//! [`Balancer`](super::share::Balancer) gave it and the jobs of that
//! queue running now. The loop reserves from a queue only while it has
//! room (running < slots): a slot of a queue pops only that queue. Taking
//! slots away never touches a running job: the queue just reserves
//! nothing more until enough of its jobs have ended (a slot retires when
//! its job ends). The worker's semaphore of `max_processes` permits still
//! bounds the jobs in flight, so a queue given a slot while another's
//! retiring slot runs on waits for that job to end.
//!
//! It also measures what a round needs: the slots busy on average since
//! the last round and the mean runtime of each queue's jobs, and it bumps
//! a version whenever room may have appeared (a job ended, the slots
//! moved), which wakes a loop waiting for room or on an idle wait.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::share::Load;

/// Weight of the newest job in a queue's mean runtime (an exponential
/// moving average: about the last 10 jobs count).
const RUNTIME_WEIGHT: f64 = 0.1;

/// One queue's slots, as reported to listeners (the `rebalanced` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The queue's name, as in `--queue`.
    pub queue: String,
    /// Slots the queue has now (a retiring slot whose job still runs is
    /// not counted).
    pub slots: usize,
}

/// Per queue counts, behind the lock.
struct Counts {
    slots: Vec<usize>,
    running: Vec<usize>,
    /// Slot-seconds busy since `since`, per queue.
    busy: Vec<f64>,
    /// When the running counts last changed (the busy area is counted up
    /// to here).
    counted_to: Instant,
    /// When the last round read the busy areas.
    since: Instant,
    /// Mean seconds per job, once one has ended.
    runtime: Vec<Option<f64>>,
    /// Whether the queue's pause key is set (`queue:pause`): its jobs
    /// count as none waiting, so a round gives it no slot to sit idle.
    paused: Vec<bool>,
}

impl Counts {
    /// Adds the busy area from `counted_to` to now.
    fn count_busy(&mut self) {
        let now = Instant::now();
        let dt = now.duration_since(self.counted_to).as_secs_f64();
        for (area, &running) in self.busy.iter_mut().zip(&self.running) {
            *area += running as f64 * dt;
        }
        self.counted_to = now;
    }
}

/// The slots and running jobs per queue, shared by the loop, the job
/// tasks and the rebalancing task.
pub struct QueueSlots {
    names: Vec<String>,
    counts: Mutex<Counts>,
    /// Bumped when room may have appeared.
    version: watch::Sender<u64>,
}

impl QueueSlots {
    /// `slots[i]` slots for queue `names[i]`, none running.
    pub fn new(names: Vec<String>, slots: &[usize]) -> Arc<Self> {
        let n = names.len();
        let now = Instant::now();
        Arc::new(QueueSlots {
            names,
            counts: Mutex::new(Counts {
                slots: slots.to_vec(),
                running: vec![0; n],
                busy: vec![0.0; n],
                counted_to: now,
                since: now,
                runtime: vec![None; n],
                paused: vec![false; n],
            }),
            version: watch::Sender::new(0),
        })
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Per queue, how many more jobs it may reserve now.
    pub fn room(&self) -> Vec<usize> {
        let counts = self.counts();
        counts
            .slots
            .iter()
            .zip(&counts.running)
            .map(|(slots, running)| slots.saturating_sub(*running))
            .collect()
    }

    /// Per queue, the jobs running now.
    pub fn running(&self) -> Vec<usize> {
        self.counts().running.clone()
    }

    /// The queue's position in `--queue`.
    pub fn position(&self, queue: &str) -> Option<usize> {
        self.names.iter().position(|n| n == queue)
    }

    /// Counts a job of queue `index` as running until the ticket is dropped
    /// (when the job's slot is free again).
    pub fn take(self: &Arc<Self>, index: usize) -> SlotTicket {
        let mut counts = self.counts();
        counts.count_busy();
        if let Some(running) = counts.running.get_mut(index) {
            *running += 1;
        }
        SlotTicket {
            slots: Arc::clone(self),
            index,
            started: Instant::now(),
        }
    }

    /// Gives the queues `slots` (in `--queue` order) and wakes the loop.
    pub fn set(&self, slots: &[usize]) {
        self.counts().slots = slots.to_vec();
        self.bump();
    }

    /// Notes which queues are paused (`queue:pause`), in `--queue` order.
    pub fn set_paused(&self, paused: &[bool]) {
        self.counts().paused = paused.to_vec();
    }

    /// Each queue's slots now.
    pub fn shares(&self) -> Vec<Share> {
        let counts = self.counts();
        self.names
            .iter()
            .zip(&counts.slots)
            .map(|(queue, &slots)| Share {
                queue: queue.clone(),
                slots,
            })
            .collect()
    }

    /// Each queue's busy slots on average since the last call and its
    /// mean runtime, with `pending` (from Redis, in `--queue` order)
    /// added, none for a paused queue: the input of a round. Starts the
    /// next averaging period.
    pub fn loads(&self, pending: &[u64]) -> Vec<Load> {
        let mut counts = self.counts();
        counts.count_busy();
        let span = counts.counted_to.duration_since(counts.since);
        let span = span.max(Duration::from_millis(1)).as_secs_f64();
        let loads = pending
            .iter()
            .zip(&counts.paused)
            .zip(&counts.busy)
            .zip(&counts.runtime)
            .map(|(((&pending, &paused), &area), &runtime)| Load {
                pending: if paused { 0 } else { pending },
                busy: area / span,
                runtime,
            })
            .collect();
        counts.busy.iter_mut().for_each(|a| *a = 0.0);
        counts.since = counts.counted_to;
        loads
    }

    /// A receiver that sees the next change (see [`Self::until_room`]).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Resolves once some queue has room.
    pub async fn until_room(&self) {
        let mut changes = self.subscribe();
        while self.room().iter().all(|&r| r == 0) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The job of queue `index` that started at `started` ended.
    fn end(&self, index: usize, started: Instant) {
        {
            let mut counts = self.counts();
            counts.count_busy();
            if let Some(running) = counts.running.get_mut(index) {
                *running = running.saturating_sub(1);
            }
            let took = started.elapsed().as_secs_f64();
            if let Some(mean) = counts.runtime.get_mut(index) {
                *mean = Some(match *mean {
                    Some(m) => m + RUNTIME_WEIGHT * (took - m),
                    None => took,
                });
            }
        }
        self.bump();
    }
}

/// A job holding a slot of its queue; dropping it frees the slot.
pub struct SlotTicket {
    slots: Arc<QueueSlots>,
    index: usize,
    started: Instant,
}

impl Drop for SlotTicket {
    fn drop(&mut self) {
        self.slots.end(self.index, self.started);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_queue_has_room_until_its_slots_run_jobs_and_shrinking_stops_none() {
        let slots = QueueSlots::new(vec!["a".into(), "b".into()], &[2, 1]);
        let first = slots.take(0);
        let _second = slots.take(0);
        assert_eq!(slots.room(), [0, 1]);
        slots.set(&[1, 2]);
        assert_eq!(slots.running(), [2, 0], "shrinking stops no job");
        assert_eq!(slots.room(), [0, 2]);
        drop(first);
        assert_eq!(slots.room(), [0, 2], "a retired slot is not given back");
        let shares = slots.shares();
        assert_eq!(shares[0].slots, 1);
        assert_eq!(slots.position("b"), Some(1));
        let loads = slots.loads(&[3, 0]);
        assert_eq!(loads[0].pending, 3);
        slots.set_paused(&[true, false]);
        assert_eq!(slots.loads(&[3, 0])[0].pending, 0, "paused: nothing waits");
        assert!(loads[0].runtime.is_some() && loads[1].runtime.is_none());
        assert!(loads[0].busy > 0.0 && loads[1].busy == 0.0, "{loads:?}");
    }

    #[tokio::test]
    async fn waiting_for_room_ends_when_a_job_ends() {
        let slots = QueueSlots::new(vec!["a".into()], &[1]);
        let ticket = slots.take(0);
        let waiter = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.until_room().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(ticket);
        waiter.await.unwrap();
    }
}
