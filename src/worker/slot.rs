//! A job's place among the worker's `--concurrency` slots, and when it is
//! given back.
//!
//! A slot is taken when the job is reserved and, as a rule, given back once
//! the job is settled and `--rest` has passed. One case gives it back
//! sooner: a job whose handler has answered and whose last step is its
//! delete frees its slot as the delete is sent (on Redis, `--rest` zero).
//! The next reservation then goes out while the delete is in flight,
//! instead of a round trip later: at `--concurrency=1` a job costs one
//! round trip's wait instead of two. A release keeps its slot: it must
//! land before the next poll, which may have to find the job again.
//!
//! If that delete fails once (the queue refuses it, or cannot be reached),
//! the job asks for a slot back ([`Slot::reclaim`]) and holds the next one
//! given back while it goes on trying: while the queue is away the loop
//! does not go on polling it in that slot, and the delete is not held up
//! by jobs that hold every slot. The jobs settling on a freed slot are at
//! most as many as the slots ([`Settling`]).
//! A failed job keeps its slot to the end: it may write to the failed
//! store and call the handler once more (the `failed()` hook). So does a
//! large job (its memory is given back before the next is reserved), and
//! every job on the database and SQS queues.
//!
//! With one slot, the job reserved early starts only once the job before
//! has reported its end ([`Settling::until_none`]): the reservation's
//! round trip overlaps the delete's, but the lines stay in order.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::balance::SlotTicket;

/// The permits of the jobs that gave their slot back before they were
/// settled: as many as there are slots.
#[derive(Debug, Clone)]
pub struct Settling {
    room: Arc<Semaphore>,
    slots: u32,
}

impl Settling {
    /// Room for `slots` jobs settling at once on freed slots.
    pub fn new(slots: usize) -> Self {
        let slots = u32::try_from(slots).unwrap_or(u32::MAX).min(MAX_ROOM);
        Settling {
            room: Arc::new(Semaphore::new(slots as usize)),
            slots,
        }
    }

    /// Resolves once no job is settling on a freed slot, that is once each
    /// such job has been settled and reported (its
    /// [`settled`](super::events::JobEvents::settled) event emitted).
    /// With one slot the loop waits so before it starts the job it
    /// reserved meanwhile: the jobs' lines come one job after the other,
    /// as `queue:work`'s do.
    pub async fn until_none(&self) {
        // The semaphore is never closed; if it were, there would be
        // nothing to wait for.
        let _all = self.room.acquire_many(self.slots).await;
    }
}

/// The most jobs settling on freed slots (a semaphore's limit, far above
/// any `--concurrency`).
const MAX_ROOM: u32 = 1 << 20;

/// A job's slot: the `--concurrency` permit and, when balanced, its
/// queue's share. Dropping it gives both back.
pub struct Slot {
    /// The `--concurrency` permits, to take one back.
    slots: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
    queue_slot: Option<SlotTicket>,
    /// Held instead of the slot once [`Slot::free_for_settling`] gave it back.
    settling: Option<OwnedSemaphorePermit>,
    room: Settling,
}

impl Slot {
    /// The slot `permit` (and `queue_slot`, when balanced), which may be
    /// given back early within `room`.
    pub fn new(
        permit: OwnedSemaphorePermit,
        queue_slot: Option<SlotTicket>,
        room: Settling,
    ) -> Self {
        Slot {
            slots: Arc::clone(permit.semaphore()),
            permit: Some(permit),
            queue_slot,
            settling: None,
            room,
        }
    }

    /// After a failed try of the write it was given back for: a wait for
    /// a `--concurrency` slot, in line with the loop's own (the semaphore
    /// is fair), to be handed to [`Slot::hold`]. `None` when the slot was
    /// never given back. The wait owns what it needs, so the write can go
    /// on being tried while it waits: a job that waits for its slot must
    /// not stop trying its delete, or its reservation could run out while
    /// longer jobs hold every slot.
    pub fn reclaim(&self) -> Option<impl Future<Output = Option<OwnedSemaphorePermit>> + use<>> {
        self.settling.as_ref()?;
        let slots = Arc::clone(&self.slots);
        Some(async move { slots.acquire_owned().await.ok() })
    }

    /// Holds `permit`, a `--concurrency` slot won by [`Slot::reclaim`],
    /// again (its queue's share, when balanced, stays given back), leaving
    /// the settling room.
    pub fn hold(&mut self, permit: OwnedSemaphorePermit) {
        self.permit = Some(permit);
        self.settling = None;
    }

    /// Gives the slot back before the job's settle write is sent, if
    /// fewer jobs than there are slots are settling that way already;
    /// otherwise the job keeps it until it is dropped.
    pub fn free_for_settling(&mut self) {
        if self.settling.is_some() {
            return;
        }
        if let Ok(settling) = Arc::clone(&self.room.room).try_acquire_owned() {
            self.settling = Some(settling);
            self.permit = None;
            self.queue_slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slot_is_freed_early_only_within_the_settling_room() {
        let permits = Arc::new(Semaphore::new(2));
        let room = Settling::new(1);
        let take = || Arc::clone(&permits).try_acquire_owned().unwrap();
        let mut first = Slot::new(take(), None, room.clone());
        let mut second = Slot::new(take(), None, room.clone());
        assert_eq!(permits.available_permits(), 0);
        first.free_for_settling();
        assert_eq!(permits.available_permits(), 1, "the first slot is free");
        second.free_for_settling();
        assert_eq!(
            permits.available_permits(),
            1,
            "no settling room left: the second keeps its slot"
        );
        assert!(second.reclaim().is_none(), "it never gave it back");
        let permit = first.reclaim().unwrap().await.unwrap();
        first.hold(permit);
        assert_eq!(permits.available_permits(), 0, "the first took one back");
        assert_eq!(room.room.available_permits(), 1, "and left the room");
        drop(first);
        drop(second);
        assert_eq!(permits.available_permits(), 2);
    }
}
