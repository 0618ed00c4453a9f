//! The cache store as the place SQS overflow pointers lead to (Laravel
//! 13.9+ puts a payload too large for SQS in a cache store and sends a
//! pointer to it): the queue reads a payload and forgets it through
//! [`PayloadStore`], never knowing which store it is.

use super::{CacheStore, php};
use crate::queue::driver::{PayloadStore, Step};
use crate::queue::sqs::overflow::Stored;

impl PayloadStore for CacheStore {
    fn kind(&self) -> &'static str {
        CacheStore::kind(self)
    }

    fn locate(&self, key: &str) -> String {
        CacheStore::locate(self, key)
    }

    /// The entry unserialized: Laravel's `put` of the payload string
    /// stores `s:LEN:"…";`.
    fn read<'a>(&'a self, key: &'a str) -> Step<'a, anyhow::Result<Stored>> {
        Box::pin(async move {
            Ok(match self.get(key).await? {
                Some(raw) => match php::unserialize_string(&raw) {
                    Some(payload) => Stored::Payload(payload.to_string()),
                    None => Stored::NotAString,
                },
                None => Stored::Missing,
            })
        })
    }

    fn forget<'a>(&'a self, key: &'a str) -> Step<'a, anyhow::Result<()>> {
        Box::pin(CacheStore::forget(self, key))
    }
}
