//! [`RedisQueue`] behind the seam: Laravel's `RedisQueue` as a
//! [`Driver`], with the capabilities only Redis has (a wake-up on push,
//! migrations, failures parked in the queue, a settle companion, the same
//! queue under another prefix).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::elsewhere::QueueElsewhere;
use super::queue::RedisQueue;
use crate::queue::ReservedJob;
use crate::queue::companion::{Ending, SettleCompanion};
use crate::queue::driver::{Call, Driver, ParksFailures, Step, WaitingForJobs};
use crate::queue::handle::QueueHandle;
use crate::queue::migrated::Migrated;
use crate::queue::sizes::{HeadAge, QueueSizes};

impl Driver for RedisQueue {
    fn describe(&self) -> String {
        RedisQueue::describe(self)
    }

    fn retry_after(&self) -> Option<u64> {
        RedisQueue::retry_after(self)
    }

    fn pop<'a>(&'a self, queue: &'a Arc<QueueHandle>, count: usize) -> Call<'a, Vec<ReservedJob>> {
        Box::pin(async move { Ok(RedisQueue::pop(self, queue, count).await?) })
    }

    fn delete<'a>(&'a self, job: &'a ReservedJob, ended: Ending<'a>) -> Call<'a, bool> {
        Box::pin(async move { Ok(self.delete_settled(job, ended).await?) })
    }

    fn release<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move { Ok(RedisQueue::release(self, job, delay).await?) })
    }

    fn hand_back<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move { Ok(RedisQueue::hand_back(self, job, delay).await?) })
    }

    fn renew<'a>(&'a self, job: &'a ReservedJob) -> Call<'a, bool> {
        Box::pin(async move { Ok(RedisQueue::renew(self, job).await?) })
    }

    fn push<'a>(&'a self, queue: &'a QueueHandle, payload: &'a str) -> Call<'a, ()> {
        Box::pin(async move { Ok(RedisQueue::push(self, &self.keys_of(queue), payload).await?) })
    }

    fn later<'a>(
        &'a self,
        queue: &'a QueueHandle,
        available_at: i64,
        payload: &'a str,
    ) -> Call<'a, ()> {
        Box::pin(async move {
            Ok(RedisQueue::later(self, &self.keys_of(queue), available_at, payload).await?)
        })
    }

    fn sizes<'a>(&'a self, queue: &'a QueueHandle, head: HeadAge) -> Call<'a, QueueSizes> {
        Box::pin(async move { Ok(RedisQueue::sizes(self, &self.keys_of(queue), head).await?) })
    }

    fn clear<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, u64> {
        Box::pin(async move { Ok(RedisQueue::clear(self, &self.keys_of(queue)).await?) })
    }

    fn at(&self) -> String {
        format!("Redis at {}", RedisQueue::describe(self))
    }

    fn handle(&self, name: &str) -> Arc<QueueHandle> {
        RedisQueue::handle(self, name)
    }

    /// The ready list's full key.
    fn location(&self, queue: &QueueHandle) -> String {
        self.keys_of(queue).ready.clone()
    }

    fn counts_in_payload(&self) -> bool {
        true
    }

    /// The settle write and the next pop share the queue's one multiplexed
    /// connection: the pop no longer waits a round trip for the write.
    fn overlaps_settles(&self) -> bool {
        true
    }

    fn block_for(&self) -> Option<u64> {
        RedisQueue::block_for(self)
    }

    fn block_on_notify<'a>(
        &'a self,
        queues: &'a [Arc<QueueHandle>],
        wait: Option<Duration>,
        _horizon: Option<Duration>,
    ) -> Call<'a, bool> {
        Box::pin(async move { Ok(RedisQueue::block_on_notify(self, queues, wait).await?) })
    }

    fn waiting_for_jobs(&self) -> Option<WaitingForJobs> {
        Some(WaitingForJobs::new(RedisQueue::waiting_for_jobs(self)))
    }

    fn take_migrated(&self) -> Vec<Migrated> {
        RedisQueue::take_migrated(self)
    }

    fn set_companion(&self, companion: Arc<dyn SettleCompanion>) -> bool {
        RedisQueue::set_companion(self, companion)
    }

    fn parking(&self) -> Option<&dyn ParksFailures> {
        Some(self)
    }

    fn elsewhere<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, Vec<QueueElsewhere>> {
        Box::pin(async move { Ok(RedisQueue::elsewhere(self, &self.keys_of(queue)).await?) })
    }

    fn renew_connection(&self) -> Step<'_, ()> {
        Box::pin(RedisQueue::renew_connection(self))
    }
}

/// The queue's `:unrecorded` sorted set (ours; Laravel has no such key).
impl ParksFailures for RedisQueue {
    fn parked_at(&self, queue: &QueueHandle) -> String {
        self.keys_of(queue).unrecorded.clone()
    }

    fn park_failure<'a>(&'a self, job: &'a ReservedJob, record: Bytes, at: i64) -> Call<'a, bool> {
        Box::pin(async move { Ok(RedisQueue::park_failure(self, job, record, at).await?) })
    }

    fn unrecorded<'a>(&'a self, queue: &'a QueueHandle, count: usize) -> Call<'a, Vec<Vec<u8>>> {
        Box::pin(
            async move { Ok(RedisQueue::unrecorded(self, &self.keys_of(queue), count).await?) },
        )
    }

    fn forget_unrecorded<'a>(&'a self, queue: &'a QueueHandle, record: &'a [u8]) -> Call<'a, ()> {
        Box::pin(async move {
            Ok(RedisQueue::forget_unrecorded(self, &self.keys_of(queue), record).await?)
        })
    }
}
