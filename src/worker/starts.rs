//! The jobs reserved whose handler call has not begun yet.
//!
//! The loop reserves again only when every job it reserved before has
//! reached its handler (see `Daemon::wait_for_slot`): a handler that can
//! take a call (a persistent pool with a free process) is then seen as
//! busy by the next turn, which reserves no job it could not start. A
//! crash costs a job an attempt only once its handler has it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// How many reserved jobs have not reached their handler, shared by the
/// loop and its job tasks.
#[derive(Debug, Clone, Default)]
pub struct Starts(Arc<Pending>);

#[derive(Debug, Default)]
struct Pending {
    count: AtomicUsize,
    reached: Notify,
}

/// One reserved job on its way to its handler; dropped when its call
/// begins (or when the job ends without one).
#[derive(Debug)]
pub struct StartTicket(Arc<Pending>);

impl Starts {
    /// A ticket for a job just reserved.
    pub fn ticket(&self) -> StartTicket {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        StartTicket(Arc::clone(&self.0))
    }

    /// Resolves once every ticket has been dropped.
    pub async fn until_all_reached(&self) {
        loop {
            let reached = self.0.reached.notified();
            tokio::pin!(reached);
            reached.as_mut().enable();
            if self.0.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            reached.await;
        }
    }
}

impl Drop for StartTicket {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.reached.notify_waiters();
    }
}
