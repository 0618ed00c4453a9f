//! Settling in batches: the deletes and releases of jobs that finish close
//! together go to Redis as one pipeline instead of one round trip each.
//!
//! Job tasks hand their write to a [`WriteBatch`] and await the answer; one
//! task takes every write waiting at that moment (up to [`MAX_BATCH`]),
//! pipelines them, and answers each. Each write stays atomic on its own (a
//! ZREM, or the release script), so PHP workers on the same queue see
//! nothing new. A batch that fails as a whole (connection lost) fails each
//! of its writes, and every caller retries as it would after a failed round
//! trip of its own; a batch that Redis answered with an error reply is sent
//! again one write at a time, so one bad write cannot fail the others.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use redis::{Pipeline, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

use super::member::MemberRef;
use super::scripts;
use crate::redis::RedisConn;

/// The most writes sent in one pipeline.
pub const MAX_BATCH: usize = 256;

/// One write that settles a reserved job.
#[derive(Debug, Clone)]
pub enum Write {
    /// `ZREM reserved member`: delete the job.
    Delete {
        /// The `:reserved` key.
        reserved: String,
        /// The reserved member: its bytes, or its digest when large.
        member: MemberRef,
    },
    /// The release script: move the reservation to `:delayed`.
    Release {
        /// The `:delayed` key.
        delayed: String,
        /// The `:reserved` key.
        reserved: String,
        /// The reserved member: its bytes, or its digest when large.
        member: MemberRef,
        /// Available-at, UNIX seconds.
        at: i64,
        /// What goes into `:delayed` instead of the reserved member (which
        /// counts the attempt): the original string, to hand the job back
        /// uncounted.
        instead: Option<Bytes>,
    },
    /// `ZREM reserved member`, then a companion's writes when it removed
    /// the member, in one script (see [`crate::queue::companion`]); by SHA1
    /// unless `text`.
    DeleteWith {
        /// The `:reserved` key.
        reserved: String,
        /// The reserved member's bytes.
        member: Bytes,
        /// The delete script with the companion's body.
        script: Arc<crate::queue::companion::DeleteScript>,
        /// The companion's keys and arguments.
        writes: crate::queue::companion::Writes,
        /// Send the script's text (`EVAL`), not its SHA1.
        text: bool,
    },
    /// The release script with `:unrecorded` for `:delayed`: remove the
    /// reservation and keep the job's failure record in its place, while
    /// the failed-job store is down.
    Park {
        /// The `:unrecorded` key.
        unrecorded: String,
        /// The `:reserved` key.
        reserved: String,
        /// The reserved member: its bytes, or its digest when large.
        member: MemberRef,
        /// When it failed, UNIX seconds.
        at: i64,
        /// The failure record.
        record: Bytes,
    },
}

impl Write {
    fn add_to(&self, pipe: &mut Pipeline) {
        match self {
            Write::Delete { reserved, member } => delete_member(pipe, reserved, member),
            Write::DeleteWith {
                reserved,
                member,
                script,
                writes,
                text,
            } => delete_with(pipe, reserved, member, script, writes, *text),
            Write::Release {
                delayed,
                reserved,
                member,
                at,
                instead,
            } => move_member(pipe, delayed, reserved, member, *at, instead.as_ref()),
            Write::Park {
                unrecorded,
                reserved,
                member,
                at,
                record,
            } => move_member(pipe, unrecorded, reserved, member, *at, Some(record)),
        }
    }
}

impl Write {
    /// What to send instead after Redis answered this write with an
    /// error: a companion's delete by SHA1 that Redis does not know
    /// (`NOSCRIPT`, after a restart) goes again as text; one Redis refuses
    /// as text (an ACL without the companion's keys) goes as the plain
    /// delete. `None`: nothing else to try.
    fn instead(&self) -> Option<Write> {
        match self {
            Write::DeleteWith {
                reserved,
                member,
                script,
                writes,
                text: false,
            } => Some(Write::DeleteWith {
                reserved: reserved.clone(),
                member: member.clone(),
                script: Arc::clone(script),
                writes: writes.clone(),
                text: true,
            }),
            Write::DeleteWith {
                reserved,
                member,
                text: true,
                ..
            } => Some(Write::Delete {
                reserved: reserved.clone(),
                member: MemberRef::Exact(member.clone()),
            }),
            _ => None,
        }
    }
}

/// The delete script of a companion ([`crate::queue::companion::script_with`]).
fn delete_with(
    pipe: &mut Pipeline,
    reserved: &str,
    member: &Bytes,
    script: &crate::queue::companion::DeleteScript,
    writes: &crate::queue::companion::Writes,
    text: bool,
) {
    let cmd = if text {
        pipe.cmd("EVAL").arg(&script.code)
    } else {
        pipe.cmd("EVALSHA").arg(&script.sha)
    };
    cmd.arg(1 + writes.keys.len()).arg(reserved);
    for key in &writes.keys {
        cmd.arg(key);
    }
    cmd.arg(&member[..]);
    for arg in &writes.args {
        cmd.arg(&arg[..]);
    }
}

