//! Laravel's database queue (`Illuminate\Queue\DatabaseQueue`): the `jobs`
//! table on SQLite, MySQL/MariaDB and PostgreSQL.
//!
//! This module holds what the worker needs to reserve, renew, delete,
//! release and hand back rows of that table, as PHP workers on the same
//! table expect them (see `docs/src/protocol.md` and the database queue
//! page of the book, `docs/src/database-queue.md`, which gives the SQL and
//! why):
//!
//! - [`spec`]: where the table is (what the configuration resolves);
//! - `pool` and `server`: the connections, and what the server is (engine,
//!   version, the `attempts` column's limit);
//! - `engine`: how SQL is written for each engine, and the lock a reserve
//!   takes;
//! - `queue`: [`DatabaseQueue`] itself (open, describe, push, sizes,
//!   clear); `reserve`: the pop; `guarded`: renew, delete, release and
//!   hand back, each guarded by the reservation's handle;
//! - `driver`: the queue behind the worker's driver seam;
//! - `error`: [`DatabaseQueueError`], telling "try again later" from "the
//!   table is wrong".

mod deletes;
mod driver;
mod engine;
mod error;
mod guarded;
mod jobs;
mod pool;
mod queue;
mod reserve;
mod server;
pub mod spec;

pub use engine::Engine;
pub use error::{DatabaseQueueError, ErrorKind};
pub use queue::{DatabaseQueue, DatabaseReservation, QueueSizes, ReservationHandle};
pub use server::AttemptsColumn;
pub use spec::{DatabaseQueueSpec, NULL_RETRY_AFTER};
