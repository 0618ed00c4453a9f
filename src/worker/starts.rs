//! Counts of the job tasks that have not reached a stage yet.
//!
//! The loop keeps two: the jobs whose handler call has not begun, and the
//! jobs whose fate is not in the queue yet. It reserves again only when every
//! job it reserved before has reached its handler (see
//! `Daemon::wait_for_slot`): a call a persistent pool has taken (running,
//! or waiting for a process) is then counted by the pool, and the next
//! turn reserves no more than the pool has room for (free processes plus
//! its `reserve_ahead` window), so a crash costs an attempt without a
//! start to at most that window's jobs. At the drain deadline, the second count
//! tells the jobs left reserved from those whose failed hook was cut.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// How many job tasks have not reached a stage, shared by the loop and
/// its job tasks.
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<Pending>);

#[derive(Debug, Default)]
struct Pending {
    count: AtomicUsize,
    reached: Notify,
}

/// One job task on its way to the stage; dropped when it gets there (or
/// when the task ends first).
#[derive(Debug)]
pub struct Ticket(Arc<Pending>);

impl Tally {
    /// A ticket for a job just reserved.
    pub fn ticket(&self) -> Ticket {
        self.0.count.fetch_add(1, Ordering::SeqCst);
        Ticket(Arc::clone(&self.0))
    }

    /// How many tickets are out.
    pub fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// Resolves once every ticket has been dropped.
    pub async fn until_all_reached(&self) {
        loop {
            let reached = self.0.reached.notified();
            tokio::pin!(reached);
            reached.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            reached.await;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::SeqCst);
        self.0.reached.notify_waiters();
    }
}
