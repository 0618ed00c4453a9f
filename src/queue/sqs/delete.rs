//! Deleting in batches: the deletes of jobs that end close together go to
//! SQS as one `DeleteMessageBatch` (up to 10 per queue) instead of one
//! `DeleteMessage` each (Laravel's `SqsJob::delete`).
//!
//! Job tasks hand their delete to the [`Deleter`] and await the answer.
//! On SQS a job keeps its `--concurrency` slot until that answer comes
//! (only Redis frees a slot as its delete is sent), so a delete may wait
//! for company only briefly. The deleter knows, per queue, how many
//! received messages are still out as jobs whose delete has not been
//! handed in ([`Outstanding`]): only those could join a batch. A queue's
//! waiting deletes are sent
//!
//! - at once when no other message of the queue is out (at
//!   `--concurrency=1`, and for the last jobs of a burst: nothing can
//!   join, so waiting would only add to the delete's time), or when one
//!   of them is [urgent](URGENT) (its visibility ends soon);
//! - at once, 10 of them, when 10 are waiting (SQS's batch limit);
//! - else when the last other message out is settled or dropped, or when
//!   the oldest has waited [`LINGER`], whichever comes first.
//!
//! So a delete waits at most [`LINGER`] longer than it would alone, and
//! only while other jobs of its queue are running. Batches are sent as
//! soon as they are due, several at once if need be. A call that fails
//! as a whole fails each of its deletes, and every caller retries as
//! after a failed call of its own; a receipt SQS refuses in a batch is
//! that caller's answer alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use super::error::{Result, SqsQueueError};
use super::queue::{Inner, SqsQueue};

/// SQS's most entries per batch call.
const MAX_ENTRIES: usize = 10;

/// The most deletes taken from the channel at once (across queues).
const MAX_TAKEN: usize = 100;

/// The longest a delete waits for others of its queue to join its batch
/// (5 ms), counted from when it was handed in; the job holds its slot
/// meanwhile. Only while other messages of the queue are out as jobs.
pub const LINGER: Duration = Duration::from_millis(5);

/// A delete whose message's visibility (as the worker's lease counts it)
/// ends within this time (1 s) is sent at once, never held for a batch:
/// a message seen again by another consumer could run twice.
pub const URGENT: Duration = Duration::from_secs(1);

/// One delete waiting: the queue URL, the receipt handle, the message's
/// mark (settled as the deleter takes the delete, so that the message is
/// always either counted out or waiting in the deleter), whether it is
/// urgent, when it was handed in, and where its answer goes (true:
/// deleted; false: the receipt is no longer valid).
struct Delete {
    url: Arc<str>,
    receipt: String,
    mark: Option<Unsettled>,
    urgent: bool,
    arrived: Instant,
    answer: oneshot::Sender<Result<bool>>,
}

/// Per queue URL, how many received messages are out as jobs and not yet
/// settled: neither their delete handed in, nor released, nor dropped.
#[derive(Default)]
pub(super) struct Outstanding {
    counts: Mutex<HashMap<Arc<str>, usize>>,
    /// Woken when a queue's count falls to zero.
    emptied: Notify,
}

impl Outstanding {
    /// How many messages of `url` are out.
    fn count(&self, url: &str) -> usize {
        self.counts().get(url).copied().unwrap_or(0)
    }

    /// Counts one more message of `url` out, until the returned mark is
    /// settled or dropped.
    pub(super) fn track(self: &Arc<Self>, url: &Arc<str>) -> Unsettled {
        *self.counts().entry(Arc::clone(url)).or_default() += 1;
        Unsettled(Arc::new(Mark {
            outstanding: Arc::clone(self),
            url: Arc::clone(url),
            settled: AtomicBool::new(false),
        }))
    }

