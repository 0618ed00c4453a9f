//! Why a job failed, in the form Laravel writes to `failed_jobs.exception`.
//!
//! PHP stores `(string) $exception`: a first line `Class: message in
//! file:line`, then `Stack trace:` and frames (protocol §8.1). The daemon has
//! no PHP frames, so it writes the first line, a one-frame trace, and then
//! what it knows (exit status, the tail of stderr) below.

use std::fmt;

/// `Illuminate\Queue\MaxAttemptsExceededException`.
pub const MAX_ATTEMPTS_EXCEEDED: &str = "Illuminate\\Queue\\MaxAttemptsExceededException";
/// `Illuminate\Queue\TimeoutExceededException` (Laravel 10.25+).
pub const TIMEOUT_EXCEEDED: &str = "Illuminate\\Queue\\TimeoutExceededException";
/// `Illuminate\Queue\ManuallyFailedException`: the job asked to fail.
pub const MANUALLY_FAILED: &str = "Illuminate\\Queue\\ManuallyFailedException";
/// The payload cannot be read (not JSON, no `attempts`).
pub const INVALID_PAYLOAD: &str = "Illuminate\\Queue\\InvalidPayloadException";
/// The handler ended with an error (non-zero exit, HTTP 5xx, crash).
pub const HANDLER_FAILED: &str = "LaravelWorker\\HandlerFailedException";
/// The worker stopped and its drain deadline passed while the job ran.
pub const WORKER_STOPPED: &str = "LaravelWorker\\WorkerStoppedException";
/// No `[[handlers]]` entry matches the job's displayName.
pub const NO_HANDLER: &str = "LaravelWorker\\NoHandlerException";

/// An exception as recorded for a failed or released job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobException {
    /// PHP-style class name, shown first.
    pub class: String,
    /// One-line message.
    pub message: String,
    /// Extra lines written after the trace (exit status, stderr tail).
    pub detail: Option<String>,
    /// A complete text supplied by the handler (for example PHP's own
    /// `(string) $e` from the bridge); written as is when present.
    pub text: Option<String>,
}

impl JobException {
    /// An exception of `class` with `message`.
    pub fn new(class: impl Into<String>, message: impl Into<String>) -> Self {
        JobException {
            class: class.into(),
            message: message.into(),
            detail: None,
            text: None,
        }
    }

    /// Adds detail lines (kept after the trace).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        if !detail.is_empty() {
            self.detail = Some(detail);
        }
        self
    }

    /// Laravel's "attempted too many times" failure for `display_name`.
    pub fn max_attempts_exceeded(display_name: &str) -> Self {
        Self::new(
            MAX_ATTEMPTS_EXCEEDED,
            format!("{display_name} has been attempted too many times."),
        )
    }

    /// Laravel's timeout failure for `display_name`.
    pub fn timed_out(display_name: &str) -> Self {
        Self::new(TIMEOUT_EXCEEDED, format!("{display_name} has timed out."))
    }
}

impl fmt::Display for JobException {
    /// The `failed_jobs.exception` text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(text) = &self.text {
            return f.write_str(text);
        }
        write!(
            f,
            "{}: {}\nStack trace:\n#0 {{main}}",
            self.class, self.message
        )?;
        if let Some(detail) = &self.detail {
            write!(f, "\n\n{detail}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_php() {
        let e = JobException::timed_out("App\\Jobs\\Foo").with_detail("stderr: boom");
        assert_eq!(
            e.to_string(),
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Foo has timed out.\nStack trace:\n#0 {main}\n\nstderr: boom"
        );
    }
}
