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

use std::sync::Arc;

use bytes::Bytes;
use sha1::{Digest, Sha1};

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
}
