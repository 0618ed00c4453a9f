//! What a handler is told about a call besides the payload: one type,
//! encoded by every transport.
//!
//! [`CallMetadata`] holds the values and [`FIELDS`] names each of them in
//! the three encodings: an environment variable (process transport), a key
//! of the request line (persistent transport) and an HTTP header (HTTP
//! transport). A transport never names a field itself; it walks
//! [`CallMetadata::fields`], so a field added here reaches every transport
//! (and the HTTP signature, which covers every metadata header).

use std::borrow::Cow;

use super::{Invocation, Mode};

/// One metadata field and its name in each transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Environment variable of the process transport.
    pub env: &'static str,
    /// Key in the request line of the persistent transport.
    pub key: &'static str,
    /// HTTP header of the HTTP transport, lower case.
    pub header: &'static str,
}

/// `run`, or `failed` for the failed hook.
pub const MODE: Field = Field {
    env: "LARAVEL_WORKER_MODE",
    key: "mode",
    header: "x-laravel-worker-mode",
};
/// The payload's `id`.
pub const JOB_ID: Field = Field {
    env: "LARAVEL_WORKER_JOB_ID",
    key: "id",
    header: "x-laravel-worker-job-id",
};
/// The payload's `uuid`; empty when it has none.
pub const JOB_UUID: Field = Field {
    env: "LARAVEL_WORKER_JOB_UUID",
    key: "uuid",
    header: "x-laravel-worker-job-uuid",
};
/// The displayName (else the payload's `job`).
pub const JOB_NAME: Field = Field {
    env: "LARAVEL_WORKER_JOB_NAME",
    key: "name",
    header: "x-laravel-worker-job-name",
};
/// The queue name (`default`, not `queues:default`).
pub const QUEUE: Field = Field {
    env: "LARAVEL_WORKER_QUEUE",
    key: "queue",
    header: "x-laravel-worker-queue",
};
/// The queue connection name (`redis`).
pub const CONNECTION: Field = Field {
    env: "LARAVEL_WORKER_CONNECTION",
    key: "connection",
    header: "x-laravel-worker-connection",
};
/// This attempt's number, from 1.
pub const ATTEMPT: Field = Field {
    env: "LARAVEL_WORKER_ATTEMPT",
    key: "attempt",
    header: "x-laravel-worker-attempt",
};
/// Attempts allowed (`maxTries`, else `--tries`); 0 means unlimited.
pub const MAX_TRIES: Field = Field {
    env: "LARAVEL_WORKER_MAX_TRIES",
    key: "max_tries",
    header: "x-laravel-worker-max-tries",
};
/// The call's time limit in seconds; 0 means none.
pub const TIMEOUT: Field = Field {
    env: "LARAVEL_WORKER_TIMEOUT",
    key: "timeout",
    header: "x-laravel-worker-timeout",
};
/// Failed mode only: the failure as recorded in the failed store (each
/// transport sends at most its own limit of it).
pub const EXCEPTION: Field = Field {
    env: "LARAVEL_WORKER_EXCEPTION",
    key: "exception",
    header: "x-laravel-worker-exception",
};

/// Run mode, for a job in a batch the worker keeps (not run by the PHP
/// bridge): `1` when the batch was cancelled (the job should skip its
/// work, as Laravel's `SkipIfBatchCancelled`), `0` when not; not sent for
/// a job in no batch.
pub const BATCH_CANCELLED: Field = Field {
    env: "LARAVEL_WORKER_BATCH_CANCELLED",
    key: "batch_cancelled",
    header: "x-laravel-worker-batch-cancelled",
};

/// Every field, in the order [`CallMetadata::fields`] gives them (the
/// order of the HTTP signature's canonical string).
pub const FIELDS: [Field; 11] = [
    MODE,
    JOB_ID,
    JOB_UUID,
    JOB_NAME,
    QUEUE,
    CONNECTION,
    ATTEMPT,
    MAX_TRIES,
    TIMEOUT,
    EXCEPTION,
    BATCH_CANCELLED,
];

/// The fields the HTTP signature covers, in the order of its signed text:
/// every field but [`BATCH_CANCELLED`], which came later and is left out
/// so that endpoints checking the documented text keep verifying.
pub const SIGNED_FIELDS: [Field; 10] = [
    MODE, JOB_ID, JOB_UUID, JOB_NAME, QUEUE, CONNECTION, ATTEMPT, MAX_TRIES, TIMEOUT, EXCEPTION,
];

/// A field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// Text, exactly as the job or the daemon has it (it may hold any
    /// character, NUL included; each transport makes it safe to carry).
    Text(Cow<'a, str>),
    /// A whole number (a JSON number in the request line, decimal text in
    /// the environment and headers).
    Number(u64),
}

impl Value<'_> {
    /// The value as text (numbers in decimal).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Value::Text(t) => Cow::Borrowed(t.as_ref()),
            Value::Number(n) => Cow::Owned(n.to_string()),
        }
    }
}

