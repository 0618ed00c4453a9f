//! An error and its causes on one line, each said once.
//!
//! A Redis error that wraps an I/O error displays as that I/O error, so
//! printing the chain as `error: cause` read "broken pipe: broken pipe". A
//! cause whose text the line already holds is left out.

use std::error::Error;

/// `e` and each of its causes not already said, joined with `": "`.
pub fn error_chain(e: &(dyn Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_said_is_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let redis = redis::RedisError::from(io);
        let e = anyhow::Error::from(redis).context("cannot read the cache");
        assert_eq!(
            format!("{e:#}"),
            "cannot read the cache: broken pipe: broken pipe"
        );
        assert_eq!(
            error_chain(e.as_ref()),
            "cannot read the cache: broken pipe"
        );
    }
}
