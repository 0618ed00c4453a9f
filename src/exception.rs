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
/// A job whose bookkeeping needs the PHP bridge (a chain), where none is
/// configured (`crate::whole::Books::NoBridge`).
pub const NO_BRIDGE: &str = "LaravelWorker\\NoBridgeException";
/// The PHP bridge did not finish a job another handler ran (its chain's
/// next job, batch or catch callbacks) and answered no exception of its own.
pub const FINISH_FAILED: &str = "LaravelWorker\\FinishFailedException";
/// No `[[handlers]]` entry matches the job's displayName.
pub const NO_HANDLER: &str = "LaravelWorker\\NoHandlerException";
/// An SQS message's body is an overflow pointer (Laravel 13.9+) whose
/// payload this worker cannot read from a cache store.
pub const OVERFLOW_PAYLOAD_MISSING: &str = "LaravelWorker\\OverflowPayloadMissingException";

/// The class Laravel reports a failed SQL statement with (a database
/// queue row whose `attempts` cannot count further, Laravel 12.54+).
pub const QUERY_EXCEPTION: &str = "Illuminate\\Database\\QueryException";

/// The Laravel version whose exception classes and wording the worker
/// writes (`[app] laravel`), so an older app's `failed_jobs` rows read as its
/// own worker would have written them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LaravelVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl LaravelVersion {
    /// The newest version this worker follows (the default).
    pub const NEWEST: LaravelVersion = LaravelVersion {
        major: 13,
        minor: 26,
    };

    /// Reads `"8"`, `"8.83"` or `"8.83.27"`.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().trim_start_matches('v').split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
        Some(LaravelVersion { major, minor })
    }

    fn at_least(self, major: u32, minor: u32) -> bool {
        self >= LaravelVersion { major, minor }
    }
}

impl Default for LaravelVersion {
    fn default() -> Self {
        Self::NEWEST
    }
}

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

    /// Laravel's "attempted too many times" failure for `display_name`, in
    /// the wording of `version` (10.30+ shortened it; 5.x named no job).
    pub fn max_attempts_exceeded(display_name: &str, version: LaravelVersion) -> Self {
        let message = if version.at_least(10, 30) {
            format!("{display_name} has been attempted too many times.")
        } else if version.at_least(6, 0) {
            format!(
                "{display_name} has been attempted too many times or run too long. \
                 The job may have previously timed out."
            )
        } else {
            "A queued job has been attempted too many times or run too long. \
             The job may have previously timed out."
                .to_string()
        };
        Self::new(MAX_ATTEMPTS_EXCEEDED, message)
    }

    /// This exception as `version` would have recorded it: before 10.25 a
    /// timeout failed the job with `MaxAttemptsExceededException` and its
    /// message; everything else is unchanged.
    pub fn for_version(self, version: LaravelVersion, display_name: &str) -> Self {
        if self.class != TIMEOUT_EXCEEDED || version.at_least(10, 25) {
            return self;
        }
        JobException {
            detail: self.detail,
            ..Self::max_attempts_exceeded(display_name, version)
        }
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
    fn wording_follows_the_laravel_version() {
        let v = |t| LaravelVersion::parse(t).unwrap();
        assert_eq!(
            v("8.83.27"),
            LaravelVersion {
                major: 8,
                minor: 83
            }
        );
        assert_eq!(
            v("13"),
            LaravelVersion {
                major: 13,
                minor: 0
            }
        );
        assert!(LaravelVersion::parse("x").is_none());
        let e = JobException::max_attempts_exceeded("App\\Jobs\\Foo", v("10.30"));
        assert_eq!(
            e.message,
            "App\\Jobs\\Foo has been attempted too many times."
        );
        let e = JobException::max_attempts_exceeded("App\\Jobs\\Foo", v("8.83"));
        assert!(
            e.message
                .ends_with("or run too long. The job may have previously timed out.")
        );
        let t = JobException::timed_out("App\\Jobs\\Foo").with_detail("killed");
        let old = t.clone().for_version(v("10.24"), "App\\Jobs\\Foo");
        assert_eq!(old.class, MAX_ATTEMPTS_EXCEEDED);
        assert_eq!(old.detail.as_deref(), Some("killed"));
        assert_eq!(t.clone().for_version(v("10.25"), "App\\Jobs\\Foo"), t);
    }

    #[test]
    fn renders_like_php() {
        let e = JobException::timed_out("App\\Jobs\\Foo").with_detail("stderr: boom");
        assert_eq!(
            e.to_string(),
            "Illuminate\\Queue\\TimeoutExceededException: App\\Jobs\\Foo has timed out.\nStack trace:\n#0 {main}\n\nstderr: boom"
        );
    }
}
