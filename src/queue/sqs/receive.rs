//! Receiving from SQS, and the jobs the worker makes of the messages.
//!
//! Laravel's `pop` asks one queue for one message without waiting (a
//! request per job, and one per empty poll every `--sleep`). Here:
//!
//! - a pop asks for up to `count` messages (never more than can start, at
//!   most 10, SQS's limit), without waiting;
//! - when every queue came back empty, the idle wait
//!   ([`SqsQueue::block_on_notify`]) long-polls every `--queue` queue at
//!   once (20 s, SQS's longest, one message each), starting a new poll as
//!   one ends empty, until `--sleep` is over or a message comes. The
//!   fetch that follows serves the queues in `--queue` order, so the
//!   first queue is served first when several have messages;
//! - a long poll still in flight when the wait ends keeps going: pops skip
//!   its queue meanwhile (the poll answers as soon as a message is there),
//!   and what it receives is held for the next pop of its queue. An idle
//!   worker so sends one request per queue every 20 s, whatever `--sleep`
//!   is, and picks up a push within a round trip;
//! - SQS goes on with a poll whose client has gone, so no poll may outlive
//!   the worker: a poll is no longer than the time before a foreseen stop
//!   (`--stop-when-empty`'s `--sleep`, the rest of `--stop-when-empty-for`
//!   or `--max-time`), and a stopping worker waits for the polls still in
//!   flight and takes what they bring ([`SqsQueue::take_received`]).
//!
//! When SQS handed a message out is known only to lie between the
//! receive's request and its answer: up to 20 s apart on a long poll. A
//! job's lease counts from the request (the safe end). So a message whose
//! receive was sent more than a third of the visibility timeout ago (a
//! long poll that waited, a message held) has its visibility extended
//! before it is handed out, and is dropped when SQS says it is no longer
//! this worker's; one held longer than the visibility timeout since its
//! answer came is dropped too (another consumer may have it; SQS shows it
//! again). A dropped message is never run here.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use bytes::Bytes;

use super::error::{Result, SqsQueueError};
use super::queue::{SqsQueue, seconds};
use super::spec::{MAX_VISIBILITY, MAX_WAIT};
use crate::queue::job::{Lease, Reservation};
use crate::queue::{Payload, QueueHandle, ReservedJob};

/// SQS's most messages per receive.
const MAX_RECEIVE: usize = 10;

/// What names a received message in its queue, for every later call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageHandle {
    /// The queue's URL (also what `failed_jobs.queue` holds, as `SqsJob`
    /// is given it).
    pub url: Arc<str>,
    /// `MessageId`: the job id Laravel's `SqsJob::getJobId` gives, stable
    /// across receives.
    pub message_id: Arc<str>,
    /// The receipt handle of this receive: the only name delete and
    /// change-visibility take.
    pub receipt: Arc<str>,
    /// `ApproximateReceiveCount`, this receive counted: the attempt number,
    /// as `SqsJob::attempts` reads it.
    pub receive_count: u64,
    /// When the receive was sent: SQS keeps a message in flight at most 12
    /// hours from it.
    pub received: Instant,
    /// Counts the message as out until it is settled, so that deletes of
    /// its queue may wait for it to join their batch (see `delete`).
    pub(super) unsettled: super::delete::Unsettled,
    /// The overflow payload's cache key, forgotten once the message is
    /// deleted (`None`: the body is the payload, or the payload is kept;
    /// see `overflow`).
    pub(super) forget: Option<String>,
    /// Why the job must fail without running: its body is an overflow
    /// pointer the worker cannot follow (see `overflow`).
    pub(super) unfollowed: Option<String>,
}

/// A queue's messages received by a long poll and not yet popped, and the
/// state of its polling.
#[derive(Default)]
pub(super) struct Held {
    messages: VecDeque<Received>,
    /// A long poll is in flight: pops skip the queue.
    polling: bool,
    /// A long poll failed: the next wait reports it (and the loop pauses).
    failed: Option<SqsQueueError>,
}

