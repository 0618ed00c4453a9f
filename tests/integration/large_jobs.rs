//! Jobs of a megabyte or more: their reserved member is named by length
//! and SHA-1 in the delete, release and renewal scripts instead of being
//! sent back to Redis (see `src/queue/redis_queue/member.rs`). Each path must settle
//! exactly the member it reserved and leave every other one alone.

use crate::common;

use common::state::{Failed, Payload, Score};
use common::{Job, QueueState, Scene};
use serde_json::json;

/// A job whose payload is about `mib` MiB (a `blob` in its data).
fn large(class: &str, mib: usize) -> Job {
    Job::laravel8(class).set(
        "data",
        json!({ "commandName": class, "blob": "y".repeat(mib * 1024 * 1024) }),
    )
}

/// A job whose `data.command` is PHP's `serialize()` text of an
/// `App\Jobs\Big` with `count` properties (`properties`, serialized), and
/// that text.
fn command_job(count: usize, properties: &str) -> (Job, String) {
    let command = format!("O:12:\"App\\Jobs\\Big\":{count}:{{{properties}}}");
    let job = Job::laravel8("App\\Jobs\\Big").set(
        "data",
        json!({ "commandName": "App\\Jobs\\Big", "command": command }),
    );
    (job, command)
}

/// `text` as PHP serializes a string (its length in bytes).
fn php_string(text: &str) -> String {
    format!("s:{}:\"{text}\";", text.len())
}

#[test]
fn a_large_job_that_succeeds_is_deleted() {
    let (s, config) = Scene::recording("exit 0");
    let job = large("App\\Jobs\\Big", 2);
    s.push(&job);

    s.run(&config, &["--once", "--sleep=0"]);
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty());
}

#[test]
fn a_large_job_that_throws_is_released_with_its_attempt_counted() {
    let (s, config) = Scene::recording("exit 1");
    let job = large("App\\Jobs\\Big", 2);
    s.push(&job);

    s.run(
        &config,
        &["--once", "--sleep=0", "--tries=3", "--backoff=30"],
    );
    s.assert_state(QueueState::empty().delayed(Payload::job(&job, 1), Score::In(30)));
}

#[test]
fn a_large_job_that_fails_is_recorded_whole_and_removed() {
    let (s, config) = Scene::recording("exit 1");
    let job = large("App\\Jobs\\Big", 2);
    s.push(&job);

    s.run(&config, &["--once", "--sleep=0", "--tries=1"]);
    let row = Failed::job(&job).payload(Payload::exact(&job));
    s.assert_state(QueueState::empty().failed([row]));
}

/// Two large jobs of the same length reserved in the same second: each
/// settle finds its own member by digest and leaves the other alone.
#[test]
fn large_members_of_the_same_length_are_told_apart() {
    let (s, config) =
        Scene::recording("case \"$LARAVEL_WORKER_JOB_NAME\" in *Fail) exit 1 ;; esac");
    let done = large("App\\Jobs\\Pass", 2);
    let fails = large("App\\Jobs\\Fail", 2);
    assert_eq!(done.build().len(), fails.build().len(), "same length");
    s.push_on("default", [&done, &fails]);

    s.run(
        &config,
        &[
            "--stop-when-empty",
            "--sleep=0",
            "--concurrency=2",
            "--tries=3",
            "--backoff=60",
        ],
    );
    assert_eq!(s.log().len(), 2, "{:?}", s.log());
    s.assert_state(QueueState::empty().delayed(Payload::job(&fails, 1), Score::In(60)));
}

/// A large job that runs past `retry_after` keeps its reservation (the
/// renewal finds the member by digest): a second worker started while it
/// runs takes nothing, and the job is deleted once done.
#[test]
fn a_large_job_longer_than_retry_after_is_renewed_not_reclaimed() {
    let s = Scene::new();
    let config = s.config().recording("sleep 5").retry_after(3).write();
    let job = large("App\\Jobs\\Long", 2);
    s.push(&job);

    let mut first = s.work(&config, &["--once", "--sleep=0", "--json"]);
    first.wait_event("starting");
    let reserved = s.redis.zrange("laravel_database_queues:default:reserved");
    assert_eq!(reserved.len(), 1, "reserved while it runs");
    let first_score = reserved[0].1;
    // Wait until the reservation has been renewed past its first expiry.
    common::wait_until("the reservation to be renewed", || {
        s.redis
            .zrange("laravel_database_queues:default:reserved")
            .first()
            .is_some_and(|(_, score)| *score > first_score)
    });
    let second = s.run(&config, &["--once", "--sleep=0"]);
    drop(second);
    first.expect_exit(0);
    assert_eq!(s.log().len(), 1, "run once: {:?}", s.log());
    s.assert_state(QueueState::empty());
}

