//! What a handler may ask of the daemon, besides its exit status.
//!
//! The daemon gives every call a file path in `LARAVEL_WORKER_RESULT`. A
//! handler that wants more than "done" (exit 0) or "exception" (non-zero)
//! writes one JSON object there before it exits:
//!
//! ```text
//! {"action":"release","delay":10}          release, available in 10 s
//! {"action":"fail","reason":"bad input"}   fail now, no retry (optionally
//!     with "class", "message" and "text" of the exception it failed with)
//! {"action":"delete"}                      delete without failing
//! {"action":"done"}                        same as exit 0
//! {"action":"exception","class":"App\\E","message":"...","text":"..."}
//! ```
//!
//! A request wins over the exit status, as in Laravel, where a job that
//! released itself and then threw is not released twice.

use serde::Deserialize;

use super::Reply;
use crate::exception::{HANDLER_FAILED, JobException, MANUALLY_FAILED};

#[derive(Debug, Deserialize)]
#[serde(tag = "action", rename_all = "lowercase")]
enum Request {
    Done,
    Delete,
    Release {
        #[serde(default)]
        delay: u64,
    },
    Fail {
        #[serde(default)]
        reason: String,
        /// The exception the job failed with (`$this->fail($e)`), when known.
        #[serde(flatten)]
        thrown: Thrown,
    },
    Exception {
        #[serde(flatten)]
        thrown: Thrown,
    },
}

/// An exception as a handler describes it; every part is optional.
#[derive(Debug, Default, Deserialize)]
struct Thrown {
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    message: Option<String>,
    /// The full exception text, as PHP prints it.
    #[serde(default)]
    text: Option<String>,
}

impl Thrown {
    fn is_empty(&self) -> bool {
        self.class.is_none() && self.message.is_none() && self.text.is_none()
    }

    /// The exception, with `class` and `message` where the handler gave none.
    fn into_exception(self, class: &str, message: String) -> JobException {
        let mut e = JobException::new(
            self.class.unwrap_or_else(|| class.to_string()),
            self.message.unwrap_or(message),
        );
        e.text = self.text;
        e
    }
}

/// Reads a handler's request. `None` when the handler wrote nothing;
/// an unreadable request becomes an exception that says why.
pub fn parse(contents: &[u8]) -> Option<Reply> {
    if contents.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let outcome = match serde_json::from_slice::<Request>(contents) {
        Ok(Request::Done) => Reply::Done,
        Ok(Request::Delete) => Reply::Delete,
        Ok(Request::Release { delay }) => Reply::Release { delay },
        Ok(Request::Fail { reason, thrown }) if thrown.is_empty() => Reply::fail(reason),
        Ok(Request::Fail { reason, thrown }) => {
            Reply::Fail(thrown.into_exception(MANUALLY_FAILED, reason))
        }
        Ok(Request::Exception { thrown }) => {
            Reply::Exception(thrown.into_exception(HANDLER_FAILED, String::new()))
        }
        Err(err) => Reply::Exception(JobException::new(
            HANDLER_FAILED,
            format!(
                "the handler wrote an unreadable result ({err}): {}",
                String::from_utf8_lossy(&contents[..contents.len().min(200)])
            ),
        )),
    };
    Some(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_action() {
        assert_eq!(parse(b""), None);
        assert_eq!(parse(br#"{"action":"done"}"#), Some(Reply::Done));
        assert_eq!(parse(br#"{"action":"delete"}"#), Some(Reply::Delete));
        assert_eq!(
            parse(br#"{"action":"release","delay":10}"#),
            Some(Reply::Release { delay: 10 })
        );
        assert_eq!(
            parse(br#"{"action":"fail","reason":"no"}"#),
            Some(Reply::fail("no"))
        );
        let Some(Reply::Exception(e)) =
            parse(br#"{"action":"exception","class":"App\\E","message":"m"}"#)
        else {
            panic!("not an exception")
        };
        assert_eq!((e.class.as_str(), e.message.as_str()), ("App\\E", "m"));
    }

    #[test]
    fn fail_may_carry_the_job_exception() {
        let Some(Reply::Fail(e)) = parse(
            br#"{"action":"fail","reason":"r","class":"App\\E","message":"m","text":"App\\E: m in x.php:1"}"#,
        ) else {
            panic!("not a fail")
        };
        assert_eq!(e.to_string(), "App\\E: m in x.php:1");
        assert_eq!((e.class.as_str(), e.message.as_str()), ("App\\E", "m"));
    }

    #[test]
    fn garbage_is_an_exception_not_a_crash() {
        let Some(Reply::Exception(e)) = parse(b"release please") else {
            panic!("not an exception")
        };
        assert!(e.message.contains("unreadable result"), "{}", e.message);
    }
}
