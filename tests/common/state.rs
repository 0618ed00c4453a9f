//! A snapshot of what the queue keys and the failed store hold, so that one
//! `assert_eq!` compares a whole scene with what the test expects, and a
//! failure says which part differs.
//!
//! The snapshot side holds what was read (payload bytes, absolute scores,
//! full exception text). The expected side is built with the same types,
//! some of which match loosely where the tests have always compared
//! loosely: a payload by JSON value or by its uuid, id and `attempts`, a
//! score as "N seconds after a time in a window", an exception by its
//! beginning and some text it contains.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;

use serde_json::Value;

use super::Scene;
use super::payloads::Job;
use super::redis_server::RedisServer;

/// The Redis prefix under the test config (Laravel 8's skeleton); an app of
/// another layout reads its own with [`QueueState::read_prefixed`].
const PREFIX: &str = "laravel_database_";

/// How far (in seconds, either way) from the snapshot's own time a score
/// expected as [`Score::In`] may be, when no window was measured.
pub const SLACK: i64 = 2;

/// A job payload: as read (its bytes), or as expected. Two payloads are
/// equal when the bytes of one match the pattern of the other.
#[derive(Clone)]
pub enum Payload {
    /// The exact bytes (what a snapshot holds).
    Bytes(String),
    /// Any text that parses to this JSON value.
    Json(Value),
    /// A JSON payload whose `uuid`, `id` and `attempts` are these.
    Job {
        uuid: String,
        id: String,
        attempts: i64,
    },
    /// Text containing every one of these.
    Containing(Vec<String>),
    /// Anything (the test does not look at it).
    Any,
}

impl Payload {
    /// `job` byte for byte.
    pub fn exact(job: &Job) -> Self {
        Payload::Bytes(job.build())
    }

    /// `job` as its reserved copy reads: the same JSON with `attempts`
    /// set (the bytes may differ: cjson re-encodes it).
    pub fn reserved(job: &Job, attempts: i64) -> Self {
        Payload::Json(
            serde_json::from_str(&job.clone().set("attempts", attempts.into()).build()).unwrap(),
        )
    }

    /// A payload with `job`'s uuid and id, and `attempts` (other fields
    /// unchecked).
    pub fn job(job: &Job, attempts: i64) -> Self {
        Payload::Job {
            uuid: job.uuid(),
            id: job.id(),
            attempts,
        }
    }

    /// Text that contains every one of `parts`.
    pub fn containing<const N: usize>(parts: [&str; N]) -> Self {
        Payload::Containing(parts.iter().map(|p| p.to_string()).collect())
    }

    fn matches(actual: &str, expected: &Payload) -> bool {
        let parsed = || serde_json::from_str::<Value>(actual).ok();
        match expected {
            Payload::Bytes(b) => actual == b,
            Payload::Json(v) => parsed().as_ref() == Some(v),
            Payload::Job { uuid, id, attempts } => parsed().is_some_and(|p| {
                p["uuid"].as_str() == Some(uuid.as_str())
                    && p["id"].as_str() == Some(id.as_str())
                    && p["attempts"].as_i64() == Some(*attempts)
            }),
            Payload::Containing(parts) => parts.iter().all(|p| actual.contains(p.as_str())),
            Payload::Any => true,
        }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        match (self, other) {
            (Payload::Any, _) | (_, Payload::Any) => true,
            (Payload::Bytes(a), e) | (e, Payload::Bytes(a)) => Payload::matches(a, e),
            (Payload::Json(a), Payload::Json(b)) => a == b,
            (
                Payload::Job {
                    uuid: u,
                    id: a,
                    attempts: x,
                },
                Payload::Job {
                    uuid: v,
                    id: b,
                    attempts: y,
                },
            ) => u == v && a == b && x == y,
            (Payload::Containing(a), Payload::Containing(b)) => a == b,
            _ => false,
        }
    }
}

impl From<&Job> for Payload {
    fn from(job: &Job) -> Self {
        Payload::exact(job)
    }
}

