//! Laravel's beanstalkd queue (`Illuminate\Queue\BeanstalkdQueue`,
//! `Jobs\BeanstalkdJob`): a tube per queue, jobs put with priority 1024,
//! their delay and `ttr` = `retry_after`, reserved with
//! `reserve-with-timeout` (`block_for`), their attempts the server's
//! `reserves` count, released with a delay, deleted, never buried; a
//! running job's reservation is renewed with `touch`.
//!
//! The parts: our own client ([`client`], the protocol's commands over
//! tokio TCP), the queue and its connections ([`queue`]), the trait on it
//! ([`driver`]) and its errors ([`error`]).

pub mod client;
pub mod driver;
pub mod error;
pub mod queue;
#[cfg(test)]
mod tests;

pub use queue::{BeanstalkdQueue, BeanstalkdQueueSpec};
