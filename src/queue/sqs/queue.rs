//! [`SqsQueue`]: one SQS connection (a client and the resolved settings),
//! shared by the worker's tasks (cheap to clone), with the calls Laravel's
//! `SqsQueue` and `SqsJob` make: send, change visibility, delete, queue
//! attributes, purge. Receiving is in `receive`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{Credentials, Region};
use aws_sdk_sqs::types::QueueAttributeName;
use aws_smithy_http_client::tls;

use super::error::{Result, SqsQueueError};
use super::receive::Held;
use super::spec::{MAX_DELAY, SqsQueueSpec, is_fifo};

/// How long one SQS call may take, a long poll included (its 20 s wait
/// plus the round trip); past it the call counts as failed and is retried
/// by the SDK's standard retry (with back-off), then by the worker.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Laravel's `SqsQueue` on one connection: the queues of one account and
/// region (a queue is named as Laravel names it, see
/// [`SqsQueueSpec::url_of`]).
///
/// What the worker adds to Laravel's calls: every receive asks for the
/// connection's visibility timeout and the running job's is extended before
/// it lapses; an idle worker long-polls every queue at once (see
/// `receive`).
#[derive(Clone)]
pub struct SqsQueue {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) client: Client,
    pub(super) spec: SqsQueueSpec,
    /// Per queue URL: messages long polls received and no pop took yet,
    /// and whether a long poll is in flight.
    pub(super) held: Mutex<std::collections::HashMap<String, Held>>,
    /// Woken when a long poll ends.
    pub(super) polled: tokio::sync::Notify,
    /// Batches the deletes of jobs that end together.
    pub(super) deleter: super::delete::Deleter,
    /// Where overflow pointers lead: the worker's cache store, handed over
    /// at start (see `overflow`); unset, no pointer can be followed.
    pub(super) payloads: std::sync::OnceLock<Arc<dyn super::overflow::PayloadStore>>,
}

/// How many messages of a queue are where, from its attributes (Laravel
/// 12.19's `pendingSize`, `delayedSize`, `reservedSize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqsSizes {
    /// `ApproximateNumberOfMessages`: visible, ready to be received.
    pub pending: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: u64,
    /// `ApproximateNumberOfMessagesNotVisible`: in flight (received,
    /// released with a delay).
    pub reserved: u64,
}

