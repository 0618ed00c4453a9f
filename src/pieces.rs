//! Text made on a blocking thread and sent on, a piece at a time, by an
//! async task: how the worker writes the JSON of a job of megabytes (the
//! decoded command of a persistent request, a failure record for the Redis
//! failed store) without holding it whole.
//!
//! [`make`] runs the maker on tokio's blocking pool with a [`PieceWriter`]
//! that gathers `size` bytes and hands them over a channel two pieces deep;
//! the caller receives each piece and writes it where it goes. Should the
//! caller stop receiving (its write failed), the maker's next piece fails
//! with `BrokenPipe` and its thread ends.

use std::io::Write;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Pieces waiting to be sent, at most: the maker waits for the sender.
const DEPTH: usize = 2;

/// Starts `maker` on a blocking thread, writing to a [`PieceWriter`] of
/// pieces of `size` bytes (the last may be shorter); returns the pieces as
/// they come, and the maker's own result.
pub fn make<T, F>(
    size: usize,
    maker: F,
) -> (mpsc::Receiver<Vec<u8>>, JoinHandle<std::io::Result<T>>)
where
    T: Send + 'static,
    F: FnOnce(&mut PieceWriter) -> std::io::Result<T> + Send + 'static,
{
    let (sender, pieces) = mpsc::channel(DEPTH);
    let made = tokio::task::spawn_blocking(move || {
        let mut writer = PieceWriter {
            size: size.max(1),
            piece: Vec::new(),
            sender,
        };
        let result = maker(&mut writer)?;
        writer.flush()?;
        Ok(result)
    });
    (pieces, made)
}

/// The maker's sink: gathers bytes into pieces of `size` and sends each.
pub struct PieceWriter {
    size: usize,
    piece: Vec<u8>,
    sender: mpsc::Sender<Vec<u8>>,
}

impl PieceWriter {
    fn send(&mut self) -> std::io::Result<()> {
        let piece = std::mem::take(&mut self.piece);
        self.sender
            .blocking_send(piece)
            .map_err(|_| std::io::ErrorKind::BrokenPipe.into())
    }
}

impl Write for PieceWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.piece.capacity() == 0 {
            self.piece.reserve_exact(self.size);
        }
        let room = self.size - self.piece.len();
        let taken = bytes.len().min(room);
        self.piece.extend_from_slice(&bytes[..taken]);
        if self.piece.len() == self.size {
            self.send()?;
        }
        Ok(taken)
    }

    /// Sends what is gathered, if anything.
    fn flush(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        self.send()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pieces_join_to_what_was_written() {
        let (mut pieces, made) = make(4, |w| {
            w.write_all(b"abcdefghij")?;
            w.write_all(b"k")?;
            Ok(7)
        });
        let mut got = Vec::new();
        while let Some(piece) = pieces.recv().await {
            assert!(!piece.is_empty() && piece.len() <= 4, "{piece:?}");
            got.extend_from_slice(&piece);
        }
        assert_eq!(got, b"abcdefghijk");
        assert_eq!(made.await.unwrap().unwrap(), 7);
    }

    #[tokio::test]
    async fn a_receiver_that_stops_ends_the_maker() {
        let (pieces, made) = make(1, |w| {
            for _ in 0..1000 {
                w.write_all(b"x")?;
            }
            Ok(())
        });
        drop(pieces);
        let err = made.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
    }
}
