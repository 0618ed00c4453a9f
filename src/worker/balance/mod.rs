//! A balanced worker (`[worker] balance`, Horizon's `balance`): each queue
//! of `--queue` gets slots of its own, and the loop reserves from a queue
//! only while it has room.
//!
//! - [`share`]: how many slots each queue gets, a pure decision
//!   ([`Balancer`]);
//! - [`spec`]: its settings, checked at start;
//! - [`queue_slots`]: the live slots and running jobs per queue, shared by
//!   the loop, the job tasks and the rounds;
//! - [`rounds`]: the task that reads the queues and moves the slots every
//!   cooldown.
//!
//! The loop holds a [`Balanced`] as an `Option`: without `[worker]
//! balance` there is none, and nothing here runs.

pub mod queue_slots;
pub mod rounds;
pub mod share;
pub mod spec;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use queue_slots::{QueueSlots, Share, SlotTicket};
pub use share::{Balancer, Mode, Policy, Strategy};

use super::Services;
use crate::queue::QueueHandle;

/// The balancing side of a running loop.
pub struct Balanced {
    /// The slots of each queue.
    slots: Arc<QueueSlots>,
    /// Until [`Balanced::start`] hands it to the rounds' task.
    balancer: Option<Balancer>,
    /// The rounds' task, aborted when the loop stops (or this is dropped).
    rounds: Option<JoinHandle<()>>,
    /// Sees the room change from the last poll on.
    room_watch: Option<watch::Receiver<u64>>,
}

/// Which queues a poll may take from, and how many jobs each.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pollable {
    /// Indexes into `--queue`, in priority order.
    pub queues: Vec<usize>,
    /// How many jobs each may give.
    pub counts: Vec<usize>,
    /// A queue was left out for want of room while its jobs still run (the
    /// queue is not known to be empty).
    pub skipped_busy: bool,
}

impl Pollable {
    /// Without balancing: every queue not `paused`, up to `count` each.
    pub fn unbalanced(paused: &[bool], count: usize) -> Self {
        let queues: Vec<usize> = (0..paused.len()).filter(|&i| !paused[i]).collect();
        Pollable {
            counts: vec![count; queues.len()],
            queues,
            skipped_busy: false,
        }
    }
}

impl Balanced {
    /// Balancing `queues` (the `--queue` names, in order) under `policy`.
    pub fn new(policy: Policy, queues: Vec<String>) -> Self {
        let balancer = Balancer::new(policy);
        let slots = QueueSlots::new(queues, balancer.slots());
        Balanced {
            slots,
            balancer: Some(balancer),
            rounds: None,
            room_watch: None,
        }
    }

    /// Starts the rounds' task over `queues` (the same queues, their keys).
    pub fn start(&mut self, services: Arc<Services>, queues: Vec<Arc<QueueHandle>>) {
        if let Some(balancer) = self.balancer.take() {
            let rounds = rounds::run(services, queues, Arc::clone(&self.slots), balancer);
            self.rounds = Some(tokio::spawn(rounds));
        }
    }

    /// Stops the rounds (the loop is stopping).
    pub fn stop(&mut self) {
        if let Some(rounds) = self.rounds.take() {
            rounds.abort();
        }
    }

    /// The free room of every queue together.
    pub fn room(&self) -> usize {
        self.slots.room().iter().sum()
    }

    /// No queue has room (every `min_processes` 0 and nothing waiting at
    /// the last round, or every slot busy).
    pub fn no_room(&self) -> bool {
        self.slots.room().iter().all(|&room| room == 0)
    }

    /// Resolves once some queue has room.
    pub async fn until_room(&self) {
        self.slots.until_room().await;
    }

    /// Resolves when the slots move or a job ends, from now on.
    pub fn moved(&self) -> impl Future<Output = ()> + use<> {
        changed(Some(self.slots.subscribe()))
    }

    /// Starts watching the room before a poll reads it, so that a job
    /// ending after the read ends the poll's idle wait; resolves then.
    pub fn watch_room(&mut self) -> impl Future<Output = ()> + use<> {
        self.room_watch = Some(self.slots.subscribe());
        changed(self.room_watch.clone())
    }

    /// Resolves when the room changed since the last [`Self::watch_room`].
    pub fn room_changed(&self) -> impl Future<Output = ()> + use<> {
        changed(self.room_watch.clone())
    }

    /// The queues not `paused` that have room, each up to `count` and its
    /// room.
    pub fn pollable(&self, paused: &[bool], count: usize) -> Pollable {
        let (room, running) = (self.slots.room(), self.slots.running());
        let mut pollable = Pollable::default();
        for (i, paused) in paused.iter().enumerate() {
            if *paused {
                continue;
            }
            match room.get(i).copied().unwrap_or(0) {
                0 => pollable.skipped_busy |= running.get(i).is_some_and(|&r| r > 0),
                room => {
                    pollable.queues.push(i);
                    pollable.counts.push(count.min(room));
                }
            }
        }
        pollable
    }

    /// Counts a job of `queue` as running on its queue's slot until the
    /// ticket is dropped.
    pub fn take(&self, queue: &str) -> Option<SlotTicket> {
        let index = self.slots.position(queue)?;
        Some(self.slots.take(index))
    }

    /// Notes which queues are paused (`queue:pause`): they get no slots.
    pub fn set_paused(&self, paused: &[bool]) {
        self.slots.set_paused(paused);
    }
}

impl Drop for Balanced {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Resolves when `changes` sees a change it has not seen yet; never for
/// `None`.
pub async fn changed(changes: Option<watch::Receiver<u64>>) {
    match changes {
        Some(mut changes) => {
            let _ = changes.changed().await;
        }
        None => std::future::pending().await,
    }
}

/// Resolves when `room` (a balanced worker's room watch) resolves; never
/// without one (a worker that is not balanced).
pub async fn changed_or_never(room: Option<impl Future<Output = ()>>) {
    match room {
        Some(room) => room.await,
        None => std::future::pending().await,
    }
}

/// Resolves when `a` or `b` resolves, whichever is given; never with
/// neither.
pub async fn first_or_never(
    a: Option<impl Future<Output = ()>>,
    b: Option<impl Future<Output = ()>>,
) {
    tokio::select! {
        () = changed_or_never(a) => {}
        () = changed_or_never(b) => {}
    }
}
