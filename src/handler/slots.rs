//! The processes of a persistent pool free to start a call now.
//!
//! The worker reserves no job a handler cannot start at once (see
//! `Router::until_startable`): a job reserved while every process of its
//! pool is busy would wait, reserved, and a crash of the worker meanwhile
//! would cost it an attempt without a start.

use tokio::sync::{Notify, Semaphore, SemaphorePermit};

/// One permit per process of a pool, and a signal each time one is freed.
#[derive(Debug)]
pub struct Slots {
    permits: Semaphore,
    freed: Notify,
}

/// A process taken for one call; freed (and announced) when dropped.
pub struct Slot<'a> {
    permit: Option<SemaphorePermit<'a>>,
    freed: &'a Notify,
}

impl Slots {
    /// `count` slots (at least 1).
    pub fn new(count: usize) -> Self {
        Slots {
            permits: Semaphore::new(count.max(1)),
            freed: Notify::new(),
        }
    }

    /// Waits for a free slot; `None` when the pool is closed.
    pub async fn acquire(&self) -> Option<Slot<'_>> {
        let permit = self.permits.acquire().await.ok()?;
        Some(Slot {
            permit: Some(permit),
            freed: &self.freed,
        })
    }

    /// How many slots are free now.
    pub fn free(&self) -> usize {
        self.permits.available_permits()
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
        drop(self.permit.take());
        self.freed.notify_waiters();
    }
}