impl From<&str> for Payload {
    fn from(text: &str) -> Self {
        Payload::Bytes(text.to_string())
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Self {
        Payload::Bytes(text)
    }
}

/// `displayName attempts=N id=ID` of a JSON payload, to tell payloads
/// apart at a glance.
fn summary(p: &Value) -> String {
    format!(
        "{} attempts={} id={}",
        p["displayName"].as_str().unwrap_or("?"),
        p["attempts"],
        p["id"].as_str().unwrap_or("?")
    )
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Payload::Bytes(b) => match serde_json::from_str::<Value>(b) {
                Ok(p) if p.is_object() => write!(f, "[{}] {b}", summary(&p)),
                _ => write!(f, "{b}"),
            },
            Payload::Json(v) => write!(f, "[{}] as JSON {v}", summary(v)),
            Payload::Job { uuid, id, attempts } => {
                write!(f, "job uuid={uuid} id={id} attempts={attempts}")
            }
            Payload::Containing(parts) => write!(f, "text containing {parts:?}"),
            Payload::Any => write!(f, "_"),
        }
    }
}

/// A sorted-set score (UNIX seconds): as read, or as expected. Equal when
/// the read score is what the other side expects.
#[derive(Clone, Copy)]
pub enum Score {
    /// Read at a time known to lie in `window` (UNIX seconds).
    Read { at: i64, window: (i64, i64) },
    /// `N` seconds after a time in the snapshot's window.
    In(i64),
    /// Exactly this UNIX time.
    At(i64),
    /// Any score (the test does not look at it).
    Any,
}

impl PartialEq for Score {
    fn eq(&self, other: &Score) -> bool {
        match (*self, *other) {
            (Score::Any, _) | (_, Score::Any) => true,
            (Score::Read { at: a, .. }, Score::Read { at: b, .. }) => a == b,
            (Score::Read { at, window }, Score::In(secs))
            | (Score::In(secs), Score::Read { at, window }) => {
                (window.0..=window.1).contains(&(at - secs))
            }
            (Score::Read { at: a, .. } | Score::At(a), Score::At(b))
            | (Score::At(a), Score::Read { at: b, .. }) => a == b,
            (Score::In(a), Score::In(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Debug for Score {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Score::Read { at, window } if window.1 - window.0 == 2 * SLACK => {
                write!(f, "now{:+} s", at - (window.0 + SLACK))
            }
            Score::Read { at, window } => {
                write!(
                    f,
                    "{at} ({:+} s after {}..={})",
                    at - window.0,
                    window.0,
                    window.1
                )
            }
            Score::In(secs) => write!(f, "now{secs:+} s"),
            Score::At(at) => write!(f, "{at}"),
            Score::Any => write!(f, "_"),
        }
    }
}

/// Text as read (exact), or as expected (a beginning and parts). Equal
/// when the exact text is what the other side expects.
#[derive(Clone)]
pub enum Text {
    /// This text exactly.
    Is(String),
    /// Text that starts with `starts` and contains every one of `contains`.
    Like {
        starts: String,
        contains: Vec<String>,
    },
    /// Anything (the test does not look at it).
    Any,
}

impl Text {
    /// Text starting with `prefix`.
    pub fn starts(prefix: &str) -> Self {
        Text::Like {
            starts: prefix.to_string(),
            contains: vec![],
        }
    }

    /// Adds a part the text must contain.
    pub fn containing(self, part: &str) -> Self {
        match self {
            Text::Like {
                starts,
                mut contains,
            } => {
                contains.push(part.to_string());
                Text::Like { starts, contains }
            }
            _ => Text::Like {
                starts: String::new(),
                contains: vec![part.to_string()],
            },
        }
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        match (self, other) {
            (Text::Any, _) | (_, Text::Any) => true,
            (Text::Is(a), Text::Like { starts, contains })
            | (Text::Like { starts, contains }, Text::Is(a)) => {
                a.starts_with(starts.as_str()) && contains.iter().all(|c| a.contains(c.as_str()))
            }
            (Text::Is(a), Text::Is(b)) => a == b,
            (
                Text::Like {
                    starts: a,
                    contains: x,
                },
                Text::Like {
                    starts: b,
                    contains: y,
                },
            ) => a == b && x == y,
        }
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Text::Is(text.to_string())
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Is(t) => write!(f, "{t:?}"),
            Text::Like { starts, contains } => {
                write!(f, "starting {starts:?}")?;
                for c in contains {
                    write!(f, ", containing {c:?}")?;
                }
                Ok(())
            }
            Text::Any => write!(f, "_"),
        }
    }
}

/// One failed_jobs row (failed_at aside).
#[derive(Clone)]
pub struct Failed {
    pub uuid: Text,
    pub connection: String,
    pub queue: String,
    pub payload: Payload,
    pub exception: Text,
}

impl Failed {
    /// `job` failed on connection `redis`, queue `default`, with any
    /// payload and exception (narrow them with the methods below).
    pub fn job(job: &Job) -> Self {
        Failed::uuid(&job.uuid())
    }

    /// The row of `uuid` on connection `redis`, queue `default`.
    pub fn uuid(uuid: &str) -> Self {
        Failed {
            uuid: uuid.into(),
            connection: "redis".into(),
            queue: "default".into(),
            payload: Payload::Any,
            exception: Text::Any,
        }
    }

    /// A row of connection `redis`, queue `default`, whatever its uuid
    /// (the payload has none).
    pub fn row() -> Self {
        Failed {
            uuid: Text::Any,
            ..Failed::uuid("")
        }
    }

    /// The row's payload is `payload` (default: any).
    pub fn payload(mut self, payload: impl Into<Payload>) -> Self {
        self.payload = payload.into();
        self
    }

    /// The exception text starts with `prefix`.
    pub fn exception(mut self, prefix: &str) -> Self {
        self.exception = Text::starts(prefix);
        self
    }

    /// The exception text also contains `part`.
    pub fn containing(mut self, part: &str) -> Self {
        self.exception = self.exception.containing(part);
        self
    }
}

impl PartialEq for Failed {
    fn eq(&self, other: &Failed) -> bool {
        self.uuid == other.uuid
            && self.connection == other.connection
            && self.queue == other.queue
            && self.payload == other.payload
            && self.exception == other.exception
    }
}

impl fmt::Debug for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} {}@{}\n      payload: {:?}\n      exception: {:?}",
            self.uuid, self.connection, self.queue, self.payload, self.exception
        )
    }
}

