//! The subcommands. Each returns the process exit status.

pub mod push;
pub mod restart;
pub mod work;
