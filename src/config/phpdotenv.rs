//! The `.env` dialect Laravel reads (phpdotenv 5), and `env()`'s literals.
//!
//! The grammar, as phpdotenv's `Lines`, `EntryParser`, `Lexer` and
//! `Resolver` have it:
//!
//! - a UTF-8 BOM at the start is dropped; lines end at `\r\n`, `\n` or `\r`;
//!   blank lines and lines whose first non-blank character is `#` are
//!   skipped;
//! - a line with `="` whose quotes do not close on it starts a multi-line
//!   value that runs to the next line with an unescaped `"` (lines joined
//!   with `\n`);
//! - `NAME=value`: both sides trimmed; `export NAME` and `"NAME"`/`'NAME'`
//!   are accepted; a name is `[A-Za-z0-9_.]+`; `NAME` alone (no `=`) unsets
//!   the variable;
//! - an unquoted value ends at whitespace (only a `#` comment may follow)
//!   or at `#`, even with no space before it (`abc#def` is `abc`);
//! - single quotes keep everything as written; double quotes take the
//!   escapes `\"`, `\\`, `\$`, `\f`, `\n`, `\r`, `\t`, `\v` (any other is an
//!   error); after a closing quote only whitespace and a comment may come;
//! - `${NAME}` in an unquoted or double-quoted value is replaced by the
//!   variable's value (the process environment first, then the lines above);
//!   an undefined variable stays written as `${NAME}`; a bare `$` is kept.
//!
//! Loading is immutable, as Laravel's repository is: a variable already in
//! the process environment keeps its value; a later line overrides an
//! earlier one.
//!
//! Errors name the line and the variable, never the value (it may be a
//! password).

use std::collections::HashMap;

/// A value as Laravel's `env()` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// `null` or `(null)` (any case).
    Null,
    /// `true`, `(true)`, `false`, `(false)` (any case).
    Bool(bool),
    /// Anything else; `empty`/`(empty)` give `""`, and one pair of matching
    /// quotes around the whole value is removed.
    Str(String),
}

/// `Env::get`'s conversion of a raw value.
pub fn env_value(raw: &str) -> EnvValue {
    match raw.to_ascii_lowercase().as_str() {
        "true" | "(true)" => return EnvValue::Bool(true),
        "false" | "(false)" => return EnvValue::Bool(false),
        "empty" | "(empty)" => return EnvValue::Str(String::new()),
        "null" | "(null)" => return EnvValue::Null,
        _ => {}
    }
    // `/\A(['"])(.*)\1\z/`: `.` does not match a newline.
    let bytes = raw.as_bytes();
    if bytes.len() >= 2
        && matches!(bytes[0], b'\'' | b'"')
        && bytes[bytes.len() - 1] == bytes[0]
        && !raw[1..raw.len() - 1].contains('\n')
    {
        return EnvValue::Str(raw[1..raw.len() - 1].to_string());
    }
    EnvValue::Str(raw.to_string())
}

/// The value a setting reads from `raw`, as the string Laravel's config
/// would hold: `None` for `null`; `"true"`/`"false"` for the booleans.
pub fn setting_value(raw: &str) -> Option<String> {
    match env_value(raw) {
        EnvValue::Null => None,
        EnvValue::Bool(b) => Some(b.to_string()),
        EnvValue::Str(s) => Some(s),
    }
}

/// A `.env` that phpdotenv (and so Laravel) refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}{name}: {cause}")]
pub struct ParseError {
    /// 1-based line number where the entry starts.
    pub line: usize,
    /// ` (NAME)` when the name was read, else empty.
    pub name: String,
    /// What is wrong, without the value.
    pub cause: &'static str,
}

/// Parses `text` and loads it as Laravel does: `process` looks a variable up
/// in the process environment. Returns every variable the file sets, with
/// its raw (interpolated) value; for a name the process environment already
/// has, that value.
///
/// # Errors
/// A line phpdotenv refuses ([`ParseError`]).
pub fn load(
    text: &str,
    process: impl Fn(&str) -> Option<String>,
) -> Result<HashMap<String, String>, ParseError> {
    let mut vars: HashMap<String, String> = HashMap::new();
    for (_, name, value) in entries(text)? {
        if let Some(external) = process(&name) {
            vars.insert(name, external);
            continue;
        }
        match value {
            Some(value) => {
                let resolved = resolve(&value, |n| process(n).or_else(|| vars.get(n).cloned()));
                vars.insert(name, resolved);
            }
            None => {
                vars.remove(&name);
            }
        }
    }
    Ok(vars)
}

