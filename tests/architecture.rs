//! The layering of `src/` (the "Architecture" section of
//! `docs/src/development.md`), checked from the source text:
//!
//! - every `crate::NAME…` path (and every path of a `use crate::{a, b::c}`
//!   group) in the code of a top-level module `src/X.rs` or `src/X/` is an
//!   edge X → NAME, allowed or not by [`LAYERS`];
//! - `config` names other modules' types and constants only, never their
//!   functions (it never opens or runs anything);
//! - inside every folder of `src/`, no two files import each other,
//!   directly or round a longer loop ([`KNOWN_CYCLES`] apart);
//! - no function in `src/` is longer than [`MAX_FN_LINES`] lines
//!   ([`LONG_FNS`] apart);
//! - the module table of the book (Architecture → Modules) has one row per
//!   module of `src/`, none for a module that is gone, and each row the
//!   layer these rules give it.
//!
//! Rule numbers are the book's (1 leaves … 11 the surface).
//!
//! Items under `#[cfg(test)]` (a test module, a test-only function) do not
//! count, and comments do not.
//! On failure the measured edges are printed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Modules that import no other module of the crate but each other.
const LEAVES: &[&str] = &[
    "escape",
    "exception",
    "error_chain",
    "log_limit",
    "pieces",
    "redact",
    "signals",
    "slug",
];

/// Modules that may import any other: the command line and the commands
/// (`main.rs` and `lib.rs`, the crate roots, are not read).
const SURFACE: &[&str] = &["cli", "commands"];

/// Listeners of the worker's events.
const LISTENERS: &[&str] = &["metrics", "horizon", "output", "pulse_feed"];

/// Every other module, with the rule that places it and the modules (beside
/// [`LEAVES`]) it may import. `None`: any module but the listed ones.
const LAYERS: &[(&str, &str, Allowed)] = &[
    ("redis", "2", Allowed::Only(&[])),
    ("sql", "2", Allowed::Only(&[])),
    ("queue", "3", Allowed::Only(&["redis", "sql"])),
    ("cache", "4", Allowed::Only(&["redis", "sql", "queue"])),
    ("failed", "4", Allowed::Only(&["redis", "sql", "queue"])),
    ("memory", "5", Allowed::Only(&[])),
    ("handler", "6", Allowed::Only(&["queue", "memory"])),
    ("lifecycle", "5", Allowed::Only(&[])),
    (
        "worker",
        "7",
        Allowed::Only(&[
            "queue",
            "handler",
            "cache",
            "failed",
            "lifecycle",
            "memory",
            "whole",
        ]),
    ),
    (
        "whole",
        "7",
        Allowed::Only(&["queue", "handler", "cache", "redis", "sql"]),
    ),
    (
        "metrics",
        "8",
        Allowed::Only(&["worker", "queue", "redis", "handler"]),
    ),
    (
        "horizon",
        "8",
        Allowed::Only(&["worker", "queue", "redis", "handler"]),
    ),
    (
        "output",
        "8",
        Allowed::Only(&["worker", "queue", "redis", "handler"]),
    ),
    (
        "pulse_feed",
        "8",
        Allowed::Only(&["worker", "queue", "redis", "sql", "handler"]),
    ),
    ("config", "9", Allowed::AllBut(&["app", "cli", "commands"])),
    ("app", "10", Allowed::AllBut(&["cli", "commands"])),
];

/// What a module may import.
enum Allowed {
    /// These modules and the leaves.
    Only(&'static [&'static str]),
    /// Every module but these.
    AllBut(&'static [&'static str]),
}

/// Import cycles between two files of one folder, each a decision: `(folder,
/// a, b)` with `a < b`. A loop through one of these pairs is not reported
/// (the pair counts as one unit). `handler/` has none: its transports share
/// `handler::child`.
const KNOWN_CYCLES: &[(&str, &str, &str)] = &[
    // `config::env` builds the `DbConnection` (the DB_* variables, as
    // `config/database.php` reads them) that `config::database` defines,
    // and the database settings percent-encode with env's `encode`.
    ("config", "database", "env"),
    // One type's `impl` split over files by concern: `RedisQueue` (large
    // jobs set aside), `DatabaseQueue` (batched deletes), `SqsQueue`
    // (batched deletes, receives, overflow pointers). Each file extends
    // the type the other defines.
    ("queue/redis_queue", "queue", "set_aside"),
    ("queue/database", "deletes", "queue"),
    ("queue/sqs", "delete", "queue"),
    ("queue/sqs", "overflow", "queue"),
    ("queue/sqs", "queue", "receive"),
];

