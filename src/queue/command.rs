//! `data.command` as plain JSON, for handlers that are not PHP.
//!
//! Laravel stores a queued object as PHP's `serialize()` text in
//! `data.command` (`O:16:"App\Jobs\SendMail":2:{s:4:"user";i:5;...}`). This
//! module reads that text into JSON text without running PHP:
//!
//! | PHP                       | JSON                                           |
//! |---------------------------|------------------------------------------------|
//! | `N;`                      | `null`                                         |
//! | `b:1;` `i:5;` `d:1.5;`    | `true`, `5`, `1.5` (INF and NAN become `null`) |
//! | `s:3:"abc";`              | `"abc"` (bytes that are not UTF-8 are replaced) |
//! | `a:2:{i:0;…;i:1;…}`       | `[…, …]` when the keys are 0, 1, 2…; else `{…}` |
//! | `O:3:"Foo":1:{…}`         | `{"__class": "Foo", …properties}`              |
//! | `E:9:"Enum:Case";`        | `{"__enum": "Enum:Case"}`                      |
//! | `C:3:"Foo":5:{…}`         | `{"__class": "Foo", "__serialized": "…"}`      |
//! | `r:2;` `R:2;`             | `{"__ref": 2}`                                 |
//!
//! Keys keep PHP's order. Private and protected property names lose PHP's
//! `\0Class\0` and `\0*\0` markers. An encrypted command
//! (`ShouldBeEncrypted`, not starting with `O:`) cannot be read without the
//! app key and is not decoded.
//!
//! What PHP's `unserialize()` refuses (a malformed value, a key that is not
//! an integer or a string, `b:2;`) is refused here too; like PHP, an integer
//! out of range saturates and bytes after the value are ignored. The text is
//! read without building a tree. Most commands' arrays are lists (keys 0,
//! 1, 2…, or none), so [`decode`] first writes every array as a list in one
//! pass, turning an array into an object when its first key is not 0 (as
//! an array with string keys). An array whose keys stop counting later, or
//! anything PHP would refuse, drops that output, and the text is read
//! twice: once to check it and find which arrays are lists, once to write
//! the JSON. Nesting is limited to
//! [`MAX_DEPTH`] levels, so no input can exhaust the stack, and the output
//! is at most a few times the size of the input.

mod input;

use std::borrow::Cow;
use std::io::Write;

use serde_json::value::RawValue;

use input::{Input, Span};

/// PHP's serialized text of a command, as the reader is given it.
#[derive(Debug, Clone, Copy)]
pub enum Text<'a> {
    /// PHP's bytes as they are.
    Plain(&'a [u8]),
    /// The body of the JSON string that holds them (between its quotes),
    /// still escaped: how `data.command` sits in a payload. Read as it
    /// stands, without an unescaped copy (see `input`).
    JsonEscaped(&'a [u8]),
}

impl<'a> Text<'a> {
    fn input(self) -> Input<'a> {
        match self {
            Text::Plain(text) => Input::plain(text),
            Text::JsonEscaped(body) => Input::json_escaped(body),
        }
    }

    /// Whether the text starts with `O:`, as a serialized object does.
    fn is_object(self) -> bool {
        let mut input = self.input();
        input.next() == Some(b'O') && input.next() == Some(b':')
    }
}

/// The deepest nesting of JSON arrays and objects a decoded command may
/// have. PHP's `json_decode()` accepts 511 levels (its default depth of
/// 512); a persistent handler's request line wraps the command in one more
/// object, so 510 keeps that line readable by PHP. PHP's own
/// `unserialize()` stops at 4096 (`unserialize_max_depth`); a command
/// between the two runs as usual but is not decoded.
pub const MAX_DEPTH: usize = 510;

/// Why a command was not decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// Not PHP serialized object text (an encrypted command, or none).
    #[error("the command is not a serialized object (encrypted?)")]
    NotAnObject,
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("the command is nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// Text PHP's `unserialize()` would refuse; says where.
    #[error("the command is not valid serialized PHP: {0}")]
    Malformed(String),
    /// The JSON could not be written where [`decode_to`] was told to.
    #[error("cannot write the decoded command: {0}")]
    Write(String),
}

/// Decodes the serialized object text of `data.command` into JSON.
///
/// # Errors
/// [`CommandError::NotAnObject`] for text that does not start with `O:`
/// (an encrypted command), [`CommandError::TooDeep`] past [`MAX_DEPTH`],
/// [`CommandError::Malformed`] for anything PHP would not unserialize.
pub fn decode(text: Text<'_>) -> Result<Box<RawValue>, CommandError> {
    if !text.is_object() {
        return Err(CommandError::NotAnObject);
    }
    read_value(text)
}