/// A parsed value: its characters and the byte offsets of its `$` signs
/// that may start an interpolation.
#[derive(Debug, Default)]
struct Value {
    chars: String,
    vars: Vec<usize>,
}

/// `(line number, name, value)` of each entry; `None`: unset.
fn entries(text: &str) -> Result<Vec<(usize, String, Option<Value>)>, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut buffer: Vec<&str> = Vec::new();
    let mut start = 0;
    let mut multiline = false;
    for (i, line) in split_lines(text).into_iter().enumerate() {
        let started = looks_like_multiline_start(line);
        if started {
            multiline = true;
        }
        let entry = if multiline {
            if buffer.is_empty() {
                start = i + 1;
            }
            buffer.push(line);
            if looks_like_multiline_stop(line, started) {
                multiline = false;
                let joined = buffer.join("\n");
                buffer.clear();
                Some((start, joined))
            } else {
                None
            }
        } else {
            Some((i + 1, line.to_string()))
        };
        if multiline {
            continue;
        }
        if let Some((number, entry)) = entry {
            let trimmed = php_trim(&entry);
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let (name, value) = parse_entry(&entry).map_err(|(name, cause)| ParseError {
                line: number,
                name: name.map(|n| format!(" ({n}=***)")).unwrap_or_default(),
                cause,
            })?;
            out.push((number, name, value));
        }
    }
    Ok(out)
}

/// Lines split at `\r\n`, `\n` or `\r`.
fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['\r', '\n']) {
        lines.push(&rest[..i]);
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
    }
    lines.push(rest);
    lines
}

fn looks_like_multiline_start(line: &str) -> bool {
    line.contains("=\"") && !looks_like_multiline_stop(line, true)
}

/// Counts the `"` not preceded by a backslash (after removing `\\` pairs)
/// and not at the start.
fn looks_like_multiline_stop(line: &str, started: bool) -> bool {
    if line == "\"" {
        return true;
    }
    let cleaned = line.replace("\\\\", "");
    let b = cleaned.as_bytes();
    let count = (1..b.len())
        .filter(|&i| b[i] == b'"' && b[i - 1] != b'\\')
        .count();
    if started { count > 1 } else { count >= 1 }
}

/// PHP's `trim()`: spaces, tabs, newlines, NUL and vertical tabs.
fn php_trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r', '\0', '\x0B'])
}

/// PHP's `ctype_space` for one character.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0B' | '\x0C')
}

