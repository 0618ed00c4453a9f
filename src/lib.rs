//! laravel-worker: a standalone worker for Laravel's Redis queues.
//!
//! It reads and writes Laravel's own keys and payloads, so it runs beside
//! `php artisan queue:work` on the same queues, and hands each job, chosen by
//! its displayName, to a handler. The modules follow the concepts a Laravel
//! operator would name:
//!
//! - [`queue`]: the Redis queue (keys, scripts, payload, operations);
//! - [`redis`](crate::redis): reaching Redis (one server, Sentinel, Cluster,
//!   TLS), the only place connections are opened;
//! - [`worker`]: the worker loop, fetch → run handler → settle;
//! - [`handler`]: the handlers and their routing;
//! - [`failed`]: the failed-job store;
//! - [`cache`]: the cache signals (restart, maxExceptions);
//! - [`sql`]: the SQL pools the table stores share; [`slug`]: Laravel's
//!   `Str::slug`;
//! - [`signals`], [`memory`], [`lifecycle`]: the process lifecycle (signals,
//!   memory, systemd notifications and the heartbeat file);
//! - [`log_limit`]: repeated errors logged once, then summarised;
//! - [`config`], [`cli`], [`commands`]: the surface; [`app`] opens what
//!   the commands work on (queue, cache, failed store, router) from the
//!   settings;
//! - [`output`], [`exception`], [`escape`]: what the worker prints and
//!   records, and how outside text is escaped in it.
//!
//! Which module may use which: the "Architecture" section of
//! `docs/src/development.md`, checked by `tests/architecture.rs`.
//!
//! `protocol §N` in doc comments and tests refers to section N of `docs/src/protocol.md`
//! (the protocol chapter of the book).

mod app;
mod backlog;
mod banner;
mod cache;
pub mod cli;
pub mod commands;
pub mod config;
mod error_chain;
mod escape;
mod exception;
mod failed;
mod handler;
mod hints;
mod horizon;
mod lifecycle;
mod log_limit;
mod memory;
mod metrics;
mod output;
mod pieces;
mod queue;
mod redis;
mod signals;
mod slug;
mod sql;
mod stdout;
mod worker;

// The crate's surface: what the binary and the integration tests use.
pub use error_chain::error_chain;
pub use escape::log_fields;
pub use handler::metadata;
pub use queue::{Payload, command};
// The database queue driver, for its tests on real databases (tests/database_queue.rs).
pub use queue::database::{
    AttemptsColumn, DatabaseQueue, DatabaseQueueError, DatabaseQueueSpec, DatabaseReservation,
    Engine, ErrorKind, QueueSizes, ReservationHandle, spec::NULL_RETRY_AFTER,
};