/// The longest a function may be, in lines (signature to closing brace).
const MAX_FN_LINES: usize = 80;

/// Functions over [`MAX_FN_LINES`] tolerated while a change shortens them
/// (file, function); none today.
const LONG_FNS: &[(&str, &str)] = &[];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The top-level modules of the crate: `src/X.rs` and `src/X/`.
fn modules() -> BTreeSet<String> {
    fs::read_dir(src())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .filter(|m| m != "main" && m != "lib")
        .collect()
}

/// `path` relative to the crate, for messages (`src/worker/lease.rs`).
fn shown(path: &Path) -> String {
    path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The lines of a file's code, string literals blanked, comments removed,
/// and each item under `#[cfg(test)]` blanked (numbering kept): only the
/// item the attribute is on, so code after a test-only function is read.
fn code_lines(path: &Path) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap();
    let mut out: Vec<String> = text.lines().map(strip).collect();
    let mut i = 0;
    while i < out.len() {
        match out[i].find("#[cfg(test)]") {
            Some(at) if out[i][..at].trim().is_empty() => i = blank_item(&mut out, i, at),
            _ => i += 1,
        }
    }
    out
}

/// Blanks the item whose `#[cfg(test)]` starts at column `at` of line
/// `start`: the attribute, any attributes after it, and the item up to its
/// `;` or its closing brace. Returns the line after the item.
fn blank_item(lines: &mut [String], start: usize, at: usize) -> usize {
    let mut depth = 0i64;
    let mut opened = false;
    let mut column = at + "#[cfg(test)]".len();
    for (i, slot) in lines.iter_mut().enumerate().skip(start) {
        let mut line = std::mem::take(slot);
        let rest = line.split_off(column.min(line.len()));
        for c in rest.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                ';' if !opened && depth == 0 => return i + 1,
                _ => {}
            }
            if opened && depth == 0 {
                return i + 1;
            }
        }
        column = 0;
    }
    lines.len()
}

