//! Fuzzing the readers of outside input: PHP's `serialize()` text
//! (`data.command`) and the payload JSON.
//!
//! Bounded, so it runs in every `cargo test` (and so in CI):
//! - the checked-in corpus (`fuzz/corpus/*`, written by
//!   `fuzz/make_corpus.php`) is replayed, whole and mutated;
//! - random PHP values are serialized and must decode to the expected JSON;
//! - random mutations and nesting bombs must never panic or overflow the
//!   stack, and what decodes is valid JSON within the depth limit;
//! - with PHP installed, PHP's own `unserialize()` is the oracle for
//!   random values (`fuzz/php_oracle.php`).
//!
//! `PROPTEST_CASES=N` runs more cases.

use std::path::{Path, PathBuf};

#[path = "common/skip.rs"]
#[allow(dead_code)]
mod skip;

use laravel_worker::Payload;
use laravel_worker::command::{self, CommandError, MAX_DEPTH};
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};

fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "the corpus is checked in");
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Deepest nesting of arrays and objects in JSON text.
fn json_depth(text: &str) -> usize {
    let (mut depth, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for b in text.bytes() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The reader's contract on any input: an error, or valid JSON no deeper
/// than the limit.
fn check_unserialize(input: &[u8]) -> Result<String, CommandError> {
    let json = command::unserialize(input)?;
    let text = json.get().to_string();
    serde_json::from_str::<&serde_json::value::RawValue>(&text).expect("valid JSON");
    assert!(json_depth(&text) <= MAX_DEPTH, "depth of {text:.200}");
    Ok(text)
}

fn check_payload(input: &[u8]) {
    if let Ok(payload) = Payload::parse(input.to_vec()) {
        let _ = payload.display_name();
        let _ = payload.backoff();
        if let Some(json) = payload.command_json() {
            assert!(json_depth(json.get()) <= MAX_DEPTH);
        }
    }
}

#[test]
fn the_unserialize_corpus_replays() {
    for (path, bytes) in corpus("unserialize") {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let result = check_unserialize(&bytes);
        match name.as_str() {
            "nested-511" | "nested-objects-600" | "unclosed-nesting" => {
                assert_eq!(result.unwrap_err(), CommandError::TooDeep, "{name}")
            }
            "bad-key"
            | "bad-bool"
            | "truncated"
            | "huge-count"
            | "count-overflow"
            | "string-too-long"
            | "string-length-overflow" => {
                assert!(
                    matches!(result, Err(CommandError::Malformed(_))),
                    "{name}: {result:?}"
                )
            }
            _ => assert!(result.is_ok(), "{name}: {result:?}"),
        }
    }
}

#[test]
fn the_unserialize_corpus_reads_the_same_every_way() {
    for (_, bytes) in corpus("unserialize") {
        check_every_way(&bytes);
        // As the value of an object's property, as a command holds it.
        let mut wrapped = b"O:1:\"A\":1:{s:1:\"v\";".to_vec();
        wrapped.extend_from_slice(&bytes);
        wrapped.push(b'}');
        check_every_way(&wrapped);
    }
}

#[test]
fn the_payload_corpus_replays() {
    for (path, bytes) in corpus("payload") {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        check_payload(&bytes);
        let parsed = Payload::parse(bytes.clone());
        let ok = !matches!(
            name.as_str(),
            "deep-512" | "not-object" | "unterminated-string"
        );
        assert_eq!(parsed.is_ok(), ok, "{name}: {:?}", parsed.err());
    }
}

/// A nesting bomb of a million levels is refused at once (the crash
/// started near 30,781).
#[test]
fn a_million_levels_is_refused_not_a_crash() {
    for open in ["a:1:{i:0;", "O:1:\"A\":1:{s:1:\"x\";", "a:1:{s:1:\"k\";"] {
        let mut text = open.repeat(1_000_000);
        text.push_str("N;");
        text.push_str(&"}".repeat(1_000_000));
        assert_eq!(
            check_unserialize(text.as_bytes()),
            Err(CommandError::TooDeep)
        );
    }
    let json = format!(r#"{{"attempts":0,"x":{}}}"#, "[".repeat(1_000_000));
    assert!(Payload::parse(json.into_bytes()).is_err());
}

// A PHP value and its expected JSON, for the structured properties.

#[derive(Debug, Clone)]
enum Php {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<(Key, Php)>),
    Object(String, Vec<(Prop, Php)>),
    Enum(String),
    Ref(i64),
}

#[derive(Debug, Clone)]
enum Key {
    Int(i64),
    Str(String),
}

#[derive(Debug, Clone)]
enum Prop {
    Public(String),
    Protected(String),
    Private(String, String),
}

fn s(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(format!("s:{}:\"", text.len()).as_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\";");
}

fn serialize(v: &Php, out: &mut Vec<u8>) {
    match v {
        Php::Null => out.extend_from_slice(b"N;"),
        Php::Bool(b) => out.extend_from_slice(if *b { b"b:1;" } else { b"b:0;" }),
        Php::Int(n) => out.extend_from_slice(format!("i:{n};").as_bytes()),
        Php::Float(f) if f.is_nan() => out.extend_from_slice(b"d:NAN;"),
        Php::Float(f) if f.is_infinite() => {
            out.extend_from_slice(if *f > 0.0 { b"d:INF;" } else { b"d:-INF;" })
        }
        Php::Float(f) => out.extend_from_slice(format!("d:{f:?};").as_bytes()),
        Php::Str(t) => s(out, t),
        Php::Array(entries) => {
            out.extend_from_slice(format!("a:{}:{{", entries.len()).as_bytes());
            for (k, v) in entries {
                match k {
                    Key::Int(n) => out.extend_from_slice(format!("i:{n};").as_bytes()),
                    Key::Str(t) => s(out, t),
                }
                serialize(v, out);
            }
            out.push(b'}');
        }
        Php::Object(class, props) => {
            out.extend_from_slice(
                format!("O:{}:\"{class}\":{}:{{", class.len(), props.len()).as_bytes(),
            );
            for (p, v) in props {
                match p {
                    Prop::Public(n) => s(out, n),
                    Prop::Protected(n) => s(out, &format!("\0*\0{n}")),
                    Prop::Private(c, n) => s(out, &format!("\0{c}\0{n}")),
                }
                serialize(v, out);
            }
            out.push(b'}');
        }
        Php::Enum(case) => {
            out.extend_from_slice(format!("E:{}:\"{case}\";", case.len()).as_bytes())
        }
        Php::Ref(n) => out.extend_from_slice(format!("r:{n};").as_bytes()),
    }
}

fn list_position(k: &Key) -> Option<i64> {
    match k {
        Key::Int(n) => Some(*n),
        Key::Str(t)
            if t == "0"
                || (!t.starts_with('0')
                    && !t.is_empty()
                    && t.bytes().all(|b| b.is_ascii_digit())) =>
        {
            t.parse().ok()
        }
        Key::Str(_) => None,
    }
}

fn expected(v: &Php) -> Value {
    match v {
        Php::Null => Value::Null,
        Php::Bool(b) => json!(b),
        Php::Int(n) => json!(n),
        Php::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Php::Str(t) => json!(t),
        Php::Array(entries) => {
            let is_list = entries
                .iter()
                .enumerate()
                .all(|(i, (k, _))| list_position(k) == Some(i as i64));
            if is_list {
                Value::Array(entries.iter().map(|(_, v)| expected(v)).collect())
            } else {
                let mut map = Map::new();
                for (k, v) in entries {
                    let key = match k {
                        Key::Int(n) => n.to_string(),
                        Key::Str(t) => t.clone(),
                    };
                    map.insert(key, expected(v));
                }
                Value::Object(map)
            }
        }
        Php::Object(class, props) => {
            let mut map = Map::new();
            map.insert("__class".into(), json!(class));
            for (p, v) in props {
                let name = match p {
                    Prop::Public(n) | Prop::Protected(n) | Prop::Private(_, n) => n.clone(),
                };
                map.insert(name, expected(v));
            }
            Value::Object(map)
        }
        Php::Enum(case) => json!({ "__enum": case }),
        Php::Ref(n) => json!({ "__ref": n }),
    }
}

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_\\\\]{0,12}"
}