    fn untrack(&self, url: &str) {
        let emptied = {
            let mut counts = self.counts();
            match counts.get_mut(url) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    false
                }
                Some(_) => {
                    counts.remove(url);
                    true
                }
                None => false,
            }
        };
        if emptied {
            // A permit is kept if the deleter is not waiting right now: it
            // looks again at its next turn, so no wake is lost.
            self.emptied.notify_one();
        }
    }

    /// The counts, however a panic left them.
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        match self.counts.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A received message counted in [`Outstanding`] until it is settled
/// (its delete handed in, or its release sent) or its job is dropped.
/// Shared by the clones of its message handle; bookkeeping only: any two
/// compare equal.
#[derive(Clone)]
pub struct Unsettled(Arc<Mark>);

struct Mark {
    outstanding: Arc<Outstanding>,
    url: Arc<str>,
    settled: AtomicBool,
}

impl Unsettled {
    /// The message will not be deleted by a batch to come (its delete is
    /// handed in, or it is released): other deletes of its queue no longer
    /// wait for it. Once; later calls do nothing.
    pub(super) fn settle(&self) {
        self.0.settle();
    }
}

impl Mark {
    fn settle(&self) {
        if !self.settled.swap(true, Ordering::AcqRel) {
            self.outstanding.untrack(&self.url);
        }
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        self.settle();
    }
}

impl std::fmt::Debug for Unsettled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsettled")
            .field("settled", &self.0.settled.load(Ordering::Acquire))
            .finish()
    }
}

