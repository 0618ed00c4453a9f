//! laravel-worker: a standalone worker for Laravel's Redis, database, SQS
//! and beanstalkd queues.
//!
//! It reads and writes Laravel's own keys, rows, messages and payloads, so it runs beside
//! `php artisan queue:work` on the same queues, and hands each job, chosen by
//! its displayName, to a handler. The modules follow the concepts a Laravel
//! operator would name (the queue, the worker, handlers, the failed store,
//! the cache signals, Horizon, metrics).
//!
//! Every module, its layer and its one-line job: the table in the
//! "Architecture → Modules" section of `docs/src/development.md`; which
//! module may use which: the rules of the same section. Both are checked by
//! `tests/architecture.rs`.
//!
//! `protocol §N` in doc comments and tests refers to section N of `docs/src/protocol.md`
//! (the protocol chapter of the book).

mod app;
mod cache;
pub mod cli;
pub mod commands;
pub mod config;
mod error_chain;
mod escape;
mod exception;
mod failed;
mod handler;
mod horizon;
mod lifecycle;
mod log_limit;
mod memory;
mod metrics;
mod output;
mod pieces;
mod pulse_feed;
mod queue;
pub mod redact;
mod redis;
mod signals;
mod slug;
mod sql;
mod whole;
mod worker;

// The crate's surface: what the binary and the integration tests use.
pub use error_chain::error_chain;
pub use escape::log_fields;
pub use handler::metadata;
pub use queue::{Payload, command};
// The driver seam, opened as `work` opens it, and its contract, for the contract test
// on every driver (tests/integration/seam_contract.rs).
pub use app::open_queue;
pub use queue::{Queue, contract};
// Horizon's batch script and its fixed keys, for the test that sends it a
// step late (tests/integration/horizon.rs).
pub use horizon::script::{FIXED_KEYS as HORIZON_FIXED_KEYS, RECORDS as HORIZON_RECORDS};
// The database queue driver, for its tests on real databases (tests/database_queue.rs).
pub use queue::database::{
    AttemptsColumn, DatabaseQueue, DatabaseQueueError, DatabaseQueueSpec, DatabaseReservation,
    Engine, ErrorKind, QueueSizes, ReservationHandle, spec::NULL_RETRY_AFTER,
};
