//! Deleting in batches: the deletes of jobs that end close together go to
//! SQS as one `DeleteMessageBatch` (up to 10 per queue) instead of one
//! `DeleteMessage` each (Laravel's `SqsJob::delete`).
//!
//! Job tasks hand their delete to the [`Deleter`] and await the answer;
//! one task takes every delete waiting at that moment, sends them (one
//! call per queue and 10 messages, all at once), answers each, and only
//! then takes the next ones: deletes that come while a batch is in flight
//! wait for the next batch, which is what fills it. A call that fails as a
//! whole fails each of its deletes, and every caller retries as after a
//! failed call of its own; a receipt SQS refuses in a batch is that
//! caller's answer alone.

use std::collections::HashMap;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use tokio::sync::{mpsc, oneshot};

use super::error::{Result, SqsQueueError};
use super::queue::SqsQueue;

/// SQS's most entries per batch call.
const MAX_ENTRIES: usize = 10;

/// The most deletes taken at once (across queues).
const MAX_TAKEN: usize = 100;

/// One delete waiting: the queue URL, the receipt handle, and where its
/// answer goes (true: deleted; false: the receipt is no longer valid).
struct Delete {
    url: String,
    receipt: String,
    answer: oneshot::Sender<Result<bool>>,
}

/// The sender side of the batching task, started with the queue.
pub(super) struct Deleter {
    sender: mpsc::UnboundedSender<Delete>,
}

impl Deleter {
    /// Starts the task that batches `queue`'s deletes. It ends when the
    /// last handle to the queue is dropped.
    pub(super) fn start(queue: std::sync::Weak<super::queue::Inner>) -> Deleter {
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(queue, receiver));
        Deleter { sender }
    }
}

impl SqsQueue {
    /// Deletes the message `receipt` of queue `url`, batched with the
    /// deletes waiting beside it; false when SQS says the receipt is no
    /// longer valid.
    ///
    /// # Errors
    /// SQS refused or could not be reached.
    pub(super) async fn delete_batched(&self, url: &str, receipt: &str) -> Result<bool> {
        let (answer, answered) = oneshot::channel();
        let delete = Delete {
            url: url.to_string(),
            receipt: receipt.to_string(),
            answer,
        };
        if self.inner.deleter.sender.send(delete).is_err() {
            return self.delete_message(url, receipt).await;
        }
        match answered.await {
            Ok(result) => result,
            // The task is gone (the runtime stopping): delete on our own.
            Err(_) => self.delete_message(url, receipt).await,
        }
    }
}

/// Takes every delete waiting, sends them, answers each; again.
async fn run(
    queue: std::sync::Weak<super::queue::Inner>,
    mut receiver: mpsc::UnboundedReceiver<Delete>,
) {
    let mut taken = Vec::with_capacity(MAX_TAKEN);
    while receiver.recv_many(&mut taken, MAX_TAKEN).await > 0 {
        let Some(inner) = queue.upgrade() else { return };
        let queue = SqsQueue { inner };
        let mut by_url: HashMap<String, Vec<Delete>> = HashMap::new();
        for delete in taken.drain(..) {
            by_url.entry(delete.url.clone()).or_default().push(delete);
        }
        let mut calls = tokio::task::JoinSet::new();
        for (url, mut deletes) in by_url {
            while !deletes.is_empty() {
                let chunk: Vec<Delete> = deletes.drain(..deletes.len().min(MAX_ENTRIES)).collect();
                calls.spawn(send(queue.clone(), url.clone(), chunk));
            }
        }
        while calls.join_next().await.is_some() {}
    }
}

/// One call for `deletes` of `url`: `DeleteMessage` for one, else
/// `DeleteMessageBatch`; each delete answered.
async fn send(queue: SqsQueue, url: String, deletes: Vec<Delete>) {
    if let [_] = deletes.as_slice() {
        let delete = deletes.into_iter().next().expect("one delete");
        let result = queue.delete_message(&url, &delete.receipt).await;
        let _ = delete.answer.send(result);
        return;
    }
    let mut call = queue.inner.client.delete_message_batch().queue_url(&url);
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