/// A line without its string and char literals' contents and without its
/// `//` comment.
fn strip(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    in_str = false;
                    out.push('"');
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push('"');
            }
            // A char literal (`'{'`, `'\''`), not a lifetime (`'a`).
            '\'' => {
                let rest: String = chars.clone().take(12).collect();
                let len = match rest.strip_prefix('\\') {
                    Some(escaped) => escaped.get(1..).and_then(|s| s.find('\'')).map(|i| i + 3),
                    None => rest
                        .char_indices()
                        .nth(1)
                        .filter(|(_, c)| *c == '\'')
                        .map(|(i, _)| i + 1),
                };
                match len {
                    Some(len) => {
                        let skip = rest[..len].chars().count();
                        for _ in 0..skip {
                            chars.next();
                        }
                        out.push_str("''");
                    }
                    None => out.push(c),
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

/// Reads one path after `crate::` (or `super::`) at the start of `text`:
/// the full paths it names, a `{…}` group expanded.
fn read_paths(text: &str) -> Vec<Vec<String>> {
    fn ident(text: &str) -> (&str, &str) {
        let end = text
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(text.len());
        text.split_at(end)
    }
    fn tree(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let mut path = prefix.to_vec();
        let mut rest = text.trim_start();
        loop {
            if let Some(group) = rest.strip_prefix('{') {
                // A group: comma-separated subtrees up to the matching brace.
                let mut used = text.len() - group.len();
                loop {
                    let sub = &text[used..];
                    let trimmed = sub.trim_start();
                    used += sub.len() - trimmed.len();
                    if let Some(after) = trimmed.strip_prefix('}') {
                        return text.len() - after.len();
                    }
                    if let Some(after) = trimmed.strip_prefix(',') {
                        used = text.len() - after.len();
                        continue;
                    }
                    if trimmed.is_empty() {
                        return text.len();
                    }
                    used += tree(trimmed, &path, out);
                }
            }
            let (name, after) = ident(rest);
            if name.is_empty() {
                break;
            }
            path.push(name.to_string());
            rest = after;
            match rest.strip_prefix("::") {
                Some(next) => rest = next,
                None => break,
            }
        }
        if path.len() > prefix.len() {
            out.push(path);
        }
        text.len() - rest.len()
    }
    let mut out = Vec::new();
    tree(text, &[], &mut out);
    out
}

/// Every path a file names after `anchor` (`crate::`), with its line.
fn paths_in(lines: &[String], anchor: &str) -> Vec<(usize, Vec<String>)> {
    let text = lines.join("\n");
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(anchor) {
        let start = from + at;
        from = start + anchor.len();
        let before = text[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line = text[..start].matches('\n').count() + 1;
        for path in read_paths(&text[from..]) {
            out.push((line, path));
        }
    }
    out
}

/// One import of another module: where, and what it names.
struct Edge {
    from: String,
    to: String,
    at: String,
    path: String,
}

/// Every edge between top-level modules in `src/`.
fn edges() -> Vec<Edge> {
    let modules = modules();
    let mut out = Vec::new();
    for file in rust_files(&src()) {
        let rel = file.strip_prefix(src()).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy().into_owned();
        let from = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if !modules.contains(&from) {
            continue;
        }
        for (line, path) in paths_in(&code_lines(&file), "crate::") {
            let to = &path[0];
            if *to != from && modules.contains(to) {
                out.push(Edge {
                    from: from.clone(),
                    to: to.clone(),
                    at: format!("{}:{line}", shown(&file)),
                    path: format!("crate::{}", path.join("::")),
                });
            }
        }
    }
    out
}

/// The edges, one line per pair of modules with a count and a first place.
fn edge_table(edges: &[Edge]) -> String {
    let mut pairs: BTreeMap<(&str, &str), (usize, &str)> = BTreeMap::new();
    for e in edges {
        pairs.entry((&e.from, &e.to)).or_insert((0, &e.at)).0 += 1;
    }
    pairs
        .iter()
        .map(|((from, to), (n, at))| format!("  {from} -> {to} ({n}, first at {at})\n"))
        .collect()
}

/// Why `from` may not import `to`, if it may not.
fn forbidden(from: &str, to: &str) -> Option<String> {
    if LEAVES.contains(&from) {
        return (!LEAVES.contains(&to))
            .then(|| "rule 1: a leaf module imports only leaf modules".to_string());
    }
    if SURFACE.contains(&from) {
        return None;
    }
    let Some((_, rule, allowed)) = LAYERS.iter().find(|(m, ..)| *m == from) else {
        return Some(format!(
            "module {from} has no place in the layers: add it to LAYERS in tests/architecture.rs \
             and to the Architecture section of docs/src/development.md"
        ));
    };
    let ok = match allowed {
        Allowed::Only(list) => LEAVES.contains(&to) || list.contains(&to),
        Allowed::AllBut(list) => !list.contains(&to),
    };
    (!ok).then(|| format!("rule {rule}: {from} may not import {to}"))
}

/// Edges the rules forbid, and `config` paths that name no type or
/// constant.
#[test]
fn modules_import_only_what_their_layer_allows() {
    for m in LEAVES.iter().chain(SURFACE).chain(LISTENERS) {
        assert!(
            LEAVES.contains(m) != SURFACE.contains(m) || LISTENERS.contains(m),
            "{m} is in two groups"
        );
    }
    let edges = edges();
    println!("measured edges:\n{}", edge_table(&edges));
    let mut problems = Vec::new();
    for e in &edges {
        if let Some(why) = forbidden(&e.from, &e.to) {
            problems.push(format!("{}: {} ({why})", e.at, e.path));
        }
        // Rule 9: config names runtime types (and constants), never
        // functions: a path that reaches no capitalised name calls or
        // reaches code.
        let names_a_type = e
            .path
            .split("::")
            .skip(2)
            .any(|s| s.starts_with(|c: char| c.is_ascii_uppercase()));
        if e.from == "config" && !LEAVES.contains(&e.to.as_str()) && !names_a_type {
            problems.push(format!(
                "{}: {} (rule 9: config names other modules' types, not their functions)",
                e.at, e.path
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "forbidden imports:\n  {}\n\nmeasured edges:\n{}",
        problems.join("\n  "),
        edge_table(&edges)
    );
}

/// The file of a folder that item `name` of it lives in: a file of that
/// name, or the file `mod.rs` re-exports it from (`None`: `mod.rs`
/// itself).
fn folder_file(
    name: &str,
    files: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
) -> Option<String> {
    if files.contains(name) {
        return Some(name.to_string());
    }
    reexports.get(name).cloned()
}

/// Every folder of `src/` that is a module (has a `mod.rs`), with its
/// module path (`["queue", "database"]`).
fn module_folders() -> Vec<(PathBuf, Vec<String>)> {
    let mut out = Vec::new();
    let mut stack = vec![(src(), Vec::new())];
    while let Some((dir, path)) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() && p.join("mod.rs").is_file() {
                let mut sub = path.clone();
                sub.push(entry.file_name().to_string_lossy().into_owned());
                out.push((p.clone(), sub.clone()));
                stack.push((p, sub));
            }
        }
    }
    out.sort();
    out
}

/// Which file of the folder `dir` (module path `module`) imports which,
/// with where: `super::FILE` and `crate::MODULE::FILE` paths, items
/// re-exported by `mod.rs` counted as their file's.
fn folder_graph(dir: &Path, module: &[String]) -> BTreeMap<String, BTreeMap<String, String>> {
    let files: BTreeSet<String> = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|s| s != "mod")
        .collect();
    // `pub use FILE::{Item, …}` in mod.rs: where each item lives.
    let mut reexports = BTreeMap::new();
    for (_, path) in paths_in(&code_lines(&dir.join("mod.rs")), "pub use ") {
        if let [file, .., item] = path.as_slice()
            && files.contains(file)
        {
            reexports.insert(item.clone(), file.clone());
        }
    }
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for file in &files {
        let path = dir.join(format!("{file}.rs"));
        let lines = code_lines(&path);
        let mut found = paths_in(&lines, "super::");
        for (line, p) in paths_in(&lines, "crate::") {
            if p.starts_with(module) {
                found.push((line, p[module.len()..].to_vec()));
            }
        }
        for (line, p) in found {
            let Some(first) = p.first() else { continue };
            if let Some(to) = folder_file(first, &files, &reexports)
                && to != *file
            {
                graph
                    .entry(file.clone())
                    .or_default()
                    .entry(to)
                    .or_insert(format!("{}:{line}", shown(&path)));
            }
        }
    }
    graph
}

/// The import loops of one folder's `graph`: pairs that import each other
/// (those in `known` apart), and files that reach themselves past two
/// others.
fn loops_in(
    folder: &str,
    graph: &BTreeMap<String, BTreeMap<String, String>>,
    known: &[(&str, &str)],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (a, outs) in graph {
        for (b, at) in outs {
            if a < b
                && let Some(back) = graph.get(b).and_then(|o| o.get(a))
                && !known.contains(&(a.as_str(), b.as_str()))
            {
                problems.push(format!("{folder}: {a} <-> {b}: {at} and {back}"));
            }
        }
    }
    // A known pair is one unit: its edges do not make longer loops.
    let mut graph = graph.clone();
    for (a, b) in known {
        for (from, to) in [(a, b), (b, a)] {
            if let Some(outs) = graph.get_mut(*from) {
                outs.remove(*to);
            }
        }
    }
    for start in graph.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = stack.pop() {
            for next in graph.get(&at).into_iter().flat_map(BTreeMap::keys) {
                if next == start && trail.len() > 2 {
                    problems.push(format!("{folder}: loop: {} -> {start}", trail.join(" -> ")));
                } else if seen.insert(next.clone()) {
                    let mut t = trail.clone();
                    t.push(next.clone());
                    stack.push((next.clone(), t));
                }
            }
        }
    }
    problems
}

/// In every folder of `src/`, no file reaches itself through imports
/// (the loops of [`KNOWN_CYCLES`] apart, each a decision named there).
#[test]
fn files_of_a_folder_import_each_other_in_one_direction() {
    let mut problems = Vec::new();
    let mut edges = String::new();
    for (folder, (a, b)) in KNOWN_CYCLES.iter().map(|(f, a, b)| (f, (a, b))) {
        let dir = src().join(folder);
        let module: Vec<String> = folder.split('/').map(str::to_string).collect();
        let graph = folder_graph(&dir, &module);
        let found = graph.get(*a).is_some_and(|o| o.contains_key(*b))
            && graph.get(*b).is_some_and(|o| o.contains_key(*a));
        if !found {
            problems.push(format!(
                "KNOWN_CYCLES entry no longer needed: {folder}: {a} <-> {b}"
            ));
        }
    }
    for (dir, module) in module_folders() {
        let folder = module.join("/");
        let graph = folder_graph(&dir, &module);
        let known: Vec<(&str, &str)> = KNOWN_CYCLES
            .iter()
            .filter(|(f, ..)| *f == folder)
            .map(|(_, a, b)| (*a, *b))
            .collect();
        let found = loops_in(&folder, &graph, &known);
        if !found.is_empty() {
            for (a, outs) in &graph {
                for (b, at) in outs {
                    edges.push_str(&format!("  {folder}: {a} -> {b} ({at})\n"));
                }
            }
        }
        problems.extend(found);
    }
    assert!(
        problems.is_empty(),
        "import cycles between the files of a folder:\n  {}\n\nmeasured edges:\n{edges}",
        problems.join("\n  ")
    );
}

/// Every function in `src/` with its length: `(lines, file, line, name)`,
/// counted from its signature to its closing brace, test-only items left
/// out.
fn functions() -> Vec<(usize, String, usize, String)> {
    let mut out = Vec::new();
    for file in rust_files(&src()) {
        let lines = code_lines(&file);
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            let mut depth = 0i64;
            let mut started = false;
            for (j, l) in lines.iter().enumerate().skip(i) {
                if !started && l.contains(';') && !l.contains('{') {
                    break;
                }
                depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
                started |= l.contains('{');
                if started && depth <= 0 {
                    out.push((j - i + 1, shown(&file), i + 1, name.clone()));
                    break;
                }
            }
        }
    }
    out.sort_by(|a, b| b.cmp(a));
    out
}

/// The name of the function a line declares, if it declares one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        let qualifier = *w == "pub"
            || w.starts_with("pub(")
            || ["const", "async", "unsafe", "extern"].contains(w);
        if !qualifier {
            break;
        }
        words.next();
    }
    if words.next()? != "fn" {
        return None;
    }
    let name: String = words
        .next()?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// No function over [`MAX_FN_LINES`] lines but those of [`LONG_FNS`]; and
