//! The command line, mirroring artisan's `queue:*` commands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The crate version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the binary was built from (`git rev-parse --short HEAD`
/// at build time), or `unknown`.
pub const BUILD: &str = env!("LARAVEL_WORKER_GIT_HASH");

/// `--version`'s text: `0.1.0 (git abc1234)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("LARAVEL_WORKER_GIT_HASH"),
    ")"
);

/// A Laravel queue worker for Redis, database, SQS and beanstalkd queues: a drop-in for
/// `php artisan queue:work`.
#[derive(Debug, Parser)]
#[command(name = "laravel-worker", version = LONG_VERSION, about)]
pub struct Cli {
    /// TOML config file (see config/laravel-worker.toml).
    #[arg(
        long,
        global = true,
        env = "LARAVEL_WORKER_CONFIG",
        value_name = "PATH"
    )]
    pub config: Option<PathBuf>,
    /// The Laravel app's .env: Redis, prefixes, queue, cache and failed-jobs
    /// database are derived from it (below the config file in precedence).
    #[arg(
        long,
        global = true,
        env = "LARAVEL_WORKER_ENV_FILE",
        value_name = "PATH"
    )]
    pub env_file: Option<PathBuf>,
    /// The Laravel app's root: its resolved configuration is read by running
    /// PHP once at start (by default whenever --env-file points into an app
    /// with `artisan`); `none` turns that off.
    #[arg(long, global = true, env = "LARAVEL_WORKER_APP", value_name = "PATH")]
    pub app: Option<PathBuf>,
    /// Less output: errors only in the log (artisan's `-q`). An explicit
    /// `RUST_LOG` wins over `-q` and `-v`.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More output: `-v` logs debug lines, `-vv` (or more) trace lines
    /// (artisan's `-v`/`-vv`/`-vvv`). Default: info.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log filter `-q`/`-v` ask for: `error`, `info` (default), `debug`
    /// or `trace`.
    pub fn log_level(&self) -> &'static str {
        match (self.quiet, self.verbose) {
            (true, _) => "error",
            (false, 0) => "info",
            (false, 1) => "debug",
            (false, _) => "trace",
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Process jobs on the queue (`queue:work`).
    Work(WorkArgs),
    /// Push a Laravel-format job onto a queue.
    Push(PushArgs),
    /// Tell running workers to stop after their current job (`queue:restart`).
    Restart,
    /// List failed jobs, newest first (`queue:failed`).
    Failed(FailedArgs),
    /// Push failed jobs back onto their queues (`queue:retry`).
    Retry(RetryArgs),
    /// Delete one failed job (`queue:forget`).
    Forget(ForgetArgs),
    /// Delete all failed jobs, or those older than --hours (`queue:flush`).
    Flush(FlushArgs),
    /// Delete every job of a queue (`queue:clear`).
    Clear(ClearArgs),
    /// Show the size of queues (`queue:monitor`).
    Monitor(MonitorArgs),
    /// Stop workers taking jobs from a queue (`queue:pause`).
    Pause(PauseArgs),
    /// Let workers take jobs from a paused queue again (`queue:resume`).
    #[command(alias = "continue")]
    Resume(PauseArgs),
    /// Exit 0 while a running worker's heartbeat file is fresh, 1 otherwise
    /// (for Docker's HEALTHCHECK).
    Health(HealthArgs),
    /// Delete failed jobs older than --hours (`queue:prune-failed`).
    PruneFailed(PruneFailedArgs),
    /// Run the whole story on a SQLite file (or, with `--driver redis`, a
    /// private redis-server): push sample jobs, work them, list the failed
    /// one, monitor the queues; then clean up. Needs no config and touches
    /// no other Redis nor database.
    Demo(DemoArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the man page (roff), e.g. `laravel-worker man > laravel-worker.1`.
    Man,
}

/// `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The queue driver to show: `database` (a SQLite `jobs` table in a
    /// file: nothing to install) or `redis` (a private redis-server on a
    /// unix socket), both in a temporary directory removed at the end.
    #[arg(long, value_name = "DRIVER", default_value = "database", value_parser = ["database", "redis"])]
    pub driver: String,
}

/// `completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

/// `prune-failed`.
#[derive(Debug, Args)]
pub struct PruneFailedArgs {
    /// Delete failed jobs that failed more than this many hours ago
    /// (artisan's default: 24).
    #[arg(long, default_value_t = 24)]
    pub hours: u64,
}

/// `health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// The heartbeat file (default: `[worker] heartbeat_file` of the config).
    #[arg(long, env = "LARAVEL_WORKER_HEARTBEAT_FILE", value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Seconds the heartbeat may be old and still count as healthy.
    #[arg(long, default_value_t = crate::lifecycle::heartbeat_file::DEFAULT_MAX_AGE, value_name = "SECONDS")]
    pub max_age: u64,
}

/// `failed`.
#[derive(Debug, Args)]
pub struct FailedArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// Failed job ids (uuids), or `all`.
    #[arg(required_unless_present_any = ["queue", "range"])]
    pub ids: Vec<String>,
    /// Retry every failed job of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Numeric id ranges such as `1-5` (repeatable), added to the ids as
    /// artisan's `--range` does; anything not `N-M` is ignored, as there.
    /// Numeric ids name jobs only in stores that use them: the uuid stores
    /// answer "Unable to find failed job", as Laravel's do.
    #[arg(long, value_name = "N-M")]
    pub range: Vec<String>,
}

/// `forget`.
#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The failed job's id (uuid).
    pub id: String,
}