type EntryError = (Option<String>, &'static str);

fn parse_entry(entry: &str) -> Result<(String, Option<Value>), EntryError> {
    let (name, value) = match entry.split_once('=') {
        Some((name, value)) => (php_trim(name), Some(php_trim(value))),
        None => (entry, None),
    };
    if name.is_empty() {
        return Err((None, "an unexpected equals"));
    }
    let name = parse_name(name).ok_or((None, "an invalid name"))?;
    let value = match value {
        None => None,
        Some(v) => Some(parse_value(v).map_err(|cause| (Some(name.clone()), cause))?),
    };
    Ok((name, value))
}

fn parse_name(name: &str) -> Option<String> {
    let mut name = name;
    let chars: Vec<char> = name.chars().collect();
    if chars.len() > 8 && name.starts_with("export") && is_space(chars[6]) {
        name = name[6..].trim_start_matches([' ', '\t', '\n', '\r', '\0', '\x0B']);
    }
    let n = name.chars().count();
    if n >= 3
        && ((name.starts_with('"') && name.ends_with('"'))
            || (name.starts_with('\'') && name.ends_with('\'')))
    {
        name = &name[1..name.len() - 1];
    }
    (!name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
    .then(|| name.to_string())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Initial,
    Unquoted,
    SingleQuoted,
    DoubleQuoted,
    Escape,
    Whitespace,
    Comment,
}

/// phpdotenv's lexer: runs of newlines, runs of other whitespace, `\`,
/// `'`, `"`, `#`, `$`, and runs of anything else.
fn lex(value: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let mut rest = value;
    while let Some(c) = rest.chars().next() {
        let class = |c: char| -> u8 {
            match c {
                '\r' | '\n' => 0,
                c if c.is_whitespace() && is_pcre_space(c) => 1,
                '\\' | '\'' | '"' | '#' | '$' => 2,
                _ => 3,
            }
        };
        let kind = class(c);
        let len = if kind == 2 {
            c.len_utf8()
        } else {
            rest.char_indices()
                .find(|&(_, d)| class(d) != kind)
                .map_or(rest.len(), |(i, _)| i)
        };
        tokens.push(&rest[..len]);
        rest = &rest[len..];
    }
    tokens
}

/// `\s` of PCRE without the `u` flag: ASCII whitespace only.
fn is_pcre_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0B' | '\x0C')
}

fn parse_value(value: &str) -> Result<Value, &'static str> {
    let mut out = Value::default();
    if value.is_empty() {
        return Ok(out);
    }
    let mut state = State::Initial;
    for token in lex(value) {
        let (chars, var, next): (&str, bool, State) = match state {
            State::Initial | State::Unquoted => match token {
                "'" if state == State::Initial => ("", false, State::SingleQuoted),
                "\"" if state == State::Initial => ("", false, State::DoubleQuoted),
                "#" => ("", false, State::Comment),
                "$" => (token, true, State::Unquoted),
                t if state == State::Unquoted && t.chars().all(is_space) => {
                    ("", false, State::Whitespace)
                }
                t => (t, false, State::Unquoted),
            },
            State::SingleQuoted => match token {
                "'" => ("", false, State::Whitespace),
                t => (t, false, State::SingleQuoted),
            },
            State::DoubleQuoted => match token {
                "\"" => ("", false, State::Whitespace),
                "\\" => ("", false, State::Escape),
                "$" => (token, true, State::DoubleQuoted),
                t => (t, false, State::DoubleQuoted),
            },
            State::Escape => match token {
                "\"" | "\\" | "$" => (token, false, State::DoubleQuoted),
                t => {
                    let escaped = match t.chars().next() {
                        Some('f') => '\x0C',
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        Some('v') => '\x0B',
                        _ => return Err("an unexpected escape sequence"),
                    };
                    out.chars.push(escaped);
                    (&t[1..], false, State::DoubleQuoted)
                }
            },
            State::Whitespace => match token {
                "#" => ("", false, State::Comment),
                t if t.chars().all(is_space) => ("", false, State::Whitespace),
                _ => return Err("unexpected whitespace"),
            },
            State::Comment => ("", false, State::Comment),
        };
        if var {
            out.vars.push(out.chars.len());
        }
        out.chars.push_str(chars);
        state = next;
    }
    if matches!(
        state,
        State::SingleQuoted | State::DoubleQuoted | State::Escape
    ) {
        return Err("a missing closing quote");
    }
    Ok(out)
}

/// Replaces `${NAME}` at each recorded `$`, last first; an undefined name
/// stays as written.
fn resolve(value: &Value, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut s = value.chars.clone();
    let mut positions = value.vars.clone();
    positions.sort_unstable_by(|a, b| b.cmp(a));
    for i in positions {
        let rest = &s[i..];
        let Some(inner) = rest.strip_prefix("${") else {
            continue;
        };
        let Some(end) = inner.find('}') else { continue };
        let name = &inner[..end];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            continue;
        }
        if let Some(found) = lookup(name) {
            let after = i + 2 + end + 1;
            s = format!("{}{found}{}", &s[..i], &s[after..]);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Option<String> {
        load(line, |_| None).unwrap().remove("A")
    }

    #[test]
    fn the_issue_examples() {
        assert_eq!(one("A=pa$word1").as_deref(), Some("pa$word1"));
        assert_eq!(one("A=\"pa$word1\"").as_deref(), Some("pa$word1"));
        assert_eq!(one("A=abc#def").as_deref(), Some("abc"));
        assert_eq!(one("A=${UNDEFINED}").as_deref(), Some("${UNDEFINED}"));
        assert_eq!(one("\u{feff}A=1").as_deref(), Some("1"));
        assert_eq!(setting_value("null"), None);
        assert_eq!(setting_value("(NULL)"), None);
        assert_eq!(setting_value("'quoted'").as_deref(), Some("quoted"));
    }

    #[test]
    fn errors_do_not_show_the_value() {
        let e = load("A=1\nREDIS_PASSWORD=\"s3cret\" pw\n", |_| None).unwrap_err();
        assert_eq!(e.line, 2);
        let text = e.to_string();
        assert!(text.contains("REDIS_PASSWORD"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
        let e = load("DB_PASSWORD=\"a\\qb\"", |_| None).unwrap_err();
        assert_eq!(e.cause, "an unexpected escape sequence");
        assert!(!e.to_string().contains("a\\qb"));
    }
}
