//! [`BeanstalkdQueue`] behind the seam: Laravel's `BeanstalkdQueue` and
//! `BeanstalkdJob` as a [`Driver`].
//!
//! - delete, release (priority 1024, the delay) and touch go through the
//!   job's own connection; beanstalkd's `NOT_FOUND` (the job is no longer
//!   reserved by it) is a reservation gone: `Ok(false)`, nothing changed;
//! - renew is `touch`: the server's ttr starts again, so a job running
//!   longer than `ttr` is never given to another worker (Laravel never
//!   touches: its job is reserved again once `ttr` passes);
//! - hand back must count no attempt, but `reserves` only grows: on a
//!   job's first attempt the hand back puts a copy (same body, priority
//!   and ttr, the delay asked) and then deletes the original, after a
//!   `touch` that proves the reservation is still ours. The copy's
//!   `reserves` starts again at 0, so its next run is attempt 1, as it
//!   should be. A connection lost between the put and the delete leaves
//!   both (the original comes back when its connection closes): at least
//!   once, never lost. On a later attempt a copy would forget the earlier
//!   ones and let a failing job run past its tries, so the job is
//!   released instead and that hand back counts one attempt;
//! - nothing is buried: a failed job is deleted, as `BeanstalkdJob` does
//!   after recording it.

use std::sync::Arc;
use std::time::Instant;

use super::BeanstalkdQueue;
use super::queue::PRIORITY;
use crate::queue::ReservedJob;
use crate::queue::clock::now;
use crate::queue::companion::Ending;
use crate::queue::driver::{Call, Driver};
use crate::queue::handle::QueueHandle;
use crate::queue::sizes::{HeadAge, QueueSizes};

impl Driver for BeanstalkdQueue {
    fn describe(&self) -> String {
        BeanstalkdQueue::describe(self)
    }

    /// The `ttr` every push gives its job.
    fn retry_after(&self) -> Option<u64> {
        Some(self.spec().retry_after)
    }

    fn pop<'a>(&'a self, queue: &'a Arc<QueueHandle>, count: usize) -> Call<'a, Vec<ReservedJob>> {
        Box::pin(async move { Ok(self.pop_jobs(queue, count).await?) })
    }

    fn delete<'a>(&'a self, job: &'a ReservedJob, _ended: Ending<'a>) -> Call<'a, bool> {
        Box::pin(async move {
            let delete = async |conn: &mut super::client::Connection, held: &super::queue::Held| {
                conn.job_command(format!("delete {}\r\n", held.id), "delete")
                    .await
            };
            Ok(self.on_reservation(job, true, delete).await?)
        })
    }

    fn release<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move {
            let release = async |conn: &mut super::client::Connection,
                                 held: &super::queue::Held| {
                let line = format!("release {} {PRIORITY} {delay}\r\n", held.id);
                conn.job_command(line, "release").await
            };
            Ok(self.on_reservation(job, true, release).await?)
        })
    }

    fn hand_back<'a>(&'a self, job: &'a ReservedJob, delay: u64) -> Call<'a, bool> {
        Box::pin(async move {
            let body = job.raw.clone();
            let hand_back = async |conn: &mut super::client::Connection,
                                   held: &super::queue::Held| {
                if held.stats.reserves > 1 {
                    let line = format!("release {} {} {delay}\r\n", held.id, held.stats.pri);
                    return conn.job_command(line, "release").await;
                }
                if !conn
                    .job_command(format!("touch {}\r\n", held.id), "touch")
                    .await?
                {
                    return Ok(false);
                }
                let (pri, ttr) = (held.stats.pri, held.stats.ttr);
                conn.put(&held.tube, pri, delay, ttr, &body).await?;
                conn.job_command(format!("delete {}\r\n", held.id), "delete")
                    .await?;
                Ok(true)
            };
            Ok(self.on_reservation(job, true, hand_back).await?)
        })
    }

    fn renew<'a>(&'a self, job: &'a ReservedJob) -> Call<'a, bool> {
        Box::pin(async move {
            let sent = Instant::now();
            let touch = async |conn: &mut super::client::Connection, held: &super::queue::Held| {
                conn.job_command(format!("touch {}\r\n", held.id), "touch")
                    .await
            };
            let touched = self.on_reservation(job, false, touch).await?;
            if touched {
                job.lease.confirm(sent);
            }
            Ok(touched)
        })
    }

    fn push<'a>(&'a self, queue: &'a QueueHandle, payload: &'a str) -> Call<'a, ()> {
        Box::pin(async move {
            self.put(&queue.name, payload.as_bytes(), 0).await?;
            Ok(())
        })
    }

    fn later<'a>(
        &'a self,
        queue: &'a QueueHandle,
        available_at: i64,
        payload: &'a str,
    ) -> Call<'a, ()> {
        Box::pin(async move {
            let delay = crate::queue::clock::seconds_until(available_at, now());
            self.put(&queue.name, payload.as_bytes(), delay).await?;
            Ok(())
        })
    }

    fn sizes<'a>(&'a self, queue: &'a QueueHandle, _head: HeadAge) -> Call<'a, QueueSizes> {
        Box::pin(async move { Ok(BeanstalkdQueue::sizes(self, &queue.name).await?) })
    }

    fn clear<'a>(&'a self, queue: &'a QueueHandle) -> Call<'a, u64> {
        Box::pin(async move { Ok(BeanstalkdQueue::clear(self, &queue.name).await?) })
    }

    /// The tube.
    fn location(&self, queue: &QueueHandle) -> String {
        format!("tube {}", queue.name)
    }
}
