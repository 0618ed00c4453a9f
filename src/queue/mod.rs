//! Laravel's Redis queue, as `Illuminate\Queue\RedisQueue` stores it.
//!
//! Everything the worker needs to reserve, finish, release, fail and reclaim a
//! job lives here: the key names ([`keys`]), the Lua scripts that keep each step
//! atomic ([`scripts`]), the payload fields the worker reads ([`payload`]), the
//! reserved job handed to the rest of the daemon ([`job`]), the Redis calls
//! themselves ([`redis_queue`]), the look for the same queue under another
//! prefix ([`elsewhere`]) and the pipelining of the deletes and releases
//! of jobs that finish together ([`batch`]), which name large members by digest
//! ([`member`]), and the reading back of the large jobs the pop set aside
//! (`set_aside`), and what the migrate script moved ([`migrated`]); the
//! writes a listener may add to a delete's script ([`companion`]).

pub mod batch;
pub mod clock;
pub mod command;
pub mod companion;
pub mod database;
pub mod driver;
pub mod elsewhere;
pub mod error;
pub mod job;
pub mod keys;
pub mod member;
pub mod migrated;
pub mod payload;
pub mod redis_queue;
pub mod scripts;
mod set_aside;
pub mod sqs;

pub use clock::now;
pub use driver::Queue;
pub use error::{QueueError, QueueResult};
pub use job::ReservedJob;
pub use keys::QueueKeys;
pub use payload::Payload;
pub use redis_queue::{HeadAge, RedisQueue};

/// How long one queue command may wait for its answer (the limit of every
/// command connection, see [`crate::redis::COMMAND_TIMEOUT`]).
pub use crate::redis::COMMAND_TIMEOUT;
