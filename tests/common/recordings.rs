//! The recordings of a real Laravel 12.67 run (`tests/fixtures/laravel12`,
//! this project's own data, kept in the repository), payloads of newer
//! versions (`../shared/fixtures/newer-payloads` beside the repository:
//! strings from other projects' test suites, read in place and never
//! copied in), and the tools to compare the daemon with them: a `redis-cli monitor` of the scene's
//! server, the recordings' own `normalize.py`, Redis and SQLite state in
//! the recordings' `state.json` shape.
//!
//! [`USES`] is the one registry of which test reads which fixture file:
//! [`read`] refuses a file its test has not registered, and
//! `tests/integration/recordings.rs` fails on a fixture file no test registers
//! and on a registered test no file of `tests/integration/` has.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use super::Scene;

/// What both trace tests (database and Redis cache store) read.
const TRACE_FILES: &[&str] = &[
    "laravel12/traces/",
    "laravel12/normalize.py",
    "laravel12/failed_jobs/schema.json",
    "laravel12/failed_jobs/failed-",
    "laravel12/cache/job-exceptions.json",
    "laravel12/cache/unique-lock.json",
    "laravel12/payloads/unique.json",
];

/// Which test reads which fixture files: a path as [`path`] takes it
/// (`laravel12/...` or `newer-payloads/...`), or a folder ending in `/`
/// for every file in it.
pub const USES: &[(&str, &[&str])] = &[
    (
        "a_process_handler_s_unique_job_has_its_redis_lock_released",
        &["laravel12/payloads/unique.json"],
    ),
    (
        "a_released_job_keeps_its_lock_and_until_processing_is_released_before_the_run",
        &["laravel12/payloads/unique.json"],
    ),
    (
        "a_database_store_lock_is_released_from_cache_locks",
        &["laravel12/payloads/unique.json"],
    ),
    (
        "the_php_bridge_s_jobs_are_never_booked_twice",
        &["laravel12/payloads/unique.json"],
    ),
    (
        "every_fixture_file_is_used_by_a_test",
        &["laravel12/README.md"],
    ),
    (
        "every_newer_payload_is_described",
        &["newer-payloads/README.md"],
    ),
    (
        "every_recorded_payload_is_reserved_run_and_settled",
        &["laravel12/payloads/", "laravel12/traces/dispatch/"],
    ),
    (
        "every_newer_payload_is_reserved_run_and_settled",
        &["newer-payloads/"],
    ),
    (
        "env_file_alone_derives_the_recorded_keys",
        &["laravel12/config/", "laravel12/failed_jobs/schema.json"],
    ),
    (
        "env_file_alone_resolves_the_recorded_queue_connection",
        &["laravel12/config/"],
    ),
    (
        "restart_and_pause_from_the_recorded_cache_entries",
        &[
            "laravel12/failed_jobs/schema.json",
            "laravel12/cache/database-store.json",
            "laravel12/cache/redis-store.json",
            "laravel12/cache/file-store.json",
        ],
    ),
    (
        "traces_match_in_effect_with_the_database_cache",
        TRACE_FILES,
    ),
    ("traces_match_in_effect_with_the_redis_cache", TRACE_FILES),
    (
        "handlers_get_the_body_as_laravel_wrote_it",
        &["laravel12/payloads/plain.json"],
    ),
    (
        "batch_counters_move_as_recorded",
        &[
            "laravel12/failed_jobs/batch-",
            "laravel12/failed_jobs/schema.json",
        ],
    ),
];

/// The folder of the newer payloads: other projects' strings, kept
/// outside the repository.
const NEWER: &str = "newer-payloads";

/// `tests/fixtures` in the repository: the Laravel 12.67 recordings.
fn own_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `../shared/fixtures` beside the repository, where `newer-payloads/` is
/// looked for.
fn outside_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")
}

/// Where fixture `rel` is: `newer-payloads/...` beside the repository,
/// everything else under `tests/fixtures`.
pub fn path(rel: &str) -> PathBuf {
    let top = rel.split('/').next().unwrap_or_default();
    let root = if top == NEWER {
        outside_root()
    } else {
        own_root()
    };
    root.join(rel)
}