/// A large job through a persistent handler: the request is written in
/// parts (the payload escaped a chunk at a time, the command decoded as it
/// is written) and must read as the same JSON line a small one would:
/// the reserved payload whole, every character intact across chunk
/// boundaries, and `data.command` decoded.
#[test]
fn a_large_persistent_request_is_one_exact_json_line() {
    let s = Scene::new();
    let handler = s.script(
        "p.sh",
        "while IFS= read -r line; do\n\
           printf '%s\\n' \"$line\" > \"$DIR/request.json\"\n\
           CALL=${line#\\{\\\"call\\\":}; CALL=${CALL%%,*}\n\
           printf '{\"call\":%s,\"action\":\"done\"}\\n' \"$CALL\" >&3\n\
         done",
    );
    let config = s
        .config()
        .handler(common::Handler::command(&handler).persistent())
        .write();
    // Multi-byte and escaped characters, so chunk cuts fall inside them.
    let blob = "é\"\\/\n\u{1F600}x".repeat(200_000);
    let (job, command) = command_job(1, &format!("s:4:\"blob\";{}", php_string(&blob)));
    s.push(&job);

    s.run(&config, &["--once", "--sleep=0"]);
    let text = std::fs::read_to_string(s.path("request.json")).unwrap();
    assert_eq!(text.matches('\n').count(), 1, "one line");
    let request: serde_json::Value = serde_json::from_str(&text).expect("a JSON line");
    assert!(request["call"].is_u64(), "call first: {}", &text[..80]);
    let payload: serde_json::Value =
        serde_json::from_str(request["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["attempts"], 1, "the reserved copy");
    assert_eq!(payload["uuid"], job.uuid().as_str());
    assert_eq!(
        payload["data"]["command"],
        command.as_str(),
        "payload intact"
    );
    assert_eq!(request["command"]["blob"], blob.as_str(), "command decoded");
    s.assert_state(QueueState::empty());
}

/// A large job through a process handler: its command file (written as the
/// command is decoded, straight from the payload's escaped JSON) holds the
/// whole command, every character intact across the pieces it was written
/// in, and its stdin the reserved payload.
#[test]
fn a_large_command_file_holds_the_whole_command() {
    let s = Scene::new();
    let copy =
        "cat > \"$DIR/stdin.json\"\ncp \"$LARAVEL_WORKER_COMMAND_FILE\" \"$DIR/command.json\"";
    let config = s.config().script(copy).write();
    // Multi-byte and escaped characters, so piece cuts fall inside them.
    let blob = "é\"\\/\n\u{1F600}x\u{0}".repeat(200_000);
    let properties = format!(
        "s:4:\"blob\";{}s:7:\"\0*\0list\";a:2:{{i:0;i:1;i:1;s:1:\"/\";}}",
        php_string(&blob)
    );
    let (job, command) = command_job(2, &properties);
    s.push(&job);

    s.run(&config, &["--once", "--sleep=0"]);
    let file = std::fs::read_to_string(s.path("command.json")).expect("a command file");
    let decoded: serde_json::Value = serde_json::from_str(&file).expect("JSON");
    assert_eq!(decoded["__class"], "App\\Jobs\\Big");
    assert!(decoded["blob"] == blob.as_str(), "blob intact");
    assert_eq!(decoded["list"], json!([1, "/"]));
    let stdin: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.path("stdin.json")).unwrap()).unwrap();
    assert_eq!(stdin["attempts"], 1, "the reserved copy on stdin");
    assert!(
        stdin["data"]["command"] == command.as_str(),
        "payload intact"
    );
    s.assert_state(QueueState::empty());
}

/// A large job failed into the Redis failed store: its record (the payload
/// escaped once more in the record's JSON) is sent in pieces and joined by
/// the store's script. The record holds the exact original, and no piece is
/// left behind.
#[test]
fn a_large_job_failed_into_the_redis_store_is_recorded_whole() {
    let (s, config) = Scene::configured(|c| c.recording("exit 1").failed_driver("redis"));
    // Characters the record's JSON escapes again, across the piece cuts.
    let job = Job::laravel8("App\\Jobs\\Big").set(
        "data",
        json!({ "commandName": "App\\Jobs\\Big", "blob": "é\"\\/\n".repeat(400_000) }),
    );
    s.push(&job);

    s.run(&config, &["--once", "--sleep=0", "--tries=1"]);
    let hash = "laravel_database_laravel-worker:failed_jobs";
    let record: String = s.redis.cmd(&["HGET", hash, &job.uuid()]);
    let record: serde_json::Value = serde_json::from_str(&record).expect("a JSON record");
    assert!(
        record["payload"].as_str() == Some(job.build().as_str()),
        "the exact original, whole"
    );
    assert_eq!(record["uuid"], job.uuid().as_str());
    let left: Vec<String> = s
        .redis
        .keys(0)
        .into_iter()
        .filter(|k| k.contains(":incoming:"))
        .collect();
    assert!(left.is_empty(), "pieces left: {left:?}");
}

/// `used_memory` of the scene's Redis, bytes.
fn used_memory(s: &Scene) -> u64 {
    let info: String = s.redis.cmd(&["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

/// Issue 22, item 2: under `maxmemory` with `volatile-ttl`, the pieces the
/// pop sets aside (keys with a TTL) are what Redis evicts first. The limit
/// is half a MiB above what the queued job takes, so the 4 MiB of pieces
/// cannot survive until the worker reads them. The job is read from
/// `:reserved` instead: it runs once, at attempt 1, and the log names the
/// policy.
#[test]
fn a_large_job_whose_pieces_redis_evicted_runs_at_its_first_attempt() {
    let (s, config) = Scene::recording("exit 0");
    let job = large("App\\Jobs\\Big", 2);
    s.push(&job);
    let limit = (used_memory(&s) + 512 * 1024).to_string();
    let _: () = s
        .redis
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    let _: () = s.redis.cmd(&["CONFIG", "SET", "maxmemory", &limit]);

    let run = s.run(&config, &["--once", "--sleep=0", "--tries=1"]);
    assert_eq!(s.log(), vec![job.run_line(1)]);
    s.assert_state(QueueState::empty());
    let evicted = s.redis.cmd::<String>(&["INFO", "stats"]);
    assert!(!evicted.contains("evicted_keys:0\r"), "{evicted}");
    let stderr = run.stderr_text();
    assert!(
        stderr.contains("Redis evicted the pieces of a large job")
            && stderr.contains("maxmemory-policy is volatile-ttl: under maxmemory Redis evicts only keys with a TTL"),
        "{stderr}"
    );
}
