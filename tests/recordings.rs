//! Laravel 11–12 parity, checked against what a real Laravel 12.67 did
//! (`../shared/fixtures/laravel12`, read in place) and payloads of newer
//! versions (`../shared/fixtures/newer-payloads`): the daemon, on a real
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

mod common;

use std::collections::BTreeSet;
use std::path::Path;

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
    // Every scenario of the README's table has its trace files, and every
    // file the newer-payloads README names is there.
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
    let newer = rec::read("newer-payloads/README.md");
    for file in all
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

/// Every payload of `payloads/` and `newer-payloads/`, pushed onto its
/// recorded key (a delayed one made due), is reserved, handed to the
/// handler with its displayName, attempt and queue, its `data.command`
/// decoded (unless encrypted or JSON), and deleted: nothing is left.
#[test]
fn every_recorded_payload_is_reserved_run_and_settled() {
    let s = Scene::new();
    let config = s
        .config()
        .set("redis", "prefix", PREFIX)
        .script(KEEP_COMMAND)
        .write();
    let mut all = recorded_payloads();
    all.extend(newer_payloads());
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
        assert!(
            log.contains("php is not on the PATH") || !v.app.join("artisan").exists(),
            "{log}"
        );
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
            Store::Redis => config.set("cache", "prefix", CACHE_PREFIX).set("cache", "colon", false),
            Store::File => config.file_cache(&s.path("storage/framework/cache/data")),
        };
        config.recording("").write()
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
            s.run(&config, &["--stop-when-empty", "--sleep=0"]);
            let paused = command.contains("queue:pause");
            let left = s.redis.llen(&queue);
            assert_eq!(left, i64::from(paused), "{name} step {n}: {command}");
            let _: i64 = s.redis.cmd(&["DEL", &queue]);
        }
    }
}
