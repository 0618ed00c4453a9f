//! The HTTP transport: one POST per call to the handler's `url`.
//!
//! The body is the payload JSON exactly as reserved (attempts already
//! counted), sent with `Content-Type: application/json`; the call's metadata
//! ([`super::metadata`]) is in headers:
//!
//! | header                          | value                                   |
//! |---------------------------------|-----------------------------------------|
//! | `X-Laravel-Worker-Mode`         | `run`, `failed` (failed hook), `finish`, `finish-failed` |
//! | `X-Laravel-Worker-Job-Id`       | payload `id`                            |
//! | `X-Laravel-Worker-Job-Uuid`     | payload `uuid` (empty when none)        |
//! | `X-Laravel-Worker-Job-Name`     | displayName                             |
//! | `X-Laravel-Worker-Queue`        | queue name (`default`)                  |
//! | `X-Laravel-Worker-Connection`   | queue connection name (`redis`)         |
//! | `X-Laravel-Worker-Attempt`      | this attempt's number, from 1           |
//! | `X-Laravel-Worker-Max-Tries`    | attempts allowed, 0 = unlimited         |
//! | `X-Laravel-Worker-Timeout`      | seconds, 0 = none                       |
//! | `X-Laravel-Worker-Exception`    | failed mode only: the first [`EXCEPTION_HEADER_LIMIT`] bytes of the recorded failure, percent-encoded (PHP: `rawurldecode`) |
//! | `X-Laravel-Worker-Timestamp`    | with a secret: UNIX seconds of sending  |
//! | `X-Laravel-Worker-Signature`    | with a secret: hex HMAC-SHA256 of the [canonical string](signed_head) followed by the body |
//! | `Authorization`                 | with a token: `Bearer {token}`          |
//!
//! Control characters in header values (which HTTP forbids) are sent as
//! spaces, leading and trailing spaces are dropped, and each value is cut to
//! its first [`HEADER_VALUE_LIMIT`] bytes; the body is the authoritative
//! copy of every field.
//!
//! The signature covers every header the receiver may act on, not only the
//! body: the text signed is the timestamp and each metadata header's value
//! as sent, in [`metadata::FIELDS`] order (an absent header, the exception
//! in run mode, as an empty value), one per line, then a line break and the
//! body. A captured `run` request replayed as `failed`, or with another
//! attempt, job id or queue, does not verify.
//!
//! The answer decides the outcome:
//!
//! - 2xx: done. A JSON object body with an `action` key is a request in the
//!   format of [`super::request`] (`{"action":"release","delay":30}`...);
//!   an empty or plain-text body is plain "done". An HTML page, or a body
//!   that says (`Content-Type`) or looks (`{`, `[`) like JSON and is not,
//!   is no handler's answer: an exception and a fault of the handler for
//!   its [`breaker`](super::breaker).
//! - 429 and 503 with `Retry-After` (seconds or an HTTP date): released
//!   after that delay, the attempt counted (`$this->release($delay)`).
//!   Without a readable `Retry-After` they are exceptions.
//! - 3xx (redirects are not followed: a POST body would be lost) and other
//!   4xx: the job fails now, with the status and the start of the body (or
//!   where it was redirected) as the reason; retrying cannot help. A 4xx is
//!   the endpoint failing the job itself, so its failed hook is not called;
//!   after a 3xx it is ([`Reply::Refused`]).
//! - 5xx and any other status, connection errors: an exception (released
//!   with backoff, or failed by the usual rules).
//! - No complete answer within the job's time limit: [`Reply::TimedOut`].
//!
//! All calls of one handler share one client and so one keep-alive pool of
//! HTTP/1.1 connections. Secrets (the token, the signing key) are never
//! logged and never shown by `Debug`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use chrono::{DateTime, NaiveDateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, StatusCode, Url};
use sha2::Sha256;

use super::metadata::{self, CallMetadata};
use super::{FaultKind, Invocation, Reply, request};
use crate::exception::{HANDLER_FAILED, JobException};

/// With a secret: UNIX seconds when the request was signed.
pub const TIMESTAMP_HEADER: &str = "x-laravel-worker-timestamp";
/// With a secret: hex HMAC-SHA256 of the canonical text ([`signed_head`],
/// then the body).
pub const SIGNATURE_HEADER: &str = "x-laravel-worker-signature";