/// One message as received, with when its receive was sent and answered.
struct Received {
    message: Message,
    sent: Instant,
    answered: Instant,
}

impl SqsQueue {
    /// Reserves up to `count` messages of `queue` (at most 10) as jobs:
    /// first those a long poll holds for it, else one receive without
    /// waiting, unless a long poll of the queue is in flight (it answers
    /// as soon as a message is there).
    ///
    /// # Errors
    /// SQS refused the receive or could not be reached (nothing received).
    pub async fn pop_jobs(
        &self,
        queue: &Arc<QueueHandle>,
        count: usize,
    ) -> Result<Vec<ReservedJob>> {
        let url = self.url_of(&queue.name);
        let count = count.min(MAX_RECEIVE);
        if count == 0 {
            return Ok(Vec::new());
        }
        let (held, skip) = {
            let mut all = self.held();
            let entry = all.entry(url.clone()).or_default();
            let take = count.min(entry.messages.len());
            let held: Vec<Received> = entry.messages.drain(..take).collect();
            (held, entry.polling)
        };
        if !held.is_empty() {
            let fresh = self.still_ours(&url, held).await;
            return Ok(self.open_pointers(self.jobs(queue, &url, fresh)).await);
        }
        if skip {
            return Ok(Vec::new());
        }
        let sent = Instant::now();
        let messages = self.receive(&url, count, 0).await?;
        let answered = Instant::now();
        tracing::trace!(queue = %url, asked = count, got = messages.len(), "received");
        let received = messages
            .into_iter()
            .map(|message| Received {
                message,
                sent,
                answered,
            })
            .collect();
        let fresh = self.still_ours(&url, received).await;
        Ok(self.open_pointers(self.jobs(queue, &url, fresh)).await)
    }

    /// The idle wait: keeps a long poll (20 s, one message; no longer than
    /// `horizon`, the time before the worker may stop) in flight on every
    /// queue of `queues` until one brings a message (true) or `wait` is
    /// over (false; `None`: no limit). Polls in flight at the end keep
    /// going (see the module's notes); a stopping worker waits for them
    /// ([`Self::take_received`]).
    ///
    /// # Errors
    /// A long poll failed (SQS refused it or could not be reached).
    pub async fn block_on_notify(
        &self,
        queues: &[Arc<QueueHandle>],
        wait: Option<Duration>,
        horizon: Option<Duration>,
    ) -> Result<bool> {
        // A poll no longer than the time before a stop may come (rounded up,
        // at least 1 s): one that outlived the worker would take a message
        // for nobody.
        let poll_secs = horizon.map_or(MAX_WAIT, |h| h.as_secs_f64().ceil() as u64);
        let poll_secs = poll_secs.clamp(1, MAX_WAIT);
        let urls: Vec<String> = queues.iter().map(|q| self.url_of(&q.name)).collect();
        let deadline = wait.map(|wait| tokio::time::Instant::now() + wait);
        loop {
            let polled = self.inner.polled.notified();
            tokio::pin!(polled);
            polled.as_mut().enable();
            {
                let mut all = self.held();
                for url in &urls {
                    let entry = all.entry(url.clone()).or_default();
                    if !entry.messages.is_empty() {
                        return Ok(true);
                    }
                    if let Some(failed) = entry.failed.take() {
                        return Err(failed);
                    }
                    if !entry.polling {
                        entry.polling = true;
                        tokio::spawn(self.clone().long_poll(url.clone(), poll_secs));
                    }
                }
            }
            tokio::select! {
                () = &mut polled => {}
                () = sleep_until(deadline) => return Ok(false),
            }
        }
    }

