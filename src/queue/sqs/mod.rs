//! Laravel's SQS queue (`Illuminate\Queue\SqsQueue`, `Jobs\SqsJob`): the
//! queues of an AWS account (or a compatible server), read and written as
//! PHP workers on the same queues expect, through the official AWS SDK.
//! The book's page `docs/src/sqs-queue.md` tells what differs from
//! `queue:work sqs` and why.
//!
//! - [`spec`]: where the queues are (what the configuration resolves), and
//!   a queue's URL from its name;
//! - `queue`: [`SqsQueue`] itself (the client; send, change visibility,
//!   delete, sizes, purge);
//! - `receive`: the pop, the long polls of the idle wait, and the jobs
//!   made of the messages; delete, release, hand back and renew of a job;
//! - [`overflow`]: Laravel 13.9's overflow pointer bodies, followed into the
//!   worker's cache store and forgotten once their message is deleted;
//! - `delete`: deletes of jobs that end together, sent as one batch;
//! - `driver`: the queue behind the worker's driver seam;
//! - `error`: [`SqsQueueError`], telling "try again later" from "the
//!   configuration is wrong".

mod delete;
mod driver;
mod error;
pub mod overflow;
mod queue;
mod receive;
pub mod spec;

pub use error::SqsQueueError;
pub use spec::{Overflow, SqsQueueSpec};

pub use queue::SqsQueue;
pub use receive::MessageHandle;
