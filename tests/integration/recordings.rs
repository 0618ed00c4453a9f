//! Laravel 11–12 parity, checked against what a real Laravel 12.67 did
//! (`tests/fixtures/laravel12`, recorded by running Laravel, kept here)
//! and payloads of newer versions (`../shared/fixtures/newer-payloads`
//! beside the repository, read in place; its tests skip with a printed
//! reason when it is absent, and fail under `CI=true`): the daemon, on a real
//! redis-server and SQLite, reserves, runs and settles every recorded
//! payload; its own Redis commands, captured with `redis-cli monitor` and
//! normalized by the recordings' `normalize.py`, write the same keys as
//! `queue:work`'s traces and leave the same state; restart and pause are
//! read from exactly the rows, keys and files Laravel wrote; `--env-file`
//! alone derives the keys Laravel used for each `.env` variant.
//!
//! Which test reads which fixture file is registered in one place,
//! `common::recordings::USES`; [`every_fixture_file_is_used_by_a_test`]
//! fails on a file no test registers. Where the daemon differs on purpose
//! (see `docs/src/differences.md`), the test asserts the documented
//! behaviour, named in [`deliberate`].

use crate::common;

use std::collections::BTreeSet;

use common::recordings::{self as rec, Monitor};
use common::{Daemon, Job, Scene};
use serde_json::{Value, json};

/// The 12.x skeleton's queue prefix (APP_NAME=Laravel).
const PREFIX: &str = "laravel-database-";
/// The 12.x skeleton's cache prefix.
const CACHE_PREFIX: &str = "laravel-cache-";

#[test]
fn every_fixture_file_is_used_by_a_test() {
    let unused = rec::unused();
    assert!(unused.is_empty(), "fixture files no test uses: {unused:#?}");
    // Every test the registry names is a test of the integration binary
    // (this file's, or another area's such as sqs_worker.rs).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration");
    let source: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    for (test, _) in rec::USES {
        assert!(
            source.contains(&format!("#[test]\nfn {test}()")),
            "no test {test}"
        );
    }
    // Every scenario of the README's table has its trace files.
    let readme = rec::read("laravel12/README.md");
    let all = rec::all_files();
    let scenarios: Vec<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .filter(|name| !name.contains('.') && *name != "scenario")
        .collect();
    assert!(scenarios.len() >= 17, "{scenarios:?}");
    for scenario in scenarios {
        for store in ["database", "redis"] {
            let file = format!("laravel12/traces/{scenario}.{store}-cache.state.json");
            assert!(all.contains(&file), "no {file}");
        }
    }
}

/// Every file of `newer-payloads/` is described in its README.
#[test]
fn every_newer_payload_is_described() {
    if !rec::have_newer_payloads() {
        return;
    }
    let newer = rec::read("newer-payloads/README.md");
    for file in rec::all_files()
        .iter()
        .filter(|f| f.starts_with("newer-payloads/") && !f.ends_with("README.md"))
    {
        let name = file.rsplit('/').next().unwrap();
        let named = newer.contains(name) || (name.starts_with("fw13-") && newer.contains("fw13-*"));
        assert!(named, "{name} is not described in newer-payloads/README.md");
    }
}

/// A handler that logs `ID NAME ATTEMPT QUEUE` and keeps the decoded
/// command (`cmd-ID.json`) when there is one.
const KEEP_COMMAND: &str = "echo \"$LARAVEL_WORKER_JOB_ID $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_ATTEMPT $LARAVEL_WORKER_QUEUE\" >> \"$LOG\"\n\
    if [ -n \"$LARAVEL_WORKER_COMMAND_FILE\" ]; then cp \"$LARAVEL_WORKER_COMMAND_FILE\" \"$DIR/cmd-$LARAVEL_WORKER_JOB_ID.json\"; fi";

/// One payload to push: where, and what the handler should see.
struct Pushed {
    file: String,
    payload: String,
    key: String,
    zset: bool,
    id: String,
    name: String,
    attempt: i64,
    /// The command's class when it must decode (not encrypted, not JSON).
    class: Option<String>,
}

/// The recorded payloads of `payloads/` with the key each was pushed to,
/// checked against the dispatch traces: the payload is the exact string
/// the dispatch sent, to that key.
fn recorded_payloads() -> Vec<Pushed> {
    let index = rec::json("laravel12/payloads/INDEX.json");
    let index_md = rec::read("laravel12/payloads/INDEX.md");
    let mut out = vec![];
    for entry in index.as_array().unwrap() {
        let file = format!("laravel12/payloads/{}", entry["file"].as_str().unwrap());
        assert!(index_md.contains(entry["file"].as_str().unwrap()), "{file}");
        let payload = rec::read(&file);
        let key = entry["key"].as_str().unwrap().to_string();
        let kind = entry["kind"].as_str().unwrap();
        let dispatch = format!("laravel12/traces/dispatch/{kind}.monitor.txt");
        if rec::all_files().contains(&dispatch) {
            let trace = rec::read(&dispatch);
            let sent = trace.lines().any(|l| {
                let args = rec::monitor_args(l);
                args.contains(&payload) && args.contains(&key)
            });
            assert!(sent, "{file}: not sent to {key} in {dispatch}");
            // The normalized dispatch trace names the same key.
            let normalized = rec::read(&dispatch.replace(".monitor.", ".normalized."));
            assert!(normalized.contains(&key), "{dispatch}");
        }
        let p: Value = serde_json::from_str(&payload).unwrap();
        out.push(pushed(
            file,
            payload,
            key,
            entry["redis_type"] == "zset",
            &p,
        ));
    }
    out
}