/// `flush`.
#[derive(Debug, Args)]
pub struct FlushArgs {
    /// Only failed jobs older than this many hours.
    #[arg(long)]
    pub hours: Option<u64>,
}

/// `clear`.
#[derive(Debug, Args)]
pub struct ClearArgs {
    /// The queue connection name (only the configured one exists).
    pub connection: Option<String>,
    /// Queues to clear, comma-separated (default: the configured queue).
    #[arg(long)]
    pub queue: Option<String>,
    /// Accepted for artisan compatibility; this command never asks.
    #[arg(long)]
    pub force: bool,
}

/// `monitor`.
#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// `connection:queue1,queue2` (or just `queue1,queue2`).
    pub queues: String,
    /// Report a queue as busy at or above this many jobs.
    #[arg(long, default_value_t = 1000)]
    pub max: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `pause` and `resume`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// `connection:queue` (a bare name uses the configured connection).
    pub queue: String,
}

/// `queue:work`'s options, with artisan's defaults.
#[derive(Debug, Args)]
pub struct WorkArgs {
    /// The queue connection name (written into failed_jobs); default from config.
    pub connection: Option<String>,
    /// Queues to work, comma-separated, highest priority first.
    #[arg(long)]
    pub queue: Option<String>,
    /// The worker's name.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Process one job (or wait --sleep if there is none) and stop.
    #[arg(long)]
    pub once: bool,
    /// Stop when the queue is empty.
    #[arg(long)]
    pub stop_when_empty: bool,
    /// Stop once no job has run for this many seconds (0 = off).
    #[arg(
        long,
        allow_negative_numbers = true,
        default_value_t = 0,
        value_name = "SECONDS"
    )]
    pub stop_when_empty_for: u64,
    /// Seconds before a job that threw is retried; a list like 1,5,10 gives one per attempt.
    #[arg(long, allow_negative_numbers = true, default_value = "0")]
    pub backoff: String,
    /// Deprecated alias of --backoff (the larger of the two is used).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub delay: u64,
    /// Stop after this many jobs (0 = no limit).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub max_jobs: u64,
    /// Stop after this many seconds (0 = no limit).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0)]
    pub max_time: u64,
    /// Work even in maintenance mode.
    #[arg(long)]
    pub force: bool,
    /// Resident memory limit in MB; exit 12 when reached (0 = no limit).
    #[arg(long, default_value_t = 128, allow_negative_numbers = true)]
    pub memory: i64,
    /// Seconds to sleep when no job is available (fractions allowed).
    #[arg(long, allow_negative_numbers = true, default_value_t = 3.0)]
    pub sleep: f64,
    /// Seconds to rest after each job (fractions allowed).
    #[arg(long, allow_negative_numbers = true, default_value_t = 0.0)]
    pub rest: f64,
    /// Seconds a job may run when it sets no timeout (0 = no limit).
    #[arg(long, allow_negative_numbers = true, default_value_t = 60)]
    pub timeout: u64,
    /// Attempts allowed when the job sets no maxTries (0 = unlimited).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    pub tries: u64,
    /// Print Laravel's JSON event lines instead of artisan lines.
    #[arg(long)]
    pub json: bool,
    /// Jobs run at once by this worker.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=crate::worker::options::MAX_PROCESSES as u64))]
    pub concurrency: u64,
    /// Slots per queue (`[worker] balance` and its companions).
    #[command(flatten)]
    pub balance: Box<BalanceArgs>,
    /// Rewrite this file every few seconds while the loop runs, for `health`
    /// (overrides `[worker] heartbeat_file`).
    #[arg(long, env = "LARAVEL_WORKER_HEARTBEAT_FILE", value_name = "PATH")]
    pub heartbeat_file: Option<PathBuf>,
}

/// `work`'s balance flags, named as Horizon's supervisor options; each
/// wins over its `[worker]` key.
#[derive(Debug, Args)]
pub struct BalanceArgs {
    /// Slots per queue: off (priority order, as queue:work), simple (an even split) or auto (slots follow each queue's work); overrides `[worker] balance`.
    #[arg(long, value_name = "MODE", value_parser = ["off", "simple", "auto"])]
    pub balance: Option<String>,
    /// What auto balancing follows: time (jobs × mean runtime) or size (jobs).
    #[arg(long, value_name = "STRATEGY", value_parser = ["time", "size"])]
    pub auto_scaling_strategy: Option<String>,
    /// Slots every queue keeps when balanced (default 1).
    #[arg(long, value_name = "N")]
    pub min_processes: Option<usize>,
    /// Slots in all when balanced (default --concurrency).
    #[arg(long, value_name = "N")]
    pub max_processes: Option<usize>,
    /// Slots a queue gains or loses per balancing round (default 1).
    #[arg(long, value_name = "N")]
    pub balance_max_shift: Option<usize>,
    /// Seconds between two balancing rounds (default 3).
    #[arg(long, value_name = "SECONDS")]
    pub balance_cooldown: Option<u64>,
}

/// `push`: enqueue a job the way Laravel's `Queue::push` does.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The queue to push to.
    pub queue: String,
    /// The job's displayName (and `job` for a string job).
    #[arg(long)]
    pub job: String,
    /// JSON for the payload's `data`.
    #[arg(long, default_value = "{}")]
    pub data: String,
    /// Seconds before the job is available (at most 2147483647, as `work`'s durations).
    #[arg(long, default_value_t = 0)]
    pub delay: u64,
    /// How many copies to push (for benchmarks and tests).
    #[arg(long, default_value_t = 1)]
    pub count: u64,
}
