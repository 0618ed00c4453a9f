//! Passwords never reach the log: a Redis, cache or database URL that does
//! not parse, a port that is not a number beside a password, a `.env` or
//! TOML file that does not parse on the line holding a password. Each case
//! runs the real binary and looks for the password in everything it wrote.

use crate::common;

use common::Daemon;

/// The password of every case; no message may contain it.
const PASSWORD: &str = "Sup3rSecretPw";

/// Runs `laravel-worker ARGS failed` with `env`, expects exit status 1 and
/// returns stdout + stderr.
fn fatal(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut all = args.to_vec();
    all.push("failed");
    let mut d = Daemon::start(&all, env);
    let code = d.code();
    let said = format!("{}\n{}", d.stdout.join("\n"), d.stderr.join("\n"));
    assert_eq!(code, Some(1), "{args:?} {env:?}:\n{said}");
    said
}

/// Asserts that `said` does not hold the password and does hold `shows`.
fn redacted(case: &str, said: &str, shows: &str) {
    assert!(
        !said.contains(PASSWORD),
        "{case}: the password is in:\n{said}"
    );
    assert!(
        !said.contains("Sup3r"),
        "{case}: part of the password is in:\n{said}"
    );
    assert!(said.contains(shows), "{case}: no {shows:?} in:\n{said}");
}

#[test]
fn passwords_in_urls_from_the_environment_are_not_logged() {
    let bad_url = format!("redis://:{PASSWORD}@10.0.0.5:notaport/0");
    redacted(
        "REDIS_URL",
        &fatal(&[], &[("REDIS_URL", &bad_url)]),
        "redis://:***@10.0.0.5:notaport/0",
    );
    let with_slash = format!("redis://:{PASSWORD}/x@10.0.0.5:6379/0");
    redacted(
        "REDIS_URL with a slash in the password",
        &fatal(&[], &[("REDIS_URL", &with_slash)]),
        "***",
    );
    let socket = format!("unix:///run/redis.sock?db=abc&pass={PASSWORD}");
    redacted(
        "unix socket URL",
        &fatal(&[], &[("REDIS_URL", &socket)]),
        "pass=***",
    );
    redacted(
        "REDIS_PORT",
        &fatal(&[], &[("REDIS_PORT", "junk"), ("REDIS_PASSWORD", PASSWORD)]),
        "REDIS_PORT=\"junk\" is not a port number",
    );
    redacted(
        "DB_PORT",
        &fatal(
            &[],
            &[
                ("DB_CONNECTION", "mysql"),
                ("DB_PORT", "abc"),
                ("DB_PASSWORD", PASSWORD),
            ],
        ),
        "DB_PORT=\"abc\" is not a port number",
    );
}

#[test]
fn passwords_in_the_config_file_are_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let run = |text: String| {
        std::fs::write(&config, text).unwrap();
        fatal(&["--config", config.to_str().unwrap()], &[])
    };
    redacted(
        "[cache] url",
        &run(format!("[cache]\nurl = \"redis://:{PASSWORD}@h:xx/1\"\n")),
        "invalid cache Redis URL \"redis://:***@h:xx/1\"",
    );
    redacted(
        "[failed] url",
        &run(format!(
            "[failed]\nurl = \"mysql://root:{PASSWORD}@db:xx/app\"\n"
        )),
        "mysql://root:***@db:xx/app",
    );
    redacted(
        "a TOML error on the URL's line",
        &run(format!(
            "[failed]\nurl = \"postgres://app:{PASSWORD} x@db/app\n"
        )),
        "postgres://app:***@db/app",
    );
}

#[test]
fn passwords_in_an_env_file_that_does_not_parse_are_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join(".env");
    for (case, text) in [
        (
            // (An unterminated double quote starts a multi-line value that
            // phpdotenv drops at the end of the file, without an error.)
            "unterminated quote",
            format!("APP_NAME=Shop\nREDIS_PASSWORD='{PASSWORD}\nDB_CONNECTION=sqlite\n"),
        ),
        (
            "stray quote",
            format!("APP_NAME=Shop\nREDIS_PASSWORD={PASSWORD} x'\n"),
        ),
        ("no name", format!("APP_NAME=Shop\n{PASSWORD} '\n")),
    ] {
        std::fs::write(&env, text).unwrap();
        let said = fatal(&["--env-file", env.to_str().unwrap()], &[]);
        redacted(case, &said, "line 2");
    }
}

/// Issue 47, 4: a `DB_URL` whose password holds a raw `/`, `?` or `#`
/// (generated passwords often have one). PHP's `parse_url`, which
/// Laravel's `ConfigurationUrlParser` uses, ends the host part there, so
/// Laravel refuses such a URL as malformed (or, with digits before the
/// `/`, reads the rest of the password as the database); the worker used
/// to read the rest as the database and print it. It now refuses the URL
/// at start, exit status 1, saying to percent-encode those characters,
/// and no part of the password is in anything it writes.
#[test]
fn a_db_url_whose_password_holds_a_raw_slash_is_refused_unshown() {
    for (case, url) in [
        (
            "slash",
            format!("postgres://lw:pa/{PASSWORD}@127.0.0.1:5432/app"),
        ),
        (
            "question mark",
            format!("postgres://lw:pa?{PASSWORD}@127.0.0.1:5432/app"),
        ),
        (
            "hash",
            format!("postgres://lw:pa#{PASSWORD}@127.0.0.1:5432/app"),
        ),
        (
            "digits, slash",
            format!("postgres://lw:12/{PASSWORD}@127.0.0.1:5432/app"),
        ),
        (
            "mysql",
            format!("mysql://lw:pa/{PASSWORD}@127.0.0.1:3306/app"),
        ),
    ] {
        let env = [
            ("DB_CONNECTION", "pgsql"),
            ("DB_URL", url.as_str()),
            ("QUEUE_CONNECTION", "database"),
        ];
        let said = fatal(&[], &env);
        redacted(case, &said, "malformed");
        redacted(case, &said, "percent-encode");
    }
}
