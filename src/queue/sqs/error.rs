//! What can go wrong talking to SQS, sorted by what the worker does about
//! it: wait and try again ([`ErrorKind::Unavailable`]: throttling, 5xx
//! answers, the network; the messages stay in the queue) or tell the
//! operator the configuration is wrong ([`ErrorKind::Refused`]: no such
//! queue, no permission, a parameter AWS refuses).

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

/// The seam's one [`ErrorKind`]: this driver sorts its errors into it.
pub use crate::queue::error::ErrorKind;

/// An error of the SQS queue, with its [`ErrorKind`], AWS's error code
/// when it sent one, and a message naming the call and the queue.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SqsQueueError {
    /// Whether trying again later can work.
    pub kind: ErrorKind,
    /// AWS's error code (`ReceiptHandleIsInvalid`, `AccessDenied`, …).
    pub code: Option<String>,
    message: String,
}

/// The result type of the SQS queue.
pub type Result<T> = std::result::Result<T, SqsQueueError>;

impl SqsQueueError {
    /// A refusal of our own, before any call (e.g. a delay SQS cannot hold).
    pub fn refused(message: impl Into<String>) -> Self {
        SqsQueueError {
            kind: ErrorKind::Refused,
            code: None,
            message: message.into(),
        }
    }

    /// The error of `doing` (e.g. "receive from URL") that the SDK gave.
    pub fn from_sdk<E>(e: &SdkError<E>, doing: &str) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let code = e.code().map(str::to_string);
        let kind = match e {
            SdkError::ServiceError(_) if !is_transient(code.as_deref(), e) => ErrorKind::Refused,
            SdkError::ConstructionFailure(_) => ErrorKind::Refused,
            _ => ErrorKind::Unavailable,
        };
        SqsQueueError {
            kind,
            code,
            message: format!("cannot {doing}: {}", one_line(e)),
        }
    }

    /// A batch entry SQS refused with `code` (and `message`).
    pub fn batch_entry(code: &str, message: Option<&str>, url: &str) -> Self {
        let transient = matches!(
            code,
            "InternalError" | "ServiceUnavailable" | "RequestThrottled"
        );
        SqsQueueError {
            kind: if transient {
                ErrorKind::Unavailable
            } else {
                ErrorKind::Refused
            },
            code: Some(code.to_string()),
            message: format!(
                "cannot delete a message from {url}: {code}: {}",
                message.unwrap_or_default()
            ),
        }
    }

    /// Whether AWS said the receipt handle no longer names a message in
    /// flight: the reservation is gone (the message was deleted, or its
    /// visibility lapsed and it was received again).
    pub fn is_reservation_gone(&self) -> bool {
        matches!(
            self.code.as_deref(),
            Some(
                "ReceiptHandleIsInvalid"
                    | "AWS.SimpleQueueService.MessageNotInflight"
                    | "MessageNotInflight"
                    | "InvalidReceiptHandle"
            )
        )
    }
}

/// The longest SDK error text a message carries (characters).
const MAX_SDK_TEXT: usize = 300;

/// What the SDK said, on one readable line: AWS's code and message when
/// SQS answered with them (`AWS.SimpleQueueService.NonExistentQueue: The
/// specified queue does not exist.`), else the error and each of its
/// causes once (`dispatch failure: io error: … Connection refused (os
/// error 111)`), never the SDK's debug dump of the request and answer;
/// at most [`MAX_SDK_TEXT`] characters, any URL's password masked.
fn one_line<E>(e: &SdkError<E>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let text = match (e.code(), e.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_string(),
        _ => crate::error_chain::error_chain(e),
    };
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = text.chars().take(MAX_SDK_TEXT).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    crate::redact::text(&short)
}

/// Whether a service error is one that passes: throttling, or a server
/// error (5xx) of SQS.
fn is_transient<E>(code: Option<&str>, e: &SdkError<E>) -> bool {
    if matches!(
        code,
        Some(
            "ThrottlingException"
                | "RequestThrottled"
                | "ServiceUnavailable"
                | "InternalError"
                | "InternalFailure"
                | "KmsThrottled"
        )
    ) {
        return true;
    }
    // The raw HTTP answer: a 5xx is SQS's trouble, not ours.
    e.raw_response()
        .is_some_and(|r| r.status().is_server_error())
}
