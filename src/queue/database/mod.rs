//! Laravel's database queue (`Illuminate\Queue\DatabaseQueue`): the `jobs`
//! table on SQLite, MySQL/MariaDB and PostgreSQL.
//!
//! This module holds what the worker needs to reserve, renew, delete,
//! release and hand back rows of that table, as PHP workers on the same
//! table expect them (see `docs/src/protocol.md` and the database queue
//! page of the book).

#[allow(dead_code, unused_imports)] // used once the driver lands (issue 27)
mod spec;

#[allow(unused_imports)]
pub use spec::DatabaseQueueSpec;
