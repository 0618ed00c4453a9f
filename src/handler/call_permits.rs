//! The calls a pool may have in flight: at most its size, which may change
//! at run time.
//!
//! The worker reserves a job for a pool only while the pool has *room*: a
//! free permit, or a place among the `reserve_ahead` calls allowed to wait
//! for one (see `Router::until_startable`). A job waiting so is reserved,
//! and a crash of the worker meanwhile costs it an attempt without a start;
//! the window bounds that cost, and keeps the next jobs ready so that the
//! pop's round trip is not between one call's end and the next one's
//! start. Shrinking below the calls in flight
//! takes nothing from them: no new call starts until they are fewer than
//! the new size.
//!
//! A pipelined pool (`pipeline = true`, see [`super::pipeline`]) lets a
//! waiting call take another way in, a place behind a busy process:
//! [`CallPermits::acquire_or`] waits for whichever comes first. Such a call
//! stays counted among the waiting until the process is handed to it, with
//! the permit of the call ahead ([`CallPermit`]s are owned, so they can
//! change hands).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

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
    /// Calls waiting in [`CallPermits::acquire`], or holding a
    /// [`Waiting`] mark.
    waiting: usize,
}

/// A permit taken for one call; freed (and announced) when dropped.
#[derive(Debug)]
pub struct CallPermit {
    permits: Arc<CallPermits>,
}

/// One call counted among the waiting while it is in
/// [`CallPermits::acquire`], or while it waits behind a busy process
/// after [`CallPermits::acquire_or`], however that ends (a dropped call
/// too).
#[derive(Debug)]
pub struct Waiting {
    permits: Arc<CallPermits>,
}

/// What [`CallPermits::acquire_or`] got first.
pub enum Acquired<T> {
    /// A free permit.
    Permit(CallPermit),
    /// The other way in, the call still counted among the waiting.
    Other(T, Waiting),
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.permits.count().waiting -= 1;
        self.permits.freed.notify_waiters();
    }
}

impl CallPermits {
    /// `size` permits (at least 1).
    pub fn new(size: usize) -> Self {
        CallPermits {
            state: Mutex::new(Count {
                size: size.max(1),
                taken: 0,
                waiting: 0,
            }),
            freed: Notify::new(),
        }
    }

    fn count(&self) -> std::sync::MutexGuard<'_, Count> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free slot now, if there is one.
    pub fn try_take(self: &Arc<Self>) -> Option<CallPermit> {
        let mut count = self.count();
        (count.taken < count.size).then(|| {
            count.taken += 1;
            CallPermit {
                permits: Arc::clone(self),
            }
        })
    }

    /// Waits for a free slot and takes it; counted among the waiting
    /// meanwhile (see [`Self::room`]).
    pub async fn acquire(self: &Arc<Self>) -> CallPermit {
        match self.acquire_or(|| None::<Infallible>).await {
            Acquired::Permit(permit) => permit,
            Acquired::Other(never, _) => match never {},
        }
    }

    /// Waits for a free slot or for `other` to give something, whichever
    /// comes first (a free slot when both are there); `other` is asked
    /// again at each [`Self::announce`], permit freed or size grown. The
    /// call is counted among the waiting meanwhile, and still after
    /// `other` gave (until the [`Waiting`] mark is dropped).
    pub async fn acquire_or<T>(
        self: &Arc<Self>,
        mut other: impl FnMut() -> Option<T>,
    ) -> Acquired<T> {
        if let Some(slot) = self.try_take() {
            return Acquired::Permit(slot);
        }
        self.count().waiting += 1;
        let waiting = Waiting {
            permits: Arc::clone(self),
        };
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.try_take() {
                return Acquired::Permit(slot);
            }
            if let Some(got) = other() {
                return Acquired::Other(got, waiting);
            }
            freed.await;
        }
    }

    /// Wakes the calls waiting in [`Self::acquire_or`] to ask their other
    /// way in again (a place behind a busy process opened).
    pub fn announce(&self) {
        self.freed.notify_waiters();
    }

    /// How many more calls may come now: the free permits, plus `ahead`
    /// calls allowed to wait for one, less those already waiting.
    pub fn room(&self, ahead: usize) -> usize {
        let count = self.count();
        let free = count.size.saturating_sub(count.taken);
        free.saturating_add(ahead).saturating_sub(count.waiting)
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

    /// Resolves once [`Self::room`] for `ahead` is above 0 (at once if it
    /// is): a permit freed, a waiting call gone, or the size grown.
    pub async fn until_room(&self, ahead: usize) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.room(ahead) > 0 {
                return;
            }
            freed.await;
        }
    }
}

impl Drop for CallPermit {
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
        let permits = std::sync::Arc::new(CallPermits::new(2));
        let (a, b) = (permits.try_take().unwrap(), permits.try_take().unwrap());
        permits.resize(1);
        assert_eq!((permits.taken(), permits.room(0)), (2, 0));
        drop(a);
        assert_eq!(permits.room(0), 0, "still one call in flight, size 1");
        drop(b);
        assert_eq!(permits.room(0), 1);
        permits.resize(3);
        assert_eq!(permits.room(0), 3);
    }

    #[tokio::test]
    async fn room_counts_the_calls_waiting_for_a_permit() {
        let permits = std::sync::Arc::new(CallPermits::new(1));
        assert_eq!((permits.room(0), permits.room(2)), (1, 3));
        let first = permits.try_take().unwrap();
        assert_eq!((permits.room(0), permits.room(2)), (0, 2));
        let waiter = {
            let permits = std::sync::Arc::clone(&permits);
            tokio::spawn(async move {
                let _slot = permits.acquire().await;
            })
        };
        tokio::task::yield_now().await;
        assert_eq!(permits.room(2), 1, "one call waits");
        assert_eq!(permits.room(1), 0, "one waiting fills a window of one");
        drop(first);
        waiter.await.unwrap();
        assert_eq!(permits.room(1), 2, "the waiter ran and freed its permit");
        permits.until_room(1).await;
    }
}