/// each of those still is long (else its entry goes).
#[test]
fn functions_are_short() {
    let all = functions();
    let long: Vec<_> = all.iter().filter(|f| f.0 > MAX_FN_LINES).collect();
    let too_long: Vec<String> = long
        .iter()
        .filter(|(_, file, _, name)| !LONG_FNS.contains(&(file.as_str(), name.as_str())))
        .map(|(n, file, line, name)| format!("{file}:{line}: fn {name}: {n} lines"))
        .collect();
    let stale: Vec<String> = LONG_FNS
        .iter()
        .filter(|(file, name)| !long.iter().any(|f| f.1 == *file && f.3 == *name))
        .map(|(file, name)| format!("{file}: fn {name}"))
        .collect();
    let top: String = all
        .iter()
        .take(10)
        .map(|(n, file, line, name)| format!("  {n} {file}:{line} {name}\n"))
        .collect();
    assert!(
        too_long.is_empty() && stale.is_empty(),
        "functions over {MAX_FN_LINES} lines:\n  {}\nLONG_FNS entries no longer needed:\n  {}\n\nthe ten longest:\n{top}",
        too_long.join("\n  "),
        stale.join("\n  ")
    );
}

/// The parser's own check: `#[cfg(test)]` hides the item it is on (a
/// function, a module, a `mod tests;`), and only that item.
#[test]
fn a_test_only_item_hides_only_itself() {
    let text = "fn a() {}\n\
                #[cfg(test)]\n\
                pub fn only_in_tests() {\n    let x = { 1 };\n}\n\
                fn b() { crate::x::y(); }\n\
                #[cfg(test)] mod inline { fn c() {} }\n\
                #[cfg(test)]\n#[path = \"t.rs\"]\nmod tests;\n\
                fn d() {}\n";
    let path = std::env::temp_dir().join(format!("architecture-{}.rs", std::process::id()));
    fs::write(&path, text).unwrap();
    let lines = code_lines(&path);
    let _ = fs::remove_file(&path);
    let kept: Vec<&str> = lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        kept,
        ["fn a() {}", "fn b() { crate::x::y(); }", "fn d() {}"],
        "{lines:#?}"
    );
    assert_eq!(lines.len(), text.lines().count(), "line numbers kept");
}

