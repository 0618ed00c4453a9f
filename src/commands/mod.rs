//! The subcommands. Each returns the process exit status.

mod banner;
pub mod clear;
pub mod demo;
pub mod docs;
pub mod failed;
pub mod health;
mod hints;
pub mod monitor;
pub mod pause;
pub mod push;
pub mod restart;
mod stdout;
pub mod work;