/// Decodes like [`decode`], writing the JSON to `sink` in pieces of about
/// [`PIECE`] bytes rather than holding it: for a command of megabytes, the
/// worker then holds its text but not its JSON too. The text is checked
/// whole before the first byte is written, so a command that cannot be
/// decoded writes nothing.
///
/// # Errors
/// As [`decode`]; [`CommandError::Write`] when `sink` fails, after which
/// what was written is a prefix of the JSON.
pub fn decode_to(text: Text<'_>, sink: &mut dyn Write) -> Result<(), CommandError> {
    if !text.is_object() {
        return Err(CommandError::NotAnObject);
    }
    let lists = check(text)?;
    let mut write = Reader::new(text, Pass::write(lists, Vec::with_capacity(2 * PIECE)));
    write.sink = Some(sink);
    write.run()?;
    write.flush(0)
}

/// Whether [`decode`] would decode `text`, found by reading it once
/// without writing anything.
///
/// # Errors
/// As [`decode`].
pub fn check_decodes(text: Text<'_>) -> Result<(), CommandError> {
    if !text.is_object() {
        return Err(CommandError::NotAnObject);
    }
    check(text).map(drop)
}

/// Bytes of JSON [`decode_to`] gathers before it writes them.
pub const PIECE: usize = 64 * 1024;

/// Pass 1: checks `text` and notes which arrays are lists.
fn check(text: Text<'_>) -> Result<Vec<bool>, CommandError> {
    let mut check = Reader::new(text, Pass::Check(Vec::new()));
    check.run()?;
    let Pass::Check(lists) = check.pass else {
        unreachable!("pass 1 keeps its pass")
    };
    Ok(lists)
}

/// Reads one serialized value of any type into JSON text.
///
/// # Errors
/// As [`decode`], except that any type is accepted at the top.
pub fn unserialize(text: &[u8]) -> Result<Box<RawValue>, CommandError> {
    read_value(Text::Plain(text))
}

fn read_value(text: Text<'_>) -> Result<Box<RawValue>, CommandError> {
    let size = match text {
        Text::Plain(bytes) | Text::JsonEscaped(bytes) => bytes.len(),
    };
    let out = match write_guessing_lists(text, Vec::with_capacity(size + size / 8)) {
        Ok(out) => out,
        Err(mut out) => {
            out.clear();
            write_checked(text, out)?
        }
    };
    let json = String::from_utf8(out).map_err(|e| CommandError::Malformed(e.to_string()))?;
    // Re-reading the output costs one more pass and guarantees valid JSON
    // (serde_json checks it without recursing).
    RawValue::from_string(json).map_err(|e| CommandError::Malformed(e.to_string()))
}

/// One pass that writes every array as a list, or as an object when its
/// first key is not 0: the whole JSON when that held, else (a later key
/// that is not the next index, or text PHP would refuse) `Err` with the
/// output buffer back, for [`write_checked`] to reuse.
fn write_guessing_lists(text: Text<'_>, out: Vec<u8>) -> Result<Vec<u8>, Vec<u8>> {
    let mut guess = Reader::new(text, Pass::Guess(out));
    let done = guess.run();
    let Pass::Guess(out) = guess.pass else {
        unreachable!("the guessing pass keeps its pass")
    };
    match done {
        Ok(()) => Ok(out),
        Err(_) => Err(out),
    }
}

/// Two passes: pass 1 checks everything and notes which arrays are lists;
/// pass 2 writes to `out`. Pass 2 reads what pass 1 accepted, so it cannot
/// fail except on a bug, which then shows as an error, not as bad JSON.
fn write_checked(text: Text<'_>, out: Vec<u8>) -> Result<Vec<u8>, CommandError> {
    let lists = check(text)?;
    let mut write = Reader::new(text, Pass::write(lists, out));
    write.run()?;
    let Pass::Write { out, .. } = write.pass else {
        unreachable!("pass 2 keeps its pass")
    };
    Ok(out)
}

enum Pass {
    /// Pass 1: one entry per array, in the order they open: is it a list?
    Check(Vec<bool>),
    /// The single pass of [`write_guessing_lists`]: every array written as
    /// a list (or an object from its first key), into the output.
    Guess(Vec<u8>),
    /// Pass 2: the list flags of pass 1, the next to use, and the output.
    Write {
        lists: Vec<bool>,
        next: usize,
        out: Vec<u8>,
    },
}

impl Pass {
    fn write(lists: Vec<bool>, out: Vec<u8>) -> Self {
        Pass::Write {
            lists,
            next: 0,
            out,
        }
    }
}

/// An array or object whose entries are being read.
#[derive(Default)]
struct Open {
    kind: Kind,
    /// Entries still to read.
    left: usize,
    /// Entries read so far.
    at: usize,
}

