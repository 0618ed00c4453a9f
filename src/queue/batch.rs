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
//!
//! The deletes that carry a companion's writes ([`super::companion`]) go
//! as one call of the delete script for all of them (up to
//! [`MAX_GROUP`]): Redis then runs one script for N jobs instead of N
//! scripts. Each delete in it stays on its own: its `ZREM`, then its
//! companion's writes under `pcall` when that removed the member.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use redis::{Pipeline, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

use super::member::MemberRef;
use super::scripts;
use crate::redis::RedisConn;

/// The most writes sent in one pipeline.
pub const MAX_BATCH: usize = 256;

/// The most deletes with a companion in one script call: Redis runs a
/// script to its end before anything else, so a call stays short (a
/// fraction of a millisecond) however many jobs finish together.
pub const MAX_GROUP: usize = 32;

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
    /// the member, in one script (see [`super::companion`]); by SHA1
    /// unless `text`.
    DeleteWith {
        /// The `:reserved` key.
        reserved: String,
        /// The reserved member's bytes.
        member: Bytes,
        /// The delete script with the companion's body.
        script: Arc<super::companion::DeleteScript>,
        /// The companion's keys and arguments.
        writes: super::companion::Writes,
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
            Write::DeleteWith { script, text, .. } => delete_with(pipe, script, *text, &[self]),
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

/// One call of a companion's delete script ([`super::companion::script_with`])
/// for `deletes`, all [`Write::DeleteWith`] of that script.
fn delete_with(
    pipe: &mut Pipeline,
    script: &super::companion::DeleteScript,
    text: bool,
    deletes: &[&Write],
) {
    let parts = || {
        deletes.iter().filter_map(|write| match write {
            Write::DeleteWith {
                reserved,
                member,
                writes,
                ..
            } => Some((reserved, member, writes)),
            _ => None,
        })
    };
    let cmd = if text {
        pipe.cmd("EVAL").arg(&script.code)
    } else {
        pipe.cmd("EVALSHA").arg(&script.sha)
    };
    cmd.arg(
        parts()
            .map(|(_, _, writes)| 1 + writes.keys.len())
            .sum::<usize>(),
    );
    for (reserved, _, writes) in parts() {
        cmd.arg(reserved);
        for key in &writes.keys {
            cmd.arg(key);
        }
    }
    for (_, member, writes) in parts() {
        cmd.arg(&member[..])
            .arg(writes.keys.len())
            .arg(writes.args.len());
        for arg in &writes.args {
            cmd.arg(&arg[..]);
        }
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

/// Where a write's answer is in a pipeline's answers: its command, and
/// its place in that command's answer when the command carries several
/// writes (a companion's deletes, one script call for them all).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slot {
    command: usize,
    within: Option<usize>,
}

/// The pipeline of `writes`, and where each one's answer will be. The
/// deletes with a companion's script (by SHA1) go in calls of it of up to
/// [`MAX_GROUP`], each in the place of its first delete; every other
/// write is a command of its own, in order. The writes of a batch are of
/// different jobs: their order does not matter to each other.
fn pipeline_of(writes: &[&Write]) -> (Pipeline, Vec<Slot>) {
    let mut pipe = redis::pipe();
    let mut slots: Vec<Option<Slot>> = vec![None; writes.len()];
    let mut command = 0;
    for (i, write) in writes.iter().enumerate() {
        if slots[i].is_some() {
            continue;
        }
        if let Write::DeleteWith {
            script,
            text: false,
            ..
        } = write
        {
            let group: Vec<usize> = (i..writes.len())
                .filter(|&j| slots[j].is_none() && same_script(writes[j], &script.sha))
                .take(MAX_GROUP)
                .collect();
            let deletes: Vec<&Write> = group.iter().map(|&j| writes[j]).collect();
            delete_with(&mut pipe, script, false, &deletes);
            for (within, j) in group.into_iter().enumerate() {
                slots[j] = Some(Slot {
                    command,
                    within: Some(within),
                });
            }
        } else {
            write.add_to(&mut pipe);
            slots[i] = Some(Slot {
                command,
                within: None,
            });
        }
        command += 1;
    }
    let slots = slots
        .into_iter()
        .map(|slot| {
            slot.unwrap_or(Slot {
                command,
                within: None,
            })
        })
        .collect();
    (pipe, slots)
}

/// Whether `write` is a delete with the companion's script `sha`, sent
/// by SHA1.
fn same_script(write: &Write, sha: &str) -> bool {
    matches!(write, Write::DeleteWith { script, text: false, .. } if script.sha == sha)
}

/// Whether the write at `slot` removed its reservation.
fn removed_at(answers: &[Value], slot: Slot) -> bool {
    match (answers.get(slot.command), slot.within) {
        (Some(answer), None) => removed(answer),
        (Some(Value::Array(each)), Some(within)) => each.get(within).is_some_and(removed),
        _ => false,
    }
}

/// Whether the delete at `slot`, in a companion's script call, was one
/// Redis refused (-1: its `ZREM` failed; the others of the call ran).
fn refused_at(answers: &[Value], slot: Slot) -> bool {
    match (answers.get(slot.command), slot.within) {
        (Some(Value::Array(each)), Some(within)) => {
            matches!(each.get(within), Some(Value::Int(-1)))
        }
        _ => false,
    }
}

/// Pipelines every write of `batch` and answers each; empties `batch`.
async fn settle(conn: &RedisConn, batch: &mut Vec<Request>) {
    let writes: Vec<&Write> = batch.iter().map(|(write, _)| write).collect();
    let (pipe, slots) = pipeline_of(&writes);
    match pipe.query_async::<Vec<Value>>(&mut conn.clone()).await {
        Ok(answers) => {
            for ((write, reply), slot) in batch.drain(..).zip(slots) {
                let answer = if refused_at(&answers, slot) {
                    // Its own error, found alone.
                    one_by_one(conn, write).await
                } else {
                    Ok(removed_at(&answers, slot))
                };
                let _ = reply.send(answer);
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
        let slot = Slot {
            command: 0,
            within: matches!(write, Write::DeleteWith { .. }).then_some(0),
        };
        let refused = matches!(&answer, Ok(answers) if refused_at(answers, slot));
        match (answer, write.instead()) {
            (Err(e), Some(next)) if !lost_connection(&e) => write = next,
            (Ok(_), Some(next)) if refused => write = next,
            (answer, _) => return answer.map(|answers| removed_at(&answers, slot)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::companion::{DeleteScript, Writes};

    fn delete_with(script: &Arc<DeleteScript>, member: &'static str) -> Write {
        Write::DeleteWith {
            reserved: "queues:default:reserved".into(),
            member: Bytes::from_static(member.as_bytes()),
            script: Arc::clone(script),
            writes: Writes {
                keys: vec!["record".into()],
                args: vec![Bytes::from_static(b"arg")],
            },
            text: false,
        }
    }

    /// The deletes with a companion go in one script call, in the place
    /// of the first; each finds its answer in that call's answer.
    #[test]
    fn deletes_with_a_companion_share_one_script_call() {
        let script = Arc::new(DeleteScript {
            code: "return {}".into(),
            sha: "sha".into(),
        });
        let plain = Write::Delete {
            reserved: "queues:default:reserved".into(),
            member: MemberRef::Exact(Bytes::from_static(b"plain")),
        };
        let writes = [delete_with(&script, "a"), plain, delete_with(&script, "b")];
        let (pipe, slots) = pipeline_of(&writes.iter().collect::<Vec<_>>());
        assert_eq!(pipe.cmd_iter().count(), 2);
        let at = |command, within| Slot { command, within };
        assert_eq!(slots, [at(0, Some(0)), at(1, None), at(0, Some(1))]);
        let answers = [
            Value::Array(vec![Value::Int(1), Value::Int(-1)]),
            Value::Int(1),
        ];
        let removed: Vec<bool> = slots.iter().map(|s| removed_at(&answers, *s)).collect();
        assert_eq!(removed, [true, true, false]);
        let refused: Vec<bool> = slots.iter().map(|s| refused_at(&answers, *s)).collect();
        assert_eq!(refused, [false, false, true], "sent again alone");
    }
}
