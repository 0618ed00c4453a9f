//! The `.env` dialect against the real phpdotenv: `tests/dotenv/corpus.env`
//! (over 80 lines: quotes, escapes, comments, interpolation, `export`,
//! multi-line values, a BOM, CRLF, `env()`'s literals) read by our parser
//! must give what Laravel's `env()` gives. `tests/dotenv/expected.json` is
//! the output of `tests/dotenv/laravel_env.php` (the real phpdotenv and
//! `Illuminate\Support\Env`); where PHP and those packages are installed the
//! test runs the script again and checks the file still matches.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Daemon, Job, QueueState, Scene};
use laravel_worker::config::env::slug_with;
use laravel_worker::config::phpdotenv::{EnvValue, env_value, load};

/// The process environment the corpus is read under (PHP gets only these,
/// and PATH).
const PROCESS: &[(&str, &str)] = &[("T_PROC", "from-process"), ("T_OVERRIDDEN", "process-wins")];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dotenv")
}

fn process(name: &str) -> Option<String> {
    PROCESS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

/// What our reader makes of `text`: every `T_` variable as `env()` would
/// return it, as JSON.
fn ours(text: &str) -> serde_json::Value {
    let vars = load(text, process).expect("the corpus parses");
    let mut out = serde_json::Map::new();
    // The process environment's variables are visible to env() too.
    let mut all: Vec<(String, String)> = vars.into_iter().collect();
    for (n, v) in PROCESS {
        if !all.iter().any(|(name, _)| name == n) {
            all.push((n.to_string(), v.to_string()));
        }
    }
    for (name, raw) in all.into_iter().filter(|(n, _)| n.starts_with("T_")) {
        let value = match env_value(&raw) {
            EnvValue::Null => serde_json::Value::Null,
            EnvValue::Bool(b) => b.into(),
            EnvValue::Str(s) => s.into(),
        };
        out.insert(name, value);
    }
    out.into()
}

/// PHP with Debian's phpdotenv and Laravel support packages, if installed.
fn php_with_phpdotenv() -> Option<Command> {
    let lib = Path::new("/usr/share/php");
    let found = Command::new("php").arg("--version").output().is_ok()
        && lib.join("Dotenv/autoload.php").is_file()
        && lib.join("Illuminate/Support/autoload.php").is_file();
    if !found {
        eprintln!(
            "note: php or /usr/share/php/{{Dotenv,Illuminate/Support}} is missing; \
             the live check against phpdotenv is skipped (expected.json is still compared)"
        );
        return None;
    }
    let mut cmd = Command::new("php");
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(PROCESS.iter().copied())
        .arg(dir().join("laravel_env.php"));
    Some(cmd)
}

#[test]
fn corpus_reads_as_laravel_reads_it() {
    let bytes = std::fs::read(dir().join("corpus.env")).unwrap();
    assert!(
        bytes.starts_with(b"\xEF\xBB\xBF"),
        "the corpus starts with a BOM"
    );
    let text = String::from_utf8(bytes).unwrap();
    let entries = text
        .lines()
        .filter(|l| l.starts_with("T_") || l.starts_with("export") || l.starts_with('"'))
        .count();
    assert!(entries >= 60, "{entries} entries");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap())
            .unwrap();
    let got = ours(&text);
    let (e, g) = (expected.as_object().unwrap(), got.as_object().unwrap());
    for (name, value) in e {
        assert_eq!(g.get(name), Some(value), "{name}");
    }
    for name in g.keys() {
        assert!(e.contains_key(name), "{name} is not set for Laravel");
    }

    if let Some(mut php) = php_with_phpdotenv() {
        let out = common::succeeds(php.arg(dir().join("corpus.env")));
        let live: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(live, expected, "expected.json is what phpdotenv gives");
    }
}

/// Files phpdotenv refuses are refused here too, and the error names the
/// line and variable but never the value.
#[test]
fn refused_files_are_refused_without_showing_the_value() {
    let cases = [
        "T_PW='s3cret",
        "T_PW=\"s3cret \\q\"",
        "T_PW=\"s3cret\" tail",
        "T_PW=s3cret tail",
        "=s3cret",
        "T PW=s3cret",
        "T-PW=s3cret",
        "T_PW='s3cret' tail",
    ];
    let scratch = tempfile::tempdir().unwrap();
    for case in cases {
        let text = format!("T_OK=1\n{case}\n");
        let e = load(&text, |_| None).expect_err(case);
        assert_eq!(e.line, 2, "{case}");
        assert!(!e.to_string().contains("s3cret"), "{case}: {e}");
        if let Some(mut php) = php_with_phpdotenv() {
            let file = scratch.path().join("case.env");
            std::fs::write(&file, &text).unwrap();
            let out = php.arg(&file).output().unwrap();
            assert_eq!(out.status.code(), Some(2), "phpdotenv refuses {case}");
        }
    }
    // An unclosed double quote runs to the end of the file: phpdotenv
    // drops it without an error, and so do we.
    let vars = load("T_OK=1\nT_PW=\"s3cret\n", |_| None).unwrap();
    assert_eq!(vars.get("T_PW"), None);
}

