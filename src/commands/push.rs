//! `push`: enqueue a job in Laravel's payload format.
//!
//! The payload has the fields of Laravel's string-job payload (protocol
//! §5.2) in PHP's key order, and on Redis `attempts: 0` and a
//! 32-character `id` (only `RedisQueue::createPayloadArray` adds them; the
//! database queue counts attempts in its column), so both PHP workers and
//! this one can run it.

use crate::config::MAX_SECONDS;
use anyhow::Context;
use rand::distr::{Alphanumeric, SampleString};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::cli::PushArgs;
use crate::config::Settings;
use crate::queue::now;

#[derive(Serialize)]
struct StringJobPayload<'a> {
    uuid: String,
    #[serde(rename = "displayName")]
    display_name: &'a str,
    job: &'a str,
    #[serde(rename = "maxTries")]
    max_tries: Option<u64>,
    #[serde(rename = "maxExceptions")]
    max_exceptions: Option<u64>,
    #[serde(rename = "failOnTimeout")]
    fail_on_timeout: bool,
    backoff: Option<String>,
    timeout: Option<u64>,
    data: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u64>,
}

/// Builds a payload for job `name` with `data` (JSON text); with
/// `counted`, the `id` and `attempts: 0` a Redis payload carries.
///
/// # Errors
/// `data` is not JSON.
pub fn payload(name: &str, data: &str, counted: bool) -> anyhow::Result<String> {
    let data: &RawValue = serde_json::from_str(data).context("--data is not valid JSON")?;
    let payload = StringJobPayload {
        uuid: uuid::Uuid::new_v4().to_string(),
        display_name: name.split('@').next().unwrap_or(name),
        job: name,
        max_tries: None,
        max_exceptions: None,
        fail_on_timeout: false,
        backoff: None,
        timeout: None,
        data,
        id: counted.then(|| Alphanumeric.sample_string(&mut rand::rng(), 32)),
        attempts: counted.then_some(0),
    };
    Ok(serde_json::to_string(&payload)?)
}

/// Pushes `args.count` jobs (delayed by `args.delay` seconds when set).
///
/// # Errors
/// An empty queue name or `--job`, bad `--data`, a `--delay` over [`MAX_SECONDS`] (`work`'s bound: the
/// due time, now + delay in signed 64-bit, would wrap to "due now"), or
/// Redis errors.
pub async fn run(settings: Settings, args: PushArgs) -> anyhow::Result<u8> {
    // An empty queue name is a queue no worker serves (Laravel's push
    // falls back to the connection's default queue; here it must be
    // named), and an empty --job a payload no worker can route.
    anyhow::ensure!(
        !args.queue.trim().is_empty(),
        "the queue name is empty: name the queue to push to (e.g. default)"
    );
    anyhow::ensure!(
        !args.job.trim().is_empty(),
        "--job is empty: give the job's displayName (e.g. App\\Jobs\\SendInvoice)"
    );
    anyhow::ensure!(
        args.delay <= MAX_SECONDS,
        "--delay must be a number of seconds from 0 to {MAX_SECONDS}, not {}",
        args.delay
    );
    let queue = crate::app::open_queue(&settings).await?;
    let keys = queue.handle(&args.queue);
    for _ in 0..args.count {
        let body = payload(&args.job, &args.data, queue.counts_in_payload())?;
        if args.delay > 0 {
            queue.later(&keys, now() + args.delay as i64, &body).await?;
        } else {
            queue.push(&keys, &body).await?;
        }
    }
    tracing::info!(queue = %args.queue, count = args.count, "pushed");
    Ok(0)
}
