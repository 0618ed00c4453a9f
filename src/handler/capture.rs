//! Bounded capture of a handler's output.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt};

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
}
