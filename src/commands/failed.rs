//! `failed`, `retry`, `forget`, `flush`: artisan's failed-job commands
//! (`queue:failed`, `queue:retry`, `queue:forget`, `queue:flush`, protocol
//! §8.3) on the configured store.
//!
//! Output follows artisan 13.x: `INFO`/`ERROR` lines, one dotted line per
//! listed or retried job, laid out to `COLUMNS` (80 when unset, at most
//! 150) like Symfony's terminal width for a non-terminal.

use super::stdout::say;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use crate::app::{open_failed_store, open_queue};
use crate::cli::{FailedArgs, FlushArgs, ForgetArgs, RetryArgs};
use crate::config::Settings;
use crate::failed::php_json::{PhpValue, retry_payload};
use crate::failed::{FailedJobStore, StoredJob};

/// `queue:failed`: lists every failed job, newest first, as artisan's
/// `failed_at id ..... connection@queue class` lines, or with `--json` as
/// a JSON array of `{id, connection, queue, class, failed_at}` (encoded like
/// PHP's `json_encode`). Returns exit status 0.
///
/// # Errors
/// The store cannot be opened or read.
pub async fn list(settings: Settings, args: FailedArgs) -> anyhow::Result<u8> {
    let store = open_failed_store(&settings).await?;
    let jobs = store.all().await?;
    if args.json {
        let list = jobs
            .iter()
            .map(|job| {
                let text = |s: &str| PhpValue::String(s.to_string());
                PhpValue::Object(vec![
                    ("id".into(), text(&job.id)),
                    ("connection".into(), text(&job.connection)),
                    ("queue".into(), text(&job.queue)),
                    ("class".into(), text(&job_class(&job.payload))),
                    ("failed_at".into(), text(&job.failed_at)),
                ])
            })
            .collect();
        say!("{}", PhpValue::List(list).encode());
        return Ok(0);
    }
    if jobs.is_empty() {
        info("No failed jobs found.");
        return Ok(0);
    }
    say!("");
    for job in &jobs {
        two_column(
            &format!("{} {}", job.failed_at, job.id),
            &format!(
                "{}@{} {}",
                job.connection,
                job.queue,
                job_class(&job.payload)
            ),
        );
    }
    say!("");
    Ok(0)
}

/// `queue:retry`: for each id (`all`: every failed job, newest first;
/// `--queue=Q`: those of queue Q, which wins over a list of ids), the
/// stored payload gets `attempts` 0 (see [`retry_payload`]), is pushed back
/// onto its queue on the configured Redis with the push script (RPUSH plus
/// a notify token), and the failed job is deleted. With `[horizon]` on, the
/// job's Horizon record is first reset for the retry
/// ([`crate::horizon::retried`]), as Horizon's connector resets it when
/// `queue:retry` pushes through it.
///
/// An id with several records (the Redis store keeps every record of a
/// uuid) retries each of them, newest first, each deleted once pushed;
/// Laravel's `file` driver would push the newest and delete them all.
///
/// As artisan, an unknown id is reported and skipped (exit status 0). Not
/// retried, reported, and kept in the store (exit status 1 at the end): a
/// job whose connection is not the configured `[queue] connection` (this
/// worker only knows that one), and a payload that is not a JSON object.
///
/// # Errors
/// The store or Redis cannot be used; a push that fails stops the command
/// with that job still in the store.
pub async fn retry(settings: Settings, args: RetryArgs) -> anyhow::Result<u8> {
    let store = open_failed_store(&settings).await?;
    let jobs = retry_jobs(&store, &args).await?;
    if jobs.is_empty() {
        info("No retryable jobs found.");
        return Ok(0);
    }
    let queue = open_queue(&settings).await?;
    let mut horizon = match &settings.horizon {
        Some(spec) => {
            let target = spec.redis.as_ref().unwrap_or(&settings.redis);
            let (prefix, pending) = (spec.prefix.as_deref(), spec.trim.pending);
            crate::horizon::retried::Records::open(target, prefix, &settings.connection, pending)
                .await
        }
        None => None,
    };
    info("Pushing failed queue jobs back onto the queue.");
    let mut refused = false;
    for job in jobs {
        let id = &job.id;
        if job.connection != settings.connection {
            error(&format!(
                "Failed job [{id}] belongs to connection [{}]; this worker pushes to [{}] \
                 only (set [queue] connection or QUEUE_CONNECTION to retry it).",
                job.connection, settings.connection
            ));
            refused = true;
            continue;
        }
        let payload = match retry_payload(&job.payload) {
            Ok(payload) => payload,
            Err(e) => {
                error(&format!("Failed job [{id}] cannot be retried: {e}."));
                refused = true;
                continue;
            }
        };
        // Before the push, so that the retry's own records (a worker may
        // run it at once) come after the reset.
        if let Some(horizon) = &mut horizon {
            horizon.reset(&job.queue, &payload).await;
        }
        let started = Instant::now();
        let pushed = queue.push(&queue.handle(&job.queue), &payload).await;
        task_line(id, started.elapsed(), pushed.is_ok());
        pushed.with_context(|| format!("push failed job {id} back onto queue {}", job.queue))?;
        store.delete(&job).await?;
        tracing::debug!(id, queue = job.queue, "failed job pushed back");
    }
    say!("");
    Ok(u8::from(refused))
}

