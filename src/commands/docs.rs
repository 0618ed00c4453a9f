//! `completions` and `man`: the shell completion scripts and the man page,
//! generated from the command line's own definition ([`crate::cli::Cli`]),
//! so they cannot drift from it.

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::Cli;

/// Writes the completion script for `shell` to stdout. Exit status 0.
///
/// # Errors
/// stdout cannot be written.
pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<u8> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "laravel-worker", &mut out);
    std::io::stdout()
        .lock()
        .write_all(&out)
        .context("cannot write the completion script")?;
    Ok(0)
}

/// Writes the man page (roff, section 1: synopsis, options, the
/// subcommands with their summaries, version) to stdout. Exit status 0.
///
/// # Errors
/// stdout cannot be written.
pub fn man() -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .context("cannot render the man page")?;
    std::io::stdout()
        .lock()
        .write_all(&out)
        .context("cannot write the man page")?;
    Ok(0)
}