/// Everything a handler is told about one call, apart from the payload.
#[derive(Debug, Clone)]
pub struct CallMetadata<'a> {
    /// Run, or the failed hook with the recorded failure.
    pub mode: Mode<'a>,
    /// The payload's `id` (empty when it has none).
    pub job_id: String,
    /// The payload's `uuid` (empty when it has none).
    pub uuid: &'a str,
    /// The displayName.
    pub name: &'a str,
    /// The queue name.
    pub queue: &'a str,
    /// The queue connection name.
    pub connection: &'a str,
    /// This attempt's number, from 1.
    pub attempt: u64,
    /// Attempts allowed; 0 means unlimited.
    pub max_tries: u64,
    /// Seconds; 0 means no limit.
    pub timeout: u64,
    /// The job's batch was cancelled; `None`: not told.
    pub batch_cancelled: Option<bool>,
}

impl<'a> CallMetadata<'a> {
    /// The metadata of `inv`.
    pub fn of(inv: &Invocation<'a>) -> Self {
        let job = inv.job;
        CallMetadata {
            mode: inv.mode,
            job_id: job.id(),
            uuid: job.uuid().unwrap_or_default(),
            name: job.display_name(),
            queue: &job.queue.name,
            connection: inv.connection,
            attempt: job.attempt(),
            max_tries: inv.max_tries,
            timeout: inv.timeout.map_or(0, |t| t.as_secs()),
            batch_cancelled: inv.batch_cancelled,
        }
    }

    /// `run`, `failed`, `finish` or `finish-failed`.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Run => "run",
            Mode::Failed { .. } => "failed",
            Mode::Finish { failure: None } => "finish",
            Mode::Finish { failure: Some(_) } => "finish-failed",
        }
    }

    /// The recorded failure, in failed mode.
    pub fn exception(&self) -> Option<&'a str> {
        match self.mode {
            Mode::Run | Mode::Finish { failure: None } => None,
            Mode::Failed { exception }
            | Mode::Finish {
                failure: Some(exception),
            } => Some(exception),
        }
    }

    /// Every field with its value, in [`FIELDS`] order. [`EXCEPTION`] is
    /// `None` in run mode (not sent); every other field is always set.
    pub fn fields(&self) -> [(Field, Option<Value<'_>>); FIELDS.len()] {
        let text = |t: &'a str| Some(Value::Text(Cow::Borrowed(t)));
        [
            (MODE, text(self.mode_name())),
            (JOB_ID, Some(Value::Text(Cow::Borrowed(&self.job_id)))),
            (JOB_UUID, text(self.uuid)),
            (JOB_NAME, text(self.name)),
            (QUEUE, text(self.queue)),
            (CONNECTION, text(self.connection)),
            (ATTEMPT, Some(Value::Number(self.attempt))),
            (MAX_TRIES, Some(Value::Number(self.max_tries))),
            (TIMEOUT, Some(Value::Number(self.timeout))),
            (EXCEPTION, self.exception().and_then(text)),
            (
                BATCH_CANCELLED,
                self.batch_cancelled.map(|c| Value::Number(u64::from(c))),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(mode: Mode<'static>) -> CallMetadata<'static> {
        CallMetadata {
            mode,
            job_id: "7".into(),
            uuid: "u",
            name: "App\\Jobs\\X",
            queue: "default",
            connection: "redis",
            attempt: 2,
            max_tries: 3,
            timeout: 60,
            batch_cancelled: Some(false),
        }
    }

    #[test]
    fn finish_modes_are_named_and_carry_the_failure() {
        let done = metadata(Mode::Finish { failure: None });
        assert_eq!((done.mode_name(), done.exception()), ("finish", None));
        let failed = metadata(Mode::Finish {
            failure: Some("E: m"),
        });
        assert_eq!(
            (failed.mode_name(), failed.exception()),
            ("finish-failed", Some("E: m"))
        );
    }

    #[test]
    fn fields_follow_the_table_and_names_are_unique() {
        let failed = metadata(Mode::Failed { exception: "E: m" });
        let listed: Vec<Field> = failed.fields().iter().map(|(f, _)| *f).collect();
        assert_eq!(listed, FIELDS, "fields() gives every field in FIELDS order");
        assert!(
            failed.fields().iter().all(|(_, v)| v.is_some()),
            "failed mode sets every field"
        );
        let run = metadata(Mode::Run);
        let unset: Vec<&str> = run
            .fields()
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(f, _)| f.key)
            .collect();
        assert_eq!(unset, ["exception"], "run mode sends no exception");
        let mut no_batch = metadata(Mode::Run);
        no_batch.batch_cancelled = None;
        let unset: Vec<&str> = no_batch
            .fields()
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(f, _)| f.key)
            .collect();
        assert_eq!(unset, ["exception", "batch_cancelled"]);
        for (i, a) in FIELDS.iter().enumerate() {
            for b in &FIELDS[i + 1..] {
                assert!(
                    a.env != b.env && a.key != b.key && a.header != b.header,
                    "{a:?} and {b:?} share a name"
                );
            }
            assert!(a.env.starts_with("LARAVEL_WORKER_"), "{a:?}");
            assert!(a.header.starts_with("x-laravel-worker-"), "{a:?}");
        }
    }
}
