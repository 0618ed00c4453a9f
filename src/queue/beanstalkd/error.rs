//! [`BeanstalkdError`]: what a beanstalkd command failed with, and its
//! [`ErrorKind`] for the settle.

use crate::queue::QueueError;
use crate::queue::error::ErrorKind;

/// A beanstalkd command that did not complete, in words that name the
/// command and what to do.
#[derive(Debug)]
pub struct BeanstalkdError {
    /// Whether trying again later can work.
    pub kind: ErrorKind,
    /// What failed.
    pub message: String,
}

/// What a beanstalkd call returns.
pub type Result<T> = std::result::Result<T, BeanstalkdError>;

impl BeanstalkdError {
    /// The connection failed during `command` (refused, reset, closed):
    /// the server is down or restarting; try again later.
    pub fn io(command: &str, e: &std::io::Error) -> Self {
        BeanstalkdError {
            kind: ErrorKind::Unavailable,
            message: format!("beanstalkd {command}: {e} (is beanstalkd running there?)"),
        }
    }

    /// No answer to `command` within the command time limit.
    pub fn timed_out(command: &str) -> Self {
        BeanstalkdError {
            kind: ErrorKind::Unavailable,
            message: format!(
                "beanstalkd {command}: no answer within {} s",
                crate::queue::COMMAND_TIMEOUT.as_secs()
            ),
        }
    }

    /// A body or answer of `len` bytes where at most `max` are read.
    pub fn too_big(command: &str, len: usize, max: usize) -> Self {
        BeanstalkdError {
            kind: ErrorKind::Refused,
            message: format!(
                "beanstalkd {command}: an answer of {len} bytes, above the {max} the \
                 worker reads (the server's max-job-size)"
            ),
        }
    }

    /// The server answered `command` with `reply`, not one of its
    /// answers: out of memory, draining and internal errors pass; a
    /// refused format, an unknown command or a job too big do not.
    pub fn reply(command: &str, reply: &str) -> Self {
        let first = reply.split(' ').next().unwrap_or_default();
        let (kind, hint) = match first {
            "OUT_OF_MEMORY" | "INTERNAL_ERROR" | "DRAINING" => (ErrorKind::Unavailable, ""),
            "JOB_TOO_BIG" => (
                ErrorKind::Refused,
                " (the job is larger than the server's max-job-size, beanstalkd -z)",
            ),
            "BURIED" => (
                ErrorKind::Refused,
                " (the server had no memory left and buried the job: kick it with \
                 kick-job once memory is freed)",
            ),
            _ => (ErrorKind::Refused, ""),
        };
        BeanstalkdError {
            kind,
            message: format!("beanstalkd {command}: the server answered {reply:?}{hint}"),
        }
    }

    /// A queue name beanstalkd cannot take as a tube name.
    pub fn bad_tube(name: &str) -> Self {
        BeanstalkdError {
            kind: ErrorKind::Refused,
            message: format!(
                "queue {name:?} cannot be a beanstalkd tube: a tube name is 1 to 200 \
                 letters, digits and - + / ; . $ _ ( ), not starting with -"
            ),
        }
    }

    /// This error, its text prefixed with where the server is.
    pub fn at(mut self, addr: &str) -> Self {
        let rest = self.message.trim_start_matches("beanstalkd ");
        self.message = format!("beanstalkd at {addr}, {rest}");
        self
    }
}

impl From<BeanstalkdError> for QueueError {
    fn from(e: BeanstalkdError) -> Self {
        QueueError::Other {
            kind: e.kind,
            message: e.message,
        }
    }
}
