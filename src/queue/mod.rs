//! The queue: where jobs wait, whichever driver keeps them.
//!
//! The worker reaches it through one seam, [`driver`]: the [`driver::Driver`]
//! trait (Laravel's `Queue` and `Job` contracts, a required core and
//! defaulted capabilities) behind the [`Queue`] handle, with the errors of
//! [`error`] and the counts of [`sizes`]. What a reserved job is ([`job`])
//! and what its payload says ([`payload`], [`command`]) are the same for
//! every driver. The drivers: [`database`] (the `jobs` table), [`sqs`]
//! (Amazon SQS), [`beanstalkd`] (its tubes), and Laravel's `RedisQueue`,
//! whose files are here: the key
//! names ([`keys`]), the Lua scripts that keep each step atomic
//! ([`scripts`]), the Redis calls ([`redis_queue`]) and the trait on them
//! (`redis_driver`), the look for the same queue under another prefix
//! ([`elsewhere`]), the pipelining of the deletes and releases of jobs that
//! finish together ([`batch`]), which name large members by digest
//! ([`member`]), the reading back of the large jobs the pop set aside
//! (`set_aside`), what the migrate script moved ([`migrated`]) and the
//! writes a listener may add to a delete's script ([`companion`]).

pub mod batch;
pub mod beanstalkd;
pub mod clock;
pub mod command;
pub mod companion;
pub mod contract;
pub mod database;
pub mod driver;
pub mod elsewhere;
pub mod error;
pub mod job;
pub mod keys;
pub mod member;
#[cfg(test)]
pub mod memory;
pub mod migrated;
pub mod payload;
pub mod redis_driver;
pub mod redis_queue;
pub mod scripts;
mod set_aside;
pub mod sizes;
pub mod sqs;

pub use clock::now;
pub use driver::Queue;
pub use error::{QueueError, QueueResult};
pub use job::ReservedJob;
pub use keys::QueueKeys;
pub use payload::Payload;
pub use redis_queue::RedisQueue;
pub use sizes::{HeadAge, QueueSizes};

/// How long one queue command may wait for its answer (the limit of every
/// command connection, see [`crate::redis::COMMAND_TIMEOUT`]).
pub use crate::redis::COMMAND_TIMEOUT;