/// Whether `../shared/fixtures/newer-payloads` is there. When it is not,
/// the caller skips (a printed reason, see `skip::note`); under `CI=true`
/// this panics instead, so a CI run cannot pass without those payloads.
#[track_caller]
pub fn have_newer_payloads() -> bool {
    let dir = path(NEWER);
    if dir.is_dir() {
        return true;
    }
    let why = format!(
        "{} is absent: the newer payloads (other projects' strings, kept outside the repository) are not run",
        dir.display()
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: {why}"
    );
    super::skip::note("newer-payloads", &why);
    false
}

/// Whether the registry entry `entry` covers `rel`.
fn covers(entry: &str, rel: &str) -> bool {
    rel == entry || (!entry.ends_with(".json") && !entry.ends_with(".md") && rel.starts_with(entry))
}

/// Whether `test` registered `rel` in [`USES`].
fn registered(test: &str, rel: &str) -> bool {
    USES.iter()
        .any(|(name, paths)| *name == test && paths.iter().any(|p| covers(p, rel)))
}

/// The current test's name (the thread's, without the module path).
fn current_test() -> String {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("?");
    name.rsplit("::").next().unwrap_or(name).to_string()
}

/// The text of fixture `rel`; panics when the current test has not
/// registered it in [`USES`].
#[track_caller]
pub fn read(rel: &str) -> String {
    let test = current_test();
    assert!(
        registered(&test, rel),
        "{test} reads {rel} without registering it in common::recordings::USES"
    );
    std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Fixture `rel` as JSON (see [`read`]).
#[track_caller]
pub fn json(rel: &str) -> Value {
    let text = read(rel);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every fixture file as [`path`] takes it, sorted: the recordings, and
/// the newer payloads when they are there.
pub fn all_files() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else {
                let rel = path.strip_prefix(base).unwrap();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = vec![];
    walk(&path("laravel12"), &own_root(), &mut out);
    if path(NEWER).is_dir() {
        walk(&path(NEWER), &outside_root(), &mut out);
    }
    out.sort();
    out
}

/// The fixture files no test registers.
pub fn unused() -> Vec<String> {
    all_files()
        .into_iter()
        .filter(|rel| {
            !USES
                .iter()
                .any(|(_, paths)| paths.iter().any(|p| covers(p, rel)))
        })
        .collect()
}

/// The files directly in fixture folder `dir` whose names end in
/// `suffix`, as [`path`] takes them, sorted.
pub fn files_in(dir: &str, suffix: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(path(dir))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.ends_with(suffix).then(|| format!("{dir}/{name}"))
        })
        .collect();
    out.sort();
    out
}

/// `redis-cli monitor` on the scene's server, writing to a file.
pub struct Monitor {
    child: Child,
    out: PathBuf,
}

impl Monitor {
    /// Starts the monitor and waits for its `OK`; `None` (after a skip
    /// note) without redis-cli.
    pub fn start(s: &Scene, name: &str) -> Option<Monitor> {
        Self::start_as(s, name, &[])
    }