/// `ZREM reserved member` (or its digest form).
fn delete_member(pipe: &mut Pipeline, reserved: &str, member: &MemberRef) {
    match member {
        MemberRef::Exact(member) => {
            pipe.cmd("ZREM").arg(reserved).arg(&member[..]);
        }
        MemberRef::Digest { digest, scores } => {
            pipe.cmd("EVAL")
                .arg(scripts::DELETE_BY_DIGEST)
                .arg(1)
                .arg(reserved)
                .arg(scores.0)
                .arg(scores.1)
                .arg(digest.len)
                .arg(&*digest.sha1);
        }
    }
}

/// The release script (or its digest form): `member` leaves `reserved` for
/// zset `to` at score `at`, as itself or as `instead`.
fn move_member(
    pipe: &mut Pipeline,
    to: &str,
    reserved: &str,
    member: &MemberRef,
    at: i64,
    instead: Option<&Bytes>,
) {
    match member {
        MemberRef::Exact(member) => {
            pipe.cmd("EVAL")
                .arg(scripts::RELEASE)
                .arg(2)
                .arg(to)
                .arg(reserved)
                .arg(&member[..])
                .arg(at)
                .arg(&instead.unwrap_or(member)[..]);
        }
        MemberRef::Digest { digest, scores } => {
            let cmd = pipe
                .cmd("EVAL")
                .arg(scripts::RELEASE_BY_DIGEST)
                .arg(2)
                .arg(to)
                .arg(reserved)
                .arg(scores.0)
                .arg(scores.1)
                .arg(digest.len)
                .arg(&*digest.sha1)
                .arg(at);
            if let Some(instead) = instead {
                cmd.arg(&instead[..]);
            }
        }
    }
}

type Request = (Write, oneshot::Sender<RedisResult<bool>>);

/// The connection the writes go through, shared with the queue, which may
/// replace it (see `RedisQueue::renew_connection`).
pub type SharedConnection = Arc<Mutex<RedisConn>>;

/// The sending side of the batching task; cheap to clone.
#[derive(Clone)]
pub struct WriteBatch {
    requests: mpsc::UnboundedSender<Request>,
}

impl WriteBatch {
    /// Starts the batching task on `conn`; it ends when the last
    /// [`WriteBatch`] clone is dropped.
    pub fn start(conn: SharedConnection) -> Self {
        let (requests, queue) = mpsc::unbounded_channel();
        tokio::spawn(run(conn, queue));
        WriteBatch { requests }
    }

    /// Sends `write` with whatever else is waiting; true when it removed
    /// a reservation (false: the reservation was already gone).
    ///
    /// # Errors
    /// The Redis error of the round trip that carried it.
    pub async fn send(&self, write: Write) -> RedisResult<bool> {
        let (reply, answer) = oneshot::channel();
        let closed =
            || redis::RedisError::from((redis::ErrorKind::Client, "the settle task has ended"));
        self.requests.send((write, reply)).map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn run(conn: SharedConnection, mut queue: mpsc::UnboundedReceiver<Request>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let current = match conn.lock() {
            Ok(conn) => conn.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        settle(&current, &mut batch).await;
    }
}

/// Pipelines every write of `batch` and answers each; empties `batch`.
async fn settle(conn: &RedisConn, batch: &mut Vec<Request>) {
    let mut pipe = redis::pipe();
    for (write, _) in batch.iter() {
        write.add_to(&mut pipe);
    }
    match pipe.query_async::<Vec<Value>>(&mut conn.clone()).await {
        Ok(answers) => {
            for ((_, reply), answer) in batch.drain(..).zip(answers) {
                let _ = reply.send(Ok(removed(&answer)));
            }
        }
        Err(e) if (batch.len() > 1 || batch[0].0.instead().is_some()) && !lost_connection(&e) => {
            // An error reply: find whose, one write at a time.
            for (write, reply) in batch.drain(..) {
                let _ = reply.send(one_by_one(conn, write).await);
            }
        }
        Err(e) => {
            for (_, reply) in batch.drain(..) {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Sends `write` alone; after an error reply, what it says to send
/// [`instead`](Write::instead), if anything.
async fn one_by_one(conn: &RedisConn, mut write: Write) -> RedisResult<bool> {
    loop {
        let mut one = redis::pipe();
        write.add_to(&mut one);
        let answer = one.query_async::<Vec<Value>>(&mut conn.clone()).await;
        match (answer, write.instead()) {
            (Err(e), Some(next)) if !lost_connection(&e) => write = next,
            (answer, _) => return answer.map(|a| a.first().is_some_and(removed)),
        }
    }
}

/// ZREM and the release script both answer 1 when they removed the
/// reservation.
fn removed(answer: &Value) -> bool {
    matches!(answer, Value::Int(n) if *n > 0)
}

/// True for errors of the connection itself, which every write of the
/// batch shares (as opposed to an error reply to one of them).
fn lost_connection(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
}
