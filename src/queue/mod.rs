//! The queue: where jobs wait, whichever driver keeps them.
//!
//! The worker reaches it through one seam, [`driver`]: the [`driver::Driver`]
//! trait (Laravel's `Queue` and `Job` contracts, a required core and
//! defaulted capabilities) behind the [`Queue`] handle, with the errors of
//! [`error`] and the counts of [`sizes`]. What a reserved job is ([`job`])
//! and what its payload says ([`payload`], [`command`]) are the same for
//! every driver, and so is the [`handle`] of a queue the worker names. The
//! drivers, a folder each: [`redis_queue`] (Laravel's `RedisQueue`),
//! [`database`] (the `jobs` table), [`sqs`] (Amazon SQS) and
//! [`beanstalkd`]. Two capabilities only Redis has so far keep their
//! neutral half here: what a driver moved to a ready list by itself
//! ([`migrated`], Horizon's `JobsMigrated`) and the writes a listener may
//! add to a delete ([`companion`]).

pub mod beanstalkd;
pub mod clock;
pub mod command;
pub mod companion;
pub mod contract;
pub mod database;
pub mod driver;
pub mod error;
pub mod handle;
pub mod job;
#[cfg(test)]
pub mod memory;
pub mod migrated;
pub mod payload;
pub mod redis_queue;
pub mod sizes;
pub mod sqs;

pub use clock::now;
pub use driver::Queue;
pub use error::{QueueError, QueueResult};
pub use handle::QueueHandle;
pub use job::ReservedJob;
pub use payload::Payload;
pub use redis_queue::RedisQueue;
pub use sizes::{HeadAge, QueueSizes};

/// How long one queue command may wait for its answer (the limit of every
/// command connection, see [`crate::redis::COMMAND_TIMEOUT`]).
pub use crate::redis::COMMAND_TIMEOUT;
