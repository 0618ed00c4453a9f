//! Telling the outside world that the worker is alive, for whoever
//! supervises it: systemd's service notifications ([`notify`]: `READY`,
//! `WATCHDOG`, `STATUS`, `STOPPING`) and the heartbeat file for container
//! health checks ([`heartbeat_file`], read by `laravel-worker health`).
//!
//! Both answer one operator question, "is the worker up and moving?", so
//! one [`Pulse`] drives them from the worker loop, on one schedule. They
//! live together here, apart from the loop, because neither knows anything
//! about queues: the loop only says when it moves and when it waits.

pub mod heartbeat_file;
pub mod notify;
mod pulse;

pub use heartbeat_file::Heartbeat;
pub use notify::Notifier;
pub use pulse::Pulse;
