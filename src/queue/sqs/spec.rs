//! Where the SQS queues are: what the configuration resolves (the app's
//! `sqs` connection) and the driver opens, and how a queue name becomes a
//! queue URL as Laravel's `SqsQueue::getQueue` builds it.

use crate::redact::Secret;

/// The longest visibility timeout SQS accepts, and the longest a message
/// may stay in flight from its receive (12 hours, in seconds).
pub const MAX_VISIBILITY: u64 = 43_200;

/// The longest `DelaySeconds` SQS accepts on a send (15 minutes).
pub const MAX_DELAY: u64 = 900;

/// The longest long poll SQS accepts (`WaitTimeSeconds`).
pub const MAX_WAIT: u64 = 20;

/// Where an SQS connection's overflow payloads are (Laravel 13.9+'s
/// `overflow` settings of the `sqs` connection: a payload too large for
/// SQS is put in a cache store under `laravel:sqs-payloads:{uuid}`, and
/// the message body is `{"@pointer":"laravel:sqs-payloads:{uuid}"}`), as far as the worker
/// reads them: where overflow is on, it resolves the pointer bodies of
/// that form it receives, from its own cache store (`[cache]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    /// `overflow.enabled` (`SQS_OVERFLOW_ENABLED`, `[sqs]
    /// overflow_enabled`; default false, as in Laravel, whose apps before
    /// 13.9 have no overflow at all): follow pointer bodies. Off, a
    /// pointer body is a payload like any other (it names no job, so it
    /// fails as Laravel's worker fails it), and no cache entry is read nor
    /// forgotten because of a message.
    pub enabled: bool,
    /// The app's store the payloads are in (`overflow.store`,
    /// `SQS_OVERFLOW_STORE`) when it is not the worker's `[cache]` store:
    /// the worker cannot read it, and fails a pointer job naming it.
    /// `None`: the `[cache]` store (Laravel's `null` is the default store).
    pub elsewhere: Option<String>,
    /// Forget the payload once its job is deleted (run or failed), as
    /// `SqsJob::delete` does (`overflow.delete_after_processing`, default
    /// true); a release keeps it.
    pub delete_after_processing: bool,
}

impl Default for Overflow {
    fn default() -> Self {
        Overflow {
            enabled: false,
            elsewhere: None,
            delete_after_processing: true,
        }
    }
}

/// One SQS queue connection, resolved as Laravel resolves the `sqs`
/// connection of `config/queue.php` (and `SqsConnector` its client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsQueueSpec {
    /// `prefix` (`SQS_PREFIX`): the account's queue URL base,
    /// `https://sqs.REGION.amazonaws.com/ACCOUNT`.
    pub prefix: String,
    /// `suffix` (`SQS_SUFFIX`): appended to every queue name (before
    /// `.fifo` on a FIFO queue).
    pub suffix: String,
    /// `region` (`AWS_DEFAULT_REGION`, default `us-east-1`).
    pub region: String,
    /// `key` and `secret` (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`),
    /// with `token` (`AWS_SESSION_TOKEN`): used when key and secret are
    /// both set, as `SqsConnector` does; else AWS's default credential
    /// chain (environment, profile, web identity, ECS, instance metadata).
    pub key: Option<String>,
    /// See [`SqsQueueSpec::key`]; never shown.
    pub secret: Option<Secret>,
    /// See [`SqsQueueSpec::key`]; never shown.
    pub token: Option<Secret>,
    /// `endpoint` (`AWS_ENDPOINT_URL_SQS`, else `AWS_ENDPOINT_URL`): a local
    /// or compatible SQS; `None`: AWS's own for the region.
    pub endpoint: Option<String>,
    /// Seconds a received message stays invisible to other consumers,
    /// asked with every receive and renewed while the job runs
    /// (`[queue] retry_after`, default 30, AWS's default visibility
    /// timeout); 2..=43,200.
    pub visibility: u64,
    /// Where overflow payloads are (Laravel 13.9+).
    pub overflow: Overflow,
}

impl SqsQueueSpec {
    /// The URL of queue `name`, as `SqsQueue::getQueue` builds it: a name
    /// that is itself a URL is used as is (a `failed_jobs.queue` holds the
    /// URL); otherwise the prefix without its trailing `/`, a `/`, and the
    /// name ending with the suffix (8.70+: for a name ending `.fifo`, the
    /// suffix goes before `.fifo`).
    pub fn url_of(&self, name: &str) -> String {
        if is_url(name) {
            return name.to_string();
        }
        let prefix = self.prefix.trim_end_matches('/');
        match name.strip_suffix(".fifo") {
            Some(base) => format!("{prefix}/{}.fifo", finish(base, &self.suffix)),
            None => format!("{prefix}/{}", finish(name, &self.suffix)),
        }
    }
}

/// Whether the queue at `url` is a FIFO queue (AWS requires the `.fifo`
/// name suffix for those, and only for those).
pub fn is_fifo(url: &str) -> bool {
    url.ends_with(".fifo")
}

/// `Str::finish`: `s` ending with one `suffix`.
fn finish(s: &str, suffix: &str) -> String {
    if suffix.is_empty() || s.ends_with(suffix) {
        s.to_string()
    } else {
        format!("{s}{suffix}")
    }
}

/// What PHP's `FILTER_VALIDATE_URL` accepts, as far as a queue name goes:
/// a scheme, `://` and a host.
fn is_url(name: &str) -> bool {
    name.split_once("://").is_some_and(|(scheme, rest)| {
        !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !rest.is_empty()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prefix: &str, suffix: &str) -> SqsQueueSpec {
        SqsQueueSpec {
            prefix: prefix.into(),
            suffix: suffix.into(),
            region: "us-east-1".into(),
            key: None,
            secret: None,
            token: None,
            endpoint: None,
            visibility: 30,
            overflow: Overflow::default(),
        }
    }

    #[test]
    fn queue_urls_as_sqs_queue_get_queue_builds_them() {
        let s = spec("https://sqs.eu-west-1.amazonaws.com/123456789012/", "");
        assert_eq!(
            s.url_of("default"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/default"
        );
        let s = spec("https://sqs.eu-west-1.amazonaws.com/123456789012", "-prod");
        assert_eq!(
            s.url_of("emails"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/emails-prod"
        );
        assert_eq!(
            s.url_of("emails-prod"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/emails-prod",
            "Str::finish adds the suffix once"
        );
        assert_eq!(
            s.url_of("orders.fifo"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-prod.fifo"
        );
        assert_eq!(
            s.url_of("http://127.0.0.1:7780/123456789012/other"),
            "http://127.0.0.1:7780/123456789012/other",
            "a URL is used as is"
        );
        assert!(is_fifo(&s.url_of("orders.fifo")));
        assert!(!is_fifo(&s.url_of("orders")));
    }
}
