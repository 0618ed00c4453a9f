//! Laravel's database queue (`Illuminate\Queue\DatabaseQueue`): the `jobs`
//! table on SQLite, MySQL/MariaDB and PostgreSQL.
//!
//! This module holds what the worker needs to reserve, renew, delete,
//! release and hand back rows of that table, as PHP workers on the same
//! table expect them (see `docs/src/protocol.md` and the database queue
//! page of the book).

mod spec;

pub use spec::{DatabaseQueueSpec, NULL_RETRY_AFTER};