/// Bytes of the failure text put (before percent-encoding) in the
/// exception header ([`metadata::EXCEPTION`]). Encoded, it stays under 3 KiB, well inside the
/// 4–8 KiB header line limits of common servers; the full text is in the
/// failed store.
pub const EXCEPTION_HEADER_LIMIT: usize = 1024;

/// Bytes of any other metadata value put in its header (a displayName or
/// an id may be as long as a job makes it; servers refuse header lines of
/// more than 4–8 KiB with 431). The body holds every value in full.
pub const HEADER_VALUE_LIMIT: usize = 1024;

/// Bytes of a response body read; the rest is not waited for.
const BODY_LIMIT: usize = 64 * 1024;

/// Bytes of a response body quoted in a failure reason or detail.
const EXCERPT_LIMIT: usize = 1024;

/// Seconds an idle pooled connection is kept. Below the 5 s keep-alive
/// timeout of Apache and Node's HTTP server, so the daemon does not reuse a
/// connection the server is closing at that moment.
const POOL_IDLE: Duration = Duration::from_secs(4);

/// Default connect timeout (config `connect_timeout`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Characters percent-encoded in the exception header: all but RFC 3986's
/// unreserved ones, as PHP's `rawurlencode` does.
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A secret value (a bearer token or a signing key), read from the
/// environment. Its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    #[cfg(test)]
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// Reads the secret from environment variable `var`, for the setting
    /// `key` of the handler matching `pattern` (both only for the message).
    ///
    /// # Errors
    /// The variable is unset, empty or not UTF-8; the message names the
    /// handler, the setting and the variable, never a value.
    pub fn from_env(pattern: &str, key: &str, var: &str) -> anyhow::Result<Self> {
        match std::env::var(var) {
            Ok(value) if !value.is_empty() => Ok(Secret(value)),
            Ok(_) => anyhow::bail!(
                "[[handlers]] match = {pattern:?}: {key} = {var:?}: the environment variable is empty"
            ),
            Err(std::env::VarError::NotPresent) => anyhow::bail!(
                "[[handlers]] match = {pattern:?}: {key} = {var:?}: the environment variable is not set"
            ),
            Err(std::env::VarError::NotUnicode(_)) => anyhow::bail!(
                "[[handlers]] match = {pattern:?}: {key} = {var:?}: the environment variable is not valid UTF-8"
            ),
        }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// What an HTTP handler is built from.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The endpoint (`http://` or `https://`).
    pub url: Url,
    /// Time allowed to open a connection (TCP and TLS handshake).
    pub connect_timeout: Duration,
    /// Sent as `Authorization: Bearer {token}`.
    pub token: Option<Secret>,
    /// Key of the HMAC-SHA256 request signature.
    pub secret: Option<Secret>,
}

/// A handler that POSTs each call to an HTTP endpoint.
#[derive(Debug)]
pub struct HttpHandler {
    client: reqwest::Client,
    url: Url,
    /// The URL as shown in logs and failure texts: no query, no credentials.
    shown_url: String,
    /// `Bearer {token}`, marked sensitive.
    authorization: Option<HeaderValue>,
    secret: Option<Secret>,
}