/// One queue's four keys.
#[derive(Clone, Default)]
pub struct Queue {
    /// The ready list, head first.
    pub ready: Vec<Payload>,
    /// `:delayed`, lowest score first.
    pub delayed: Vec<(Payload, Score)>,
    /// `:reserved`, lowest score first.
    pub reserved: Vec<(Payload, Score)>,
    /// The length of `:notify`.
    pub notify: i64,
}

impl Queue {
    fn is_empty(&self) -> bool {
        self.ready.is_empty()
            && self.delayed.is_empty()
            && self.reserved.is_empty()
            && self.notify == 0
    }

    fn mismatches(&self, other: &Queue, name: &str, out: &mut Vec<String>) {
        list(&format!("{name}.ready"), &self.ready, &other.ready, out);
        for (part, a, b) in [
            ("delayed", &self.delayed, &other.delayed),
            ("reserved", &self.reserved, &other.reserved),
        ] {
            list(&format!("{name}.{part}"), a, b, out);
        }
        if self.notify != other.notify {
            out.push(format!(
                "{name}.notify: {} tokens, expected {}",
                self.notify, other.notify
            ));
        }
    }
}

/// Compares two lists item by item, noting each difference.
fn list<T: fmt::Debug + PartialEq>(what: &str, a: &[T], b: &[T], out: &mut Vec<String>) {
    if a.len() != b.len() {
        out.push(format!("{what}: {} entries, expected {}", a.len(), b.len()));
        return;
    }
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            out.push(format!("{what}[{i}]:\n  is       {x:?}\n  expected {y:?}"));
        }
    }
}

/// Every queue key of DB 0, the other keys there, and the scene's SQLite
/// failed_jobs rows.
#[derive(Clone, Default)]
pub struct QueueState {
    /// The Redis prefix of the queue keys (`None`: [`PREFIX`]). On the
    /// expected side it says how to read the scene; it is never compared.
    pub prefix: Option<String>,
    /// By queue name (without the prefix); a queue with no key is absent.
    pub queues: BTreeMap<String, Queue>,
    /// Keys of DB 0 that are no queue's, sorted.
    pub other_keys: Vec<String>,
    /// failed_jobs rows, in id order.
    pub failed: Vec<Failed>,
}

impl QueueState {
    /// Reads the scene now; scores expected as [`Score::In`] may be off by
    /// [`SLACK`] seconds.
    pub fn read(s: &Scene) -> Self {
        let now = super::now();
        Self::read_in(s, now - SLACK..=now + SLACK)
    }

    /// Reads the scene; a score expected as [`Score::In`]`(n)` must be `n`
    /// seconds after a time in `window` (UNIX seconds, as measured by the
    /// test around what set it).
    pub fn read_in(s: &Scene, window: RangeInclusive<i64>) -> Self {
        Self::read_prefixed(s, PREFIX, window)
    }

