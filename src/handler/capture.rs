//! Bounded capture of a handler's output.

use std::collections::VecDeque;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt};

/// The last bytes of a stream, and how many bytes it had in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tail {
    /// At most the configured limit of bytes, the newest ones.
    pub bytes: Vec<u8>,
    /// Total bytes read.
    pub total: u64,
}

impl Tail {
    /// The tail as text, prefixed with a note when the start was cut.
    pub fn text(&self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        let text = text.trim_end();
        if self.total > self.bytes.len() as u64 {
            format!(
                "[... {} earlier bytes cut]\n{text}",
                self.total - self.bytes.len() as u64
            )
        } else {
            text.to_string()
        }
    }

    /// Appends one line (of `total` bytes, of which `line` is the kept
    /// part) to this tail, keeping its last `limit` bytes.
    pub fn push_line(&mut self, line: &[u8], total: u64, limit: usize) {
        let mut kept: VecDeque<u8> = std::mem::take(&mut self.bytes).into();
        if self.total > 0 {
            kept.push_back(b'\n');
            self.total += 1;
        }
        self.total += total;
        let cut = total.saturating_sub(line.len() as u64);
        if cut > 0 {
            // The line's own start is gone: what is kept before it cannot
            // be shown as adjacent text either.
            kept.clear();
        }
        kept.extend(line);
        let excess = kept.len().saturating_sub(limit);
        kept.drain(..excess);
        self.bytes = kept.into();
    }
}

/// Reads `stream` to its end, keeping only the last `limit` bytes, so a
/// chatty handler can neither block on a full pipe nor fill our memory.
pub async fn read_tail<R: AsyncRead + Unpin>(mut stream: R, limit: usize) -> Tail {
    let mut kept: VecDeque<u8> = VecDeque::with_capacity(limit.min(8192));
    let mut total = 0u64;
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n as u64;
                kept.extend(&buf[..n]);
                let excess = kept.len().saturating_sub(limit);
                kept.drain(..excess);
            }
        }
    }
    Tail {
        bytes: kept.into(),
        total,
    }
}

/// Which bytes of an over-long line [`next_line`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first `limit` bytes (to show what a line began with).
    Head,
    /// The last `limit` bytes (as [`read_tail`] keeps a stream's end).
    Tail,
}

/// Reads the next line of `reader` (without its `\n`), keeping at most
/// `limit` bytes of it as `keep` says; `total` counts them all, so a line
/// with no newline for hundreds of megabytes costs `limit` bytes of memory,
/// not its length. `None` at the end of the stream; a last line without a
/// newline is returned as a line.
///
/// # Errors
/// A read error of the stream.
pub async fn next_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
    keep: Keep,
) -> std::io::Result<Option<Tail>> {
    let mut kept: VecDeque<u8> = VecDeque::new();
    let mut total = 0u64;
    let mut seen = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(seen.then(|| Tail {
                bytes: kept.into(),
                total,
            }));
        }
        seen = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        total += chunk.len() as u64;
        match keep {
            Keep::Head => {
                let room = limit.saturating_sub(kept.len());
                kept.extend(&chunk[..chunk.len().min(room)]);
            }
            Keep::Tail => {
                kept.extend(chunk);
                let excess = kept.len().saturating_sub(limit);
                kept.drain(..excess);
            }
        }
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(Tail {
                bytes: kept.into(),
                total,
            }));
        }
    }
}

/// The first `limit` bytes of `bytes` as one line of text for a log or an
/// error message: invalid UTF-8 replaced, control characters escaped
/// (`\n`, `\u{1b}`), quoted, with the number of bytes left out when cut.
pub fn shown(bytes: &[u8], total: u64, limit: usize) -> String {
    let cut = &bytes[..bytes.len().min(limit)];
    let text = String::from_utf8_lossy(cut);
    let left_out = total.saturating_sub(cut.len() as u64);
    if left_out > 0 {
        format!("{text:?} [... {left_out} more bytes]")
    } else {
        format!("{text:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_the_newest_bytes() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let tail = read_tail(&data[..], 100).await;
        assert_eq!(tail.total, 20_000);
        assert_eq!(tail.bytes, data[19_900..].to_vec());
        assert!(tail.text().starts_with("[... 19900 earlier bytes cut]"));
    }

    #[test]
    fn pushed_lines_keep_the_newest_bytes() {
        let mut tail = Tail::default();
        tail.push_line(b"one", 3, 8);
        tail.push_line(b"two", 3, 8);
        assert_eq!((tail.bytes.as_slice(), tail.total), (&b"one\ntwo"[..], 7));
        tail.push_line(b"three", 5, 8);
        assert_eq!((tail.bytes.as_slice(), tail.total), (&b"wo\nthree"[..], 13));
        tail.push_line(b"xyz", 1000, 8);
        assert_eq!((tail.bytes.as_slice(), tail.total), (&b"xyz"[..], 1014));
        assert!(tail.text().starts_with("[... 1011 earlier bytes cut]\nxyz"));
    }

    #[tokio::test]
    async fn lines_are_bounded_either_way() {
        let mut data = vec![b'a'; 50_000];
        data.extend(b"bc\nshort\nlast");
        let mut head = &data[..];
        let line = next_line(&mut head, 10, Keep::Head).await.unwrap().unwrap();
        assert_eq!(
            (line.bytes.as_slice(), line.total),
            (&b"aaaaaaaaaa"[..], 50_002)
        );
        let mut tail = &data[..];
        let line = next_line(&mut tail, 4, Keep::Tail).await.unwrap().unwrap();
        assert_eq!((line.bytes.as_slice(), line.total), (&b"aabc"[..], 50_002));
        let line = next_line(&mut tail, 4, Keep::Tail).await.unwrap().unwrap();
        assert_eq!(line.bytes, b"hort");
        let line = next_line(&mut tail, 4, Keep::Tail).await.unwrap().unwrap();
        assert_eq!((line.bytes.as_slice(), line.total), (&b"last"[..], 4));
        assert_eq!(next_line(&mut tail, 4, Keep::Tail).await.unwrap(), None);
    }

    #[test]
    fn shown_lines_are_escaped_and_bounded() {
        assert_eq!(shown(b"a\nb\x1b[31m", 7, 100), r#""a\nb\u{1b}[31m""#);
        assert_eq!(shown(b"abcdef", 1000, 3), r#""abc" [... 997 more bytes]"#);
    }
}