/// The failed jobs `retry` works through, in order, as artisan picks them;
/// an unknown id is reported here.
async fn retry_jobs(store: &FailedJobStore, args: &RetryArgs) -> anyhow::Result<Vec<StoredJob>> {
    if let [only] = args.ids.as_slice()
        && only == "all"
    {
        return store.all().await;
    }
    if let Some(queue) = args.queue.as_deref().filter(|q| !q.is_empty()) {
        let jobs: Vec<StoredJob> = store
            .all()
            .await?
            .into_iter()
            .filter(|job| job.queue == queue)
            .collect();
        if jobs.is_empty() {
            error(&format!("Unable to find failed jobs for queue [{queue}]."));
        }
        return Ok(jobs);
    }
    let ranged = range_ids(&args.range)?;
    let mut ids: Vec<&String> = Vec::new();
    for id in args.ids.iter().chain(&ranged) {
        if !id.is_empty() && !ids.contains(&id) {
            ids.push(id);
        }
    }
    let mut jobs = Vec::new();
    for id in ids {
        let found = store.find_all(id).await?;
        if found.is_empty() {
            error(&format!("Unable to find failed job with ID [{id}]."));
        }
        jobs.extend(found);
    }
    Ok(jobs)
}

/// Most ids one `--range` may name.
pub const MAX_RANGE_IDS: u64 = 10_000;

/// The ids of artisan's `--range=N-M` options, in order: each `N-M`
/// (digits only) gives N, N+1, … M (or down from N when M < N, as PHP's
/// `range()`); anything else is ignored, as artisan's pattern skips it.
///
/// # Errors
/// A range of more than [`MAX_RANGE_IDS`] ids.
pub fn range_ids(ranges: &[String]) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for range in ranges {
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(start) || !digits(end) {
            continue;
        }
        let (Ok(start), Ok(end)) = (start.parse::<u64>(), end.parse::<u64>()) else {
            anyhow::bail!("--range={range}: the numbers are too large");
        };
        if start.abs_diff(end) >= MAX_RANGE_IDS {
            anyhow::bail!("--range={range} names more than {MAX_RANGE_IDS} ids");
        }
        if start <= end {
            ids.extend((start..=end).map(|id| id.to_string()));
        } else {
            ids.extend((end..=start).rev().map(|id| id.to_string()));
        }
    }
    Ok(ids)
}

/// `queue:forget`: deletes the failed job with this uuid (every record of
/// it, as Laravel's `file` driver). Exit status 0 when there was one, 1
/// ("No failed job matches the given ID.") when not.
///
/// # Errors
/// The store cannot be opened or written.
pub async fn forget(settings: Settings, args: ForgetArgs) -> anyhow::Result<u8> {
    let store = open_failed_store(&settings).await?;
    if store.forget(&args.id).await? {
        info("Failed job deleted successfully.");
        Ok(0)
    } else {
        error("No failed job matches the given ID.");
        Ok(1)
    }
}

/// `queue:flush`: deletes every failed job, or with `--hours=N` (N > 0;
/// 0 means all, as in artisan) those that failed at or before now − N
/// hours. Exit status 0.
///
/// # Errors
/// The store cannot be opened or written, or N hours reach before the
/// calendar's start.
pub async fn flush(settings: Settings, args: FlushArgs) -> anyhow::Result<u8> {
    let store = open_failed_store(&settings).await?;
    let hours = args.hours.filter(|&h| h > 0);
    let older_than = hours.map(hours_ago).transpose()?;
    let deleted = store.flush(older_than).await?;
    tracing::debug!(deleted, "failed jobs flushed");
    match hours {
        Some(h) => info(&format!(
            "All jobs that failed more than {h} hours ago have been deleted successfully."
        )),
        None => info("All failed jobs deleted successfully."),
    }
    Ok(0)
}

/// `queue:prune-failed`: deletes the failed jobs that failed at or before
/// now − `--hours` hours (default 24, as artisan) and says how many went
/// (`N entries deleted.`). Exit status 0.
///
/// # Errors
/// The store cannot be opened or written, or N hours reach before the
/// calendar's start.
pub async fn prune(settings: Settings, args: crate::cli::PruneFailedArgs) -> anyhow::Result<u8> {
    let store = open_failed_store(&settings).await?;
    let deleted = store.flush(Some(hours_ago(args.hours)?)).await?;
    info(&format!("{deleted} entries deleted."));
    Ok(0)
}

/// Now minus `hours` hours.
fn hours_ago(hours: u64) -> anyhow::Result<DateTime<Utc>> {
    i64::try_from(hours)
        .ok()
        .and_then(TimeDelta::try_hours)
        .and_then(|ago| Utc::now().checked_sub_signed(ago))
        .with_context(|| format!("--hours={hours} is out of range"))
}

