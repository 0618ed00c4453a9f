//! The calls a pool may have in flight: at most its size, which may change
//! at run time.
//!
//! The worker reserves no job a handler cannot start at once (see
//! `Router::until_startable`): a job reserved while every call permit of its pool
//! is taken would wait, reserved, and a crash of the worker meanwhile would
//! cost it an attempt without a start. Shrinking below the calls in flight
//! takes nothing from them: no new call starts until they are fewer than
//! the new size.

use std::sync::Mutex;

use tokio::sync::Notify;

/// A resizable count of call permits, and a signal each time one is freed or
/// the size grows.
#[derive(Debug)]
pub struct CallPermits {
    state: Mutex<Count>,
    freed: Notify,
}

#[derive(Debug, Clone, Copy)]
struct Count {
    size: usize,
    taken: usize,
}

/// A permit taken for one call; freed (and announced) when dropped.
pub struct CallPermit<'a> {
    permits: &'a CallPermits,
}

impl CallPermits {
    /// `size` permits (at least 1).
    pub fn new(size: usize) -> Self {
        CallPermits {
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
    pub fn try_take(&self) -> Option<CallPermit<'_>> {
        let mut count = self.count();
        (count.taken < count.size).then(|| {
            count.taken += 1;
            CallPermit { permits: self }
        })
    }

    /// Waits for a free slot and takes it.
    pub async fn acquire(&self) -> CallPermit<'_> {
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

    /// How many permits are free now.
    pub fn free(&self) -> usize {
        let count = self.count();
        count.size.saturating_sub(count.taken)
    }

    /// How many permits are taken now (calls in flight; above the size for
    /// a while after a shrink).
    pub fn taken(&self) -> usize {
        self.count().taken
    }

    /// The size now.
    pub fn size(&self) -> usize {
        self.count().size
    }

    /// Sets the size (at least 1). Growing frees permits at once; shrinking
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

impl Drop for CallPermit<'_> {
    fn drop(&mut self) {
        self.permits.count().taken -= 1;
        self.permits.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shrink_waits_for_the_calls_in_flight() {
        let permits = CallPermits::new(2);
        let (a, b) = (permits.try_take().unwrap(), permits.try_take().unwrap());
        permits.resize(1);
        assert_eq!((permits.taken(), permits.free()), (2, 0));
        drop(a);
        assert_eq!(permits.free(), 0, "still one call in flight, size 1");
        drop(b);
        assert_eq!(permits.free(), 1);
        permits.resize(3);
        assert_eq!(permits.free(), 3);
    }
}