#[derive(Clone, Copy, Default)]
enum Kind {
    /// `slot`: its list flag in the check pass; `list`: whether its keys
    /// so far are 0, 1, 2…; `written_as_list`: what the check pass found.
    Array {
        slot: usize,
        list: bool,
        written_as_list: bool,
    },
    #[default]
    Object,
}

/// An array or object key, as PHP stores it.
enum Key<'a> {
    Int(i64),
    Str(Cow<'a, [u8]>),
}

struct Reader<'a, 's> {
    input: Input<'a>,
    pass: Pass,
    /// Where the write pass sends its output once it holds [`PIECE`]
    /// bytes ([`decode_to`]); `None` keeps it all.
    sink: Option<&'s mut dyn Write>,
}

impl<'a, 's> Reader<'a, 's> {
    fn new(text: Text<'a>, pass: Pass) -> Self {
        Reader {
            input: text.input(),
            pass,
            sink: None,
        }
    }

    /// Sends the output gathered so far to the sink, if there is one and
    /// the output holds at least `least` bytes.
    fn flush(&mut self, least: usize) -> Result<(), CommandError> {
        let (Some(sink), Pass::Write { out, .. }) = (self.sink.as_mut(), &mut self.pass) else {
            return Ok(());
        };
        if out.len() < least.max(1) {
            return Ok(());
        }
        sink.write_all(out)
            .map_err(|e| CommandError::Write(e.to_string()))?;
        out.clear();
        Ok(())
    }

    fn out(&mut self) -> Option<&mut Vec<u8>> {
        match &mut self.pass {
            Pass::Check(_) => None,
            Pass::Guess(out) | Pass::Write { out, .. } => Some(out),
        }
    }

    fn raw(&mut self, s: &str) {
        if let Some(out) = self.out() {
            out.extend_from_slice(s.as_bytes());
        }
    }

    /// Writes a string the text holds, in pieces when it is long and the
    /// output goes to a sink, so that neither it nor its JSON is held whole.
    fn string_out(&mut self, span: &Span<'a>) -> Result<(), CommandError> {
        if self.sink.is_none() || span.len() <= PIECE {
            if self.out().is_some() {
                let bytes = span.bytes();
                self.string_out_bytes(&bytes);
            }
            return Ok(());
        }
        // Each piece is cut where a character may still be incomplete; the
        // at most 3 bytes after the cut start the next piece.
        let mut carry: Vec<u8> = Vec::with_capacity(PIECE + 4);
        let mut escaped = Vec::with_capacity(6 * (PIECE + 4) + 2);
        self.raw("\"");
        let mut write = |reader: &mut Self, bytes: &[u8]| {
            escaped.clear();
            write_str(&mut escaped, bytes);
            if let Some(out) = reader.out() {
                // Without the quotes put around the piece.
                out.extend_from_slice(&escaped[1..escaped.len() - 1]);
            }
            reader.flush(PIECE)
        };
        span.pieces(PIECE, |piece| {
            carry.extend_from_slice(piece);
            let cut = complete_up_to(&carry);
            write(self, &carry[..cut])?;
            carry.drain(..cut);
            Ok(())
        })?;
        write(self, &carry)?;
        self.raw("\"");
        Ok(())
    }

    fn string_out_bytes(&mut self, bytes: &[u8]) {
        if let Some(out) = self.out() {
            write_str(out, bytes);
        }
    }

    /// Reads the whole value with an explicit stack of open arrays and
    /// objects (no recursion), writing JSON in the write pass.
    fn run(&mut self) -> Result<(), CommandError> {
        let mut open: Vec<Open> = Vec::new();
        loop {
            // A value: a scalar, or the head of a container.
            if let Some(container) = self.value_head(open.len())? {
                open.push(container);
            }
            self.flush(PIECE)?;
            // Then close what is complete and read the next key.
            loop {
                let Some(top) = open.last_mut() else {
                    return Ok(());
                };
                if top.left == 0 {
                    let done = open.pop().unwrap_or_default();
                    self.expect(b'}')?;
                    self.close(&done);
                    continue;
                }
                let first = top.at == 0;
                top.at += 1;
                top.left -= 1;
                let at = top.at - 1;
                let key = self.key()?;
                let kind = self.judge_key(top, &key, at, first)?;
                if !first || matches!(kind, Kind::Object) {
                    self.raw(",");
                }
                match kind {
                    Kind::Array {
                        written_as_list: true,
                        ..
                    } => {}
                    Kind::Array { .. } => {
                        self.key_out(&key, false)?;
                        self.raw(":");
                    }
                    Kind::Object => {
                        self.key_out(&key, true)?;
                        self.raw(":");
                    }
                }
                break;
            }
        }
    }