fn php_value() -> impl Strategy<Value = Php> {
    let leaf = prop_oneof![
        Just(Php::Null),
        any::<bool>().prop_map(Php::Bool),
        any::<i64>().prop_map(Php::Int),
        any::<f64>().prop_map(Php::Float),
        any::<String>().prop_map(Php::Str),
        "[A-Za-z]{1,8}:[A-Za-z]{1,8}".prop_map(Php::Enum),
        (1i64..100).prop_map(Php::Ref),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        let key = prop_oneof![
            any::<i64>().prop_map(Key::Int),
            (0i64..4).prop_map(Key::Int),
            any::<String>().prop_map(Key::Str),
            (0u8..4).prop_map(|n| Key::Str(n.to_string())),
        ];
        let prop = prop_oneof![
            name().prop_map(Prop::Public),
            name().prop_map(Prop::Protected),
            (name(), name()).prop_map(|(c, n)| Prop::Private(c, n)),
        ];
        prop_oneof![
            // Lists: keys 0, 1, 2…
            prop::collection::vec(inner.clone(), 0..6).prop_map(|items| {
                Php::Array(
                    items
                        .into_iter()
                        .enumerate()
                        .map(|(i, v)| (Key::Int(i as i64), v))
                        .collect(),
                )
            }),
            // Maps, keys made unique as PHP arrays have them.
            prop::collection::vec((key, inner.clone()), 0..6).prop_map(|entries| {
                let mut seen = std::collections::HashSet::new();
                Php::Array(
                    entries
                        .into_iter()
                        .filter(|(k, _)| {
                            seen.insert(match k {
                                Key::Int(n) => n.to_string(),
                                Key::Str(t) => t.clone(),
                            })
                        })
                        .collect(),
                )
            }),
            (name(), prop::collection::vec((prop, inner), 0..6)).prop_map(|(class, props)| {
                let mut seen = std::collections::HashSet::new();
                Php::Object(
                    class,
                    props
                        .into_iter()
                        .filter(|(p, _)| {
                            seen.insert(match p {
                                Prop::Public(n) | Prop::Protected(n) | Prop::Private(_, n) => {
                                    n.clone()
                                }
                            })
                        })
                        .collect(),
                )
            }),
        ]
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize, usize),
    Truncate(usize),
    Repeat(usize, usize, usize),
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Flip(at, b) => {
                if let Some(x) = bytes.get_mut(at % len) {
                    *x ^= b;
                }
            }
            Mutation::Insert(at, b) => bytes.insert((at % len).min(bytes.len()), b),
            Mutation::Delete(at, n) => {
                let start = (at % len).min(bytes.len());
                let end = (start + n % 16).min(bytes.len());
                bytes.drain(start..end);
            }
            Mutation::Truncate(at) => bytes.truncate(at % len),
            Mutation::Repeat(at, n, times) => {
                // Copies a slice many times over: makes nesting bombs and
                // counts that disagree with their contents.
                let start = (at % len).min(bytes.len());
                let end = (start + n % 32).min(bytes.len());
                let slice = bytes[start..end].to_vec();
                for _ in 0..times % 2000 {
                    bytes.splice(start..start, slice.iter().copied());
                }
            }
        }
    }
    bytes
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Flip(a, b)),
        (
            any::<usize>(),
            prop_oneof![
                Just(b'{'),
                Just(b'}'),
                Just(b';'),
                Just(b':'),
                Just(b'"'),
                any::<u8>()
            ]
        )
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, n)| Mutation::Delete(a, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(a, n, t)| Mutation::Repeat(a, n, t)),
    ]
}