    /// The messages this worker's long polls received and no pop took, once
    /// no poll of `queues` is in flight any more or `within` has passed (a
    /// poll ends at most 20 s after it was sent). A worker about to stop
    /// takes them (see `worker::received`), so that no message is left in
    /// flight for nobody; a poll still in flight at `within` is left to
    /// SQS, which shows what it took again after the visibility timeout.
    pub async fn take_received(
        &self,
        queues: &[Arc<QueueHandle>],
        within: Duration,
    ) -> Vec<ReservedJob> {
        let urls: Vec<String> = queues.iter().map(|q| self.url_of(&q.name)).collect();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let polled = self.inner.polled.notified();
            tokio::pin!(polled);
            polled.as_mut().enable();
            let polling = {
                let all = self.held();
                urls.iter()
                    .any(|url| all.get(url).is_some_and(|e| e.polling))
            };
            if !polling {
                break;
            }
            tokio::select! {
                () = &mut polled => {}
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let mut jobs = Vec::new();
        for (queue, url) in queues.iter().zip(&urls) {
            let held: Vec<Received> = match self.held().get_mut(url) {
                Some(entry) => entry.messages.drain(..).collect(),
                None => Vec::new(),
            };
            if !held.is_empty() {
                let fresh = self.still_ours(url, held).await;
                jobs.extend(self.jobs(queue, url, fresh));
            }
        }
        jobs
    }

    /// One long poll of `url` (up to `wait_secs`), its outcome left in the
    /// queue's [`Held`].
    async fn long_poll(self, url: String, wait_secs: u64) {
        tracing::debug!(queue = %url, wait_secs, "long poll sent");
        let sent = Instant::now();
        let answer = self.receive(&url, 1, wait_secs).await;
        let answered = Instant::now();
        {
            let mut all = self.held();
            let entry = all.entry(url).or_default();
            entry.polling = false;
            match answer {
                Ok(messages) => {
                    entry
                        .messages
                        .extend(messages.into_iter().map(|message| Received {
                            message,
                            sent,
                            answered,
                        }));
                }
                Err(e) => {
                    entry.failed = Some(e);
                }
            }
        }
        self.inner.polled.notify_waiters();
    }

    /// `ReceiveMessage` of up to `max` messages of `url`, hidden for the
    /// visibility timeout, with their receive count; waiting up to
    /// `wait_secs` for one (0: not at all, whatever the queue's
    /// `ReceiveMessageWaitTimeSeconds` says).
    async fn receive(&self, url: &str, max: usize, wait_secs: u64) -> Result<Vec<Message>> {
        let answer = self
            .inner
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(seconds(max as u64))
            .wait_time_seconds(seconds(wait_secs))
            .visibility_timeout(seconds(self.visibility()))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| SqsQueueError::from_sdk(&e, &format!("receive from {url}")))?;
        Ok(answer.messages.unwrap_or_default())
    }

    /// The received messages still surely this worker's (see the module's
    /// notes): one held past the visibility timeout is dropped, one whose
    /// receive was sent over a third of it ago is extended first, and
    /// dropped when SQS refuses.
    async fn still_ours(&self, url: &str, held: Vec<Received>) -> Vec<Received> {
        let visibility = Duration::from_secs(self.visibility());
        let mut fresh = Vec::with_capacity(held.len());
        for mut received in held {
            let receipt = received
                .message
                .receipt_handle()
                .unwrap_or_default()
                .to_string();
            if received.answered.elapsed() + Duration::from_secs(1) >= visibility {
                tracing::warn!(
                    queue = %url,
                    id = received.message.message_id().unwrap_or_default(),
                    "a received message waited past its visibility timeout before a slot was \
                     free: left to SQS, which shows it again"
                );
                continue;
            }
            if received.sent.elapsed() > visibility / 3 {
                let sent = Instant::now();
                match self
                    .change_visibility(url, &receipt, self.visibility())
                    .await
                {
                    Ok(true) => received.sent = sent,
                    Ok(false) | Err(_) => {
                        tracing::warn!(
                            queue = %url,
                            id = received.message.message_id().unwrap_or_default(),
                            "cannot extend a held message's visibility: left to SQS"
                        );
                        continue;
                    }
                }
            }
            fresh.push(received);
        }
        fresh
    }