fn pushed(file: String, payload: String, key: String, zset: bool, p: &Value) -> Pushed {
    let command = p["data"]["command"].as_str().unwrap_or_default();
    // PHP's unserialize() refuses a class name whose length is not the
    // declared one (some test-suite strings are written that way): such a
    // command is not decoded, and the job still runs.
    let class = command.strip_prefix("O:").and_then(|rest| {
        let (len, rest) = rest.split_once(':')?;
        let class = rest.split('"').nth(1)?;
        (len.parse() == Ok(class.len())).then(|| class.to_string())
    });
    Pushed {
        key,
        zset,
        id: p["id"].as_str().unwrap().to_string(),
        name: p["displayName"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: {p}"))
            .to_string(),
        attempt: p["attempts"].as_i64().unwrap() + 1,
        class,
        payload,
        file,
    }
}

/// The newer payloads: whole payloads as they are (fresh id and uuid),
/// serialized commands in a Laravel 13 payload of their class.
fn newer_payloads() -> Vec<Pushed> {
    let key = format!("{PREFIX}queues:default");
    let mut out = vec![];
    for (n, file) in rec::files_in("newer-payloads", "").into_iter().enumerate() {
        if file.ends_with("README.md") {
            continue;
        }
        let text = rec::read(&file);
        let items: Vec<String> = if file.ends_with(".strings") {
            text.lines()
                .map(|l| serde_json::from_str::<String>(l).unwrap())
                .collect()
        } else {
            vec![text]
        };
        for (i, item) in items.into_iter().enumerate() {
            let tag = format!("newer-{n}-{i}");
            let mut p: Value = match serde_json::from_str::<Value>(&item) {
                Ok(v) if v.is_object() => v,
                _ => {
                    let class = item
                        .split('"')
                        .nth(1)
                        .unwrap_or("Closure")
                        .replace("\\\\", "\\");
                    let job = Job::laravel13(&class)
                        .set("data", json!({"commandName": class, "command": item}));
                    serde_json::from_str(&job.build()).unwrap()
                }
            };
            // RedisQueue adds id and attempts to what createPayload makes;
            // a payload from a test suite may lack them.
            p["id"] = json!(tag);
            if p.get("attempts").is_none() {
                p["attempts"] = json!(0);
            }
            p["uuid"] = json!(format!("00000000-0000-4000-8000-{:012}", n * 100 + i));
            let payload = p.to_string();
            out.push(pushed(file.clone(), payload, key.clone(), false, &p));
        }
    }
    out
}

/// Every payload of `payloads/`, pushed onto its recorded key (a delayed
/// one made due), is reserved, handed to the handler with its
/// displayName, attempt and queue, its `data.command` decoded (unless
/// encrypted or JSON), and deleted: nothing is left.
#[test]
fn every_recorded_payload_is_reserved_run_and_settled() {
    run_and_settle(recorded_payloads());
}

/// As [`every_recorded_payload_is_reserved_run_and_settled`], for every
/// payload of `newer-payloads/` (skipped when the folder is absent).
#[test]
fn every_newer_payload_is_reserved_run_and_settled() {
    if rec::have_newer_payloads() {
        run_and_settle(newer_payloads());
    }
}

/// Pushes `all`, runs the daemon until the queues are empty, and checks
/// each payload was handed over once, decoded, and deleted.
fn run_and_settle(mut all: Vec<Pushed>) {
    let s = Scene::new();
    // The payloads' reserve, decoding and settle, without the bookkeeping
    // around them (whole_jobs.rs, whole_chains.rs): with it, a chain's
    // step on a process handler and no PHP bridge fails before it runs.
    let config = s
        .config()
        .set("redis", "prefix", PREFIX)
        .set("bookkeeping", "enabled", false)
        .script(KEEP_COMMAND)
        .write();
    let mut ids = BTreeSet::new();
    for p in &mut all {
        // A released copy shares its id with the dispatched one.
        if !ids.insert(p.id.clone()) {
            let fresh = format!("{}-again", p.id);
            p.payload = p.payload.replacen(&p.id, &fresh, 1);
            p.id = fresh;
        }
        if p.zset {
            let _: i64 =
                s.redis
                    .cmd(&["ZADD", &p.key, &(common::now() - 1).to_string(), &p.payload]);
        } else {
            let _: i64 = s.redis.cmd(&["RPUSH", &p.key, &p.payload]);
        }
    }
    s.run(
        &config,
        &["--queue=default,emails", "--stop-when-empty", "--sleep=0"],
    );

    let log = s.log();
    for p in &all {
        let queue = p
            .key
            .trim_start_matches(&format!("{PREFIX}queues:"))
            .split(':')
            .next()
            .unwrap();
        let line = format!("{} {} {} {queue}", p.id, p.name, p.attempt);
        assert_eq!(
            log.iter().filter(|l| **l == line).count(),
            1,
            "{}: {line} in {log:#?}",
            p.file
        );
        let decoded = std::fs::read_to_string(s.path(&format!("cmd-{}.json", p.id)));
        match (&p.class, decoded) {
            (Some(class), Ok(text)) => {
                let command: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(
                    command["__class"].as_str(),
                    Some(class.as_str()),
                    "{}",
                    p.file
                );
            }
            (Some(_), Err(e)) => panic!("{}: no decoded command: {e}", p.file),
            (None, _) => {}
        }
    }
    assert_eq!(log.len(), all.len(), "{log:#?}");
    let left: Vec<String> = s
        .redis
        .keys(0)
        .into_iter()
        .filter(|k| !k.ends_with(":notify"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Where a recorded key lives (`KEYS.json`'s `where`): a Redis DB, the
/// `cache` table, or a file under `storage/`.
enum Place {
    Redis(i64),
    Table,
    File,
}

fn place(where_: &str) -> Place {
    match where_.strip_prefix("redis db ") {
        Some(db) => Place::Redis(db.parse().unwrap()),
        None if where_ == "table cache" => Place::Table,
        None => Place::File,
    }
}

/// A recorded `.env` variant in a scene: the app folder (the `.env` with
/// only the Redis port changed to the scene's, as the recording changed
/// it to its own; SQLite `database/database.sqlite` with the skeleton's
/// tables; `storage/`), the server reachable over TCP with the variant's
/// credentials.
struct Variant {
    s: Scene,
    admin: redis::Connection,
    app: std::path::PathBuf,
    config: std::path::PathBuf,
    keys: Value,
}

impl Variant {
    fn new(name: &str, keys: &Value) -> Variant {
        let s = Scene::new();
        let mut admin = s.redis.conn(0);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let recorded = rec::json(&format!("laravel12/config/{name}.json"));
        let mut env = recorded["env_file"].as_str().unwrap().to_string();
        let changes = recorded["observation"]["env_changes_for_observing"].clone();
        for change in changes.as_array().unwrap() {
            let (var, value) = change.as_str().unwrap().split_once('=').unwrap();
            env = set_env(&env, var, value);
        }
        env = set_env(&env, "REDIS_PORT", &port.to_string()).replace(":7701", &format!(":{port}"));
        if name == "config-cached" {
            env = set_env(&env, "APP_NAME", "\"Changed Since\"");
        }
        let admin_cmd = |c: &mut redis::Connection, args: &[&str]| {
            redis::cmd(args[0]).arg(&args[1..]).query::<()>(c).unwrap();
        };
        admin_cmd(&mut admin, &["CONFIG", "SET", "port", &port.to_string()]);
        admin_cmd(
            &mut admin,
            &[
                "ACL", "SETUSER", "user", "on", "nopass", "~*", "&*", "+@all",
            ],
        );
        let app = s.path("app");
        for dir in [
            "database",
            "storage/framework/cache/data",
            "bootstrap/cache",
        ] {
            std::fs::create_dir_all(app.join(dir)).unwrap();
        }
        // The app's markers, so the worker would ask PHP (which is not on
        // its PATH) and falls back to the .env rules.
        std::fs::write(app.join("artisan"), "#!/usr/bin/env php\n<?php\n").unwrap();
        std::fs::write(app.join("bootstrap/app.php"), "<?php\n").unwrap();
        if name == "config-cached" {
            // What config:cache leaves (its content is PHP's business).
            std::fs::write(app.join("bootstrap/cache/config.php"), "<?php return [];\n").unwrap();
        }
        std::fs::write(app.join(".env"), env).unwrap();
        let schema = rec::json("laravel12/failed_jobs/schema.json");
        rec::create_tables(&app.join("database/database.sqlite"), &schema);
        let config = s.config().settings_from_app().recording("").write();
        if name == "redis-password-set" {
            admin_cmd(&mut admin, &["CONFIG", "SET", "requirepass", "s3cret"]);
        }
        Variant {
            s,
            admin,
            app,
            config,
            keys: keys[name].clone(),
        }
    }

    /// Runs `work ARGS` with `--env-file` and no PHP on the PATH.
    fn work(&self, args: &[&str]) -> Daemon {
        let env_file = self.app.join(".env");
        let mut all = vec![
            "--config",
            self.config.to_str().unwrap(),
            "--env-file",
            env_file.to_str().unwrap(),
            "work",
        ];
        all.extend_from_slice(args);
        Daemon::start(&all, &[("PATH", "/nonexistent")])
    }

    fn redis(&mut self, db: i64, args: &[&str]) {
        redis::cmd("SELECT")
            .arg(db)
            .query::<()>(&mut self.admin)
            .unwrap();
        redis::cmd(args[0])
            .arg(&args[1..])
            .query::<redis::Value>(&mut self.admin)
            .unwrap();
    }

    fn llen(&mut self, db: i64, key: &str) -> i64 {
        redis::cmd("SELECT")
            .arg(db)
            .query::<()>(&mut self.admin)
            .unwrap();
        redis::cmd("LLEN").arg(key).query(&mut self.admin).unwrap()
    }

    /// Writes the recorded value of `which` (`restart_key`, ...) where
    /// Laravel wrote it.
    fn write(&mut self, which: &str) {
        let entry = self.keys[which].clone();
        // KEYS.json gives no value for the Redis store: its formats are
        // those of cache/redis-store.json (`b:1;`, plain digits).
        let fallback = match which {
            "restart_key" => common::now().to_string(),
            _ => "b:1;".to_string(),
        };
        let key = entry["key"].as_str().unwrap();
        let value = entry["value"].as_str().map_or(fallback, str::to_string);
        let value = value.as_str();
        match place(entry["where"].as_str().unwrap()) {
            Place::Redis(db) => self.redis(db, &["SET", key, value]),
            Place::Table => common::sqlite::execute(
                &self.app.join("database/database.sqlite"),
                "INSERT OR REPLACE INTO cache (key, value, expiration) VALUES (?, ?, 2110918398)",
                &[key, value],
            ),
            Place::File => {
                let path = self.app.join("storage").join(key);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, value).unwrap();
            }
        }
    }
}

/// `text` with `var=value` in place of any line setting `var`.
fn set_env(text: &str, var: &str, value: &str) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(&format!("{var}=")) && !l.starts_with(&format!("# {var}=")))
        .map(str::to_string)
        .collect();
    lines.push(format!("{var}={value}"));
    lines.join("\n") + "\n"
}

/// For every recorded `.env` variant, `--env-file` alone (no PHP on the
/// PATH) finds the queue list, its DB and the restart and pause keys
/// Laravel used (`KEYS.json`): a job pushed there runs, the recorded pause
/// value there holds the queue, the recorded restart value there stops
/// the worker; the connection authenticates and selects as the observed
/// trace does. A `config:cache`d app whose `.env` changed since cannot be
/// known from the `.env`: the log says so.
#[test]
fn env_file_alone_derives_the_recorded_keys() {
    let keys = rec::json("laravel12/config/KEYS.json");
    assert_eq!(keys.as_object().unwrap().len(), 16);
    for name in keys.as_object().unwrap().keys() {
        let mut v = Variant::new(name, &keys);
        let queue = v.keys["queue_list_key_for_default"].clone();
        let (key, Place::Redis(db)) = (
            queue["key"].as_str().unwrap(),
            place(queue["where"].as_str().unwrap()),
        ) else {
            panic!("{name}: {queue}");
        };
        let job = Job::laravel13("App\\Jobs\\PlainJob").build();
        v.redis(db, &["RPUSH", key, &job]);
        let auth: &[&str] = if name == "redis-password-set" {
            &["-a", "s3cret", "--no-auth-warning"]
        } else {
            &[]
        };
        let monitor = Monitor::start_as(&v.s, name, auth);
        let mut d = v.work(&["--stop-when-empty", "--sleep=0"]);
        d.expect_exit(0);
        let log = d.stderr_text();
        assert!(log.contains("php is not on the PATH"), "{name}: {log}");
        if name == "config-cached" {
            assert!(log.contains("the app's configuration is cached"), "{log}");
            assert!(
                log.contains("first_key=changed-since-database-queues:default"),
                "{log}"
            );
            assert_eq!(
                v.llen(db, key),
                1,
                "{name}: the cached key is not the .env's"
            );
            continue;
        }
        assert!(log.contains(&format!("first_key={key}")), "{name}: {log}");
        assert_eq!(v.llen(db, key), 0, "{name}: the job ran: {log}");
        let restart = v.keys["restart_key"]["key"].as_str().unwrap().to_string();
        assert!(
            log.contains(&restart),
            "{name}: restart key {restart} in {log}"
        );
        if let (Some(monitor), Some(observed)) = (
            monitor,
            Some(rec::read(&format!(
                "laravel12/config/{name}.observe.monitor.txt"
            ))),
        ) {
            let ours = monitor.stop_after(|| v.redis(0, &["ECHO", "monitor-end"]));
            assert_eq!(
                auth_and_select(&ours, db),
                auth_and_select(&observed, db),
                "{name}"
            );
        }

        // The recorded pause value holds the queue.
        v.write("pause_key_for_redis:default");
        v.redis(db, &["RPUSH", key, &job]);
        v.work(&["--stop-when-empty", "--sleep=0"]).expect_exit(0);
        assert_eq!(v.llen(db, key), 1, "{name}: paused");
        // The recorded restart value stops a running worker.
        let mut d = v.work(&["--sleep=0.05"]);
        d.wait_log(&["worker started"]);
        v.write("restart_key");
        d.expect_stop(0, "restart_signal");
    }
}

/// How a trace's first connection to DB `db` authenticated and selected:
/// the number of AUTH arguments (password, or user and password) and the
/// SELECT it sent.
fn auth_and_select(trace: &str, db: i64) -> (usize, bool) {
    let auth = trace
        .lines()
        .map(rec::monitor_args)
        .find(|a| a.first().is_some_and(|c| c.eq_ignore_ascii_case("auth")))
        .map_or(0, |a| a.len() - 1);
    let select = db == 0
        || trace.lines().map(rec::monitor_args).any(|a| {
            a.first().is_some_and(|c| c.eq_ignore_ascii_case("select"))
                && a.get(1) == Some(&db.to_string())
        });
    (auth, select)
}

/// A cache store of the recordings, set up in a scene.
#[derive(Clone, Copy, Debug)]
enum Store {
    Database,
    Redis,
    File,
}

impl Store {
    /// The scene's daemon config with this store, as the 12.x skeleton
    /// makes it (prefix `laravel-cache-`, no colon).
    fn config(self, s: &Scene) -> std::path::PathBuf {
        let config = s.config().set("redis", "prefix", PREFIX);
        let config = match self {
            Store::Database => {
                let schema = rec::json("laravel12/failed_jobs/schema.json");
                rec::create_tables(&s.path("failed.sqlite"), &schema);
                let url = format!("sqlite://{}", s.path("failed.sqlite").display());
                config.database_cache(&url, CACHE_PREFIX).failed_url(&url)
            }
            Store::Redis => config
                .set("cache", "prefix", CACHE_PREFIX)
                .set("cache", "colon", false),
            Store::File => config.file_cache(&s.path("storage/framework/cache/data")),
        };
        config.recording("").write()
    }

    /// The config of the trace runs: this store, failed_jobs in the
    /// scene's SQLite made from the recorded schema, a short kill grace.
    fn trace_config(self, s: &Scene) -> std::path::PathBuf {
        let schema = rec::json("laravel12/failed_jobs/schema.json");
        let db = s.path("failed.sqlite");
        rec::create_tables(&db, &schema);
        let url = format!("sqlite://{}", db.display());
        let config = s
            .config()
            .set("redis", "prefix", PREFIX)
            .failed_url(&url)
            .kill_grace(1);
        let config = match self {
            Store::Database => config.database_cache(&url, CACHE_PREFIX),
            _ => config
                .set("cache", "prefix", CACHE_PREFIX)
                .set("cache", "colon", false),
        };
        config.script(SCENARIO_HANDLER).write()
    }

    /// Writes what a trace's `queue:restart` left in the store.
    fn load_trace_after(self, s: &Scene, state: &Value) {
        match self {
            Store::Database => rec::load_cache_rows(&s.path("failed.sqlite"), &state["cache"]),
            _ => {
                let mut cache = state["redis"].clone();
                cache.as_object_mut().unwrap().retain(|db, _| db != "0");
                rec::load_redis(s, &cache);
            }
        }
    }

    /// Makes the store hold exactly the recorded `after` state of a step.
    fn load(self, s: &Scene, after: &Value) {
        match self {
            Store::Database => {
                common::sqlite::execute(&s.path("failed.sqlite"), "DELETE FROM cache", &[]);
                rec::load_cache_rows(&s.path("failed.sqlite"), &after["cache"]);
            }
            Store::Redis => {
                let _: () = s.redis.cache(&["FLUSHDB"]);
                rec::load_redis(s, &after["redis"]);
            }
            Store::File => {
                let _ = std::fs::remove_dir_all(s.path("storage"));
                for file in after["files"].as_array().into_iter().flatten() {
                    let path = s.path("storage").join(file["path"].as_str().unwrap());
                    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                    std::fs::write(path, file["content"].as_str().unwrap()).unwrap();
                }
            }
        }
    }
}

/// `queue:restart`, `queue:pause`, `queue:resume`, `queue:pause`,
/// `queue:continue` and `queue:restart` again, as each cache store held
/// them after each command (`cache/*-store.json`: rows with `i:<time>;`
/// and `b:1;`, Redis keys on the cache DB with plain digits, files named
/// by sha1 of the key without the prefix): the daemon stops on each
/// restart and leaves the queue alone exactly while it is paused.
#[test]
fn restart_and_pause_from_the_recorded_cache_entries() {
    for store in [Store::Database, Store::Redis, Store::File] {
        let name = format!("{store:?}").to_lowercase();
        let recorded = rec::json(&format!("laravel12/cache/{name}-store.json"));
        let s = Scene::new();
        let config = store.config(&s);
        let queue = format!("{PREFIX}queues:default");
        for (n, step) in recorded["steps"].as_array().unwrap().iter().enumerate() {
            let command = step["command"].as_str().unwrap();
            if command.contains("queue:restart") {
                let mut d = s.work(&config, &["--sleep=0.05"]);
                d.wait_log(&["worker started"]);
                store.load(&s, &step["after"]);
                d.expect_stop(0, "restart_signal");
                continue;
            }
            store.load(&s, &step["after"]);
            let job = Job::laravel13("App\\Jobs\\PlainJob").build();
            let _: i64 = s.redis.cmd(&["RPUSH", &queue, &job]);
            let paused = command.contains("queue:pause");
            // The pause key is read before the pop with --once too.
            s.run(&config, &["--once", "--sleep=0"]);
            assert_eq!(
                s.redis.llen(&queue),
                i64::from(paused),
                "{name} step {n}: --once"
            );
            let _: i64 = s.redis.cmd(&["RPUSH", &queue, &job]);
            s.run(&config, &["--stop-when-empty", "--sleep=0"]);
            let left = s.redis.llen(&queue);
            assert_eq!(left, 2 * i64::from(paused), "{name} step {n}: {command}");
            let _: i64 = s.redis.cmd(&["DEL", &queue]);
        }
    }
}

/// The handler of the trace scenarios: logs `MODE NAME ATTEMPT`; in run
/// mode sleeps past the job's timeout when `sleep` exists and answers
/// with `answer.json` when it exists (else exit 0: done).
const SCENARIO_HANDLER: &str = "echo \"$LARAVEL_WORKER_MODE $LARAVEL_WORKER_JOB_NAME $LARAVEL_WORKER_ATTEMPT\" >> \"$LOG\"\n\
    [ \"$LARAVEL_WORKER_MODE\" = run ] || exit 0\n\
    if [ -f \"$DIR/sleep\" ]; then sleep 5; fi\n\
    if [ -f \"$DIR/answer.json\" ]; then cp \"$DIR/answer.json\" \"$LARAVEL_WORKER_RESULT\"; fi\n\
    exit 0";

/// The failed_jobs fixture of a scenario that fails its job.
fn failed_fixture(scenario: &str) -> Option<&'static str> {
    Some(match scenario {
        "last-try-failed" => "failed-last-try",
        "timeout-last-attempt" => "failed-timeout",
        "timeout-fail-on-timeout" => "failed-timeout-fail-on-timeout",
        "max-exceptions-exhausted" => "failed-max-exceptions",
        "retry-until-expired" => "failed-retry-until",
        "self-failing" => "failed-self",
        _ => return None,
    })
}

/// What the handler answers in `scenario`, as the recorded job behaved:
/// the recorded exception's class and message, `release(5)`, `fail()`.
fn answer(scenario: &str, state: &Value) -> Option<Value> {
    let thrown = |state: &Value| {
        let row = state["failed_jobs"]
            .as_array()
            .and_then(|r| r.first())
            .cloned();
        let line = row.map_or("RuntimeException: flaky".to_string(), |r| {
            rec::first_line(r["exception"].as_str().unwrap())
        });
        let (class, message) = line.split_once(": ").unwrap();
        json!({"action": "exception", "class": class, "message": message})
    };
    match scenario {
        "release-backoff"
        | "last-try-failed"
        | "max-exceptions-first"
        | "max-exceptions-exhausted" => Some(thrown(state)),
        "release-explicit" => Some(json!({"action": "release", "delay": 5})),
        "self-failing" => {
            let mut a = thrown(state);
            a["action"] = json!("fail");
            a["reason"] = a["message"].clone();
            Some(a)
        }
        _ => None,
    }
}

/// The recorded run's "now": the first time stamp of its raw trace
/// (`None` when the worker sent no command, as with a paused queue and
/// the database store).
fn recorded_now(raw: &str) -> Option<f64> {
    raw.lines()
        .find_map(|l| l.split(' ').next()?.parse::<f64>().ok())
        .map(f64::floor)
}

/// Shifts every zset score of a recorded `redis` state by `by` seconds.
fn shift_scores(redis: &mut Value, by: f64) {
    for keys in redis
        .as_object_mut()
        .into_iter()
        .flat_map(|m| m.values_mut())
    {
        for entry in keys
            .as_object_mut()
            .into_iter()
            .flat_map(|m| m.values_mut())
        {
            if entry["type"] == "zset" {
                for pair in entry["value"].as_array_mut().into_iter().flatten() {
                    pair[1] = json!(pair[1].as_f64().unwrap() + by);
                }
            }
        }
    }
}

/// One trace scenario run by the daemon with `store`'s cache.
struct TraceRun {
    s: Scene,
    state: Value,
    now: f64,
    /// Seconds the run took: a score the daemon wrote may be that much
    /// later than `now` plus the recorded delay.
    slack: f64,
    ours: String,
    recorded: String,
    raw: String,
}

fn run_trace(scenario: &str, store: Store) -> Option<TraceRun> {
    let base = format!(
        "laravel12/traces/{scenario}.{}-cache",
        format!("{store:?}").to_lowercase()
    );
    let state = rec::json(&format!("{base}.state.json"));
    let raw = rec::read(&format!("{base}.monitor.txt"));
    let recorded = rec::read(&format!("{base}.normalized.txt"));
    // normalize.py turns the recorded raw trace into the normalized one:
    // the daemon's trace goes through the same script.
    let normalized = rec::normalize(&raw)?;
    assert_eq!(normalized, recorded, "{base}: normalize.py");
    let s = Scene::new();
    let config = store.trace_config(&s);
    let now = common::now() as f64;
    let shift = now - recorded_now(&raw).unwrap_or(now);
    let mut before = state["before"]["redis"].clone();
    shift_scores(&mut before, shift);
    rec::load_redis(&s, &before);
    if let Store::Database = store {
        rec::load_cache_rows(&s.path("failed.sqlite"), &state["before"]["cache"]);
        for lock in state["before"]["cache_locks"]
            .as_array()
            .into_iter()
            .flatten()
        {
            common::sqlite::execute(
                &s.path("failed.sqlite"),
                "INSERT INTO cache_locks (key, owner, expiration) VALUES (?, ?, ?)",
                &[
                    lock["key"].as_str().unwrap(),
                    lock["owner"].as_str().unwrap(),
                    &(now as i64 + 3600).to_string(),
                ],
            );
        }
    }
    if let Some(answer) = answer(scenario, &state) {
        std::fs::write(s.path("answer.json"), answer.to_string()).unwrap();
    }
    if scenario.starts_with("timeout") {
        s.touch("sleep");
    }
    let monitor = Monitor::start(&s, scenario)?;
    let args: Vec<&str> = state["worker"]["argv"].as_array().unwrap()[4..]
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    if scenario == "restart-stop" {
        let mut d = s.work(&config, &args);
        d.wait_log(&["worker started"]);
        store.load_trace_after(&s, &state);
        d.expect_stop(0, "restart_signal");
    } else {
        s.run(&config, &args);
    }
    let slack = common::now() as f64 - now;
    let ours = rec::normalize(&monitor.stop(&s))?;
    Some(TraceRun {
        s,
        state,
        now,
        slack,
        ours,
        recorded,
        raw,
    })
}

/// Asserts that two comparable `redis` states hold the same keys, types
/// and members, scores within a second.
fn assert_same_redis(expected: &Value, ours: &Value, slack: f64, what: &str) {
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .into_iter()
            .flat_map(|dbs| {
                dbs.iter().flat_map(|(db, keys)| {
                    keys.as_object()
                        .unwrap()
                        .keys()
                        .map(move |k| format!("{db} {k}"))
                })
            })
            .collect()
    };
    assert_eq!(
        keys(ours),
        keys(expected),
        "{what}: keys\nours: {ours:#}\nrecorded: {expected:#}"
    );
    for (db, dbkeys) in expected.as_object().unwrap() {
        for (key, entry) in dbkeys.as_object().unwrap() {
            let our = &ours[db][key];
            assert_eq!(our["type"], entry["type"], "{what}: {key}");
            if entry["type"] != "zset" {
                assert_eq!(our["value"], entry["value"], "{what}: {key}");
                continue;
            }
            let (a, b) = (
                our["value"].as_array().unwrap(),
                entry["value"].as_array().unwrap(),
            );
            assert_eq!(a.len(), b.len(), "{what}: {key}");
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x[0], y[0], "{what}: {key} member");
                let (sx, sy) = (x[1].as_f64().unwrap(), y[1].as_f64().unwrap());
                assert!(
                    sx >= sy - 1.0 && sx <= sy + slack + 1.0,
                    "{what}: {key} score {sx} vs recorded {sy} (run took {slack} s)"
                );
            }
        }
    }
}

