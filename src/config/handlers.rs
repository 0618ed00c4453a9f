//! `[[handlers]]` entries, checked (`config::check`) and resolved into
//! typed specs: what to run (a program, warm processes, an HTTP endpoint),
//! for which jobs, under which breaker. The app opens each spec into a
//! handler (`app::build_router`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::file::{HandlerEntry, Transport};
use crate::handler::http::DEFAULT_CONNECT_TIMEOUT;
use crate::handler::scheduling::Scheduling;
use crate::handler::{BreakerSettings, Keeper};

/// One `[[handlers]]` entry, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerSpec {
    /// displayName pattern (`match`); `*` is a wildcard.
    pub pattern: String,
    /// How a job reaches the handler.
    pub transport: TransportSpec,
    /// Default time limit in seconds for jobs with no payload `timeout`.
    pub timeout: Option<u64>,
    /// Only jobs from these queues match; `None`: any queue.
    pub queues: Option<Vec<String>>,
    /// Its breaker: `[worker]`'s, with the entry's own `trip_after`.
    pub breaker: BreakerSettings,
    /// Who does Laravel's bookkeeping for its jobs (`bookkeeping`; by
    /// default Laravel for the PHP bridge, the worker otherwise).
    pub keeper: Keeper,
}

/// How a job reaches a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportSpec {
    /// One process per job (`command`, `mode` unset or `"process"`).
    Process(CommandSpec),
    /// Warm processes (`command`, `mode = "persistent"`).
    Persistent(CommandSpec, PoolSpec),
    /// An HTTP POST per job (`url`).
    Http(HttpSpec),
}

/// A command handler's program and environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// Variables set for the handler (`env`).
    pub env: BTreeMap<String, String>,
    /// Start from an empty environment (`env_clear`).
    pub env_clear: bool,
    /// Pass `data.command` decoded to JSON (`decode_command`, default true).
    pub decode_command: bool,
    /// The scheduling policy of its processes (`scheduling`, default
    /// batch).
    pub scheduling: Scheduling,
}

/// The warm processes of a persistent handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    /// Most processes alive at once (`processes`, default 1).
    pub processes: usize,
    /// Processes started with the worker and kept however idle
    /// (`min_processes`, default 0).
    pub min_processes: usize,
    /// How long a process above the minimum may wait idle before it is
    /// stopped (`idle_timeout`, seconds); `None`: kept until the worker exits.
    pub idle_timeout: Option<Duration>,
    /// Jobs reserved ahead of the free processes, each waiting for one
    /// (`reserve_ahead`); `None`: one per process.
    pub reserve_ahead: Option<usize>,
    /// Whether a busy process is sent its next request before it answers
    /// (`pipeline`, default false).
    pub pipeline: bool,
    /// Calls before a process is replaced (`max_jobs`; 0: never).
    pub max_jobs: u64,
    /// Resident MB above which a process is replaced (`max_memory`; 0: no
    /// limit).
    pub max_memory_mb: u64,
}

/// An HTTP handler's endpoint and credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSpec {
    /// The endpoint each job is POSTed to.
    pub url: String,
    /// Time allowed to connect (`connect_timeout`, default 5 s).
    pub connect_timeout: Duration,
    /// The variable holding a bearer token (`token_env`), by name.
    pub token_env: Option<String>,
    /// The variable holding the HMAC signing key (`secret_env`), by name.
    pub secret_env: Option<String>,
}