impl PartialEq for Unsettled {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Unsettled {}

/// The sender side of the batching task, started with the queue, and the
/// count of messages out.
pub(super) struct Deleter {
    sender: mpsc::UnboundedSender<Delete>,
    pub(super) outstanding: Arc<Outstanding>,
}

impl Deleter {
    /// Starts the task that batches `queue`'s deletes. It ends when the
    /// last handle to the queue is dropped.
    pub(super) fn start(queue: Weak<Inner>) -> Deleter {
        let (sender, receiver) = mpsc::unbounded_channel();
        let outstanding = Arc::new(Outstanding::default());
        let dispatch = move |url: Arc<str>, deletes: Vec<Delete>| {
            // A caller holds the queue while it waits: when it is gone, so
            // are the callers, and dropping the answers is all there is.
            if let Some(inner) = queue.upgrade() {
                tokio::spawn(send(SqsQueue { inner }, url, deletes));
            }
        };
        tokio::spawn(run(receiver, Arc::clone(&outstanding), dispatch));
        Deleter {
            sender,
            outstanding,
        }
    }
}

impl SqsQueue {
    /// Deletes the message `receipt` of queue `url`, batched with the
    /// deletes of its queue handed in beside it (see the module's notes;
    /// `urgent`: its visibility ends within [`URGENT`], sent at once);
    /// false when SQS says the receipt is no longer valid.
    ///
    /// # Errors
    /// SQS refused or could not be reached.
    pub(super) async fn delete_batched(
        &self,
        url: &Arc<str>,
        receipt: &str,
        mark: &Unsettled,
        urgent: bool,
    ) -> Result<bool> {
        let (answer, answered) = oneshot::channel();
        let delete = Delete {
            url: Arc::clone(url),
            receipt: receipt.to_string(),
            mark: Some(mark.clone()),
            urgent,
            arrived: Instant::now(),
            answer,
        };
        if let Err(mpsc::error::SendError(delete)) = self.inner.deleter.sender.send(delete) {
            drop(delete);
            mark.settle();
            return self.delete_message(url, receipt).await;
        }
        match answered.await {
            Ok(result) => result,
            // The task is gone (the runtime stopping): delete on our own.
            Err(_) => self.delete_message(url, receipt).await,
        }
    }
}

/// How many of a queue's waiting deletes to send now, as one call:
/// `waiting` of them, the oldest handed in at `oldest`, `urgent` if any is,
/// `others` messages of the queue still out, at `now`. Zero: wait (until
/// `oldest + LINGER`, or until `others` falls to zero).
fn due(waiting: usize, oldest: Instant, urgent: bool, others: usize, now: Instant) -> usize {
    if waiting >= MAX_ENTRIES {
        MAX_ENTRIES
    } else if waiting > 0 && (urgent || others == 0 || now >= oldest + LINGER) {
        waiting
    } else {
        0
    }
}

/// Takes the deletes handed in, and hands each batch to `dispatch` (one
/// queue, at most 10) as it falls [`due`]; until the channel closes,
/// then everything waiting goes.
async fn run(
    mut receiver: mpsc::UnboundedReceiver<Delete>,
    outstanding: Arc<Outstanding>,
    mut dispatch: impl FnMut(Arc<str>, Vec<Delete>),
) {
    let mut waiting: HashMap<Arc<str>, Vec<Delete>> = HashMap::new();
    let mut taken = Vec::with_capacity(MAX_TAKEN);
    let mut open = true;
    loop {
        let wake = waiting
            .values()
            .filter_map(|deletes| deletes.first())
            .map(|delete| delete.arrived + LINGER)
            .min();
        tokio::select! {
            n = receiver.recv_many(&mut taken, MAX_TAKEN), if open => open = n > 0,
            () = sleep_until(wake) => {}
            () = outstanding.emptied.notified() => {}
        }
        // Whatever else was handed in meanwhile joins this turn.
        while open && taken.len() < MAX_TAKEN {
            match receiver.try_recv() {
                Ok(delete) => taken.push(delete),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        for mut delete in taken.drain(..) {
            // Taken: no longer out, but waiting here. Settled only now, not
            // as it was handed in: else a turn could find it neither out
            // nor here while it crossed the channel, and send its batch
            // without it (a one-message call right after).
            if let Some(mark) = delete.mark.take() {
                mark.settle();
            }
            waiting
                .entry(Arc::clone(&delete.url))
                .or_default()
                .push(delete);
        }
        let now = Instant::now();
        for (url, deletes) in &mut waiting {
            // Nothing more comes once the channel is closed.
            let others = if open { outstanding.count(url) } else { 0 };
            while let Some(oldest) = deletes.first().map(|d| d.arrived) {
                let urgent = deletes.iter().any(|d| d.urgent);
                let n = due(deletes.len(), oldest, urgent, others, now);
                if n == 0 {
                    break;
                }
                tracing::trace!(
                    queue = %url,
                    deletes = n,
                    others,
                    urgent,
                    waited_us = now.saturating_duration_since(oldest).as_micros() as u64,
                    "delete batch due"
                );
                dispatch(Arc::clone(url), deletes.drain(..n).collect());
            }
        }
        waiting.retain(|_, deletes| !deletes.is_empty());
        if !open && waiting.is_empty() {
            return;
        }
    }
}

/// Sleeps until `at`; for ever when `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One call for `deletes` of `url`: `DeleteMessage` for one, else
/// `DeleteMessageBatch`; each delete answered.
async fn send(queue: SqsQueue, url: Arc<str>, deletes: Vec<Delete>) {
    if let [_] = deletes.as_slice() {
        let delete = deletes.into_iter().next().expect("one delete");
        let result = queue.delete_message(&url, &delete.receipt).await;
        let _ = delete.answer.send(result);
        return;
    }
    let mut call = queue.inner.client.delete_message_batch().queue_url(&*url);
    for (n, delete) in deletes.iter().enumerate() {
        let entry = DeleteMessageBatchRequestEntry::builder()
            .id(n.to_string())
            .receipt_handle(&delete.receipt)
            .build();
        match entry {
            Ok(entry) => call = call.entries(entry),
            Err(e) => {
                // Never: both fields are set. Answer each alone rather than
                // lose a delete.
                tracing::debug!("cannot build a batch entry ({e}): deleting one by one");
                for delete in deletes {
                    let result = queue.delete_message(&url, &delete.receipt).await;
                    let _ = delete.answer.send(result);
                }
                return;
            }
        }
    }
    let output = match call.send().await {
        Ok(output) => output,
        Err(e) => {
            let doing = format!("delete {} messages from {url}", deletes.len());
            for delete in deletes {
                let _ = delete.answer.send(Err(SqsQueueError::from_sdk(&e, &doing)));
            }
            return;
        }
    };
    let failed: HashMap<&str, _> = output.failed().iter().map(|f| (f.id(), f)).collect();
    for (n, delete) in deletes.into_iter().enumerate() {
        let result = match failed.get(n.to_string().as_str()) {
            None => Ok(true),
            Some(f) => {
                let e = SqsQueueError::batch_entry(f.code(), f.message(), &url);
                if e.is_reservation_gone() {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        };
        let _ = delete.answer.send(result);
    }
}

#[cfg(test)]
mod tests {
    //! The batching decision, on tokio's paused clock: the deleter's task
    //! runs with a dispatch that records each call (its queue, receipts and
    //! time) and answers every delete at once, in place of SQS.

    use super::*;

    type Calls = Arc<Mutex<Vec<(String, Vec<String>, Duration)>>>;

    struct Rig {
        sender: mpsc::UnboundedSender<Delete>,
        outstanding: Arc<Outstanding>,
        calls: Calls,
    }

    fn rig() -> Rig {
        let (sender, receiver) = mpsc::unbounded_channel();
        let outstanding = Arc::new(Outstanding::default());
        let calls: Calls = Arc::default();
        let start = Instant::now();
        let record = Arc::clone(&calls);
        let dispatch = move |url: Arc<str>, deletes: Vec<Delete>| {
            let receipts = deletes.iter().map(|d| d.receipt.clone()).collect();
            record
                .lock()
                .unwrap()
                .push((url.to_string(), receipts, start.elapsed()));
            for delete in deletes {
                let _ = delete.answer.send(Ok(true));
            }
        };
        tokio::spawn(run(receiver, Arc::clone(&outstanding), dispatch));
        Rig {
            sender,
            outstanding,
            calls,
        }
    }

    impl Rig {
        /// A message of `url` received and out as a job.
        fn out(&self, url: &str) -> Unsettled {
            self.outstanding.track(&Arc::from(url))
        }

        /// Hands in the delete of `mark`'s message, named `receipt`.
        fn delete(
            &self,
            mark: &Unsettled,
            receipt: &str,
            urgent: bool,
        ) -> oneshot::Receiver<Result<bool>> {
            let (answer, answered) = oneshot::channel();
            let delete = Delete {
                url: Arc::clone(&mark.0.url),
                receipt: receipt.to_string(),
                mark: Some(mark.clone()),
                urgent,
                arrived: Instant::now(),
                answer,
            };
            assert!(self.sender.send(delete).is_ok());
            answered
        }

        fn calls(&self) -> Vec<(String, Vec<String>, Duration)> {
            self.calls.lock().unwrap().clone()
        }
    }

    async fn deleted(answered: oneshot::Receiver<Result<bool>>) {
        assert!(matches!(answered.await, Ok(Ok(true))));
    }

    fn call(url: &str, receipts: &[&str], at_ms: u64) -> (String, Vec<String>, Duration) {
        (
            url.to_string(),
            receipts.iter().map(|r| r.to_string()).collect(),
            Duration::from_millis(at_ms),
        )
    }

    /// At `--concurrency=1` nothing can join: the delete waits for nothing.
    #[tokio::test(start_paused = true)]
    async fn a_delete_with_no_other_message_out_is_sent_at_once() {
        let rig = rig();
        let a = rig.out("q");
        deleted(rig.delete(&a, "a", false)).await;
        assert_eq!(rig.calls(), vec![call("q", &["a"], 0)]);
    }

    /// Jobs ending 2 ms apart share one call; a job still running holds
    /// them no longer than LINGER.
    #[tokio::test(start_paused = true)]
    async fn deletes_wait_for_the_jobs_still_out_at_most_the_linger() {
        let rig = rig();
        let (a, b, _running) = (rig.out("q"), rig.out("q"), rig.out("q"));
        let first = rig.delete(&a, "a", false);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let second = rig.delete(&b, "b", false);
        deleted(first).await;
        deleted(second).await;
        assert_eq!(LINGER, Duration::from_millis(5));
        assert_eq!(rig.calls(), vec![call("q", &["a", "b"], 5)]);
    }

    /// The last job out handing its delete in sends the batch at once; so
    /// does a job out being released or dropped (nothing more can join).
    #[tokio::test(start_paused = true)]
    async fn the_last_message_out_ends_the_wait() {
        let rig = rig();
        let (a, b) = (rig.out("q"), rig.out("q"));
        let first = rig.delete(&a, "a", false);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = rig.delete(&b, "b", false);
        deleted(first).await;
        deleted(second).await;
        assert_eq!(rig.calls(), vec![call("q", &["a", "b"], 1)]);

        let (c, released, dropped) = (rig.out("q"), rig.out("q"), rig.out("q"));
        let third = rig.delete(&c, "c", false);
        tokio::time::sleep(Duration::from_millis(1)).await;
        released.settle();
        tokio::time::sleep(Duration::from_millis(1)).await;
        drop(dropped);
        deleted(third).await;
        assert_eq!(rig.calls()[1], call("q", &["c"], 3));
    }

    /// SQS takes 10 entries a call: 10 waiting go at once, never more.
    #[tokio::test(start_paused = true)]
    async fn ten_deletes_go_at_once_and_never_more_in_one_call() {
        let rig = rig();
        let marks: Vec<Unsettled> = (0..13).map(|_| rig.out("q")).collect();
        let names: Vec<String> = (0..12).map(|n| format!("m{n}")).collect();
        let answers: Vec<_> = (0..12)
            .map(|n| rig.delete(&marks[n], &names[n], false))
            .collect();
        for answered in answers {
            deleted(answered).await;
        }
        let first: Vec<&str> = names[..10].iter().map(String::as_str).collect();
        let rest: Vec<&str> = names[10..].iter().map(String::as_str).collect();
        // The 13th job is still out: the two left wait the linger for it.
        assert_eq!(rig.calls(), vec![call("q", &first, 0), call("q", &rest, 5)]);
    }

    /// A message whose visibility ends soon waits for no one, and takes
    /// those waiting with it.
    #[tokio::test(start_paused = true)]
    async fn an_urgent_delete_is_sent_at_once() {
        let rig = rig();
        let (a, b, _running) = (rig.out("q"), rig.out("q"), rig.out("q"));
        let first = rig.delete(&a, "a", false);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = rig.delete(&b, "b", true);
        deleted(first).await;
        deleted(second).await;
        assert_eq!(rig.calls(), vec![call("q", &["a", "b"], 1)]);
    }

    /// A call names one queue; a delete waits only for its own queue's
    /// messages out.
    #[tokio::test(start_paused = true)]
    async fn deletes_of_two_queues_never_share_a_call_nor_wait_for_each_other() {
        let rig = rig();
        let (x, y, _y_running) = (rig.out("x"), rig.out("y"), rig.out("y"));
        let first = rig.delete(&x, "x1", false);
        let second = rig.delete(&y, "y1", false);
        deleted(first).await;
        deleted(second).await;
        assert_eq!(
            rig.calls(),
            vec![call("x", &["x1"], 0), call("y", &["y1"], 5)]
        );
    }

    /// A retried delete (its mark settled at the first try) counts once.
    #[tokio::test(start_paused = true)]
    async fn a_mark_settles_once() {
        let outstanding = Arc::new(Outstanding::default());
        let url: Arc<str> = Arc::from("q");
        let a = outstanding.track(&url);
        let _b = outstanding.track(&url);
        a.settle();
        a.settle();
        drop(a);
        assert_eq!(outstanding.count("q"), 1);
    }
}