    /// Notes whether `key`, entry `at` of `top`, keeps an array a list;
    /// returns how `top` is written from here on. The guessing pass writes
    /// every array as a list: one found not to be at its first key (an
    /// array with string keys) becomes an object on the spot, its `[` being
    /// the last byte written; one found later ends the pass. The two passes
    /// meet neither case: pass 1 saw these keys.
    fn judge_key(
        &mut self,
        top: &mut Open,
        key: &Key<'_>,
        at: usize,
        first: bool,
    ) -> Result<Kind, CommandError> {
        if let Kind::Array {
            list,
            written_as_list,
            ..
        } = &mut top.kind
        {
            *list = *list && key.index() == Some(at);
            if *written_as_list && !*list {
                if !(first && self.reopen_as_object()) {
                    return Err(CommandError::Malformed(format!(
                        "the array before byte {} is not a list",
                        self.input.position()
                    )));
                }
                *written_as_list = false;
            }
        }
        Ok(top.kind)
    }

    /// In the guessing pass, turns the `[` just written into `{`; `false`
    /// in any other pass, or when the last byte is not that `[`.
    fn reopen_as_object(&mut self) -> bool {
        match &mut self.pass {
            Pass::Guess(out) => match out.last_mut() {
                Some(last @ b'[') => {
                    *last = b'{';
                    true
                }
                _ => false,
            },
            Pass::Check(_) | Pass::Write { .. } => false,
        }
    }

    /// Reads one value's head. A scalar (or leaf object) is read whole and
    /// `None` returned; an array or object is opened and returned, its
    /// entries still to read. `depth` is the number of containers open.
    fn value_head(&mut self, depth: usize) -> Result<Option<Open>, CommandError> {
        let before = self.input;
        let kind = self.byte()?;
        match kind {
            b'N' | b'b' | b'i' | b'd' | b's' => self.scalar(kind)?,
            b'a' => {
                Self::enter(depth)?;
                return self.open_array().map(Some);
            }
            b'O' => {
                Self::enter(depth)?;
                return self.open_object().map(Some);
            }
            b'E' | b'C' | b'r' | b'R' => {
                Self::enter(depth)?;
                self.leaf_object(kind)?;
            }
            _ => {
                self.input = before;
                return Err(self.error("a type letter"));
            }
        }
        Ok(None)
    }

    /// Reads the rest of a scalar of type letter `kind` (`N`, `b`, `i`,
    /// `d`, `s`) and writes it.
    fn scalar(&mut self, kind: u8) -> Result<(), CommandError> {
        match kind {
            b'N' => {
                self.expect(b';')?;
                self.raw("null");
            }
            b'b' => {
                self.expect(b':')?;
                let b = self.byte()?;
                self.expect(b';')?;
                match b {
                    b'0' => self.raw("false"),
                    b'1' => self.raw("true"),
                    _ => return Err(self.error("0 or 1")),
                }
            }
            b'i' => {
                self.expect(b':')?;
                let n = self.int(b';')?;
                self.raw(&n.to_string());
            }
            b'd' => {
                self.expect(b':')?;
                let f = self.float()?;
                if let Some(out) = self.out() {
                    // Infinite and NaN floats have no JSON form: null.
                    let _ = serde_json::to_writer(out, &f);
                }
            }
            _ => {
                let s = self.string()?;
                self.expect(b';')?;
                self.string_out(&s)?;
            }
        }
        Ok(())
    }

    /// Opens an array (`a:COUNT:{`): a JSON list or object, as the check
    /// pass found it.
    fn open_array(&mut self) -> Result<Open, CommandError> {
        self.expect(b':')?;
        let count = self.count(b':')?;
        self.expect(b'{')?;
        let (slot, written_as_list) = match &mut self.pass {
            Pass::Check(lists) => {
                // Noted at the opening, so that the write pass meets
                // the flags in the same order; settled at the close.
                lists.push(true);
                (lists.len() - 1, false)
            }
            Pass::Write { lists, next, .. } => {
                let flag = lists.get(*next).copied().ok_or_else(|| {
                    CommandError::Malformed("arrays changed between passes".into())
                })?;
                *next += 1;
                (0, flag)
            }
            Pass::Guess(_) => (0, true),
        };
        self.raw(if written_as_list { "[" } else { "{" });
        Ok(Open {
            kind: Kind::Array {
                slot,
                list: true,
                written_as_list,
            },
            left: count,
            at: 0,
        })
    }