/// The recorded failed_jobs rows of `scenario` (from `failed_jobs/`),
/// compared with ours: connection, queue, the payload byte for byte (as it
/// was before the pop counted the attempt), the exception's first line.
fn assert_failed_rows(run: &TraceRun, scenario: &str, store: Store) {
    let ours = run.s.failed_rows();
    if scenario == "chain-next" {
        // queue:work pushed the chain's next job (its recorded trace);
        // a process handler with no PHP bridge configured cannot, so the
        // step fails loudly before it runs, saying what to configure,
        // rather than dropping the chain (whole_chains.rs runs it through
        // the bridge).
        assert_eq!(ours.len(), 1, "{scenario}: {ours:?}");
        assert!(
            ours[0]
                .exception
                .starts_with("LaravelWorker\\NoBridgeException"),
            "{scenario}: {ours:?}"
        );
        return;
    }
    let Some(fixture) = failed_fixture(scenario) else {
        assert!(ours.is_empty(), "{scenario}: {ours:?}");
        return;
    };
    let recorded = rec::json(&format!("laravel12/failed_jobs/{fixture}.json"));
    let rows = match store {
        Store::Database => &recorded["rows"],
        _ => &recorded["rows_from_the_redis_cache_store_run"],
    };
    let rows = rows.as_array().unwrap();
    assert_eq!(
        rows,
        run.state["failed_jobs"].as_array().unwrap(),
        "{fixture} and the state file agree"
    );
    assert_eq!(ours.len(), rows.len(), "{scenario}");
    for (our, row) in ours.iter().zip(rows) {
        assert_eq!(our.uuid, row["uuid"].as_str().unwrap(), "{scenario}");
        assert_eq!(
            our.connection,
            row["connection"].as_str().unwrap(),
            "{scenario}"
        );
        assert_eq!(our.queue, row["queue"].as_str().unwrap(), "{scenario}");
        assert_eq!(
            our.payload,
            row["payload"].as_str().unwrap(),
            "{scenario}: payload"
        );
        let expected = rec::first_line(row["exception"].as_str().unwrap());
        assert_eq!(
            rec::first_line(&our.exception),
            expected,
            "{scenario}: exception"
        );
    }
}

