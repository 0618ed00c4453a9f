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

// The driver seam, every driver. The scenes the drivers' own files play
// alike are shared from tests/common: queue_scenes.rs (a run, a release,
// a failure; every stop condition) and parity.rs (the parity scenario
// beside `queue:work`).
mod seam_contract;

// The Redis queue: protocol, reservations, Redis topologies.
mod fleet;
mod large_jobs;
mod notify;
mod outages;
mod pipeline;
mod protocol;
mod reclaim;
mod recordings;
mod redis_acl;
mod redis_cluster;
mod redis_sentinel;
mod redis_tls;
mod throughput_paths;
mod whole_chains;
mod whole_jobs;

// The database queue, and the database cache store.
mod cache_database;
mod database_fleet;
mod database_outages;
mod database_parity;
mod database_queue;
mod database_rows;
mod database_worker;

// The SQS queue.
mod sqs_fleet;
mod sqs_worker;

// The beanstalkd queue.
mod beanstalkd_worker;

// Handlers: processes, warm processes, HTTP, scheduling, breakers.
mod breaker;
mod handler_hardening;
mod http;
mod persistent;
mod pools;
mod scheduling;

// The worker's lifecycle: signals, drain, stop conditions, balance.
mod app_signals;
mod balance;
mod clean_exits;
mod control;
mod drain;
mod lifecycle;

// Failed jobs and their commands.
mod failed_commands;
mod failed_store_hardening;

// Beside a real Laravel: its config, bridge, commands and workers.
mod composer_package;
mod deb_first_job;
mod laravel_app_config;
mod laravel_bridge;
mod laravel_commands;
mod laravel_fleet;
mod laravel_jobs;
mod laravel_parity;

// Horizon's records and the metrics endpoint.
mod horizon;
mod metrics;
mod pulse_feed;

// The surface: command line, config, output, deploy files, first contact.
mod banner;
mod cli_habits;
mod command_json;
mod crafted_input;
mod demo;
mod deploy;
mod dotenv;
mod example_config;
mod packages;
mod secrets_in_messages;
mod wrong_place;