    /// Opens an object (`O:LEN:"CLASS":COUNT:{`), its class first.
    fn open_object(&mut self) -> Result<Open, CommandError> {
        let class = self.string()?;
        self.expect(b':')?;
        let count = self.count(b':')?;
        self.expect(b'{')?;
        self.raw("{\"__class\":");
        self.string_out(&class)?;
        Ok(Open {
            kind: Kind::Object,
            left: count,
            at: 0,
        })
    }

    /// Reads and writes a value that holds no entries: an enum case (`E`),
    /// a custom-serialized object (`C`) or a reference (`r`, `R`).
    fn leaf_object(&mut self, kind: u8) -> Result<(), CommandError> {
        match kind {
            b'E' => {
                let case = self.string()?;
                self.expect(b';')?;
                self.raw("{\"__enum\":");
                self.string_out(&case)?;
                self.raw("}");
            }
            b'C' => {
                let class = self.string()?;
                self.expect(b':')?;
                let len = self.count(b':')?;
                self.expect(b'{')?;
                let data = self.take(len)?;
                self.expect(b'}')?;
                self.raw("{\"__class\":");
                self.string_out(&class)?;
                self.raw(",\"__serialized\":");
                self.string_out(&data)?;
                self.raw("}");
            }
            _ => {
                self.expect(b':')?;
                let n = self.int(b';')?;
                self.raw(&format!("{{\"__ref\":{n}}}"));
            }
        }
        Ok(())
    }

    /// Closes a container whose entries are all read.
    fn close(&mut self, done: &Open) {
        match done.kind {
            Kind::Array {
                slot,
                list,
                written_as_list,
            } => {
                if let Pass::Check(lists) = &mut self.pass
                    && let Some(flag) = lists.get_mut(slot)
                {
                    *flag = list;
                }
                self.raw(if written_as_list { "]" } else { "}" });
            }
            Kind::Object => self.raw("}"),
        }
    }

    /// Refuses a container inside `depth` open ones past [`MAX_DEPTH`].
    fn enter(depth: usize) -> Result<(), CommandError> {
        if depth >= MAX_DEPTH {
            return Err(CommandError::TooDeep);
        }
        Ok(())
    }

    /// An array or object key: `i:N;` or `s:N:"…";`, as PHP requires.
    fn key(&mut self) -> Result<Key<'a>, CommandError> {
        let before = self.input;
        match self.byte()? {
            b'i' => {
                self.expect(b':')?;
                Ok(Key::Int(self.int(b';')?))
            }
            b's' => {
                let s = self.string()?;
                self.expect(b';')?;
                Ok(Key::Str(s.bytes()))
            }
            _ => {
                self.input = before;
                Err(self.error("an integer or string key"))
            }
        }
    }

    fn key_out(&mut self, key: &Key<'_>, property: bool) -> Result<(), CommandError> {
        match key {
            Key::Int(n) => {
                self.raw(&format!("\"{n}\""));
                Ok(())
            }
            Key::Str(s) => {
                let name = if property { property_name(s) } else { s };
                self.string_out_bytes(name);
                Ok(())
            }
        }
    }

    /// `:LEN:"bytes"` (the type letter already read).
    fn string(&mut self) -> Result<Span<'a>, CommandError> {
        self.expect(b':')?;
        let len = self.count(b':')?;
        self.expect(b'"')?;
        let bytes = self.take(len)?;
        self.expect(b'"')?;
        Ok(bytes)
    }

    /// A length or count: decimal digits up to `end`.
    fn count(&mut self, end: u8) -> Result<usize, CommandError> {
        let digits = self.until(end)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err(self.error("a count"));
        }
        std::str::from_utf8(&digits)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| self.error("a count"))
    }

    /// `[+-]?[0-9]+` up to `end`; out of range saturates, as in PHP.
    fn int(&mut self, end: u8) -> Result<i64, CommandError> {
        let text = self.until(end)?;
        let (negative, digits) = match text.split_first() {
            Some((b'-', rest)) => (true, rest),
            Some((b'+', rest)) => (false, rest),
            _ => (false, &text[..]),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err(self.error("an integer"));
        }
        let mut n: i64 = 0;
        for &d in digits {
            let d = i64::from(d - b'0');
            n = if negative {
                n.saturating_mul(10).saturating_sub(d)
            } else {
                n.saturating_mul(10).saturating_add(d)
            };
        }
        Ok(n)
    }

    fn float(&mut self) -> Result<f64, CommandError> {
        let text = self.until(b';')?;
        std::str::from_utf8(&text)
            .ok()
            .filter(|t| {
                t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
            })
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| self.error("a float"))
    }

    /// The bytes up to `end`, which is consumed. Numbers are short: a
    /// delimiter that is missing is not looked for far.
    fn until(&mut self, end: u8) -> Result<Cow<'a, [u8]>, CommandError> {
        self.input
            .until(end, 32)
            .ok_or_else(|| self.error(&format!("'{}'", end as char)))
    }

    fn take(&mut self, len: usize) -> Result<Span<'a>, CommandError> {
        self.input
            .take(len)
            .ok_or_else(|| self.error(&format!("{len} more bytes")))
    }

    fn byte(&mut self) -> Result<u8, CommandError> {
        self.input.next().ok_or_else(|| self.error("more input"))
    }

    fn expect(&mut self, want: u8) -> Result<(), CommandError> {
        let before = self.input;
        if self.byte()? == want {
            Ok(())
        } else {
            self.input = before;
            Err(self.error(&format!("'{}'", want as char)))
        }
    }

    fn error(&self, what: &str) -> CommandError {
        CommandError::Malformed(format!("expected {what} at byte {}", self.input.position()))
    }
}

