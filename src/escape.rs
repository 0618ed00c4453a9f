//! Escaping text that comes from outside (a job's displayName, a handler's
//! output) before it is printed, so it cannot forge a line of its own or
//! steer the terminal.
//!
//! [`capped`] bounds what one log value may take; [`lossy`] reads bytes
//! from outside as text.
//!
//! [`control`] is the one rule, used by the artisan job lines and by every
//! log line (see [`log_fields`]). JSON output needs nothing more: serde
//! already escapes control characters there.

use std::borrow::Cow;
use std::fmt::Write;

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::{Writer, debug_fn};

/// `bytes` as text, each sequence that is not UTF-8 replaced by U+FFFD, as
/// [`String::from_utf8_lossy`] does; borrowed when they are all UTF-8.
///
/// Checked with [`std::str::from_utf8`] first, which reads ASCII a word at
/// a time: `from_utf8_lossy` reads every byte, and a worker runs it on each
/// job's payload (3.5 % of the daemon's instructions at `--concurrency=32`
/// went to it with no-op jobs).
pub fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// `s` with every character that could break a line or drive a terminal
/// written as an escape: `\n`, `\r`, `\t`, other C0 controls, DEL and the C1
/// controls as `\xNN` / `\u{NN}`, and the Unicode line separators and
/// bidirectional overrides (which reorder what a reader sees) as `\u{NNNN}`.
/// Everything else, backslashes included (`App\Jobs\Foo`), is unchanged;
/// borrowed when nothing needs escaping.
pub fn control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && needs_escape(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Most bytes of one value (or of the message) in a log line: 16 KiB, the
/// default `[worker] output_limit`. A value from outside (a 1 MB host
/// name in the config, a service that answers garbage) is cut there.
pub const LOG_VALUE_MAX: usize = 16 * 1024;

/// `s` cut to at most `max` bytes of its own (at character boundaries):
/// its first and last halves, with ` … (N bytes in all) … ` where the
/// middle was, so both the start of a value and its end (the last words
/// of a handler's output) stay; borrowed when it fits.
pub fn capped(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut head = max / 2;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - (max - max / 2);
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    Cow::Owned(format!(
        "{} … ({} bytes in all) … {}",
        &s[..head],
        s.len(),
        &s[tail..]
    ))
}

/// The field formatter of the daemon's log: as tracing's default (the
/// message, then `name=value` pairs), with the message and every value passed
/// through [`control`], so one event is always one line. String values keep
/// their quoted form (`job="App\\Jobs\\Foo"`).
pub fn log_fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    debug_fn(|writer: &mut Writer<'_>, field, value| {
        let text = format!("{value:?}");
        let text = control(&capped(&text, LOG_VALUE_MAX)).into_owned();
        if field.name() == "message" {
            write!(writer, "{text}")
        } else {
            write!(writer, "{}={text}", field.name())
        }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_borrows_utf8_and_replaces_what_is_not() {
        assert!(matches!(
            lossy("App\\Jobs\\Café".as_bytes()),
            Cow::Borrowed("App\\Jobs\\Café")
        ));
        let bad: &[u8] = b"ab\xffc\xe2\x82";
        assert_eq!(lossy(bad), String::from_utf8_lossy(bad));
        assert_eq!(lossy(bad), "ab\u{FFFD}c\u{FFFD}");
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        assert!(matches!(capped("short", 8), Cow::Borrowed("short")));
        assert_eq!(capped("ééé", 4), "é … (6 bytes in all) … é");
        assert_eq!(capped("abcdefgh", 4), "ab … (8 bytes in all) … gh");
    }

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(control("App\\Jobs\\Foo é"), Cow::Borrowed(_)));
    }

    #[test]
    fn controls_are_escaped() {
        assert_eq!(
            control("A\nB\r\t\x1b[31mC\x7f\u{9b}D\u{202e}E\0"),
            "A\\nB\\r\\t\\x1b[31mC\\x7f\\u{9b}D\\u{202e}E\\x00"
        );
    }
}