/// The module table of `docs/src/development.md` (Architecture →
/// Modules): `(module, layer)` per row, the module as the row writes it
/// (`src/worker/lease.rs`, a folder as `src/worker/`).
fn module_table() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/development.md");
    let text = fs::read_to_string(&path).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut cells = line.strip_prefix("| `src/")?.split('|');
            let module = cells.next()?.trim().trim_end_matches('`');
            let layer = cells.next()?.trim();
            Some((format!("src/{module}"), layer.to_string()))
        })
        .collect()
}

/// Every module of `src/` as the table names it: each `.rs` file, a
/// `mod.rs` by its folder.
fn module_paths() -> BTreeSet<String> {
    rust_files(&src())
        .iter()
        .map(|file| {
            let shown = shown(file);
            match shown.strip_suffix("/mod.rs") {
                Some(folder) => format!("{folder}/"),
                None => shown,
            }
        })
        .collect()
}

/// The layer a module's row must give: the rule that places its top-level
/// module (as [`forbidden`] applies it), then the rule's name.
fn layer_of(module: &str) -> String {
    let rest = module.trim_start_matches("src/");
    let first = rest.split('/').next().unwrap_or(rest);
    let top = first.strip_suffix(".rs").unwrap_or(first);
    if top == "lib" || top == "main" {
        return "crate root".to_string();
    }
    let rule = if LEAVES.contains(&top) {
        "1"
    } else if SURFACE.contains(&top) {
        "11"
    } else {
        match LAYERS.iter().find(|(m, ..)| *m == top) {
            Some((_, rule, _)) => rule,
            None => return format!("no layer (add {top} to LAYERS)"),
        }
    };
    let name = RULE_NAMES
        .iter()
        .find(|(n, _)| *n == rule)
        .map_or("?", |(_, name)| name);
    format!("{rule} {name}")
}

