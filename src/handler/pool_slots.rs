//! The calls a pool may have in flight: at most its size, which may change
//! at run time.
//!
//! The worker reserves no job a handler cannot start at once (see
//! `Router::until_startable`): a job reserved while every slot of its pool
//! is taken would wait, reserved, and a crash of the worker meanwhile would
//! cost it an attempt without a start. Shrinking below the calls in flight
//! takes nothing from them: no new call starts until they are fewer than
//! the new size.

use std::sync::Mutex;

use tokio::sync::Notify;

/// A resizable count of call slots, and a signal each time one is freed or
/// the size grows.
#[derive(Debug)]
pub struct Slots {
    state: Mutex<Count>,
    freed: Notify,
}

#[derive(Debug, Clone, Copy)]
struct Count {
    size: usize,
    taken: usize,
}

/// A slot taken for one call; freed (and announced) when dropped.
pub struct Slot<'a> {
    slots: &'a Slots,
}

impl Slots {
    /// `size` slots (at least 1).
    pub fn new(size: usize) -> Self {
        Slots {
            state: Mutex::new(Count {
                size: size.max(1),
                taken: 0,
            }),
            freed: Notify::new(),
        }
    }

    fn count(&self) -> std::sync::MutexGuard<'_, Count> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free slot now, if there is one.
    pub fn try_take(&self) -> Option<Slot<'_>> {
        let mut count = self.count();
        (count.taken < count.size).then(|| {
            count.taken += 1;
            Slot { slots: self }
        })
    }

    /// Waits for a free slot and takes it.
    pub async fn acquire(&self) -> Slot<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.try_take() {
                return slot;
            }
            freed.await;
        }
    }

    /// How many slots are free now.
    pub fn free(&self) -> usize {
        let count = self.count();
        count.size.saturating_sub(count.taken)
    }

    /// How many slots are taken now (calls in flight; above the size for
    /// a while after a shrink).
    pub fn taken(&self) -> usize {
        self.count().taken
    }

    /// The size now.
    pub fn size(&self) -> usize {
        self.count().size
    }

    /// Sets the size (at least 1). Growing frees slots at once; shrinking
    /// leaves the calls in flight alone.
    pub fn resize(&self, size: usize) {
        self.count().size = size.max(1);
        self.freed.notify_waiters();
    }

    /// Resolves once at least one slot is free (at once if one is).
    pub async fn until_free(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.free() > 0 {
                return;
            }
            freed.await;
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.count().taken -= 1;
        self.slots.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shrink_waits_for_the_calls_in_flight() {
        let slots = Slots::new(2);
        let (a, b) = (slots.try_take().unwrap(), slots.try_take().unwrap());
        slots.resize(1);
        assert_eq!((slots.taken(), slots.free()), (2, 0));
        drop(a);
        assert_eq!(slots.free(), 0, "still one call in flight, size 1");
        drop(b);
        assert_eq!(slots.free(), 1);
        slots.resize(3);
        assert_eq!(slots.free(), 3);
    }
}
