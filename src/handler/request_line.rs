//! The request a persistent handler reads on stdin: one JSON line with the
//! `call` number first, the call's metadata, the payload as a string and,
//! when asked for, `data.command` as JSON.
//!
//! A small request is encoded whole and written at once. For a payload of
//! [`STREAM_AT`] bytes or more, the line would hold the payload a second
//! time, escaped, next to the decoded command: so it is written in parts
//! instead, the payload escaped [`CHUNK`] bytes at a time and the command
//! decoded as it is written (on a blocking thread, see [`crate::pieces`]).
//! The bytes on the pipe are the same.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::value::RawValue;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::Invocation;
use super::metadata::{self, CallMetadata, Value};
use crate::queue::Payload;

/// Bytes of the failure text sent in a failed-mode request.
const EXCEPTION_LIMIT: usize = 64 * 1024;

/// Payloads of at least this many bytes (1 MiB) are written in parts.
pub const STREAM_AT: usize = 1024 * 1024;

/// Bytes of payload escaped per write when streaming.
const CHUNK: usize = 64 * 1024;

/// One request, ready to be written (possibly more than once, to a new
/// process when the first one was found dead).
pub enum Request<'a> {
    /// The whole line, newline included.
    Line(Vec<u8>),
    /// A large request in parts: `head` is the line up to and including
    /// `"payload":"`; then the payload, escaped as it is written; then the
    /// command, if any (the parsed payload it is decoded from, checked to
    /// decode), and the end of the line.
    Parts {
        head: String,
        payload: Cow<'a, str>,
        command: Option<Box<Payload>>,
    },
}

impl<'a> Request<'a> {
    /// The request for call `call` of `inv`; with `decode_command`,
    /// `data.command` as JSON too.
    ///
    /// # Errors
    /// The metadata cannot be encoded (not expected: strings and numbers).
    pub fn new(
        call: u64,
        inv: &'a Invocation<'_>,
        decode_command: bool,
    ) -> serde_json::Result<Self> {
        let job = inv.job;
        let payload = crate::escape::lossy(&job.reserved);
        let parsed = job.payload.as_ref().ok().filter(|_| decode_command);
        let metadata = CallMetadata::of(inv);
        if job.reserved.len() < STREAM_AT {
            let command = parsed.and_then(Payload::command_json);
            let command_len = command.as_ref().map_or(0, |c| c.get().len());
            let mut line = Vec::with_capacity(line_capacity(payload.len(), command_len));
            serde_json::to_writer(
                &mut line,
                &RequestLine {
                    call,
                    metadata: &metadata,
                    payload: Some(&payload),
                    command: command.as_deref(),
                },
            )?;
            line.push(b'\n');
            return Ok(Request::Line(line));
        }
        let mut head = serde_json::to_string(&RequestLine {
            call,
            metadata: &metadata,
            payload: None,
            command: None,
        })?;
        head.pop(); // the closing `}`
        head.push_str(",\"payload\":\"");
        Ok(Request::Parts {
            head,
            payload,
            command: parsed
                .filter(|p| p.has_command_json())
                .map(|p| Box::new(p.clone())),
        })
    }

    /// Writes the request to `to`; returns how many bytes were written.
    ///
    /// # Errors
    /// The write failed (the process is gone, say).
    pub async fn write_to<W: AsyncWrite + Unpin>(&self, to: &mut W) -> std::io::Result<usize> {
        match self {
            Request::Line(line) => {
                to.write_all(line).await?;
                Ok(line.len())
            }
            Request::Parts {
                head,
                payload,
                command,
            } => {
                let mut sent = head.len();
                to.write_all(head.as_bytes()).await?;
                let mut escaped = Vec::with_capacity(2 * CHUNK + 2);
                let mut rest: &str = payload;
                while !rest.is_empty() {
                    // Never 0: a character is at most 4 bytes, CHUNK far more.
                    let cut = rest.floor_char_boundary(CHUNK.min(rest.len()));
                    escaped.clear();
                    serde_json::to_writer(&mut escaped, &rest[..cut])?;
                    // Without the quotes serde_json put around the piece.
                    let inner = &escaped[1..escaped.len() - 1];
                    to.write_all(inner).await?;
                    sent += inner.len();
                    rest = &rest[cut..];
                }
                let mut tail = String::from("\"");
                if let Some(command) = command {
                    tail.push_str(",\"command\":");
                    to.write_all(tail.as_bytes()).await?;
                    sent += tail.len() + write_command(Payload::clone(command), to).await?;
                    tail.clear();
                }
                tail.push_str("}\n");
                to.write_all(tail.as_bytes()).await?;
                Ok(sent + tail.len())
            }
        }
    }
}

/// Bytes to reserve for a whole request line: the payload escaped (a
/// payload's quotes and backslashes each gain one, about a fifth of its
/// bytes in Laravel's payloads), the command, and room for the metadata. A
/// line written into a buffer this size is not copied as it grows.
fn line_capacity(payload: usize, command: usize) -> usize {
    payload + payload / 4 + command + 512
}

/// Writes `payload`'s `data.command` as JSON to `to` while it is decoded
/// (on a blocking thread, see [`crate::pieces`]), so that it is never held
/// whole; returns how many bytes were written.
///
/// # Errors
/// The write failed, or the command did not decode after all (the line is
/// then cut short: the caller must not use the process for another request).
async fn write_command<W: AsyncWrite + Unpin>(
    payload: Payload,
    to: &mut W,
) -> std::io::Result<usize> {
    let (mut pieces, decoding) =
        crate::pieces::make(CHUNK, move |sink| payload.write_command_json(sink));
    let mut sent = 0;
    // On a write error the receiver is dropped on return, so the decoder's
    // next piece fails and its thread ends.
    while let Some(piece) = pieces.recv().await {
        to.write_all(&piece).await?;
        sent += piece.len();
    }
    match decoding.await {
        Ok(Ok(true)) => Ok(sent),
        Ok(Ok(false)) => Err(std::io::Error::other(
            "the command did not decode as it was written",
        )),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// The line's fields: the `call` number, the call's metadata under its
/// [`metadata::Field::key`] names, the payload as a string (when given),
/// and `data.command` as JSON (when given).
struct RequestLine<'a> {
    call: u64,
    metadata: &'a CallMetadata<'a>,
    payload: Option<&'a str>,
    command: Option<&'a RawValue>,
}

impl Serialize for RequestLine<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("call", &self.call)?;
        for (field, value) in self.metadata.fields() {
            match value {
                None => {}
                Some(Value::Number(n)) => map.serialize_entry(field.key, &n)?,
                Some(Value::Text(text)) if field == metadata::EXCEPTION => map.serialize_entry(
                    field.key,
                    &text[..text.floor_char_boundary(EXCEPTION_LIMIT)],
                )?,
                Some(Value::Text(text)) => map.serialize_entry(field.key, &text)?,
            }
        }
        if let Some(payload) = self.payload {
            map.serialize_entry("payload", payload)?;
        }
        if let Some(command) = self.command {
            map.serialize_entry("command", command)?;
        }
        map.end()
    }
}
