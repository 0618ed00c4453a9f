//! Reserving the next job (`Worker::getNextJob` + `RedisQueue::pop`).

use std::future::Future;
use std::sync::Arc;

use crate::queue::{Popped, QueueKeys, RedisQueue};

/// Polls `queues` in priority order and reserves the first job found; the
/// first queue that has one wins, so a lower queue is served only when every
/// queue before it is empty *at this poll*.
///
/// When all are empty and the connection has `block_for`, waits on all their
/// notify lists at once (BLPOP takes the keys in priority order) and, if a
/// token arrives, polls once more. Laravel 13 blocks only on the first
/// queue; one wait on all of them wakes for work on any queue and still
/// serves them in order.
///
/// Only the wait is cut short by `interrupted`: a pop in flight always
/// completes, so a job Redis has reserved is never dropped on the floor.
///
/// # Errors
/// Any Redis error (the caller logs it and pauses).
pub async fn next_job(
    queue: &RedisQueue,
    queues: &[Arc<QueueKeys>],
    interrupted: impl Future<Output = ()>,
) -> redis::RedisResult<Popped> {
    if let Some(job) = poll(queue, queues).await? {
        return Ok(Some(job));
    }
    let woken = tokio::select! {
        woken = queue.block_on_notify(queues) => woken?,
        () = interrupted => false,
    };
    if woken {
        return poll(queue, queues).await;
    }
    Ok(None)
}

async fn poll(queue: &RedisQueue, queues: &[Arc<QueueKeys>]) -> redis::RedisResult<Popped> {
    for keys in queues {
        if let Some(job) = queue.pop(keys).await? {
            return Ok(Some(job));
        }
    }
    Ok(None)
}