    /// As [`QueueState::read_in`], for queue keys under Redis prefix
    /// `prefix` (the app's `database.redis.options.prefix`).
    pub fn read_prefixed(s: &Scene, prefix: &str, window: RangeInclusive<i64>) -> Self {
        let window = (*window.start(), *window.end());
        let queues = format!("{prefix}queues:");
        let mut state = QueueState {
            prefix: Some(prefix.to_string()),
            ..QueueState::default()
        };
        for key in s.redis.keys(0) {
            let Some(rest) = key.strip_prefix(queues.as_str()) else {
                state.other_keys.push(key);
                continue;
            };
            let (name, part) = match rest.rsplit_once(':') {
                Some((name, part @ ("delayed" | "reserved" | "notify"))) => (name, part),
                _ => (rest, "ready"),
            };
            let queue = state.queues.entry(name.to_string()).or_default();
            let scored = |redis: &RedisServer| -> Vec<(Payload, Score)> {
                redis
                    .zrange(&key)
                    .into_iter()
                    .map(|(m, at)| (Payload::Bytes(m), Score::Read { at, window }))
                    .collect()
            };
            match part {
                "delayed" => queue.delayed = scored(&s.redis),
                "reserved" => queue.reserved = scored(&s.redis),
                "notify" => queue.notify = s.redis.llen(&key),
                _ => {
                    queue.ready = s
                        .redis
                        .lrange(&key)
                        .into_iter()
                        .map(Payload::Bytes)
                        .collect()
                }
            }
        }
        state.failed = s
            .failed_rows()
            .into_iter()
            .map(|r| Failed {
                uuid: Text::Is(r.uuid),
                connection: r.connection,
                queue: r.queue,
                payload: Payload::Bytes(r.payload),
                exception: Text::Is(r.exception),
            })
            .collect();
        state
    }

    /// Nothing anywhere: no key in DB 0, no failed row.
    pub fn empty() -> Self {
        QueueState::default()
    }

    /// The Redis prefix the queue keys are read under.
    fn prefix_or_default(&self) -> &str {
        self.prefix.as_deref().unwrap_or(PREFIX)
    }

    /// Changes queue `name` with `change` (dropping it if left empty).
    pub fn queue(mut self, name: &str, change: impl FnOnce(&mut Queue)) -> Self {
        let queue = self.queues.entry(name.to_string()).or_default();
        change(queue);
        if queue.is_empty() {
            self.queues.remove(name);
        }
        self
    }

    /// `default`'s ready list holds `payloads`, in order.
    pub fn ready<P: Into<Payload>>(self, payloads: impl IntoIterator<Item = P>) -> Self {
        self.ready_on("default", payloads)
    }

    /// Queue `name`'s ready list holds `payloads`, in order.
    pub fn ready_on<P: Into<Payload>>(
        self,
        name: &str,
        payloads: impl IntoIterator<Item = P>,
    ) -> Self {
        let ready: Vec<Payload> = payloads.into_iter().map(Into::into).collect();
        self.queue(name, |q| q.ready = ready)
    }

    /// `default`'s `:delayed` also holds `payload` at `score`.
    pub fn delayed(self, payload: impl Into<Payload>, score: Score) -> Self {
        let entry = (payload.into(), score);
        self.queue("default", |q| q.delayed.push(entry))
    }

    /// `default`'s `:reserved` also holds `payload` at `score`.
    pub fn reserved(self, payload: impl Into<Payload>, score: Score) -> Self {
        let entry = (payload.into(), score);
        self.queue("default", |q| q.reserved.push(entry))
    }

    /// `default`'s `:notify` has `n` tokens.
    pub fn notify(self, n: i64) -> Self {
        self.notify_on("default", n)
    }

    /// Queue `name`'s `:notify` has `n` tokens.
    pub fn notify_on(self, name: &str, n: i64) -> Self {
        self.queue(name, |q| q.notify = n)
    }

    /// DB 0 also holds these keys (sorted), which are no queue's.
    pub fn other_keys<const N: usize>(mut self, keys: [&str; N]) -> Self {
        self.other_keys = keys.iter().map(|k| k.to_string()).collect();
        self
    }

    /// The failed store holds these rows, in order.
    pub fn failed(mut self, rows: impl IntoIterator<Item = Failed>) -> Self {
        self.failed = rows.into_iter().collect();
        self
    }

