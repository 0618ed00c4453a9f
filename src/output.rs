//! One line per job, as `queue:work` prints them (protocol §6.8).
//!
//! Default: artisan's line, written once the job is settled:
//! `  2026-11-21 12:00:00 App\Jobs\Foo ........ 12.34ms DONE`
//! (FAIL for a failed job or one released after an exception).
//!
//! An app on Laravel 8.x (`[app] laravel = "8.x"`): Laravel 8's lines,
//! `[2026-11-21 12:00:00][jobid] Processing: App\Jobs\Foo`, then
//! `Processed:` or `Failed:` ([`Reporter::with_laravel8_lines`]).
//!
//! `--json`: Laravel 11.27+'s JSON events, one object per line with keys
//! `level, id, uuid, connection, queue, job, status, result, attempts,
//! exception, message, timestamp, duration`, empty values left out, for the
//! statuses `starting`, `success`, `released_after_exception` and `failed`.

mod lines;

use std::sync::Arc;
use std::time::Duration;

use chrono::{Local, SecondsFormat};
use serde_json::{Map, Value};

use crate::exception::JobException;
use crate::queue::ReservedJob;
use crate::worker::{JobEvents, Outcome, Settled, StopReason, Verdict};

pub use lines::Lines;

/// Writes the per-job lines to stdout: a listener of the worker's
/// [`JobEvents`], as artisan's `WorkCommand` listens to the worker's.
#[derive(Debug, Clone)]
pub struct Reporter {
    json: bool,
    connection: String,
    /// Laravel 8's lines (`[time][id] Processing: Name`), for an app on 8.x.
    laravel8: bool,
    /// Where the lines go: standard output, written together.
    out: Arc<Lines>,
}

/// Width of Laravel 8's padded status word (`str_pad("{$status}:", 11)`).
const LARAVEL8_STATUS_WIDTH: usize = 11;

/// Width of an artisan line, dots included.
const LINE_WIDTH: usize = 100;

impl Reporter {
    /// A reporter for jobs of queue connection `connection`, its lines
    /// written together (see [`Lines`]).
    pub fn new(json: bool, connection: impl Into<String>) -> Self {
        Reporter {
            json,
            connection: connection.into(),
            laravel8: false,
            out: Lines::stdout(),
        }
    }

    /// With `laravel8` set (the app is on Laravel 8.x or older, `[app]
    /// laravel`), the text lines follow Laravel 8's `WorkCommand`:
    /// `[2026-11-21 12:00:00][jobid] Processing: App\Jobs\Foo` when a job
    /// is reserved, `Processed:` when it ends without an exception (deleted
    /// or released by itself), `Failed:` when it fails; a job released after
    /// an exception gets no second line, as there. `--json` is unchanged.
    pub fn with_laravel8_lines(mut self, laravel8: bool) -> Self {
        self.laravel8 = laravel8;
        self
    }

    /// `[time][id] Status:    Name`, put together in one buffer (two per
    /// job, so without the formatting machinery).
    fn laravel8_line(&self, job: &ReservedJob, status: &str) {
        let time = local_seconds();
        let name = crate::escape::control(job.display_name());
        let job_id = job.id();
        let id = crate::escape::control(&job_id);
        let mut line =
            String::with_capacity(time.len() + id.len() + LARAVEL8_STATUS_WIDTH + name.len() + 6);
        for part in ["[", &time, "][", &id, "] ", status, ":"] {
            line.push_str(part);
        }
        let padding = LARAVEL8_STATUS_WIDTH.saturating_sub(status.len() + 1);
        line.extend(std::iter::repeat_n(' ', padding + 1));
        line.push_str(&name);
        self.out.push(&line);
    }

    fn artisan_line(&self, job: &ReservedJob, outcome: Outcome, took: Duration) {
        let time = local_seconds();
        // Outside text: a newline or an escape sequence must not reach the terminal raw.
        let name = crate::escape::control(job.display_name());
        let run_time = run_time_for_humans(took);
        let word = outcome.word();
        let used = 2 + 19 + 1 + name.chars().count() + 1 + run_time.len() + 1 + word.len();
        let dots = ".".repeat(LINE_WIDTH.saturating_sub(used + 1).max(1));
        let line = format!("  {time} {name} {dots} {run_time} {word}");
        self.out.push(&line);
    }

