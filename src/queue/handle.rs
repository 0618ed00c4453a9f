//! A queue as the worker names it, whichever driver keeps it.
//!
//! Laravel names a queue by a string (`--queue=high,default`) and each
//! driver turns that string into what it reads and writes: Redis into its
//! keys under the connection's prefix, the database into its `queue`
//! column's value, SQS into a queue URL, beanstalkd into a tube. The worker
//! does that once per queue, through [`Driver::handle`](super::driver::Driver::handle),
//! and passes the [`QueueHandle`] it gets back to every later call: it
//! reads only the name; the driver reads what it attached.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// One queue: its name and what its driver derived from the name once.
#[derive(Clone)]
pub struct QueueHandle {
    /// The queue's name as the worker was given it (`default`, not a key
    /// or a URL): what logs, metrics and `failed_jobs.queue` show.
    pub name: String,
    /// What the driver that made the handle derived from the name (Redis:
    /// its keys); `None` when the name is all it needs.
    data: Option<Arc<dyn Any + Send + Sync>>,
}

impl QueueHandle {
    /// A handle that is only a name.
    pub fn named(name: &str) -> Self {
        QueueHandle {
            name: name.to_string(),
            data: None,
        }
    }

    /// A handle carrying `data` beside the name, for the driver that made it.
    pub fn with<T: Any + Send + Sync>(name: &str, data: T) -> Self {
        QueueHandle {
            name: name.to_string(),
            data: Some(Arc::new(data)),
        }
    }

    /// The driver's data, when it is a `T` (the driver that made the handle
    /// reads its own; any other gets `None`).
    pub fn data<T: 'static>(&self) -> Option<&T> {
        self.data.as_deref().and_then(|d| d.downcast_ref::<T>())
    }
}

impl fmt::Debug for QueueHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueHandle")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they name the same queue.
impl PartialEq for QueueHandle {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for QueueHandle {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_reads_back_its_own_data_only() {
        let handle = QueueHandle::with("emails", 7_u32);
        assert_eq!(handle.name, "emails");
        assert_eq!(handle.data::<u32>(), Some(&7));
        assert_eq!(handle.data::<String>(), None);
        assert_eq!(QueueHandle::named("emails").data::<u32>(), None);
        assert_eq!(handle, QueueHandle::named("emails"));
    }
}
