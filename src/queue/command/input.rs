//! The text the command reader reads, byte by byte.
//!
//! `data.command` arrives inside the payload's JSON, as a JSON string: the
//! quotes of PHP's text are `\"`, its namespaces' backslashes `\\`, a NUL
//! of a private property `\u0000`. Unescaping the whole string first would
//! hold a second copy of a command of megabytes, so the reader reads the
//! escaped text itself: each escape is decoded as the reader comes to it,
//! and a run of bytes with no escape in it is lent out as it stands.
//!
//! PHP's lengths (`s:5:"hello"`) count bytes of the unescaped text, which
//! is what every position and length here counts too.

use std::borrow::Cow;

/// A reading position in PHP's serialized text, plain or JSON-escaped.
///
/// `Copy`, so that a [`Span`] can keep where its bytes start and read them
/// again later.
#[derive(Clone, Copy)]
pub(super) struct Input<'a> {
    /// The text: PHP's bytes, or the body of a JSON string (between its
    /// quotes) that holds them.
    text: &'a [u8],
    /// Whether `text` is JSON-escaped.
    escaped: bool,
    /// The next byte of `text` to look at.
    at: usize,
    /// Unescaped bytes read so far.
    read: usize,
    /// The UTF-8 bytes of a `\u` escape, of which `pending.0..pending.1`
    /// are not read yet.
    utf8: [u8; 4],
    pending: (u8, u8),
}

/// Bytes taken from the text, to be read later: borrowed when they needed
/// no unescaping, else where they start and how many there are.
pub(super) enum Span<'a> {
    Plain(&'a [u8]),
    Escaped { from: Input<'a>, len: usize },
}

impl<'a> Input<'a> {
    /// PHP's serialized bytes, as they are.
    pub fn plain(text: &'a [u8]) -> Self {
        Self::new(text, false)
    }

    /// The body of a JSON string (without its quotes) that holds PHP's
    /// serialized text.
    pub fn json_escaped(body: &'a [u8]) -> Self {
        Self::new(body, true)
    }

    fn new(text: &'a [u8], escaped: bool) -> Self {
        Input {
            text,
            escaped,
            at: 0,
            read: 0,
            utf8: [0; 4],
            pending: (0, 0),
        }
    }

    /// Unescaped bytes read so far: the position errors name.
    pub fn position(&self) -> usize {
        self.read
    }

    /// The next byte, or `None` at the end of the text or at an escape that
    /// is not valid JSON (which the caller reports as the text ending).
    pub fn next(&mut self) -> Option<u8> {
        let byte = if self.pending.0 < self.pending.1 {
            self.pending.0 += 1;
            self.utf8[usize::from(self.pending.0 - 1)]
        } else {
            let byte = *self.text.get(self.at)?;
            self.at += 1;
            if self.escaped && byte == b'\\' {
                self.unescape()?
            } else {
                byte
            }
        };
        self.read += 1;
        Some(byte)
    }

    /// Reads the escape after a backslash; returns its first byte and keeps
    /// the others of a `\u` escape pending.
    fn unescape(&mut self) -> Option<u8> {
        let kind = *self.text.get(self.at)?;
        self.at += 1;
        Some(match kind {
            b'"' | b'\\' | b'/' => kind,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let c = self.code_point()?;
                let len = c.encode_utf8(&mut self.utf8).len();
                self.pending = (1, len as u8);
                self.utf8[0]
            }
            _ => return None,
        })
    }

    /// The character of a `\uXXXX` escape (the `\u` read), joining a
    /// surrogate pair; a lone surrogate is not valid.
    fn code_point(&mut self) -> Option<char> {
        let first = self.hex4()?;
        let c = match first {
            0xD800..=0xDBFF => {
                if self.text.get(self.at..self.at + 2)? != b"\\u" {
                    return None;
                }
                self.at += 2;
                let low = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return None;
                }
                0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => return None,
            c => c,
        };
        char::from_u32(c)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.at..self.at + 4)?;
        let digits = std::str::from_utf8(digits).ok()?;
        let n = u32::from_str_radix(digits, 16).ok()?;
        // from_str_radix takes a sign; JSON does not.
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.at += 4;
        Some(n)
    }

    /// The bytes up to `end` (which is consumed), when `end` comes within
    /// `window` bytes; else `None`, with nothing read.
    pub fn until(&mut self, end: u8, window: usize) -> Option<Cow<'a, [u8]>> {
        if self.pending.0 == self.pending.1 {
            // No escape before `end`: the bytes are lent as they stand.
            let rest = self.text.get(self.at..).unwrap_or_default();
            let window = &rest[..rest.len().min(window)];
            let stop = window
                .iter()
                .position(|&b| b == end || (self.escaped && b == b'\\'));
            match stop {
                Some(len) if window[len] == end => {
                    self.at += len + 1;
                    self.read += len + 1;
                    return Some(Cow::Borrowed(&rest[..len]));
                }
                Some(_) => {}
                None => return None,
            }
        }
        let mut ahead = *self;
        let mut bytes = Vec::new();
        while bytes.len() < window {
            match ahead.next()? {
                b if b == end => {
                    *self = ahead;
                    return Some(Cow::Owned(bytes));
                }
                b => bytes.push(b),
            }
        }
        None
    }

    /// Takes the next `len` bytes; `None` (nothing read) when the text
    /// ends first.
    pub fn take(&mut self, len: usize) -> Option<Span<'a>> {
        if self.pending.0 == self.pending.1 {
            let end = self.at.checked_add(len).filter(|&e| e <= self.text.len());
            if let Some(end) = end {
                let run = &self.text[self.at..end];
                if !self.escaped || !run.contains(&b'\\') {
                    self.at = end;
                    self.read += len;
                    return Some(Span::Plain(run));
                }
            } else if !self.escaped {
                return None;
            }
        }
        let from = *self;
        let mut ahead = *self;
        ahead.skip(len)?;
        *self = ahead;
        Some(Span::Escaped { from, len })
    }

    /// Moves on `len` bytes, a run without escapes at a time.
    fn skip(&mut self, mut len: usize) -> Option<()> {
        while len > 0 {
            if self.pending.0 < self.pending.1 {
                self.next()?;
                len -= 1;
                continue;
            }
            let rest = self.text.get(self.at..).unwrap_or_default();
            let run = rest.iter().take(len).position(|&b| b == b'\\');
            let run = run.unwrap_or(len.min(rest.len()));
            self.at += run;
            self.read += run;
            len -= run;
            if len > 0 {
                self.next()?;
                len -= 1;
            }
        }
        Some(())
    }
}

