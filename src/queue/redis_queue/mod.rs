//! Laravel's `RedisQueue`: the queue kept in Redis lists and sorted sets.
//!
//! The key names of a queue ([`keys`]), the Lua scripts that keep each
//! step atomic ([`scripts`]), the Redis calls ([`queue`]) and the
//! [`Driver`](crate::queue::driver::Driver) trait on them (`driver`), the
//! look for the same queue under another prefix ([`elsewhere`]), the
//! pipelining of the deletes and releases of jobs that finish together
//! ([`batch`]), which name large members by digest and what names a Redis
//! reservation ([`member`]), and the reading back of the large jobs the
//! pop set aside (`set_aside`).
//!
//! The folder is not called `redis`: that is the crate the calls go
//! through, and [`crate::redis`] the connections they go on.

pub mod batch;
mod driver;
pub mod elsewhere;
pub mod keys;
pub mod member;
pub mod queue;
pub mod scripts;
mod set_aside;

pub use queue::RedisQueue;