    /// The jobs of `received` messages of `queue` (at `url`). A message
    /// without a receipt handle (never sent by SQS) cannot be settled and
    /// is left to SQS.
    fn jobs(
        &self,
        queue: &Arc<QueueHandle>,
        url: &str,
        received: Vec<Received>,
    ) -> Vec<ReservedJob> {
        let url: Arc<str> = Arc::from(url);
        received
            .into_iter()
            .filter_map(|Received { message, sent, .. }| {
                let receipt = message.receipt_handle()?.to_string();
                let receive_count = receive_count(
                    message
                        .attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                        .map(String::as_str),
                    message.message_id().unwrap_or_default(),
                );
                let raw = Bytes::from(message.body.unwrap_or_default().into_bytes());
                Some(ReservedJob {
                    queue: Arc::clone(queue),
                    payload: Payload::parse_stored(raw.clone()),
                    // What a handler is given: the body, as `SqsJob` reads
                    // it (the receipt handle is in the message handle).
                    reserved: raw.clone(),
                    raw,
                    lease: Lease::new(Some(self.visibility()), sent),
                    reservation: Reservation::Message(Arc::new(MessageHandle {
                        url: Arc::clone(&url),
                        message_id: Arc::from(message.message_id.unwrap_or_default()),
                        receipt: Arc::from(receipt),
                        receive_count,
                        received: sent,
                        unsettled: self.inner.deleter.outstanding.track(&url),
                        forget: None,
                        unfollowed: None,
                    })),
                })
            })
            .collect()
    }

    /// Deletes `job`'s message (it ran); false when AWS says the receipt is
    /// no longer valid.
    ///
    /// # Errors
    /// SQS refused or could not be reached.
    pub async fn delete_job(&self, job: &ReservedJob) -> Result<bool> {
        let handle = handle(job)?;
        let urgent = job.lease.until().is_some_and(|until| {
            until.saturating_duration_since(Instant::now()) < super::delete::URGENT
        });
        let deleted =
            (self.delete_batched(&handle.url, &handle.receipt, &handle.unsettled, urgent)).await?;
        if deleted {
            self.forget_payload(handle).await;
        }
        Ok(deleted)
    }

    /// Releases `job` as `SqsJob::release` does: its visibility set to
    /// `delay` seconds (the receive count grows at its next receive).
    /// SQS keeps a message in flight at most 12 hours from its receive: a
    /// longer delay is cut to what is left of them, with a warning
    /// (Laravel passes it and AWS refuses the call).
    ///
    /// # Errors
    /// SQS refused or could not be reached.
    pub async fn release_job(&self, job: &ReservedJob, delay: u64) -> Result<bool> {
        let handle = handle(job)?;
        // No delete of this message comes: other deletes stop waiting for it.
        handle.unsettled.settle();
        let left = MAX_VISIBILITY.saturating_sub(handle.received.elapsed().as_secs() + 1);
        if delay > left {
            tracing::warn!(
                job = job.display_name(),
                id = %handle.message_id,
                delay,
                "SQS keeps a message in flight at most 12 hours from its receive: released \
                 with a delay of {left} s"
            );
        }
        self.change_visibility(&handle.url, &handle.receipt, delay.min(left))
            .await
    }

    /// Hands `job` back: visible again in `delay` seconds. Its receive was
    /// counted and SQS cannot uncount it: the next receive's
    /// `ApproximateReceiveCount` is one more.
    ///
    /// # Errors
    /// SQS refused or could not be reached.
    pub async fn hand_back_job(&self, job: &ReservedJob, delay: u64) -> Result<bool> {
        self.release_job(job, delay).await
    }