impl<'a> Span<'a> {
    /// Number of (unescaped) bytes.
    pub fn len(&self) -> usize {
        match self {
            Span::Plain(bytes) => bytes.len(),
            Span::Escaped { len, .. } => *len,
        }
    }

    /// The bytes, borrowed when they needed no unescaping.
    pub fn bytes(&self) -> Cow<'a, [u8]> {
        match self {
            Span::Plain(bytes) => Cow::Borrowed(bytes),
            Span::Escaped { .. } => {
                let mut all = Vec::with_capacity(self.len());
                self.pieces(usize::MAX, |piece| {
                    all.extend_from_slice(piece);
                    Ok::<(), ()>(())
                })
                .ok();
                Cow::Owned(all)
            }
        }
    }

    /// Gives the bytes to `each` in order, in pieces of at most `size`
    /// bytes (at least one byte each); stops at the first error.
    pub fn pieces<E>(
        &self,
        size: usize,
        mut each: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Span::Plain(bytes) => {
                for piece in bytes.chunks(size.max(1)) {
                    each(piece)?;
                }
                Ok(())
            }
            Span::Escaped { from, len } => {
                let mut input = *from;
                let mut left = *len;
                let mut piece = Vec::with_capacity(size.min(*len));
                while left > 0 {
                    let room = (size - piece.len()).min(left);
                    let rest = input.text.get(input.at..).unwrap_or_default();
                    let run = if input.pending.0 < input.pending.1 {
                        0
                    } else {
                        let run = rest.iter().take(room).position(|&b| b == b'\\');
                        run.unwrap_or(room.min(rest.len()))
                    };
                    if run > 0 {
                        piece.extend_from_slice(&rest[..run]);
                        input.at += run;
                        input.read += run;
                        left -= run;
                    } else {
                        // Taken by `take`, so the bytes are there.
                        let Some(b) = input.next() else { break };
                        piece.push(b);
                        left -= 1;
                    }
                    if piece.len() == size || left == 0 {
                        each(&piece)?;
                        piece.clear();
                    }
                }
                Ok(())
            }
        }
    }
}
