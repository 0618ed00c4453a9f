//! The integration tests, one binary: each area is a module of its own
//! (`tests/integration/AREA.rs`, run alone with
//! `cargo test --test integration AREA::`), and all of them share one
//! build of the crate and of `tests/common` (real redis-server, real
//! daemon binary, real handlers: nothing is mocked).
//!
//! One binary instead of one per file: a change to `src/` is linked once
//! before the tests run, not once per file, and the compiler judges
//! `tests/common` once, so a helper no area uses is reported as unused.
//! The checks of another kind stay binaries of their own:
//! `tests/architecture.rs` (the layering rules), `tests/docs.rs` (the book
//! against the code) and `tests/fuzz_readers.rs` (property tests of the
//! readers of outside input).

#[path = "../common/mod.rs"]
mod common;

mod app_signals;
mod balance;
mod banner;
mod breaker;
mod cache_database;
mod clean_exits;
mod cli_habits;
mod command_json;
mod composer_package;
mod control;
mod crafted_input;
mod database_fleet;
mod database_outages;
mod database_parity;
mod database_queue;
mod database_rows;
mod database_worker;
mod demo;
mod deploy;
mod dotenv;
mod drain;
mod example_config;
mod failed_commands;
mod failed_store_hardening;
mod fleet;
mod handler_hardening;
mod horizon;
mod http;
mod laravel_app_config;
mod laravel_bridge;
mod laravel_commands;
mod laravel_fleet;
mod laravel_jobs;
mod laravel_parity;
mod large_jobs;
mod lifecycle;
mod metrics;
mod notify;
mod outages;
mod persistent;
mod pipeline;
mod pools;
mod protocol;
mod reclaim;
mod recordings;
mod redis_acl;
mod redis_cluster;
mod redis_sentinel;
mod redis_tls;
mod scheduling;
mod secrets_in_messages;
mod sqs_fleet;
mod sqs_worker;
mod throughput_paths;
mod wrong_place;