impl HttpHandler {
    /// A handler for `options.url` with its own connection pool.
    ///
    /// # Errors
    /// A token that cannot be sent in a header (control characters), or an
    /// HTTP client that cannot be set up (TLS configuration).
    pub fn new(options: HttpOptions) -> anyhow::Result<Self> {
        // reqwest is built without a default crypto provider; use ring's.
        // An error only means one is installed already (another handler).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .pool_idle_timeout(POOL_IDLE)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("laravel-worker/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot set up the HTTP client")?;
        let authorization = match &options.token {
            Some(token) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {}", token.0)).map_err(|_| {
                        anyhow::anyhow!("the bearer token holds characters a header cannot carry")
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(HttpHandler {
            client,
            shown_url: shown_url(&options.url),
            url: options.url,
            authorization,
            secret: options.secret,
        })
    }

    /// POSTs one call and maps the answer to a [`Reply`]. Never fails:
    /// connection errors and bad answers become outcomes.
    pub async fn call(&self, inv: &Invocation<'_>) -> Reply {
        let body = inv.job.reserved.clone();
        let headers = self.headers(inv, &body, unix_now());
        let mut request = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(body);
        if let Some(limit) = inv.timeout {
            request = request.timeout(limit);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return self.transport_error(inv, e),
        };
        let status = response.status();
        let retry_after = header_text(&response, reqwest::header::RETRY_AFTER);
        let location = header_text(&response, reqwest::header::LOCATION);
        let content_type = header_text(&response, CONTENT_TYPE);
        let body = match read_bounded(response).await {
            Ok(body) => body,
            Err(e) => return self.transport_error(inv, e),
        };
        tracing::debug!(
            job = inv.job.display_name(),
            id = %inv.job.id(),
            url = %self.shown_url,
            status = status.as_u16(),
            "HTTP handler answered"
        );
        let answer = Answer {
            status,
            retry_after: retry_after.as_deref(),
            location: location.as_deref(),
            content_type: content_type.as_deref(),
            body: &body,
        };
        answer.outcome(inv.job.display_name(), &self.shown_url, Utc::now())
    }

    /// The request headers of one call; `now` is the signing time in UNIX
    /// seconds.
    fn headers(&self, inv: &Invocation<'_>, body: &[u8], now: u64) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let mut put = |name: &'static str, value: &str| {
            headers.insert(HeaderName::from_static(name), header_value(value));
        };
        for (field, value) in CallMetadata::of(inv).fields() {
            match value {
                None => {}
                Some(value) if field == metadata::EXCEPTION => {
                    put(field.header, &encode_exception(&value.text()))
                }
                Some(value) => {
                    let text = value.text();
                    put(
                        field.header,
                        &text[..text.floor_char_boundary(HEADER_VALUE_LIMIT)],
                    )
                }
            }
        }
        if let Some(secret) = &self.secret {
            let timestamp = now.to_string();
            put(TIMESTAMP_HEADER, &timestamp);
            let signature = sign(secret, &headers, body);
            headers.insert(
                HeaderName::from_static(SIGNATURE_HEADER),
                header_value(&signature),
            );
        }
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        headers
    }

    /// A request that got no complete answer: a timeout of the job's limit,
    /// or a connection error.
    fn transport_error(&self, inv: &Invocation<'_>, e: reqwest::Error) -> Reply {
        let name = inv.job.display_name();
        let e = e.without_url();
        // A connect timeout is a connection error; any other timeout is the
        // job's own limit (the only request timeout set).
        if e.is_timeout() && !e.is_connect() {
            let seconds = inv.timeout.map_or(0, |t| t.as_secs());
            tracing::warn!(
                job = name,
                id = %inv.job.id(),
                timeout = seconds,
                url = %self.shown_url,
                "the job ran past its timeout of {seconds} s: its HTTP request was abandoned \
                 (the connection is closed; no signal can reach a remote handler)"
            );
            return Reply::TimedOut(JobException::timed_out(name).with_detail(format!(
                "The HTTP handler at {} sent no complete answer within {seconds} s.",
                self.shown_url
            )));
        }
        let cause = crate::error_chain::error_chain(&e);
        Reply::Exception(
            JobException::new(
                HANDLER_FAILED,
                format!("{name}: the HTTP request failed: {cause}"),
            )
            .with_detail(format!(
                "The HTTP handler at {} could not be reached: {cause}.",
                self.shown_url
            )),
        )
    }
}

/// One HTTP answer, as far as the outcome depends on it.
#[derive(Debug, Clone, Copy)]
struct Answer<'a> {
    status: StatusCode,
    retry_after: Option<&'a str>,
    location: Option<&'a str>,
    content_type: Option<&'a str>,
    /// The first [`BODY_LIMIT`] bytes of the body.
    body: &'a [u8],
}

impl Answer<'_> {
    /// The outcome of this answer to a call for job `name` at `url`, with
    /// `now` for `Retry-After` dates.
    fn outcome(&self, name: &str, url: &str, now: DateTime<Utc>) -> Reply {
        let status = self.status;
        if status.is_success() {
            if let Some(malformed) = self.malformed(name, url) {
                return malformed;
            }
            return requested(self.body).unwrap_or(Reply::Done);
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
            if let Some(delay) = self.retry_after.and_then(|v| retry_after(v, now)) {
                return Reply::Release { delay };
            }
        } else if status.is_redirection() {
            let to = self.location.unwrap_or("nowhere");
            return Reply::Refused(JobException::new(
                HANDLER_FAILED,
                format!(
                    "HTTP {status} from {url}: redirected to {to} (redirects are not followed)"
                ),
            ));
        } else if status.is_client_error() {
            return Reply::fail(format!("HTTP {status} from {url}: {}", excerpt(self.body)));
        }
        let mut detail = format!("The HTTP handler at {url} answered {status}");
        match excerpt(self.body) {
            text if text.is_empty() => detail.push_str(" with an empty body."),
            text => {
                detail.push_str(". Its body began with:\n");
                detail.push_str(&text);
            }
        }
        Reply::Exception(
            JobException::new(HANDLER_FAILED, format!("{name}: HTTP {status}")).with_detail(detail),
        )
    }
}