impl Key<'_> {
    /// The key as a list position: an integer, or a string PHP would store
    /// as one (`"0"`, `"12"`; not `"01"` or `"+1"`).
    fn index(&self) -> Option<usize> {
        match self {
            Key::Int(n) => usize::try_from(*n).ok(),
            Key::Str(s) => {
                let canonical = s.first().is_some_and(u8::is_ascii_digit)
                    && (s.len() == 1 || s[0] != b'0')
                    && s.iter().all(u8::is_ascii_digit);
                if !canonical {
                    return None;
                }
                std::str::from_utf8(s).ok()?.parse().ok()
            }
        }
    }
}

/// Writes `bytes` as a JSON string; bytes that are not UTF-8 are replaced.
fn write_str(out: &mut Vec<u8>, bytes: &[u8]) {
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(out, &*crate::escape::lossy(bytes));
}

/// The length of `bytes` up to where a UTF-8 character may still be
/// incomplete: a cut there, and before nothing else, changes nothing of how
/// the bytes read as UTF-8 (invalid sequences included) once joined again.
fn complete_up_to(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let at = bytes.len() - back;
        let needs = match bytes[at] {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            0x80..=0xBF => continue,
            _ => return bytes.len(),
        };
        return if needs > back { at } else { bytes.len() };
    }
    bytes.len()
}