/// Every trace scenario with `store`: the daemon's Redis commands write
/// the keys queue:work's do, and leave the recorded Redis state, cache
/// rows and failed_jobs rows, but for the differences named in
/// [`deliberate`].
fn traces_match_in_effect(store: Store) {
    let mut scenarios: Vec<String> =
        rec::files_in("laravel12/traces", ".database-cache.state.json")
            .into_iter()
            .map(|f| {
                f.rsplit('/')
                    .next()
                    .unwrap()
                    .split('.')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
    scenarios.sort();
    assert_eq!(scenarios.len(), 17);
    let mut failures = vec![];
    for scenario in &scenarios {
        let result = std::panic::catch_unwind(|| check_trace(scenario, store));
        if let Err(e) = result {
            let text = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!(
                "{scenario}: {}",
                text.chars().take(3000).collect::<String>()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenarios differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// One trace scenario (see [`traces_match_in_effect`]).
fn check_trace(scenario: &str, store: Store) {
    {
        let Some(run) = run_trace(scenario, store) else {
            return;
        };
        let what = format!("{scenario} ({store:?} cache)");
        let mut expected = rec::comparable_redis(
            &run.state["redis"],
            recorded_now(&run.raw).unwrap_or(run.now),
        );
        let mut written = rec::written_keys(&run.recorded);
        deliberate(&run, scenario, &mut expected, &mut written);
        let ours = rec::redis_state(&run.s, run.now);
        assert_same_redis(&expected, &ours, run.slack, &what);
        assert_eq!(
            rec::written_keys(&run.ours),
            written,
            "{what}: keys written\nours:\n{}",
            run.ours
        );
        assert_failed_rows(&run, scenario, store);
        // The migrations ask for the same due members, with 12.x's limit
        // argument (`limit 0 -1`). `<NOW-1>` is `<NOW>` from a monitor line
        // stamped a second after the script's clock was read.
        let migrations = |trace: &str| -> BTreeSet<String> {
            trace
                .lines()
                .filter(|l| l.contains("] \"zrangebyscore\""))
                .map(|l| same_second(&l[l.find(']').unwrap()..]))
                .collect()
        };
        assert!(
            migrations(&run.ours).is_superset(&migrations(&run.recorded)),
            "{what}: migrations\nours:\n{}",
            run.ours
        );
        if scenario.starts_with("max-exceptions") {
            assert_counter_as_recorded(&run, scenario, store);
        }
        if let Store::Database = store {
            let locks: Vec<String> = run.state["cache_locks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["key"].as_str().unwrap().to_string())
                .collect();
            let ours = common::sqlite::strings(
                &run.s.path("failed.sqlite"),
                "SELECT key FROM cache_locks ORDER BY key",
            );
            assert_eq!(ours, locks, "{what}: cache_locks");
            let recorded: Vec<String> = run.state["cache"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    format!(
                        "{}={}",
                        r["key"].as_str().unwrap(),
                        r["value"].as_str().unwrap()
                    )
                })
                .collect();
            assert_eq!(
                rec::cache_rows(&run.s.path("failed.sqlite")),
                recorded,
                "{what}: cache rows"
            );
        }
    }
}

/// The differences named in `docs/src/differences.md`, applied to what
/// queue:work left, so that the test asserts the daemon's documented
/// behaviour.
fn deliberate(
    run: &TraceRun,
    scenario: &str,
    expected: &mut Value,
    written: &mut BTreeSet<String>,
) {
    let queue = format!("{PREFIX}queues:default");
    // A process handler's ShouldBeUnique lock is released by the worker
    // from the payload's context, where queue:work released it (a `DEL` on
    // the lock connection, or the `cache_locks` row): no difference left.
    // The lock the recording's dispatch left is the one the payload names.
    if scenario == "unique"
        && let Some((key, _)) = unique_lock(run)
    {
        assert!(written.contains(&format!("0 {key}")), "{written:?}");
    }
    let db0 = expected.get_mut("0").and_then(Value::as_object_mut);
    match (scenario, db0) {
        // A process handler does not dispatch a chain's next job (the PHP
        // bridge's finish mode does, through Laravel's own code); without
        // a bridge the step fails (see `assert_failed_rows`).
        ("chain-next", Some(db0)) => {
            db0.remove(&queue);
            db0.remove(&format!("{queue}:notify"));
        }
        // A timeout with tries left: queue:work leaves the job reserved
        // until retry_after (and kills itself); the daemon kills only the
        // handler and releases the job at once (backoff 0).
        ("timeout-first-attempt", Some(db0)) => {
            let mut reserved = db0.remove(&format!("{queue}:reserved")).unwrap();
            reserved["value"][0][1] = json!(0.0);
            db0.insert(format!("{queue}:delayed"), reserved);
            written.insert(format!("0 {queue}:delayed"));
        }
        _ => {}
    }
    if expected
        .get("0")
        .and_then(Value::as_object)
        .is_some_and(|m| m.is_empty())
    {
        expected.as_object_mut().unwrap().remove("0");
    }
}

#[test]
fn traces_match_in_effect_with_the_database_cache() {
    traces_match_in_effect(Store::Database);
}

#[test]
fn traces_match_in_effect_with_the_redis_cache() {
    traces_match_in_effect(Store::Redis);
}

/// The unique lock of the `unique` scenario as the dispatch left it in
/// the Redis store (`cache/unique-lock.json`): on the lock connection (DB
/// 0) under the Redis and cache prefixes, named
/// `laravel_unique_job:{class}:{uniqueId}` (12.x: a colon before the id),
/// the name the payload carries in `illuminate:log:context.hidden`. `None`
/// for the database store (its lock is a `cache_locks` row).
fn unique_lock(run: &TraceRun) -> Option<(String, Value)> {
    let recorded = rec::json("laravel12/cache/unique-lock.json");
    let payload: Value =
        serde_json::from_str(rec::read("laravel12/payloads/unique.json").as_str()).unwrap();
    let hidden = &payload["illuminate:log:context"]["hidden"];
    let name = "laravel_unique_job:App\\Jobs\\UniqueJob:k";
    assert_eq!(
        hidden["laravel_unique_job_key"],
        json!(format!("s:{}:\"{name}\";", name.len()))
    );
    let db_lock = &recorded["database"]["after_dispatch"]["cache_locks"][0]["key"];
    assert_eq!(db_lock, &json!(format!("{CACHE_PREFIX}{name}")));
    let key = format!("{PREFIX}{CACHE_PREFIX}{name}");
    let in_db0 = &recorded["redis"]["after_dispatch"]["redis_non_queue_keys"]["0"][&key];
    assert_eq!(in_db0["type"], "string", "{recorded:#}");
    let before = run.state["before"]["redis"]["0"].get(&key)?;
    Some((key, json!({"type": "string", "value": before["value"]})))
}

/// The `$maxExceptions` counter after each exception, as
/// `cache/job-exceptions.json` shows it per store (same run and uuid as
/// the traces): `job-exceptions:UUID` = `i:1;` in the table, plain digits
/// in Redis DB 1, forgotten after the second exception. The daemon's
/// store holds exactly that.
fn assert_counter_as_recorded(run: &TraceRun, scenario: &str, store: Store) {
    let recorded = rec::json("laravel12/cache/job-exceptions.json");
    let step = if scenario.ends_with("first") {
        "after_first_exception"
    } else {
        "after_second_exception"
    };
    let (expected, ours): (Vec<String>, Vec<String>) = match store {
        Store::Database => {
            let rows = recorded["database"][step]["table cache"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let rows = rows.iter().map(|r| {
                format!(
                    "{}={}",
                    r["key"].as_str().unwrap(),
                    r["value"].as_str().unwrap()
                )
            });
            let ours = rec::cache_rows(&run.s.path("failed.sqlite"));
            (
                rows.collect(),
                ours.into_iter()
                    .filter(|r| r.contains("job-exceptions:"))
                    .collect(),
            )
        }
        _ => {
            let keys = recorded["redis"][step]["redis db 1"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let keys = keys
                .iter()
                .map(|(k, v)| format!("{k}={}", v["value"].as_str().unwrap()));
            let ours = run
                .s
                .redis
                .keys(1)
                .into_iter()
                .filter(|k| k.contains("job-exceptions:"));
            let ours = ours.map(|k| format!("{k}={}", run.s.redis.cache::<String>(&["GET", &k])));
            (keys.collect(), ours.collect())
        }
    };
    assert_eq!(ours, expected, "{scenario}: the exception counter");
}

/// A batch's row as the recordings compare it: pending, failed, failed
/// job ids, cancelled, finished.
fn batch_counters(row: &Value) -> (i64, i64, usize, bool, bool) {
    let ids: Vec<Value> = serde_json::from_str(row["failed_job_ids"].as_str().unwrap()).unwrap();
    (
        row["pending_jobs"].as_i64().unwrap(),
        row["failed_jobs"].as_i64().unwrap(),
        ids.len(),
        !row["cancelled_at"].is_null(),
        !row["finished_at"].is_null(),
    )
}

/// `job_batches` counters through a batch's life when its jobs run
/// through the PHP bridge, one `work --once` at a time, as the recordings
/// show them for `queue:work --once` (`failed_jobs/batch-*.json`):
/// pending and failed counts, failed job ids, cancelled_at and
/// finished_at, and the callbacks' order and counters. The bridge runs
/// here on Debian's Laravel 8.83 (the test app in `tests/laravel/`), whose
/// batch bookkeeping the recorded 12.67 rows are compared with.
#[test]
fn batch_counters_move_as_recorded() {
    for name in ["batch-ok", "batch-fails", "batch-allow-failures"] {
        let recorded = rec::json(&format!("laravel12/failed_jobs/{name}.json"));
        let s = Scene::new();
        let Some(app) = common::laravel::App::new(&s) else {
            return;
        };
        let db = s.path("failed.sqlite");
        // The 12.x skeleton's job_batches columns (8.x has the same).
        let schema = rec::json("laravel12/failed_jobs/schema.json");
        rec::create_tables(&db, &json!({"job_batches": schema["job_batches"]}));
        let config = app.config(&s, common::laravel::Transport::PerJob);
        app.dispatch(json!([recorded["spec"]]));
        for (n, snapshot) in recorded["snapshots"].as_array().unwrap().iter().enumerate() {
            if n > 0 {
                s.run(&config, &["--once", "--sleep=0"]);
            }
            let rows = common::sqlite::batches(&db);
            assert_eq!(rows.len(), 1, "{name}");
            let ours = (
                rows[0].pending_jobs,
                rows[0].failed_jobs,
                rows[0].failed_job_ids,
                rows[0].cancelled,
                rows[0].finished,
            );
            let expected = batch_counters(&snapshot["job_batches"][0]);
            assert_eq!(ours, expected, "{name}: after {}", snapshot["after"]);
        }
        let summary = |log: &[Value]| -> Vec<String> {
            log.iter()
                .map(|r| {
                    format!(
                        "{} {} {} {} {}",
                        r["event"], r["tag"], r["pending"], r["failed"], r["skipped"]
                    )
                })
                .collect()
        };
        let expected = summary(recorded["job_log"].as_array().unwrap());
        assert_eq!(summary(&app.records()), expected, "{name}: job log");
        assert_eq!(
            s.failed_rows().len(),
            recorded["failed_jobs"].as_array().unwrap().len(),
            "{name}"
        );
    }
}

/// `text` with every relative time token (`<NOW+1>`, `<NOW-1>`) read as
/// `<NOW>`: the normalizer counts from each monitor line's own second.
fn same_second(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("<NOW") {
        out.push_str(&rest[..at]);
        out.push_str("<NOW>");
        rest = &rest[at..];
        rest = rest.find('>').map_or("", |end| &rest[end + 1..]);
    }
    out.push_str(rest);
    out
}

/// The queue connection and its database, from `--env-file` alone, as the
/// real Laravel 12.67 resolved them for each recorded `.env` variant.
/// Every variant was recorded with `QUEUE_CONNECTION=redis` (`queue.default`
/// = `redis`): the worker stays on Redis. None was recorded on the
/// skeleton's own `QUEUE_CONNECTION=database`; put back, the database
/// queue's database is the default connection Laravel resolved
/// (`database.connections.sqlite`, below the app's root, as recorded), and
/// the failed store and a database cache store (`connection => null`) use
/// the same file.
#[test]
fn env_file_alone_resolves_the_recorded_queue_connection() {
    use laravel_worker::config::{
        CacheSettings, FailedSettings, Layer, QueueDriverSettings, Settings, dotenv, merge_sources,
    };
    let keys = rec::json("laravel12/config/KEYS.json");
    assert_eq!(keys.as_object().unwrap().len(), 16);
    for name in keys.as_object().unwrap().keys() {
        let recorded = rec::json(&format!("laravel12/config/{name}.json"));
        let config = &recorded["config"];
        let env = recorded["env_file"].as_str().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let app = std::fs::canonicalize(dir.path()).unwrap();
        // Resolved without the process environment: only the `.env` speaks.
        let resolve = |env: &str| {
            std::fs::write(app.join(".env"), env).unwrap();
            let dotenv = dotenv::layer(&app.join(".env")).unwrap();
            Settings::resolve(
                merge_sources(
                    None,
                    dotenv,
                    Layer::default(),
                    Layer::default(),
                    Layer::default(),
                )
                .unwrap(),
            )
            .unwrap()
        };

        let s = resolve(env);
        assert_eq!(config["queue.default"], "redis", "{name}");
        assert_eq!(s.driver, QueueDriverSettings::Redis, "{name}");
        assert_eq!(s.connection, "redis", "{name}");

        let s = resolve(&set_env(env, "QUEUE_CONNECTION", "database"));
        let QueueDriverSettings::Database(spec) = &s.driver else {
            panic!("{name}: {:?}", s.driver);
        };
        // The recorded app's root, from its file cache store's directory.
        let root = config["cache"]["stores"]["file"]["path"]
            .as_str()
            .unwrap()
            .strip_suffix("/storage/framework/cache/data")
            .unwrap();
        assert_eq!(config["database.default"], "sqlite", "{name}");
        let file = config["database.connections.sqlite"]["database"]
            .as_str()
            .unwrap();
        let ours = format!(
            "sqlite://{}",
            app.join(file.strip_prefix(&format!("{root}/")).unwrap())
                .display()
        );
        assert_eq!(spec.url, ours, "{name}");
        assert_eq!(
            (spec.table.as_str(), spec.retry_after),
            ("jobs", 90),
            "{name}"
        );
        assert_eq!(
            (s.connection.as_str(), s.default_queue.as_str()),
            ("database", "default")
        );
        assert_eq!(config["queue.failed"]["database"], "sqlite", "{name}");
        assert_eq!(
            s.failed,
            FailedSettings::Database {
                url: ours.clone(),
                table: "failed_jobs".into()
            },
            "{name}"
        );
        if config["cache"]["default"] == "database" {
            assert_eq!(
                config["cache"]["stores"]["database"]["connection"],
                Value::Null
            );
            let CacheSettings::Database { url, .. } = &s.cache else {
                panic!("{name}: {:?}", s.cache);
            };
            assert_eq!(url, &ours, "{name}");
        }
    }
}