    /// Extends `job`'s visibility by the visibility timeout from now (ours:
    /// Laravel never does), and its lease with it; false when AWS says the
    /// message is no longer in flight, or when the 12-hour limit would cut
    /// the extension short (the reservation is then lost as a Redis lease
    /// is: the handler is stopped under `on_lease_lost = "kill"`).
    ///
    /// # Errors
    /// SQS refused or could not be reached.
    pub async fn renew_job(&self, job: &ReservedJob) -> Result<bool> {
        let handle = handle(job)?;
        let left = MAX_VISIBILITY.saturating_sub(handle.received.elapsed().as_secs());
        if left <= self.visibility() + 1 {
            tracing::warn!(
                job = job.display_name(),
                id = %handle.message_id,
                "SQS keeps a message in flight at most 12 hours: its visibility cannot be \
                 extended again, and SQS will show it to other consumers"
            );
            return Ok(false);
        }
        let sent = Instant::now();
        let renewed = self
            .change_visibility(&handle.url, &handle.receipt, self.visibility())
            .await?;
        if renewed {
            job.lease.confirm(sent);
        }
        Ok(renewed)
    }
}

/// The largest receive count: what an `ApproximateReceiveCount` the worker
/// cannot read stands for. PHP's `(int)` cast, which `SqsJob::attempts`
/// applies, saturates a number too large at `PHP_INT_MAX` as well.
pub const UNREADABLE_RECEIVE_COUNT: u64 = i64::MAX as u64;

/// The attempt number of a message from its `ApproximateReceiveCount`
/// (`attribute`; the message's id `id` for the warning).
///
/// - a number: that count (SQS counts this receive);
/// - absent (a compatible server that does not send it): 1, as before;
/// - anything else (`"abc"`, `"-1"`, `"1.5"`, a count past 2^63 − 1):
///   [`UNREADABLE_RECEIVE_COUNT`], with a warning. The worker cannot tell
///   how often the job ran, and counting it as attempt 1 (PHP's `(int)
///   "abc"` is 0) would run a job past its tries again and again; as the
///   largest count, a job with `--tries` is failed as attempted too many
///   times (Laravel's `MaxAttemptsExceededException`), as PHP's saturated
///   cast of a too large count fails it, and a job without a limit
///   (`--tries=0`) still runs.
pub fn receive_count(attribute: Option<&str>, id: &str) -> u64 {
    let Some(text) = attribute else {
        return 1;
    };
    match text.parse::<u64>() {
        Ok(count) if count <= UNREADABLE_RECEIVE_COUNT => count,
        _ => {
            let shown: String = text.chars().take(40).collect();
            tracing::warn!(
                id,
                "SQS gave ApproximateReceiveCount {shown:?}, not a count the worker can \
                 read: the job counts as attempted {UNREADABLE_RECEIVE_COUNT} times, so it \
                 is failed if it has a tries limit rather than run again"
            );
            UNREADABLE_RECEIVE_COUNT
        }
    }
}

/// Sleeps until `at`; for ever when `None`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The message handle of `job`.
fn handle(job: &ReservedJob) -> Result<&MessageHandle> {
    match &job.reservation {
        Reservation::Message(handle) => Ok(handle),
        _ => Err(SqsQueueError::refused(
            "a job reserved from another queue driver cannot be settled on SQS",
        )),
    }
}

impl SqsQueue {
    /// The held messages and polls, however a panic left them.
    fn held(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Held>> {
        match self.inner.held.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A count the worker cannot read is the largest count, never
    /// attempt 1: a job past its tries is failed, not run again.
    #[test]
    fn an_unreadable_receive_count_is_the_largest_count() {
        assert_eq!(receive_count(Some("1"), "m"), 1);
        assert_eq!(receive_count(Some("7"), "m"), 7);
        assert_eq!(receive_count(None, "m"), 1, "absent: as before");
        for odd in [
            "abc",
            "",
            "-1",
            "1.5",
            " 2",
            "18446744073709551617",
            "9223372036854775808",
        ] {
            assert_eq!(
                receive_count(Some(odd), "m"),
                UNREADABLE_RECEIVE_COUNT,
                "{odd:?}"
            );
        }
        assert_eq!(
            receive_count(Some("9223372036854775807"), "m"),
            UNREADABLE_RECEIVE_COUNT
        );
    }
}