/// The Laravel ≤ 10 skeleton's `REDIS_PASSWORD=null` means no password: a
/// worker from `--env-file` alone reaches a Redis without a password, with
/// `DB_PASSWORD=null`, a `$` in an unquoted value and a BOM in the file, and
/// the Laravel 11+ `CACHE_STORE=database` on SQLite.
#[test]
fn env_file_with_null_password_and_database_cache() {
    let s = Scene::new();
    let app = s.path("app");
    std::fs::create_dir_all(app.join("database")).unwrap();
    let env = format!(
        "\u{feff}APP_NAME=Laravel\nAPP_KEY=base64:pa$word\nREDIS_HOST={}\nREDIS_PASSWORD=null\n\
         REDIS_PORT=0\nQUEUE_CONNECTION=redis\nCACHE_STORE=database\nDB_CONNECTION=sqlite\n\
         DB_PASSWORD=null\n",
        s.redis.socket.display()
    );
    std::fs::write(app.join(".env"), env).unwrap();
    let db = app.join("database/database.sqlite");
    common::sqlite::create_failed_jobs(&db);
    common::sqlite::block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
            .await
            .unwrap();
        sqlx::raw_sql(
            "create table \"cache\" (\"key\" varchar not null primary key, \
             \"value\" text not null, \"expiration\" integer not null)",
        )
        .execute(&mut c)
        .await
        .unwrap();
    });
    let config = s.config().settings_from_app().recording("exit 0").write();
    let job = Job::laravel8("App\\Jobs\\FromEnv");
    s.redis
        .push_to("laravel-database-queues:default", &job.build());
    let env_file = app.join(".env");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "--config".to_string(),
            config.to_str().unwrap().to_string(),
            "--env-file".to_string(),
            env_file.to_str().unwrap().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let a = args(&["work", "--once", "--sleep=0"]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    Daemon::run(&a, &[]).expect_exit(0);
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty());

    // queue:restart through the app's cache table stops a worker.
    let a = args(&["work", "--sleep=0.05"]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let mut w = Daemon::start(&a, &[]);
    w.wait_log(&["worker started"]);
    let r = args(&["restart"]);
    let r: Vec<&str> = r.iter().map(String::as_str).collect();
    Daemon::run(&r, &[]).expect_exit(0);
    w.expect_stop(0, "restart_signal");
}

/// `Str::slug` of awkward app names, as PHP's own Laravel computes it (the
/// prefixes derived from `APP_NAME`).
#[test]
fn slug_matches_laravel() {
    let names = [
        ("shop.example.com", "shopexamplecom", "shopexamplecom"),
        ("Bücherei", "bucherei", "bucherei"),
        ("Shop@Home", "shop-at-home", "shop_at_home"),
        ("My Shop", "my-shop", "my_shop"),
        (
            "Crème Brûlée_Café",
            "creme-brulee-cafe",
            "creme_brulee_cafe",
        ),
        ("Straße-42", "strasse-42", "strasse_42"),
        ("  ÆØÅ łódź  ", "aeoa-lodz", "aeoa_lodz"),
        ("a--b__c", "a-b-c", "a_b_c"),
        ("Ñandú!", "nandu", "nandu"),
        ("Laravel", "laravel", "laravel"),
        ("ACME (Staging)", "acme-staging", "acme_staging"),
    ];
    for (name, dash, underscore) in names {
        assert_eq!(slug_with(name, '-'), dash, "{name}");
        assert_eq!(slug_with(name, '_'), underscore, "{name}");
    }
    if !Path::new("/usr/share/php/Illuminate/Support/autoload.php").is_file()
        || Command::new("php").arg("--version").output().is_err()
    {
        eprintln!(
            "note: php or Laravel's support package is missing; live Str::slug check skipped"
        );
        return;
    }
    let out = common::succeeds(
        Command::new("php")
            .arg(dir().join("slug.php"))
            .args(names.iter().map(|(n, _, _)| *n)),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for ((name, dash, underscore), line) in names.iter().zip(text.lines()) {
        assert_eq!(
            line,
            format!("{dash}\t{underscore}"),
            "PHP's slug of {name}"
        );
    }
}