    /// As [`Monitor::start`], with more redis-cli arguments (`-a PASSWORD`).
    pub fn start_as(s: &Scene, name: &str, more: &[&str]) -> Option<Monitor> {
        if !super::skip::have("redis-cli", "the daemon's Redis commands are not compared") {
            return None;
        }
        let out = s.path(&format!("{name}.monitor.txt"));
        let file = std::fs::File::create(&out).unwrap();
        let child = Command::new("redis-cli")
            .arg("-s")
            .arg(&s.redis.socket)
            .args(more)
            .arg("monitor")
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let monitor = Monitor { child, out };
        super::wait_until("redis-cli monitor to start", || {
            monitor.text().starts_with("OK")
        });
        Some(monitor)
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Stops the monitor after a last marker command has reached it and
    /// returns the trace up to that marker.
    pub fn stop(self, s: &Scene) -> String {
        self.stop_after(|| {
            let _: String = s.redis.cmd(&["ECHO", "monitor-end"]);
        })
    }

    /// As [`Monitor::stop`], with `echo` sending `ECHO monitor-end`.
    pub fn stop_after(mut self, echo: impl FnOnce()) -> String {
        echo();
        super::wait_until("the monitor's end marker", || {
            self.text().contains("\"monitor-end\"")
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = self.text();
        let end = text.find("\"monitor-end\"").unwrap_or(text.len());
        let end = text[..end].rfind('\n').map_or(0, |n| n + 1);
        text[..end].to_string()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `trace` through the recordings' `normalize.py`; `None` (after a skip
/// note) without python3.
pub fn normalize(trace: &str) -> Option<String> {
    if !super::skip::have("python3", "traces are not normalized and compared") {
        return None;
    }
    use std::io::Write;
    let script = path("laravel12/normalize.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(trace.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "normalize.py failed");
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The Redis commands that change data, as named in a monitor trace.
const WRITES: &[&str] = &[
    "zadd",
    "zrem",
    "zremrangebyrank",
    "rpush",
    "lpush",
    "lpop",
    "del",
    "set",
    "setex",
    "incrby",
    "incr",
    "expire",
    "unlink",
];

/// The arguments of one monitor line, unquoted (monitor escapes `"` and
/// `\` with a backslash, other bytes as `\xNN`).
pub fn monitor_args(line: &str) -> Vec<String> {
    let mut args = vec![];
    let Some(at) = line.find("] ") else {
        return args;
    };
    let mut bytes = line.as_bytes()[at + 2..].iter().copied();
    while let Some(b) = bytes.next() {
        if b != b'"' {
            continue;
        }
        let mut arg = vec![];
        while let Some(b) = bytes.next() {
            match b {
                b'"' => break,
                b'\\' => match bytes.next() {
                    Some(b'n') => arg.push(b'\n'),
                    Some(b'r') => arg.push(b'\r'),
                    Some(b't') => arg.push(b'\t'),
                    Some(b'x') => {
                        let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                        let hex = String::from_utf8_lossy(&hex).into_owned();
                        arg.push(u8::from_str_radix(&hex, 16).unwrap_or(b'?'));
                    }
                    Some(other) => arg.push(other),
                    None => {}
                },
                other => arg.push(other),
            }
        }
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    args
}

/// The database number of a monitor line (`[N client]`).
fn monitor_db(line: &str) -> Option<String> {
    let start = line.find('[')? + 1;
    let end = start + line[start..].find(' ')?;
    Some(line[start..end].to_string())
}

/// The keys a trace writes, as `db key`, with `notify` lists and what
/// only this worker's scripts touch left out by the caller.
pub fn written_keys(trace: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for line in trace.lines() {
        let args = monitor_args(line);
        let (Some(db), Some(command), Some(key)) = (monitor_db(line), args.first(), args.get(1))
        else {
            continue;
        };
        if WRITES.contains(&command.to_lowercase().as_str()) {
            keys.insert(format!("{db} {key}"));
        }
    }
    keys
}

/// The keys of DB 0 and DB 1 in the recordings' `state.json` shape:
/// `{"0": {key: {"type", "value"}}}`, payload members parsed as JSON, zset
/// scores made relative to `now`.
pub fn redis_state(s: &Scene, now: f64) -> Value {
    let mut dbs = serde_json::Map::new();
    for db in [0, 1] {
        let mut keys = serde_json::Map::new();
        for key in s.redis.keys(db) {
            let kind: String = s.redis.cmd_on(db, &["TYPE", &key]);
            let value = match kind.as_str() {
                "list" => json!(
                    s.redis
                        .cmd_on::<Vec<String>>(db, &["LRANGE", &key, "0", "-1"])
                ),
                "zset" => {
                    let pairs: Vec<(String, f64)> = s
                        .redis
                        .cmd_on(db, &["ZRANGE", &key, "0", "-1", "WITHSCORES"]);
                    json!(pairs)
                }
                _ => json!(s.redis.cmd_on::<String>(db, &["GET", &key])),
            };
            keys.insert(key, json!({"type": kind, "value": value}));
        }
        dbs.insert(db.to_string(), Value::Object(keys));
    }
    comparable_redis(&Value::Object(dbs), now)
}

/// A recorded or observed `redis` state made comparable: members that are
/// JSON parsed (so the key order of the pop script's re-encoding does not
/// matter), scores relative to `now`, `pttl` dropped, empty DBs dropped.
pub fn comparable_redis(redis: &Value, now: f64) -> Value {
    let mut out = BTreeMap::new();
    for (db, keys) in redis.as_object().into_iter().flatten() {
        let mut db_keys = BTreeMap::new();
        for (key, entry) in keys.as_object().into_iter().flatten() {
            let member = |m: &Value| match m.as_str().map(serde_json::from_str::<Value>) {
                Some(Ok(v)) if v.is_object() => v,
                _ => m.clone(),
            };
            let value = match entry["type"].as_str() {
                Some("zset") => entry["value"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|pair| {
                        json!([
                            member(&pair[0]),
                            (pair[1].as_f64().unwrap_or(0.0) - now).round()
                        ])
                    })
                    .collect(),
                Some("list") => entry["value"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(member)
                    .collect(),
                _ => entry["value"].clone(),
            };
            db_keys.insert(key.clone(), json!({"type": entry["type"], "value": value}));
        }
        if !db_keys.is_empty() {
            out.insert(db.clone(), db_keys);
        }
    }
    json!(out)
}

/// Loads a recorded `redis` state (`{"0": {key: {type, value}}}`) into the
/// scene's server, as it was.
pub fn load_redis(s: &Scene, redis: &Value) {
    for (db, keys) in redis.as_object().into_iter().flatten() {
        let db: i64 = db.parse().unwrap();
        for (key, entry) in keys.as_object().into_iter().flatten() {
            let values = entry["value"].as_array().cloned().unwrap_or_default();
            match entry["type"].as_str() {
                Some("list") => {
                    for v in values {
                        let _: i64 = s.redis.cmd_on(db, &["RPUSH", key, v.as_str().unwrap()]);
                    }
                }
                Some("zset") => {
                    for pair in values {
                        let score = pair[1].as_f64().unwrap().to_string();
                        let _: i64 = s
                            .redis
                            .cmd_on(db, &["ZADD", key, &score, pair[0].as_str().unwrap()]);
                    }
                }
                _ => {
                    let value = entry["value"].as_str().unwrap();
                    let _: String = s.redis.cmd_on(db, &["SET", key, value]);
                }
            }
        }
    }
}

/// Creates the tables of `schema` (the recorded `schema.json`: columns
/// per table) in the SQLite file at `path`.
pub fn create_tables(path: &Path, schema: &Value) {
    for (table, columns) in schema.as_object().into_iter().flatten() {
        let cols: Vec<String> = columns
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let pk = if c["pk"] == 1 { " PRIMARY KEY" } else { "" };
                let auto = if pk.is_empty() || c["type"] != "INTEGER" {
                    ""
                } else {
                    " AUTOINCREMENT"
                };
                let default = match c["dflt_value"].as_str() {
                    Some(d) => format!(" DEFAULT {d}"),
                    None => String::new(),
                };
                format!(
                    "\"{}\" {}{pk}{auto}{default}",
                    c["name"].as_str().unwrap(),
                    c["type"].as_str().unwrap()
                )
            })
            .collect();
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS \"{table}\" ({})",
            cols.join(", ")
        );
        super::sqlite::execute(path, &sql, &[]);
    }
}

/// Around when the recordings were made (UNIX seconds, the fixtures'
/// README: "every Unix time in the data ... around 1795558000").
const RECORDED_AROUND: i64 = 1_795_558_000;

/// Inserts the recorded `cache` rows (key, value, expiration). Each row
/// was alive when recorded, so its expiration is moved by the time since
/// the recording: a counter written with a day to live (`job-exceptions`)
/// must not have expired because the test runs a day later.
pub fn load_cache_rows(path: &Path, rows: &Value) {
    let shift = (super::now() - RECORDED_AROUND).max(0);
    for row in rows.as_array().into_iter().flatten() {
        let recorded = row["expiration"].as_i64().unwrap_or(0);
        let expiration = (recorded + shift).to_string();
        super::sqlite::execute(
            path,
            "INSERT INTO cache (key, value, expiration) VALUES (?, ?, ?)",
            &[
                row["key"].as_str().unwrap(),
                row["value"].as_str().unwrap(),
                &expiration,
            ],
        );
    }
}

/// The `cache` rows as `key=value`, sorted.
pub fn cache_rows(path: &Path) -> Vec<String> {
    super::sqlite::strings(path, "SELECT key || '=' || value FROM cache ORDER BY key")
}

/// The first line of a failed row's exception, up to ` in /` (PHP's
/// file and line).
pub fn first_line(exception: &str) -> String {
    let line = exception.lines().next().unwrap_or_default();
    line.split(" in /").next().unwrap_or_default().to_string()
}