/// The rules of the book's Architecture section, by number, as the module
/// table names them.
const RULE_NAMES: &[(&str, &str)] = &[
    ("1", "leaf"),
    ("2", "connections"),
    ("3", "queue"),
    ("4", "stores"),
    ("5", "process"),
    ("6", "handler"),
    ("7", "worker"),
    ("8", "listeners"),
    ("9", "config"),
    ("10", "app"),
    ("11", "surface"),
];

/// The module table covers every module of `src/`, names no module that
/// is gone, lists each once, and gives each the layer these rules apply.
#[test]
fn every_module_has_a_row_in_the_module_table() {
    let table = module_table();
    let modules = module_paths();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (module, layer) in &table {
        if !seen.insert(module.as_str()) {
            problems.push(format!("{module}: two rows"));
        }
        if !modules.contains(module) {
            problems.push(format!("{module}: a row for a module that does not exist"));
        } else if *layer != layer_of(module) {
            problems.push(format!(
                "{module}: the row says layer {layer:?}, the rules place it in {:?}",
                layer_of(module)
            ));
        }
    }
    for module in modules.iter().filter(|m| !seen.contains(m.as_str())) {
        problems.push(format!(
            "{module}: no row (add `| `{module}` | {} | its job |`)",
            layer_of(module)
        ));
    }
    assert!(
        problems.is_empty(),
        "the module table of docs/src/development.md (Architecture → Modules):\n  {}",
        problems.join("\n  ")
    );
}