    /// What differs between `self` and `other`, one entry per difference.
    pub fn mismatches(&self, other: &QueueState) -> Vec<String> {
        let mut out = vec![];
        let names: std::collections::BTreeSet<&String> =
            self.queues.keys().chain(other.queues.keys()).collect();
        let none = Queue::default();
        for name in names {
            let a = self.queues.get(name).unwrap_or(&none);
            let b = other.queues.get(name).unwrap_or(&none);
            a.mismatches(b, name, &mut out);
        }
        if self.other_keys != other.other_keys {
            out.push(format!(
                "other keys: {:?}, expected {:?}",
                self.other_keys, other.other_keys
            ));
        }
        list("failed", &self.failed, &other.failed, &mut out);
        out
    }
}

impl PartialEq for QueueState {
    fn eq(&self, other: &Self) -> bool {
        self.mismatches(other).is_empty()
    }
}

/// One entry a line, so that the two sides of a failed `assert_eq!` read
/// side by side.
impl fmt::Debug for QueueState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "QueueState {{")?;
        for (name, q) in &self.queues {
            writeln!(f, "  {name}:")?;
            for p in &q.ready {
                writeln!(f, "    ready    {p:?}")?;
            }
            for (p, at) in &q.delayed {
                writeln!(f, "    delayed  {at:?}  {p:?}")?;
            }
            for (p, at) in &q.reserved {
                writeln!(f, "    reserved {at:?}  {p:?}")?;
            }
            writeln!(f, "    notify   {}", q.notify)?;
        }
        if !self.other_keys.is_empty() {
            writeln!(f, "  other keys: {:?}", self.other_keys)?;
        }
        for row in &self.failed {
            writeln!(f, "  failed   {row:?}")?;
        }
        write!(f, "}}")
    }
}

impl Scene {
    /// Asserts that the job log holds `job`'s runs as attempts 1 to
    /// `attempts`, in order and nothing else, and that no queue key or
    /// failed row is left: the job ran that often and then was done.
    #[track_caller]
    pub fn assert_ran_then_gone(&self, job: &super::Job, attempts: i64) {
        let runs: Vec<String> = (1..=attempts).map(|a| job.run_line(a)).collect();
        assert_eq!(self.log(), runs, "the job log");
        self.assert_state(QueueState::empty());
    }

    /// The queue keys and failed rows now (see [`QueueState::read`]).
    pub fn state(&self) -> QueueState {
        QueueState::read(self)
    }

    /// Asserts that the scene holds `expected` (scores within [`SLACK`] of
    /// now), listing each difference when it does not.
    #[track_caller]
    pub fn assert_state(&self, expected: QueueState) {
        let now = super::now();
        let actual = QueueState::read_prefixed(
            self,
            expected.prefix_or_default(),
            now - SLACK..=now + SLACK,
        );
        assert_eq!(
            actual,
            expected,
            "the queue keys or failed rows differ (left: Redis and failed_jobs now, right: expected):\n{}",
            actual.mismatches(&expected).join("\n")
        );
    }

    /// As [`Scene::assert_state`] for the queue keys only: keys of DB 0
    /// that are no queue's and the failed rows are not compared (for tests
    /// whose failed store lives elsewhere).
    #[track_caller]
    pub fn assert_queues(&self, expected: QueueState) {
        self.assert_part(expected, false);
    }

    /// As [`Scene::assert_state`] for Redis DB 0 only (every key there);
    /// the failed rows are not compared.
    #[track_caller]
    pub fn assert_redis(&self, expected: QueueState) {
        self.assert_part(expected, true);
    }

    #[track_caller]
    fn assert_part(&self, expected: QueueState, other_keys: bool) {
        let now = super::now();
        let state = QueueState::read_prefixed(
            self,
            expected.prefix_or_default(),
            now - SLACK..=now + SLACK,
        );
        let part = |state: QueueState| QueueState {
            prefix: None,
            queues: state.queues,
            other_keys: if other_keys { state.other_keys } else { vec![] },
            failed: vec![],
        };
        let (actual, expected) = (part(state), part(expected));
        assert_eq!(
            actual,
            expected,
            "the Redis keys differ (left: Redis now, right: expected):\n{}",
            actual.mismatches(&expected).join("\n")
        );
    }

    /// As [`Scene::assert_state`], scores judged against `window` (see
    /// [`QueueState::read_in`]).
    #[track_caller]
    pub fn assert_state_in(&self, window: RangeInclusive<i64>, expected: QueueState) {
        let actual = QueueState::read_prefixed(self, expected.prefix_or_default(), window);
        assert_eq!(
            actual,
            expected,
            "the queue keys or failed rows differ (left: Redis and failed_jobs now, right: expected):\n{}",
            actual.mismatches(&expected).join("\n")
        );
    }
}
