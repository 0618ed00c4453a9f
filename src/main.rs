use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use laravel_worker::cli::{Cli, Command};
use laravel_worker::commands;
use laravel_worker::config::Settings;
use tracing_subscriber::EnvFilter;

/// Exit status of a fatal error (bad config, unusable Redis).
const FATAL: u8 = 1;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    init_logging(&cli);

    // One thread is enough: jobs run in their own processes, and a single
    // thread keeps the daemon small.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return ExitCode::from(FATAL);
        }
    };
    let result = runtime.block_on(async {
        // `health` needs no Redis, and no config when given --file; the
        // demo, completions and man page need no settings at all.
        match &cli.command {
            Command::Health(args) => {
                return commands::health::run(args, cli.config.as_deref(), cli.env_file.as_deref());
            }
            Command::Demo(args) => return commands::demo::run(&args.driver).await,
            Command::Completions(args) => return commands::docs::completions(args.shell),
            Command::Man => return commands::docs::man(),
            Command::Work(_) => commands::work::absorb_resize_signals(),
            _ => {}
        }
        let settings = Settings::load_connection(
            cli.config.as_deref(),
            cli.env_file.as_deref(),
            cli.app.as_deref(),
            match &cli.command {
                Command::Work(args) => args.connection.as_deref(),
                _ => None,
            },
        )?;
        let app_default = match &cli.command {
            Command::Work(_) => app_default_settings(&cli, &settings),
            _ => None,
        };
        match cli.command {
            Command::Work(args) => commands::work::run(settings, app_default, args).await,
            Command::Push(args) => commands::push::run(settings, args).await,
            Command::Restart => commands::restart::run(settings).await,
            Command::Failed(args) => commands::failed::list(settings, args).await,
            Command::Retry(args) => commands::failed::retry(settings, args).await,
            Command::Forget(args) => commands::failed::forget(settings, args).await,
            Command::Flush(args) => commands::failed::flush(settings, args).await,
            Command::Clear(args) => commands::clear::run(settings, args).await,
            Command::Monitor(args) => commands::monitor::run(settings, args).await,
            Command::Pause(args) => commands::pause::run(settings, args, true).await,
            Command::Resume(args) => commands::pause::run(settings, args, false).await,
            Command::PruneFailed(args) => commands::failed::prune(settings, args).await,
            Command::Health(_) | Command::Demo(_) | Command::Completions(_) | Command::Man => {
                unreachable!("handled above")
            }
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // A URL in the message may hold a password (a TOML error quotes
            // the line it stopped at, a driver may quote its URL).
            // Each cause once: a Redis error that wraps an I/O error
            // displays as that error ("Connection refused: Connection refused").
            let chain = laravel_worker::error_chain(e.as_ref());
            let message = laravel_worker::config::redact::text(&chain);
            tracing::error!("{message}");
            ExitCode::from(FATAL)
        }
    }
}

/// Prints clap's message for `e` and gives the exit status: 0 for `--help`
/// and `--version`, 1 for a bad command line, as artisan exits on an
/// option it refuses (a flag's bad value is a bad configuration: the same
/// status as a bad value in the config file).
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(FATAL),
    }
}

/// The log filter of `level` when `RUST_LOG` is unset (`work`: whether
/// the command is `work`). At the default level sqlx's pool keeps its own
/// lines ("error occurred while testing the connection on-release", "ping
/// on idle connection returned error") to itself: during a database outage
/// they doubled the worker's warnings, whose own lines name the failed
/// statement and its cause. Outside `work`, the config's `setting …` lines
/// (one per value read) stay out of a command's output too, and its
/// warnings stay in. `-v` shows all of them.
fn default_filter(level: &str, work: bool) -> String {
    match (level, work) {
        ("info", true) => format!("{level},sqlx_core::pool=error"),
        ("info", false) => format!("{level},sqlx_core::pool=error,laravel_worker::config=warn"),
        _ => level.to_string(),
    }
}

/// Logs to stderr at `RUST_LOG`'s level (a non-empty one wins over -q/-v;
/// an empty one counts as unset), without colours unless stderr is a
/// terminal; outside text (displayNames, handler output) cannot break a
/// line.
fn init_logging(cli: &Cli) {
    tracing_subscriber::fmt()
        .with_env_filter(
            std::env::var("RUST_LOG")
                .ok()
                .filter(|v| !v.trim().is_empty())
                .and_then(|v| EnvFilter::try_new(v).ok())
                .unwrap_or_else(|| {
                    let work = matches!(cli.command, Command::Work(_));
                    EnvFilter::new(default_filter(cli.log_level(), work))
                }),
        )
        .with_writer(std::io::stderr)
        .fmt_fields(laravel_worker::log_fields())
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// The settings of the app's own queue connection when `settings` serve
/// another (`work redis` on a database app), loaded without their
/// `setting …` lines, for `work`'s warning when the app's queues hold jobs
/// it leaves; `None` when they are the app's, or cannot be loaded.
fn app_default_settings(cli: &Cli, settings: &Settings) -> Option<Settings> {
    let app = settings.app_connection.as_deref()?;
    let quiet = tracing::subscriber::NoSubscriber::default();
    tracing::subscriber::with_default(quiet, || {
        Settings::load_connection(
            cli.config.as_deref(),
            cli.env_file.as_deref(),
            cli.app.as_deref(),
            Some(app),
        )
        .ok()
    })
}