/// The class `queue:failed` shows for a payload (13.x
/// `ListFailedCommand::extractJobName`): with no `data.command`, `job`;
/// else a non-empty `displayName`, else the first `"…"` inside
/// `data.command`, else `job`; empty when none applies.
pub fn job_class(payload: &str) -> String {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(payload) else {
        return String::new();
    };
    let job = || match fields.get("job") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let command = match fields.get("data") {
        Some(Value::Object(data)) => match data.get("command") {
            None | Some(Value::Null) => return job(),
            Some(command) => command,
        },
        _ => return job(),
    };
    if let Some(Value::String(name)) = fields.get("displayName")
        && !name.is_empty()
    {
        return name.clone();
    }
    match command {
        Value::String(text) => first_quoted(text).map_or_else(job, str::to_string),
        _ => job(),
    }
}

/// The first match of `/"([^"]+)"/` in `text`: the text between the first
/// pair of neighbouring quotes that has something between them.
fn first_quoted(text: &str) -> Option<&str> {
    let quotes: Vec<usize> = text.match_indices('"').map(|(i, _)| i).collect();
    quotes
        .windows(2)
        .find(|pair| pair[1] > pair[0] + 1)
        .map(|pair| &text[pair[0] + 1..pair[1]])
}

/// Width artisan lays lines out to: `COLUMNS`, else 80; at most 150.
fn width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&w| w > 0)
        .unwrap_or(80)
        .min(150)
}

/// Artisan's `components->info`.
fn info(message: &str) {
    say!("\n   INFO  {message}\n");
}

/// Artisan's `components->error` (on stdout, as artisan writes it).
fn error(message: &str) {
    say!("\n   ERROR  {message}\n");
}

/// Artisan's `components->twoColumnDetail`: `  first ..... second`.
fn two_column(first: &str, second: &str) {
    let used = 2 + first.chars().count() + 1 + 1 + second.chars().count() + 2;
    let dots = ".".repeat(width().saturating_sub(used));
    say!("  {first} {dots} {second}");
}

/// Artisan's `components->task` line: `  description ..... 1.23ms DONE`.
fn task_line(description: &str, took: Duration, done: bool) {
    let run_time = format!(" {}", run_time_for_humans(took));
    let used = description.chars().count() + run_time.chars().count() + 10;
    let dots = ".".repeat(width().saturating_sub(used));
    let word = if done { "DONE" } else { "FAIL" };
    say!("  {description} {dots}{run_time} {word}");
}

/// `12.34ms` up to a second, else `1s 234ms` (seconds and milliseconds).
fn run_time_for_humans(took: Duration) -> String {
    let ms = took.as_secs_f64() * 1000.0;
    if ms <= 1000.0 {
        format!("{ms:.2}ms")
    } else {
        match took.subsec_millis() {
            0 => format!("{}s", took.as_secs()),
            rest => format!("{}s {rest}ms", took.as_secs()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_expand_as_artisans() {
        let r = |list: &[&str]| range_ids(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(r(&["1-3"]).unwrap(), ["1", "2", "3"]);
        assert_eq!(r(&["3-1", "7-7"]).unwrap(), ["3", "2", "1", "7"]);
        assert!(
            r(&["1-", "a-3", "1-2-3", "-1", " 1-2", "5"])
                .unwrap()
                .is_empty()
        );
        assert!(r(&["1-99999"]).is_err());
        assert!(r(&["1-99999999999999999999999"]).is_err());
    }

    #[test]
    fn job_class_follows_artisan() {
        // No data.command: `job`.
        assert_eq!(
            job_class(r#"{"displayName":"X","job":"App\\Jobs\\A@run","data":{"a":1}}"#),
            "App\\Jobs\\A@run"
        );
        assert_eq!(job_class(r#"{"job":"J","data":{"command":null}}"#), "J");
        // displayName when set.
        assert_eq!(
            job_class(
                r#"{"displayName":"App\\Jobs\\B","job":"J","data":{"command":"O:1:\"C\":0:{}"}}"#
            ),
            "App\\Jobs\\B"
        );
        // Else the first quoted name in the command.
        assert_eq!(
            job_class(
                r#"{"displayName":"","job":"J","data":{"command":"O:12:\"\"App\\Jobs\\C\":0:{}"}}"#
            ),
            "App\\Jobs\\C"
        );
        // Else job; not JSON: empty.
        assert_eq!(
            job_class(r#"{"job":"J","data":{"command":"no quotes"}}"#),
            "J"
        );
        assert_eq!(job_class("not json"), "");
        assert_eq!(job_class("[1]"), "");
    }

    #[test]
    fn first_quoted_skips_empty_pairs() {
        assert_eq!(first_quoted(r#"a""b"c"#), Some("b"));
        assert_eq!(first_quoted(r#""x""#), Some("x"));
        assert_eq!(first_quoted(r#"""#), None);
        assert_eq!(first_quoted("none"), None);
    }
}
