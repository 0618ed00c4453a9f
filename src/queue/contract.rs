//! The seam's contract: what every [`Driver`](super::driver::Driver)
//! promises the worker, as checks that run on a driver given an empty
//! queue. The memory queue runs them here; every real driver runs the same
//! checks on its server (`tests/integration/seam_contract.rs`). Each check
//! panics on a breach, naming it: they are tests.
//!
//! - a pop counts the attempt; a release counts it, a hand back does not;
//! - a write naming a lost reservation (reclaimed by another worker)
//!   reports it (`false`) and changes nothing;
//! - renew keeps a held reservation;
//! - sizes and clear agree with what was pushed and reserved.

use std::sync::Arc;

use super::Queue;
use super::ReservedJob;
use super::companion::Ending;
use super::handle::QueueHandle;
use super::sizes::{HeadAge, QueueSizes};

/// A payload with a `uuid` and a `displayName`, as Laravel pushes them.
pub fn payload(n: u32) -> String {
    format!(
        r#"{{"uuid":"contract-{n}","displayName":"App\\Jobs\\Contract","job":"Illuminate\\Queue\\CallQueuedHandler@call","maxTries":null,"attempts":0,"data":{{"commandName":"App\\Jobs\\Contract","command":"x"}}}}"#
    )
}

/// How long a job made available may take to be poppable: Redis moves
/// a due delayed job (a hand back, a release) to the ready list on its
/// migration schedule, not at once.
const AVAILABLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Reserves one job of `queue`, which holds one or soon will (polled:
/// a driver has no event for a delayed job coming due).
async fn pop_one(queue: &Queue, keys: &Arc<QueueHandle>) -> ReservedJob {
    let deadline = std::time::Instant::now() + AVAILABLE_WITHIN;
    loop {
        let mut jobs = queue.pop(keys, 1).await.expect("pop");
        if let Some(job) = jobs.pop() {
            assert!(jobs.is_empty(), "one job popped");
            return job;
        }
        assert!(std::time::Instant::now() < deadline, "no job to pop");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Pending, delayed and reserved of `queue`.
async fn counts(queue: &Queue, keys: &QueueHandle) -> (u64, u64, u64) {
    let QueueSizes {
        pending,
        delayed,
        reserved,
        ..
    } = queue.sizes(keys, HeadAge::Skip).await.expect("sizes");
    (pending, delayed, reserved)
}

fn done() -> Ending<'static> {
    Ending::Completed {
        reserved_at: std::time::SystemTime::now(),
    }
}

/// Attempts: counted by a pop and a release, not by a hand back where
/// `hand_back_uncounted` (SQS counts every receive, and cannot uncount one).
pub async fn attempts_are_counted_as_laravel_counts_them(
    queue: &Queue,
    name: &str,
    hand_back_uncounted: bool,
) {
    let keys = queue.handle(name);
    queue.push(&keys, &payload(1)).await.expect("push");
    let job = pop_one(queue, &keys).await;
    assert_eq!(job.attempt(), 1);
    assert!(queue.hand_back(&job, 0).await.expect("hand back"));
    let job = pop_one(queue, &keys).await;
    let counted = u64::from(!hand_back_uncounted);
    assert_eq!(job.attempt(), 1 + counted, "a hand back counts no attempt");
    assert!(queue.release(&job, 0).await.expect("release"));
    let job = pop_one(queue, &keys).await;
    assert_eq!(job.attempt(), 2 + counted, "a release counts the attempt");
    assert!(
        queue.renew(&job).await.expect("renew"),
        "renew keeps a held job"
    );
    assert!(queue.delete(&job, done()).await.expect("delete"));
    assert_eq!(counts(queue, &keys).await, (0, 0, 0));
}

/// After the reservation is lost (`lose` ends it, as another worker's
/// reclaim would), every write reports it and changes nothing.
pub async fn a_lost_reservation_is_reported_and_left_alone(
    queue: &Queue,
    name: &str,
    lose: impl Fn(&str),
) {
    let keys = queue.handle(name);
    queue.push(&keys, &payload(2)).await.expect("push");
    let job = pop_one(queue, &keys).await;
    lose(name);
    assert!(!queue.renew(&job).await.expect("renew"));
    assert!(!queue.release(&job, 0).await.expect("release"));
    assert!(!queue.hand_back(&job, 0).await.expect("hand back"));
    assert!(!queue.delete(&job, done()).await.expect("delete"));
    let (pending, delayed, reserved) = counts(queue, &keys).await;
    assert_eq!(pending + delayed + reserved, 1, "the job is still there");
    assert_eq!(queue.clear(&keys).await.expect("clear"), 1);
}

/// Sizes follow pushes, delays and reservations; clear empties the queue
/// and says how many it deleted.
pub async fn sizes_and_clear_agree(queue: &Queue, name: &str) {
    let keys = queue.handle(name);
    queue.push(&keys, &payload(3)).await.expect("push");
    queue.push(&keys, &payload(4)).await.expect("push");
    let later = super::clock::now() + 600;
    queue.later(&keys, later, &payload(5)).await.expect("later");
    assert_eq!(counts(queue, &keys).await, (2, 1, 0));
    let _held = pop_one(queue, &keys).await;
    assert_eq!(counts(queue, &keys).await, (1, 1, 1));
    assert_eq!(queue.clear(&keys).await.expect("clear"), 3);
    assert_eq!(counts(queue, &keys).await, (0, 0, 0));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::memory::MemoryQueue;

    fn memory() -> (Arc<MemoryQueue>, Queue) {
        let memory = Arc::new(MemoryQueue::new(Some(60)));
        let queue = Queue::shared(Arc::clone(&memory) as Arc<dyn crate::queue::driver::Driver>);
        (memory, queue)
    }

    #[tokio::test]
    async fn the_memory_queue_counts_attempts() {
        attempts_are_counted_as_laravel_counts_them(&memory().1, "default", true).await;
    }

    #[tokio::test]
    async fn the_memory_queue_reports_lost_reservations() {
        let (memory, queue) = memory();
        a_lost_reservation_is_reported_and_left_alone(&queue, "default", |name| {
            memory.reclaim(name)
        })
        .await;
    }

    #[tokio::test]
    async fn the_memory_queue_sizes_and_clear() {
        sizes_and_clear_agree(&memory().1, "default").await;
    }
}