impl Answer<'_> {
    /// A 2xx answer that is not a handler's answer: an HTML page (a wrong
    /// route, a login or error page), or a body that says or looks like
    /// JSON (`Content-Type`, or a leading `{` or `[`) and is not. Whether
    /// the job ran is unknown: an exception, and a fault of the handler.
    /// A plain-text body (`ok`) stays "done".
    fn malformed(&self, name: &str, url: &str) -> Option<Reply> {
        let problem = self.not_an_answer()?;
        let status = self.status;
        let kind = self.content_type.unwrap_or("none");
        let what = format!(
            "{url} answered {status} with Content-Type {kind} and {problem}: {}",
            excerpt(self.body)
        );
        let exception = JobException::new(HANDLER_FAILED, format!("{name}: HTTP {status}"))
            .with_detail(format!("The HTTP handler at {what}"));
        Some(Reply::Exception(exception).with_fault(FaultKind::Malformed, what))
    }

    /// What makes this 2xx body no handler's answer, if anything.
    fn not_an_answer(&self) -> Option<&'static str> {
        let start = self.body.trim_ascii_start();
        let opens = |tag: &[u8]| {
            start
                .get(..tag.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(tag))
        };
        if opens(b"<!doctype html") || opens(b"<html") {
            return Some("an HTML page");
        }
        let kind = self
            .content_type
            .and_then(|t| t.split(';').next())
            .map(|k| k.trim().to_ascii_lowercase())
            .unwrap_or_default();
        let says_json = kind == "application/json" || kind.ends_with("+json");
        let looks_json = matches!(start.first(), Some(b'{' | b'['));
        let whole = self.body.len() < BODY_LIMIT;
        let broken = serde_json::from_slice::<serde_json::Value>(self.body).is_err();
        ((says_json || looks_json) && whole && broken).then_some("a body that is not JSON")
    }
}

/// A request in a 2xx body: a JSON object with an `action` key. Anything
/// else (empty, not JSON, JSON without `action`) is `None`: plain done.
fn requested(body: &[u8]) -> Option<Reply> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if value.as_object()?.contains_key("action") {
        request::parse(body)
    } else {
        None
    }
}

/// Seconds to wait from a `Retry-After` value: whole seconds, or an HTTP
/// date (IMF-fixdate, RFC 850 or asctime form) counted from `now`; a date
/// in the past is 0. `None` when the value is neither.
fn retry_after(value: &str, now: DateTime<Utc>) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok();
    }
    let at = [
        "%a, %d %b %Y %H:%M:%S GMT",
        "%A, %d-%b-%y %H:%M:%S GMT",
        "%a %b %e %H:%M:%S %Y",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(value, format).ok())?
    .and_utc();
    Some(u64::try_from(at.timestamp() - now.timestamp()).unwrap_or(0))
}

/// The text a request's signature covers, before the body (which follows
/// it): the values of the timestamp
/// header and of every metadata header in `headers`, in
/// [`metadata::FIELDS`] order, each followed by `\n` (an absent header
/// counts as empty). Header values hold no line breaks
/// (control characters are sent as spaces), so the lines cannot be shifted
/// into one another.
fn signed_head(headers: &HeaderMap) -> Vec<u8> {
    let names =
        std::iter::once(TIMESTAMP_HEADER).chain(metadata::SIGNED_FIELDS.iter().map(|f| f.header));
    let mut text = Vec::with_capacity(512);
    for name in names {
        if let Some(value) = headers.get(name) {
            text.extend_from_slice(value.as_bytes());
        }
        text.push(b'\n');
    }
    text
}

/// Hex HMAC-SHA256 of [`signed_head`]`(headers)` followed by `body`,
/// under `secret`, computed without copying the body after the head.
fn sign(secret: &Secret, headers: &HeaderMap, body: &[u8]) -> String {
    // HMAC takes keys of any length; the error branch cannot happen.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.0.as_bytes()) else {
        return String::new();
    };
    mac.update(&signed_head(headers));
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The first [`EXCEPTION_HEADER_LIMIT`] bytes of `text`, percent-encoded.
fn encode_exception(text: &str) -> String {
    let cut = text.floor_char_boundary(EXCEPTION_HEADER_LIMIT);
    utf8_percent_encode(&text[..cut], ENCODED).to_string()
}

