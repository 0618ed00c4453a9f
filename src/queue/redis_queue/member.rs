//! How a write names the member it settles in `:reserved`.
//!
//! Laravel deletes and releases a job by sending its reserved string back
//! (`ZREM reserved member`): for a job of 20 MB that is 20 MB more on the
//! wire and, in this process, two more copies of it (the command's argument
//! and the packed command), held while the job's own copies still are. So
//! a member of [`DIGEST_AT`] bytes or more is named instead by its length
//! and SHA-1 (computed here once, at reservation), and the `*_BY_DIGEST`
//! scripts find it among the members scored where this reservation may be
//! scored: from the expiry the pop wrote to the last renewal sent. Only
//! members of the same length are hashed, in Redis, by `redis.sha1hex`.
//!
//! The member itself is unchanged, so PHP workers (which reclaim expired
//! reservations by score) see exactly what Laravel would have left.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sha1::{Digest, Sha1};

use super::keys::QueueKeys;

/// Members at least this many bytes long (1 MiB) are named by digest.
pub const DIGEST_AT: usize = 1024 * 1024;

/// A large member's name: its length in bytes and SHA-1, lower-case hex
/// (what `redis.sha1hex` returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDigest {
    /// Length of the member, bytes.
    pub len: usize,
    /// SHA-1 of the member, 40 lower-case hex digits.
    pub sha1: Arc<str>,
}

impl MemberDigest {
    /// The digest of `member` when it is [`DIGEST_AT`] bytes or longer.
    pub fn of_large(member: &[u8]) -> Option<Self> {
        (member.len() >= DIGEST_AT).then(|| MemberDigest {
            len: member.len(),
            sha1: hex::encode(Sha1::digest(member)).into(),
        })
    }
}

/// What a write sends to name a reserved member.
#[derive(Debug, Clone)]
pub enum MemberRef {
    /// The member's exact bytes (Laravel's way; every member under
    /// [`DIGEST_AT`] bytes).
    Exact(Bytes),
    /// A large member, by digest, among the members scored within
    /// `scores` (inclusive, UNIX seconds).
    Digest {
        /// The member's length and SHA-1.
        digest: MemberDigest,
        /// Lowest and highest score the reservation may have.
        scores: (i64, i64),
    },
}

/// What names a Redis reservation for every later write: the keys of its
/// queue, and for a large member its digest and the scores it may have in
/// `:reserved` (the expiry the pop wrote, raised by each renewal sent and
/// narrowed to one score when a renewal is confirmed: a renewal whose
/// answer was lost may or may not have landed). Shared by the clones of a
/// [`ReservedJob`](crate::queue::ReservedJob).
#[derive(Debug, Clone)]
pub struct RedisReservation {
    /// The keys of the queue the job was popped from.
    pub keys: Arc<QueueKeys>,
    /// Length and SHA-1 of the reserved member when it is large: writes
    /// then name it by digest.
    pub digest: Option<MemberDigest>,
    /// Lowest and highest score (UNIX seconds) the member may have.
    scores: Arc<Mutex<(i64, i64)>>,
}

impl RedisReservation {
    /// The reservation of `member` in `keys`' `:reserved`, scored `score`
    /// (UNIX seconds) by the pop.
    pub fn new(keys: Arc<QueueKeys>, member: &[u8], score: i64) -> Self {
        RedisReservation {
            keys,
            digest: MemberDigest::of_large(member),
            scores: Arc::new(Mutex::new((score, score))),
        }
    }

    /// How writes name the member `reserved`: its bytes, or for a large
    /// one its digest and the scores it may have.
    pub fn member(&self, reserved: &Bytes) -> MemberRef {
        match &self.digest {
            Some(digest) => MemberRef::Digest {
                digest: digest.clone(),
                scores: self.scores(),
            },
            None => MemberRef::Exact(reserved.clone()),
        }
    }

    /// A renewal to `score` is about to be sent: until it is confirmed the
    /// member may have either its old score or this one.
    pub fn renewing(&self, score: i64) {
        self.update(|s| *s = (s.0.min(score), s.1.max(score)));
    }

    /// A renewal to `score` was confirmed.
    pub fn confirm(&self, score: i64) {
        self.update(|s| *s = (score, score));
    }

    /// Lowest and highest score the member may have in `:reserved`.
    pub fn scores(&self) -> (i64, i64) {
        match self.scores.lock() {
            Ok(s) => *s,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn update(&self, change: impl FnOnce(&mut (i64, i64))) {
        match self.scores.lock() {
            Ok(mut s) => change(&mut s),
            Err(poisoned) => change(&mut poisoned.into_inner()),
        }
    }
}

/// Two reservations are equal when they are the same one (clones of it).
impl PartialEq for RedisReservation {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.scores, &other.scores)
    }
}

impl Eq for RedisReservation {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_large_members_get_a_digest() {
        assert_eq!(MemberDigest::of_large(&[b'x'; DIGEST_AT - 1]), None);
        let large = vec![b'x'; DIGEST_AT];
        let digest = MemberDigest::of_large(&large).unwrap();
        assert_eq!(digest.len, DIGEST_AT);
        assert_eq!(digest.sha1.len(), 40);
        assert!(
            digest
                .sha1
                .chars()
                .all(|c| matches!(c, '0'..='9' | 'a'..='f'))
        );
    }

    #[test]
    fn a_large_members_scores_widen_while_a_renewal_is_unconfirmed() {
        let keys = Arc::new(QueueKeys::new("", "default", false));
        let large = Bytes::from(vec![b'x'; DIGEST_AT]);
        let held = RedisReservation::new(keys, &large, 100);
        held.renewing(190);
        assert!(matches!(
            held.member(&large),
            MemberRef::Digest {
                scores: (100, 190),
                ..
            }
        ));
        held.confirm(190);
        assert_eq!(held.scores(), (190, 190));
        let small = Bytes::from_static(b"{}");
        let keys = Arc::new(QueueKeys::new("", "default", false));
        assert!(matches!(
            RedisReservation::new(keys, &small, 1).member(&small),
            MemberRef::Exact(_)
        ));
    }
}
