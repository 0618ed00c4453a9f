//! [`SqsQueue`] behind the seam: Laravel's `SqsQueue` as a [`Driver`].
//! The idle wait is a long poll on every queue at once; the messages of
//! polls still in flight at stop are held for the worker to hand back; a
//! failure has no place in a queue (the message stays in flight and SQS
//! shows it again after its visibility timeout); attempts are SQS's
//! `ApproximateReceiveCount`.
//!
//! The futures are boxed where the trait boxes them: the AWS SDK's are
//! large, and one allocation beside an HTTPS request costs nothing.

use std::sync::Arc;
use std::time::Duration;

use super::SqsQueue;
use crate::exception::OVERFLOW_PAYLOAD_MISSING;
use crate::queue::ReservedJob;
use crate::queue::clock::now;
use crate::queue::companion::Ending;
use crate::queue::driver::{Call, Driver, PayloadStore, Refusal, Step};
use crate::queue::handle::QueueHandle;
use crate::queue::job::Reservation;
use crate::queue::sizes::{HeadAge, QueueSizes};

impl Driver for SqsQueue {
    fn describe(&self) -> String {
        SqsQueue::describe(self)
    }

    /// The visibility timeout every receive asks for.
    fn retry_after(&self) -> Option<u64> {
        Some(self.visibility())
    }

    fn pop<'a>(&'a self, queue: &'a Arc<QueueHandle>, count: usize) -> Call<'a, Vec<ReservedJob>> {
        Box::pin(async move { Ok(self.pop_jobs(queue, count).await?) })
    }

    fn delete<'a>(&'a self, job: &'a ReservedJob, _ended: Ending<'a>) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.delete_job(job).await?) })
    }

    fn release<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.release_job(job, delay).await?) })
    }

    fn hand_back<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.hand_back_job(job, delay).await?) })
    }

    fn renew<'a>(&'a self, job: &'a ReservedJob) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.renew_job(job).await?) })
    }

    fn push<'a>(&'a self, queue: &'a QueueHandle, payload: &'a str) -> Call<'a, ()> {
        Box::pin(async move { Ok(self.send(&queue.name, payload, 0).await?) })
    }

    /// `DelaySeconds`: at most 900 s, refused above (as AWS refuses
    /// Laravel's send).
    fn later<'a>(
        &'a self,
        queue: &'a QueueHandle,
        available_at: i64,
        payload: &'a str,
    ) -> Call<'a, ()> {
        Box::pin(async move {
            let delay = crate::queue::clock::seconds_until(available_at, now());
            Ok(self.send(&queue.name, payload, delay).await?)
        })
    }

    fn sizes<'a>(&'a self, queue: &'a QueueHandle, _head: HeadAge) -> Call<'a, QueueSizes> {
        Box::pin(async move {
            let sizes = SqsQueue::sizes(self, &queue.name).await?;
            Ok(QueueSizes {
                pending: sizes.pending,
                delayed: sizes.delayed,
                delayed_due: 0,
                reserved: sizes.reserved,
                // SQS does not say (Laravel gives null too).
                oldest_pending: None,
                head_bytes: 0,
            })
        })
    }

    /// `PurgeQueue`.
    fn clear<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, u64> {
        Box::pin(async move { Ok(self.purge(&queue.name).await?) })
    }

    /// Each queue's attributes read once: a queue SQS says does not exist
    /// (or refuses to show) is refused in one line naming its URL.
    fn check_queues<'a>(&'a self, queues: &'a [Arc<QueueHandle>]) -> Call<'a, ()> {
        Box::pin(async move {
            for queue in queues {
                self.check_exists(&queue.name).await?;
            }
            Ok(())
        })
    }

    /// The queue's URL.
    fn location(&self, queue: &QueueHandle) -> String {
        self.url_of(&queue.name)
    }

    /// The queue URL (`SqsJob` is given the URL as its queue).
    fn failed_queue_name(&self, queue: &QueueHandle) -> String {
        self.url_of(&queue.name)
    }

    fn set_payload_store(&self, store: Arc<dyn PayloadStore>) -> bool {
        SqsQueue::set_payload_store(self, store)
    }

    /// A pointer body the worker cannot follow (see `overflow`).
    fn refusal(&self, job: &ReservedJob) -> Option<Refusal> {
        let Reservation::Message(handle) = &job.reservation else {
            return None;
        };
        Some(Refusal {
            class: OVERFLOW_PAYLOAD_MISSING,
            message: handle.unfollowed.clone()?,
            failed_hook: false,
        })
    }

    /// Long polls on every queue at once, cut to `horizon`.
    fn block_on_notify<'a>(
        &'a self,
        queues: &'a [Arc<QueueHandle>],
        wait: Option<Duration>,
        horizon: Option<Duration>,
    ) -> Call<'a, bool> {
        Box::pin(async move { Ok(SqsQueue::block_on_notify(self, queues, wait, horizon).await?) })
    }

    fn take_received<'a>(
        &'a self,
        queues: &'a [Arc<QueueHandle>],
        within: Duration,
    ) -> Step<'a, Vec<ReservedJob>> {
        Box::pin(SqsQueue::take_received(self, queues, within))
    }
}
