//! The commands' lines on standard output. A reader that goes away early
//! (`monitor | true`, `failed | head -1`) closes the pipe: `println!` would
//! panic (exit 101) on the broken pipe; [`say!`] drops the rest of the
//! output instead, and the command finishes its work and exits with its
//! own status, quietly.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output failed once (a closed pipe): nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` and a newline to standard output; after a write error
/// (the reader is gone), writes nothing more.
pub fn line(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .is_err()
    {
        CLOSED.store(true, Ordering::Relaxed);
    }
}

/// `println!` for the commands' output, through [`line`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::commands::stdout::line(format_args!($($arg)*))
    };
}
pub(crate) use say;