/// `\0Class\0name` (private) and `\0*\0name` (protected) become `name`.
fn property_name(raw: &[u8]) -> &[u8] {
    match raw.strip_prefix(b"\0") {
        Some(rest) => match rest.iter().position(|&b| b == 0) {
            Some(at) => &rest[at + 1..],
            None => raw,
        },
        None => raw,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn read(text: &[u8]) -> Result<Value, CommandError> {
        let raw = unserialize(text)?;
        Ok(serde_json::from_str(raw.get()).unwrap())
    }

    #[test]
    fn a_laravel_job() {
        // Made by PHP 8.2: serialize(new App\Jobs\SendEmail) with a protected
        // model identifier, a private array, a null and a mixed array.
        let text = "O:18:\"App\\Jobs\\SendEmail\":4:{s:7:\"\0*\0user\";O:45:\"Illuminate\\Contracts\\Database\\ModelIdentifier\":2:{s:5:\"class\";s:8:\"App\\User\";s:2:\"id\";i:7;}s:24:\"\0App\\Jobs\\SendEmail\0tags\";a:2:{i:0;s:1:\"a\";i:1;s:3:\"bé\";}s:5:\"delay\";N;s:4:\"opts\";a:2:{s:1:\"x\";d:1.5;s:1:\"y\";b:1;}}";
        let raw = decode(Text::Plain(text.as_bytes())).unwrap();
        assert_eq!(
            raw.get(),
            r#"{"__class":"App\\Jobs\\SendEmail","user":{"__class":"Illuminate\\Contracts\\Database\\ModelIdentifier","class":"App\\User","id":7},"tags":["a","bé"],"delay":null,"opts":{"x":1.5,"y":true}}"#,
            "PHP's key order is kept"
        );
    }

    #[test]
    fn lengths_are_bytes_and_strings_may_hold_quotes_and_semicolons() {
        let v = read("s:7:\"é\";\"x;\";".as_bytes()).unwrap();
        assert_eq!(v, json!("é\";\"x;"));
    }

    #[test]
    fn enums_refs_custom_and_sparse_arrays() {
        assert_eq!(
            read(b"E:13:\"Status:Active\";").unwrap(),
            json!({"__enum": "Status:Active"})
        );
        assert_eq!(read(b"r:2;").unwrap(), json!({"__ref": 2}));
        assert_eq!(
            read(b"C:3:\"Foo\":3:{abc}").unwrap(),
            json!({"__class": "Foo", "__serialized": "abc"})
        );
        assert_eq!(
            read(b"a:2:{i:1;s:1:\"a\";i:5;N;}").unwrap(),
            json!({"1": "a", "5": null})
        );
        assert_eq!(read(b"d:INF;").unwrap(), Value::Null);
        assert_eq!(read(b"a:0:{}").unwrap(), json!([]));
        assert_eq!(
            read(b"a:2:{s:1:\"0\";N;s:1:\"1\";b:0;}").unwrap(),
            json!([null, false]),
            "numeric string keys are integer keys in PHP"
        );
        assert_eq!(
            read(b"a:1:{i:0;a:2:{i:0;N;i:7;N;}}").unwrap(),
            json!([{"0": null, "7": null}]),
            "each array is judged on its own"
        );
    }

    #[test]
    fn an_array_found_not_to_be_a_list_is_written_as_an_object() {
        // The single pass writes `[` first; these turn out otherwise at
        // their last key, or inside a list, or with a list inside.
        for (text, want) in [
            (
                &b"a:3:{i:0;N;i:1;b:1;s:1:\"x\";i:2;}"[..],
                json!({"0": null, "1": true, "x": 2}),
            ),
            (
                b"a:2:{i:0;a:2:{i:0;N;i:2;N;}i:1;a:0:{}}",
                json!([{"0": null, "2": null}, []]),
            ),
            (
                b"a:2:{i:0;a:1:{i:0;N;}i:5;a:1:{i:0;N;}}",
                json!({"0": [null], "5": [null]}),
            ),
            // Found at the first key: turned into an object in the pass.
            (
                b"a:3:{i:0;a:1:{s:1:\"k\";N;}i:1;a:1:{i:3;N;}i:2;a:0:{}}",
                json!([{"k": null}, {"3": null}, []]),
            ),
            (
                b"O:3:\"Foo\":2:{s:1:\"a\";a:1:{i:0;i:1;}s:1:\"b\";a:1:{i:1;i:1;}}",
                json!({"__class": "Foo", "a": [1], "b": {"1": 1}}),
            ),
        ] {
            assert_eq!(read(text).unwrap(), want);
        }
        // Inside a command, the same as the two passes write it in pieces.
        let command = b"O:3:\"Foo\":2:{s:1:\"a\";a:2:{i:0;N;s:1:\"k\";N;}s:1:\"b\";a:0:{}}";
        let got = same_every_way(command).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&got).unwrap(),
            json!({"__class": "Foo", "a": {"0": null, "k": null}, "b": []})
        );
    }

    #[test]
    fn numbers_read_as_php_reads_them() {
        assert_eq!(read(b"i:+5;").unwrap(), json!(5));
        assert_eq!(read(b"i:007;").unwrap(), json!(7));
        assert_eq!(
            read(b"i:99999999999999999999;").unwrap(),
            json!(i64::MAX),
            "saturates"
        );
        assert_eq!(read(b"d:1.0E+25;").unwrap(), json!(1.0e25));
        assert_eq!(read(b"d:.5;").unwrap(), json!(0.5));
        assert_eq!(read(b"N;trailing").unwrap(), Value::Null);
    }

    #[test]
    fn malformed_text_is_an_error_not_a_panic() {
        for bad in [
            &b"s:99:\"short\";"[..],
            b"O:3:\"Foo\":1:{",
            b"x",
            b"i:12",
            b"i: 5;",
            b"b:2;",
            b"a:1:{i:0;}",
            b"a:1:{N;N;}",
            b"a:1:{d:1.5;N;}",
            b"a:-1:{}",
            b"s:-1:\"\";",
            b"",
        ] {
            assert!(
                matches!(unserialize(bad), Err(CommandError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let nest = |n: usize| {
            let mut s = "a:1:{i:0;".repeat(n);
            s.push_str("N;");
            s.push_str(&"}".repeat(n));
            s
        };
        assert!(unserialize(nest(MAX_DEPTH).as_bytes()).is_ok());
        assert_eq!(
            unserialize(nest(MAX_DEPTH + 1).as_bytes()).unwrap_err(),
            CommandError::TooDeep
        );
        // The crash of the past: tens of thousands of levels.
        assert_eq!(
            unserialize(nest(100_000).as_bytes()).unwrap_err(),
            CommandError::TooDeep
        );
        // An enum at the bottom is one more JSON level.
        let mut s = "a:1:{i:0;".repeat(MAX_DEPTH);
        s.push_str("E:3:\"A:B\";");
        s.push_str(&"}".repeat(MAX_DEPTH));
        assert_eq!(
            unserialize(s.as_bytes()).unwrap_err(),
            CommandError::TooDeep
        );
    }

    #[test]
    fn only_plain_commands_are_decoded() {
        assert_eq!(
            decode(Text::Plain(b"O:3:\"Foo\":0:{}")).unwrap().get(),
            r#"{"__class":"Foo"}"#
        );
        assert_eq!(
            decode(Text::Plain(b"eyJpdiI6IjEyMyJ9")).unwrap_err(),
            CommandError::NotAnObject
        );
    }

    /// `text` as the body of a JSON string, as a payload holds it.
    fn escaped(text: &[u8]) -> String {
        let json = serde_json::to_string(&String::from_utf8_lossy(text)).unwrap();
        json[1..json.len() - 1].to_string()
    }

    /// Every way of reading `text` gives the same answer: plain or still
    /// escaped, whole or written to a sink.
    fn same_every_way(text: &[u8]) -> Result<String, CommandError> {
        let plain = decode(Text::Plain(text)).map(|raw| raw.get().to_string());
        // JSON holds only UTF-8: other bytes have no escaped form.
        let body = std::str::from_utf8(text).map(|_| escaped(text)).ok();
        let mut ways = vec![Text::Plain(text)];
        if let Some(body) = &body {
            let from_json = decode(Text::JsonEscaped(body.as_bytes())).map(|r| r.get().to_string());
            assert!(from_json == plain, "escaped text reads as the text");
            ways.push(Text::JsonEscaped(body.as_bytes()));
        }
        for text in ways {
            let mut sink = Vec::new();
            let streamed = decode_to(text, &mut sink).map(|()| String::from_utf8(sink).unwrap());
            assert!(streamed == plain, "written in pieces as whole");
            assert_eq!(check_decodes(text).is_ok(), plain.is_ok());
        }
        plain
    }

    #[test]
    fn escaped_text_reads_as_its_unescaped_bytes() {
        let job = "O:18:\"App\\Jobs\\SendEmail\":3:{s:7:\"\0*\0user\";s:6:\"a/\"\n\t\\\";s:4:\"tags\";a:1:{i:0;s:7:\"b\u{e9}\u{1F600}\";}s:1:\"x\";d:1.5;}";
        let json = same_every_way(job.as_bytes()).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&json).unwrap(),
            json!({"__class": "App\\Jobs\\SendEmail", "user": "a/\"\n\t\\", "tags": ["b\u{e9}\u{1F600}"], "x": 1.5})
        );
        // PHP's lengths count bytes of the unescaped text: a length that
        // counts escapes instead is refused either way.
        assert!(same_every_way(b"O:1:\"A\":1:{s:1:\"k\";s:2:\"\n\";}").is_err());
        assert!(same_every_way(b"O:1:\"A\":1:{s:1:\"k\";s:1:\"\n\";}").is_ok());
    }

    #[test]
    fn escapes_that_are_not_json_are_refused_not_read() {
        for body in [
            &b"O:1:\\q"[..],
            b"O:1:\\u12",
            b"O:1:\\ud800x",
            b"O:1:\\udc00",
        ] {
            let result = decode(Text::JsonEscaped(body));
            assert!(
                matches!(result, Err(CommandError::Malformed(_))),
                "{result:?}"
            );
        }
    }

    #[test]
    fn long_strings_are_written_in_pieces_that_join_to_the_whole() {
        // Multi-byte characters, escapes and invalid UTF-8 across the cuts.
        let mut blob = Vec::new();
        while blob.len() < 3 * PIECE + 17 {
            blob.extend_from_slice("x\"\\/\u{e9}\u{20ac}\u{1F600}\n".as_bytes());
            if blob.len() % 7 == 0 {
                blob.push(0xff);
            }
        }
        let valid: Vec<u8> = blob.iter().copied().filter(|&b| b != 0xff).collect();
        for (cut, blob) in [0, 1, 2, 3]
            .into_iter()
            .flat_map(|cut| [(cut, &blob), (cut, &valid)])
        {
            let blob = &blob[cut..];
            let mut text = format!("O:3:\"Big\":1:{{s:4:\"blob\";s:{}:\"", blob.len()).into_bytes();
            text.extend_from_slice(blob);
            text.extend_from_slice(b"\";}");
            let json = same_every_way(&text).unwrap();
            let value: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert!(value["blob"].as_str().unwrap() == String::from_utf8_lossy(blob));
        }
    }

    #[test]
    fn a_sink_that_fails_is_an_error() {
        struct Full;
        impl std::io::Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let n = 2 * PIECE;
        let text = format!("O:1:\"A\":1:{{s:1:\"k\";s:{n}:\"{}\";}}", "a".repeat(n));
        assert!(matches!(
            decode_to(Text::Plain(text.as_bytes()), &mut Full),
            Err(CommandError::Write(_))
        ));
    }
}