impl HandlerSpec {
    /// The spec of a checked entry, `breaker` being `[worker]`'s.
    pub(super) fn new(entry: HandlerEntry, breaker: BreakerSettings) -> HandlerSpec {
        let transport = entry.transport();
        let keeper = keeper(&entry);
        let command = || CommandSpec {
            command: entry.command.clone().unwrap_or_default(),
            env: entry.env.clone().unwrap_or_default(),
            env_clear: entry.env_clear.unwrap_or(false),
            decode_command: entry.decodes_command(),
            scheduling: entry
                .scheduling
                .as_deref()
                .and_then(Scheduling::from_name)
                .unwrap_or_default(),
        };
        let transport = match transport {
            Transport::Process => TransportSpec::Process(command()),
            Transport::Persistent => TransportSpec::Persistent(
                command(),
                PoolSpec {
                    processes: entry.processes.unwrap_or(1),
                    min_processes: entry.min_processes.unwrap_or(0),
                    idle_timeout: entry.idle_timeout.map(Duration::from_secs),
                    reserve_ahead: entry.reserve_ahead,
                    pipeline: entry.pipeline.unwrap_or(false),
                    max_jobs: entry.max_jobs.unwrap_or(0),
                    max_memory_mb: entry.max_memory.unwrap_or(0),
                },
            ),
            Transport::Http => TransportSpec::Http(HttpSpec {
                url: entry.url.clone().unwrap_or_default(),
                connect_timeout: entry
                    .connect_timeout
                    .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs),
                token_env: entry.token_env.clone(),
                secret_env: entry.secret_env.clone(),
            }),
        };
        HandlerSpec {
            breaker: BreakerSettings {
                trip_after: entry.trip_after.unwrap_or(breaker.trip_after),
                ..breaker
            },
            pattern: entry.pattern,
            transport,
            timeout: entry.timeout,
            queues: entry.queues,
            keeper,
        }
    }

    /// The command handler's program and environment; `None` for HTTP.
    pub fn command(&self) -> Option<&CommandSpec> {
        match &self.transport {
            TransportSpec::Process(c) | TransportSpec::Persistent(c, _) => Some(c),
            TransportSpec::Http(_) => None,
        }
    }

    /// The HTTP handler's endpoint; `None` for a command handler.
    pub fn http(&self) -> Option<&HttpSpec> {
        match &self.transport {
            TransportSpec::Http(h) => Some(h),
            _ => None,
        }
    }

    /// `process`, `persistent` or `http`.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            TransportSpec::Process(_) => "process",
            TransportSpec::Persistent(..) => "persistent",
            TransportSpec::Http(_) => "http",
        }
    }
}

/// Who keeps the books of `entry`'s jobs: its `bookkeeping` (`"laravel"`
/// or `"worker"`, checked by `check::handlers`), else Laravel for the PHP
/// bridge (an argument whose file name is `laravel-worker-bridge.php`, as
/// every bridge version is named, so an older bridge is never
/// double-booked) and the worker for any other handler.
fn keeper(entry: &HandlerEntry) -> Keeper {
    match entry.bookkeeping.as_deref() {
        Some("laravel") => Keeper::Laravel,
        Some(_) => Keeper::Worker,
        None => {
            let bridge = entry.command.iter().flatten().any(|arg| {
                std::path::Path::new(arg)
                    .file_name()
                    .is_some_and(|f| f == "laravel-worker-bridge.php")
            });
            if bridge {
                Keeper::Laravel
            } else {
                Keeper::Worker
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(toml_text: &str) -> HandlerEntry {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn the_bridge_keeps_its_own_books_by_default() {
        let bridge = entry(
            "match = \"*\"\ncommand = [\"php\", \"/srv/app/vendor/laravel-worker/laravel-worker/laravel-worker-bridge.php\", \"--app=/srv/app\"]",
        );
        assert_eq!(keeper(&bridge), Keeper::Laravel);
        let python = entry("match = \"*\"\ncommand = [\"python3\", \"worker.py\"]");
        assert_eq!(keeper(&python), Keeper::Worker);
        let http = entry("match = \"*\"\nurl = \"http://h/q\"");
        assert_eq!(keeper(&http), Keeper::Worker);
        let renamed = entry(
            "match = \"*\"\ncommand = [\"php\", \"bridge-copy.php\"]\nbookkeeping = \"laravel\"",
        );
        assert_eq!(keeper(&renamed), Keeper::Laravel);
        let forced = entry(
            "match = \"*\"\ncommand = [\"php\", \"laravel-worker-bridge.php\"]\nbookkeeping = \"worker\"",
        );
        assert_eq!(keeper(&forced), Keeper::Worker);
    }
}