/// A header value for `text`: control characters (tabs included) turned
/// into spaces, and no leading or trailing space, which a server would drop
/// (so the receiver sees, and verifies, exactly the bytes signed).
fn header_value(text: &str) -> HeaderValue {
    let bytes: Vec<u8> = text
        .bytes()
        .map(|b| if b < 0x20 || b == 0x7f { b' ' } else { b })
        .collect();
    let start = bytes.iter().position(|&b| b != b' ').unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    HeaderValue::from_bytes(&bytes[start..end]).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A response header as text, if present and readable.
fn header_text(response: &Response, name: HeaderName) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Reads at most [`BODY_LIMIT`] bytes of the body.
///
/// # Errors
/// The connection broke or the time limit passed while reading.
async fn read_bounded(mut response: Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = BODY_LIMIT - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= BODY_LIMIT {
            break;
        }
    }
    Ok(body)
}

/// The start of a body as text for a failure message: at most
/// [`EXCERPT_LIMIT`] bytes, trimmed, with a note when cut.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    let cut = text.floor_char_boundary(EXCERPT_LIMIT);
    if cut < text.len() {
        format!("{} [... cut]", &text[..cut])
    } else {
        text.to_string()
    }
}

/// `scheme://host[:port]/path` of `url`: no credentials, query or fragment.
fn shown_url(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{}://{host}:{port}{}", url.scheme(), url.path()),
        None => format!("{}://{host}{}", url.scheme(), url.path()),
    }
}