    fn json_line(
        &self,
        job: &ReservedJob,
        status: &str,
        result: &str,
        exception: Option<&JobException>,
        took: Option<Duration>,
    ) {
        let level = if matches!(status, "starting" | "success") {
            "info"
        } else {
            "warning"
        };
        let mut log = Map::new();
        let mut put = |key: &str, value: Value| {
            let empty = match &value {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                _ => false,
            };
            if !empty {
                log.insert(key.to_string(), value);
            }
        };
        put("level", level.into());
        put("id", job.id().into());
        put("uuid", job.uuid().unwrap_or_default().into());
        put("connection", self.connection.clone().into());
        put("queue", job.queue.name.clone().into());
        put("job", job.display_name().into());
        put("status", status.into());
        put("result", result.into());
        put("attempts", job.attempt().into());
        put(
            "exception",
            exception
                .map(|e| e.class.clone())
                .unwrap_or_default()
                .into(),
        );
        put(
            "message",
            exception
                .map(|e| e.message.clone())
                .unwrap_or_default()
                .into(),
        );
        put(
            "timestamp",
            Local::now()
                .to_rfc3339_opts(SecondsFormat::Micros, false)
                .into(),
        );
        if let Some(took) = took {
            let seconds = (took.as_secs_f64() * 1e6).round() / 1e6;
            put("duration", seconds.into());
        }
        self.out.push(&Value::Object(log).to_string());
    }
}

/// The local time to the second as artisan's lines give it
/// (`2026-11-21 12:00:00`), formatted once per second and per thread: a
/// busy worker writes thousands of lines a second, and the formatting
/// cost more than the line around it.
fn local_seconds() -> String {
    thread_local! {
        static LAST: std::cell::RefCell<(i64, String)> = const { std::cell::RefCell::new((i64::MIN, String::new())) };
    }
    let now = Local::now();
    LAST.with_borrow_mut(|(second, text)| {
        if *second != now.timestamp() {
            *second = now.timestamp();
            *text = now.format("%Y-%m-%d %H:%M:%S").to_string();
        }
        text.clone()
    })
}

impl JobEvents for Reporter {
    /// JSON mode: the `starting` line.
    fn reserved(&self, job: &ReservedJob) {
        if self.json {
            self.json_line(job, "starting", "", None, None);
        } else if self.laravel8 {
            self.laravel8_line(job, "Processing");
        }
    }

    /// The job's line: artisan's DONE/FAIL, or the JSON status (see
    /// [`Outcome`] for the words).
    fn settled(&self, job: &ReservedJob, verdict: &Verdict, settled: Settled, took: Duration) {
        // A job of a tripped handler did not run: a line each would bury
        // the one error line that says why (JSON keeps its line).
        if !self.json && matches!(verdict, Verdict::HandBack { tripped: true, .. }) {
            return;
        }
        let outcome = Outcome::of(verdict, settled);
        let exception = match verdict {
            Verdict::Release { exception, .. } => exception.as_ref(),
            Verdict::Fail { exception, .. } => Some(exception),
            Verdict::Delete | Verdict::HandBack { .. } | Verdict::LeaseLost => None,
        };
        if self.json {
            let (status, result) = (outcome.status(), outcome.result());
            self.json_line(job, status, result, exception, Some(took));
        } else if self.laravel8 {
            // JobProcessed and JobFailed print; a release after an
            // exception and a hand-back on stop raise neither.
            match outcome {
                Outcome::Done | Outcome::Released => self.laravel8_line(job, "Processed"),
                Outcome::Failed => self.laravel8_line(job, "Failed"),
                Outcome::Reclaimed | Outcome::LeftReserved => self.laravel8_line(job, "Unsettled"),
                Outcome::ReleasedAfterException | Outcome::HandedBack | Outcome::LeaseLost => {}
            }
        } else {
            self.artisan_line(job, outcome, took);
        }
    }

    /// The lines still waiting for the writer go out before the worker
    /// exits.
    fn stopped(&self, _reason: StopReason) {
        self.out.flush();
    }
}

/// `12.34ms` under a second, `1.5s` above, like artisan's run time.
fn run_time_for_humans(took: Duration) -> String {
    let ms = took.as_secs_f64() * 1000.0;
    if ms < 1000.0 {
        format!("{ms:.2}ms")
    } else {
        format!("{:.2}s", ms / 1000.0)
    }
}