fn corpus_seed(name: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds: Vec<Vec<u8>> = corpus(name).into_iter().map(|(_, b)| b).collect();
    prop::sample::select(seeds)
}

/// `text` as the body of a JSON string written the way PHP's
/// `json_encode()` writes it by default: `\/`, and `\uXXXX` (surrogate
/// pairs past the BMP) for every character that is not ASCII.
fn php_escaped(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            '\n' => out.push_str("\\n"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out
}

/// Every way the worker reads a command agrees on `text`: as bytes or
/// still JSON-escaped (serde_json's way and PHP's), whole or written in
/// pieces to a sink.
fn check_every_way(text: &[u8]) {
    let whole = command::decode(command::Text::Plain(text)).map(|raw| raw.get().to_string());
    let mut bodies = Vec::new();
    if let Ok(text) = std::str::from_utf8(text) {
        let json = serde_json::to_string(text).unwrap();
        bodies.push(json[1..json.len() - 1].to_string());
        bodies.push(php_escaped(text));
    }
    let mut ways = vec![command::Text::Plain(text)];
    ways.extend(
        bodies
            .iter()
            .map(|b| command::Text::JsonEscaped(b.as_bytes())),
    );
    for way in ways {
        let read = command::decode(way).map(|raw| raw.get().to_string());
        assert!(
            read == whole,
            "{way:.80?}: {read:.200?} against {whole:.200?}"
        );
        let mut sink = Vec::new();
        let streamed =
            command::decode_to(way, &mut sink).map(|()| String::from_utf8(sink).unwrap());
        assert!(streamed == whole, "streamed {way:.80?}: {streamed:.200?}");
        assert_eq!(command::check_decodes(way).is_ok(), whole.is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_way_of_reading_agrees(v in php_value(), ms in prop::collection::vec(mutation(), 0..3)) {
        let mut text = b"O:1:\"A\":1:{s:1:\"v\";".to_vec();
        serialize(&v, &mut text);
        text.push(b'}');
        check_every_way(&mutate(text, &ms));
    }

    #[test]
    fn serialized_values_decode_to_their_json(v in php_value()) {
        let mut text = Vec::new();
        serialize(&v, &mut text);
        let json = check_unserialize(&text).expect("decodes");
        let got: Value = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(got, expected(&v));
    }

    #[test]
    fn mutated_values_never_panic(v in php_value(), ms in prop::collection::vec(mutation(), 1..6)) {
        let mut text = Vec::new();
        serialize(&v, &mut text);
        let _ = check_unserialize(&mutate(text, &ms));
    }

    #[test]
    fn mutated_corpus_never_panics(
        seed in corpus_seed("unserialize"),
        ms in prop::collection::vec(mutation(), 1..8),
    ) {
        let _ = check_unserialize(&mutate(seed, &ms));
    }

    #[test]
    fn mutated_payloads_never_panic(
        seed in corpus_seed("payload"),
        ms in prop::collection::vec(mutation(), 1..8),
    ) {
        check_payload(&mutate(seed, &ms));
    }

    #[test]
    fn nesting_decodes_up_to_the_limit_and_no_further(
        opens in prop::collection::vec(0usize..3, 1..1500),
        closed in any::<bool>(),
    ) {
        const OPEN: [&str; 3] = ["a:1:{i:0;", "O:1:\"A\":1:{s:1:\"x\";", "a:1:{s:1:\"k\";"];
        let mut text: String = opens.iter().map(|&i| OPEN[i]).collect();
        text.push_str("N;");
        if closed {
            text.push_str(&"}".repeat(opens.len()));
        }
        let result = check_unserialize(text.as_bytes());
        if opens.len() > MAX_DEPTH {
            prop_assert_eq!(result.unwrap_err(), CommandError::TooDeep);
        } else if closed {
            prop_assert!(result.is_ok());
        } else {
            prop_assert!(matches!(result, Err(CommandError::Malformed(_))));
        }
    }
}

/// PHP's own `unserialize()` as the oracle: random values made and read
/// back by PHP, then by the worker.
#[test]
fn php_unserialize_agrees_on_random_values() {
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/php_oracle.php");
    let output = match std::process::Command::new("php")
        .arg(&oracle)
        .args(["20260101", "400"])
        .output()
    {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "the PHP oracle failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            skip::note("php", &format!("the PHP oracle cannot run ({e})"));
            return;
        }
    };
    let mut compared = 0;
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let case: Value = serde_json::from_str(line).unwrap();
        let text = hex::decode(case["s"].as_str().unwrap()).unwrap();
        let ours = check_unserialize(&text)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&text)));
        let ours: Value = serde_json::from_str(&ours).unwrap();
        assert_eq!(ours, case["j"], "{}", String::from_utf8_lossy(&text));
        compared += 1;
    }
    assert_eq!(compared, 400);
}