/// UNIX seconds now.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn retry_after_takes_seconds_and_all_three_http_date_forms() {
        let now = at("1994-11-06T08:49:00Z");
        assert_eq!(retry_after("120", now), Some(120));
        assert_eq!(retry_after(" 0 ", now), Some(0));
        for date in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(retry_after(date, now), Some(37), "{date}");
        }
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(0),
            "a past date means now"
        );
        for bad in ["", "-5", "1.5", "soon", "99999999999999999999999"] {
            assert_eq!(retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn signature_covers_the_timestamp_every_metadata_header_and_the_body() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            (TIMESTAMP_HEADER, "1700000000"),
            ("x-laravel-worker-mode", "run"),
            ("x-laravel-worker-job-id", "7"),
            ("x-laravel-worker-job-uuid", "u"),
            ("x-laravel-worker-job-name", "App\\Jobs\\X"),
            ("x-laravel-worker-queue", "default"),
            ("x-laravel-worker-connection", "redis"),
            ("x-laravel-worker-attempt", "1"),
            ("x-laravel-worker-max-tries", "3"),
            ("x-laravel-worker-timeout", "60"),
        ] {
            headers.insert(HeaderName::from_static(name), header_value(value));
        }
        let body = br#"{"job":"x"}"#;
        let mut text = signed_head(&headers);
        text.extend_from_slice(body);
        assert_eq!(
            String::from_utf8(text.clone()).unwrap(),
            "1700000000\nrun\n7\nu\nApp\\Jobs\\X\ndefault\nredis\n1\n3\n60\n\n{\"job\":\"x\"}"
        );
        // Expected value from PHP's `hash_hmac('sha256', $text, 'Jefe')`.
        let secret = Secret::new("Jefe");
        assert_eq!(
            sign(&secret, &headers, body),
            "ff16f54fa0099c37d8c6f9f7ea5f6476ef1587821340ad7077a4bf103f5cf660"
        );
        // Any signed header changed, the signature changes; the batch
        // header is outside the signed text.
        let mut batch = headers.clone();
        batch.insert(
            HeaderName::from_static(metadata::BATCH_CANCELLED.header),
            header_value("1"),
        );
        assert_eq!(sign(&secret, &batch, body), sign(&secret, &headers, body));
        for field in metadata::SIGNED_FIELDS {
            let mut changed = headers.clone();
            changed.insert(HeaderName::from_static(field.header), header_value("other"));
            assert_ne!(
                sign(&secret, &changed, body),
                sign(&secret, &headers, body),
                "{field:?}"
            );
        }
    }

    fn answer(status: u16, body: &str) -> Answer<'_> {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            retry_after: None,
            location: None,
            content_type: None,
            body: body.as_bytes(),
        }
    }

    #[test]
    fn a_json_content_type_with_a_body_that_is_not_json_is_a_fault() {
        let now = Utc::now();
        let mut a = answer(200, "<html>Welcome</html>");
        a.content_type = Some("application/json; charset=utf-8");
        let (outcome, fault) = a.outcome("App\\Jobs\\X", "http://h/q", now).into_parts();
        assert!(matches!(outcome, Reply::Exception(_)), "{outcome:?}");
        assert_eq!(fault.map(|f| f.kind), Some(FaultKind::Malformed));
        a.body = br#"{"ok":true}"#;
        assert_eq!(a.outcome("X", "u", now), Reply::Done);
        a.content_type = Some("text/html; charset=UTF-8");
        a.body = b"ok";
        assert_eq!(a.outcome("X", "u", now), Reply::Done, "plain text: done");
        for page in [
            &b"\n<!DOCTYPE html><html>Login</html>"[..],
            b"<HTML>Welcome</HTML>",
        ] {
            a.body = page;
            let fault = a.outcome("X", "u", now).into_parts().1;
            assert_eq!(
                fault.map(|f| f.kind),
                Some(FaultKind::Malformed),
                "an HTML page"
            );
        }
        a.content_type = None;
        a.body = br#"{"action":"rel"#;
        let fault = a.outcome("X", "u", now).into_parts().1;
        assert_eq!(
            fault.map(|f| f.kind),
            Some(FaultKind::Malformed),
            "cut JSON"
        );
    }

    #[test]
    fn status_classes() {
        let now = Utc::now();
        let o = |a: Answer<'_>| a.outcome("App\\Jobs\\X", "http://h/q", now);
        assert_eq!(o(answer(200, "")), Reply::Done);
        assert_eq!(o(answer(204, "")), Reply::Done);
        assert_eq!(o(answer(200, "OK")), Reply::Done);
        assert_eq!(o(answer(200, r#"{"ok":true}"#)), Reply::Done);
        assert_eq!(
            o(answer(200, r#"{"action":"release","delay":30}"#)),
            Reply::Release { delay: 30 }
        );
        assert_eq!(o(answer(201, r#"{"action":"delete"}"#)), Reply::Delete);
        let Reply::Fail(e) = o(answer(422, "bad input")) else {
            panic!()
        };
        let reason = e.message;
        assert_eq!(
            reason,
            "HTTP 422 Unprocessable Entity from http://h/q: bad input"
        );
        let Reply::Exception(e) = o(answer(500, "boom")) else {
            panic!()
        };
        assert_eq!(e.message, "App\\Jobs\\X: HTTP 500 Internal Server Error");
        assert!(e.detail.unwrap().ends_with("began with:\nboom"));
        // 429 and 503 without Retry-After are exceptions, with one a release.
        assert!(matches!(o(answer(429, "")), Reply::Exception(_)));
        assert!(matches!(o(answer(503, "")), Reply::Exception(_)));
        let mut busy = answer(503, "");
        busy.retry_after = Some("7");
        assert_eq!(o(busy), Reply::Release { delay: 7 });
        let mut moved = answer(302, "");
        moved.location = Some("/login");
        let Reply::Refused(e) = o(moved) else {
            panic!()
        };
        let reason = e.message;
        assert!(reason.contains("redirected to /login"), "{reason}");
    }

    #[test]
    fn excerpts_and_exception_headers_are_bounded() {
        let long = "é".repeat(2000);
        let cut = excerpt(long.as_bytes());
        assert!(cut.len() <= EXCERPT_LIMIT + 10 && cut.ends_with("[... cut]"));
        let encoded = encode_exception(&long);
        assert!(encoded.len() <= EXCEPTION_HEADER_LIMIT * 3);
        assert_eq!(
            encode_exception("App\\E: no\nStack trace:"),
            "App%5CE%3A%20no%0AStack%20trace%3A"
        );
        assert_eq!(header_value("a\r\nb").to_str().unwrap(), "a  b");
        assert_eq!(header_value(" \tx y\n ").to_str().unwrap(), "x y");
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let options = HttpOptions {
            url: Url::parse("https://user@example.test:8443/q?key=k1").unwrap(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            token: Some(Secret::new("tok-3141")),
            secret: Some(Secret::new("key-2718")),
        };
        let handler = HttpHandler::new(options.clone()).unwrap();
        for text in [format!("{options:?}"), format!("{handler:?}")] {
            assert!(!text.contains("tok-3141"), "{text}");
            assert!(!text.contains("key-2718"), "{text}");
        }
        assert_eq!(handler.shown_url, "https://example.test:8443/q");
    }
}