impl SqsQueue {
    /// A client for `spec`: its credentials when key and secret are both
    /// set (`SqsConnector`), else AWS's default chain; its region and
    /// endpoint, else the chain's (`AWS_REGION`, `AWS_ENDPOINT_URL_SQS`…).
    /// TLS is rustls on ring. No call is made: the first receive tells
    /// whether the queue can be reached.
    pub async fn open(spec: &SqsQueueSpec) -> Self {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .region(Region::new(spec.region.clone()))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_attempt_timeout(CALL_TIMEOUT)
                    .build(),
            );
        if let (Some(key), Some(secret)) = (&spec.key, &spec.secret) {
            loader = loader.credentials_provider(Credentials::new(
                key,
                secret.expose(),
                spec.token.as_ref().map(|token| token.expose().to_string()),
                None,
                "laravel-sqs-connection",
            ));
        }
        if let Some(endpoint) = &spec.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        let config = loader.load().await;
        SqsQueue {
            inner: Arc::new_cyclic(|weak| Inner {
                client: Client::new(&config),
                spec: spec.clone(),
                held: Mutex::default(),
                polled: tokio::sync::Notify::new(),
                deleter: super::delete::Deleter::start(weak.clone()),
                payloads: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Where the queues are, for logs: the prefix, the endpoint when set,
    /// and the region (never a key;
    /// a URL's password masked, though a user part is refused at start).
    pub fn describe(&self) -> String {
        let spec = &self.inner.spec;
        let prefix = crate::redact::url(&spec.prefix);
        match &spec.endpoint {
            Some(endpoint) => format!(
                "SQS {prefix} (endpoint {}, region {})",
                crate::redact::url(endpoint),
                spec.region
            ),
            None => format!("SQS {prefix} (region {})", spec.region),
        }
    }

    /// The URL of queue `name` (see [`SqsQueueSpec::url_of`]).
    pub fn url_of(&self, name: &str) -> String {
        self.inner.spec.url_of(name)
    }

    /// Where the connection's overflow payloads are (Laravel 13.9+).
    pub fn overflow(&self) -> &super::spec::Overflow {
        &self.inner.spec.overflow
    }

    /// Hands the queue the store its overflow pointers lead to (the
    /// worker's cache store); false when one was handed over already.
    pub fn set_payload_store(&self, store: Arc<dyn super::overflow::PayloadStore>) -> bool {
        self.inner.payloads.set(store).is_ok()
    }

    /// The store overflow pointers lead to, once handed over.
    pub(super) fn payloads(&self) -> Option<&dyn super::overflow::PayloadStore> {
        self.inner.payloads.get().map(|store| store.as_ref())
    }

    /// Seconds a receive hides a message (the reservation's length).
    pub fn visibility(&self) -> u64 {
        self.inner.spec.visibility
    }

    /// Sends `payload` to queue `name`, visible in `delay` seconds
    /// (`SqsQueue::pushRaw` / `later`). On a FIFO queue, as Laravel 12.27+
    /// sends a string job: the queue name is the message group, a fresh
    /// UUID the deduplication id, and no per-message delay (FIFO queues
    /// refuse one; the delay is dropped with a warning).
    ///
    /// # Errors
    /// A delay above 900 s ([`MAX_DELAY`]: SQS refuses it, and Laravel's
    /// `later` fails the same way), or SQS refused or could not be reached.
    pub async fn send(&self, name: &str, payload: &str, delay: u64) -> Result<()> {
        let url = self.url_of(name);
        if delay > MAX_DELAY {
            return Err(SqsQueueError::refused(format!(
                "cannot delay a message on SQS by {delay} s: SQS holds a message back at most \
                 {MAX_DELAY} s (15 minutes); Laravel's SqsQueue passes longer delays and AWS \
                 refuses the send; push it later, or with a delay of at most {MAX_DELAY} s"
            )));
        }
        let mut send = self
            .inner
            .client
            .send_message()
            .queue_url(&url)
            .message_body(payload);
        if is_fifo(&url) {
            if delay > 0 {
                tracing::warn!(
                    queue = %url,
                    delay,
                    "a FIFO queue takes no per-message delay: sent without it, as Laravel 12.27+ does"
                );
            }
            send = send
                .message_group_id(name)
                .message_deduplication_id(uuid::Uuid::new_v4().to_string());
        } else if delay > 0 {
            send = send.delay_seconds(seconds(delay));
        }
        send.send()
            .await
            .map_err(|e| SqsQueueError::from_sdk(&e, &format!("send a message to {url}")))?;
        Ok(())
    }

    /// Makes the message `receipt` of queue `url` visible again in
    /// `seconds` (`SqsJob::release`, and our renewal); false when AWS says
    /// the receipt no longer names a message in flight.
    ///
    /// # Errors
    /// SQS refused otherwise, or could not be reached.
    pub(super) async fn change_visibility(
        &self,
        url: &str,
        receipt: &str,
        seconds_from_now: u64,
    ) -> Result<bool> {
        let answer = self
            .inner
            .client
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(receipt)
            .visibility_timeout(seconds(seconds_from_now))
            .send()
            .await;
        match answer {
            Ok(_) => Ok(true),
            Err(e) => {
                let e =
                    SqsQueueError::from_sdk(&e, &format!("change a message's visibility on {url}"));
                if e.is_reservation_gone() {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Deletes the message `receipt` of queue `url` (`SqsJob::delete`);
    /// false when AWS says the receipt is no longer valid. (AWS may also
    /// accept a stale receipt and delete nothing: only the worker's own
    /// lease tells a lost reservation.)
    ///
    /// # Errors
    /// SQS refused otherwise, or could not be reached.
    pub(super) async fn delete_message(&self, url: &str, receipt: &str) -> Result<bool> {
        let answer = self
            .inner
            .client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt)
            .send()
            .await;
        match answer {
            Ok(_) => Ok(true),
            Err(e) => {
                let e = SqsQueueError::from_sdk(&e, &format!("delete a message from {url}"));
                if e.is_reservation_gone() {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Whether queue `name` exists: its attributes read once. Laravel never
    /// creates an SQS queue, so a missing one is an error of the setup.
    ///
    /// # Errors
    /// SQS says the queue does not exist, or refuses to show it (one line
    /// naming the queue, its URL and what to check); an SQS that cannot be
    /// reached is no error here.
    pub async fn check_exists(&self, name: &str) -> Result<()> {
        match self.sizes(name).await {
            Err(e) if e.kind == super::error::ErrorKind::Refused => {
                let url = self.url_of(name);
                let missing = e.code.as_deref().is_some_and(|c| {
                    c.contains("NonExistentQueue") || c.contains("QueueDoesNotExist")
                });
                Err(SqsQueueError::refused(if missing {
                    format!(
                        "the SQS queue {name:?} does not exist at {url}: create it (Laravel does \
                         not create SQS queues), or check [sqs] prefix (SQS_PREFIX) and the queue \
                         name (--queue, SQS_QUEUE)"
                    )
                } else {
                    format!("the SQS queue {name:?} at {url} cannot be read: {e}")
                }))
            }
            _ => Ok(()),
        }
    }

    /// Queue `name`'s messages by state, from its attributes.
    ///
    /// # Errors
    /// SQS refused (no such queue…) or could not be reached.
    pub async fn sizes(&self, name: &str) -> Result<SqsSizes> {
        let url = self.url_of(name);
        let answer = self
            .inner
            .client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| SqsQueueError::from_sdk(&e, &format!("read the attributes of {url}")))?;
        let get = |name: QueueAttributeName| {
            answer
                .attributes()
                .and_then(|a| a.get(&name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(SqsSizes {
            pending: get(QueueAttributeName::ApproximateNumberOfMessages),
            delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
            reserved: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        })
    }

    /// Purges queue `name` (`SqsQueue::clear`: its size, then
    /// `PurgeQueue`); returns the size it had (all three counts, as 12.19+
    /// sums them). AWS may take up to 60 s to finish a purge, and allows
    /// one per queue every 60 s.
    ///
    /// # Errors
    /// SQS refused (a purge within 60 s of the last…) or could not be reached.
    pub async fn purge(&self, name: &str) -> Result<u64> {
        let url = self.url_of(name);
        let sizes = self.sizes(name).await?;
        self.inner
            .client
            .purge_queue()
            .queue_url(&url)
            .send()
            .await
            .map_err(|e| SqsQueueError::from_sdk(&e, &format!("purge {url}")))?;
        Ok(sizes.pending + sizes.delayed + sizes.reserved)
    }
}

/// `secs` as the `i32` the SQS API takes (every caller bounds it far
/// below `i32::MAX`).
pub(super) fn seconds(secs: u64) -> i32 {
    i32::try_from(secs).unwrap_or(i32::MAX)
}
