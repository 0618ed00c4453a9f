//! [`QueueSizes`]: how many jobs a queue holds, by state, in the seam's
//! words (what `queue:monitor` shows, what the backlog gauges and Horizon's
//! wait times read), whichever driver counts them.

/// The job counts of one queue (`queue:monitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QueueSizes {
    /// Jobs ready to run: Redis's ready list, the table's due unreserved
    /// rows, SQS's visible messages.
    pub pending: u64,
    /// Jobs not due yet: Redis's `:delayed`, rows with a later
    /// `available_at`, SQS's delayed messages.
    pub delayed: u64,
    /// Delayed jobs already due that the next pop makes ready (Redis only;
    /// 0 where a due job is ready already). Not
    /// in `queue:monitor`'s JSON, so not in ours.
    #[serde(skip)]
    pub delayed_due: u64,
    /// Jobs reserved by a worker (running, or waiting to be reclaimed):
    /// Redis's `:reserved`, rows with `reserved_at`, SQS's messages in flight.
    pub reserved: u64,
    /// When the oldest ready job was pushed (UNIX seconds): on Redis the
    /// head's `createdAt` (Laravel 12.11+), else Horizon's `pushedAt`; on
    /// the database its `available_at`; `None` where the driver cannot say
    /// (SQS, older payloads).
    pub oldest_pending: Option<i64>,
    /// Bytes of the head job when it was read whole for `oldest_pending`
    /// (Redis), else 0.
    #[serde(skip)]
    pub head_bytes: u64,
}

/// Whether a size reading also reads the head job for its age
/// ([`QueueSizes::oldest_pending`]). Redis has no way to read part of a
/// list element, so the head is copied whole: callers that need only
/// counts (balancing, Horizon's wait time) say [`HeadAge::Skip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadAge {
    /// Read the head job for its `createdAt`/`pushedAt`.
    Read,
    /// Counts only; `oldest_pending` is `None`.
    Skip,
}

impl QueueSizes {
    /// Ready + delayed + reserved, as Laravel's `size`.
    pub fn size(&self) -> u64 {
        self.pending + self.delayed + self.reserved
    }

    /// The jobs that want a worker now: ready + delayed already due +
    /// reserved (running, or waiting to be reclaimed). What an autoscaler
    /// should follow; jobs delayed into the future are left out.
    pub fn backlog(&self) -> u64 {
        self.pending + self.delayed_due + self.reserved
    }
}
