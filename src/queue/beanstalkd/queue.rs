//! [`BeanstalkdQueue`]: Laravel's `BeanstalkdQueue` and `BeanstalkdJob`,
//! carried out over connections of our own client.
//!
//! beanstalkd ties a reservation to the connection that reserved the job:
//! only that connection may delete, release or touch it, and a reserve
//! blocks its connection. So every reserved job keeps the connection it
//! was reserved on, for its own writes only, until it is deleted, released
//! or handed back; the connection then goes back to the idle ones. Pushes,
//! sizes and clears take an idle connection (or open one) for the call.
//! The connections open at once are thus the jobs running plus the calls
//! in flight; at most [`MAX_IDLE`] are kept idle. A connection that failed
//! is dropped, and the next call opens a new one: the server restarted is
//! reached again by itself. When a connection closes, beanstalkd makes its
//! reserved jobs ready again: a reservation never outlives its connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use super::client::{Connection, JobStats, Reserved};
use super::error::{BeanstalkdError, Result};
use crate::queue::job::{DriverHandle, Lease, Reservation};
use crate::queue::{Payload, QueueHandle, QueueSizes, ReservedJob};

/// The priority Laravel puts and releases jobs with
/// (`Pheanstalk::DEFAULT_PRIORITY`).
pub const PRIORITY: u32 = 1024;

/// Idle connections kept for later calls; more are closed.
const MAX_IDLE: usize = 64;

/// Where the beanstalkd queue is, as the app's `beanstalkd` connection
/// says (`BeanstalkdConnector`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeanstalkdQueueSpec {
    /// `host` (`BEANSTALKD_QUEUE_HOST`, default `localhost`).
    pub host: String,
    /// `port` (default 11300, `Pheanstalk::DEFAULT_PORT`).
    pub port: u16,
    /// `retry_after` (default 90; `null` is 60, `Pheanstalk::DEFAULT_TTR`):
    /// the `ttr` every push gives its job.
    pub retry_after: u64,
    /// `block_for` (default 0): seconds a pop waits for a job
    /// (`reserve-with-timeout`).
    pub block_for: u64,
}

impl BeanstalkdQueueSpec {
    /// `host:port` (an IPv6 host in brackets).
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The beanstalkd queue of one server (see the module's documentation).
#[derive(Clone)]
pub struct BeanstalkdQueue {
    inner: Arc<Inner>,
}

struct Inner {
    spec: BeanstalkdQueueSpec,
    addr: String,
    idle: Mutex<Vec<Connection>>,
    /// Jobs reserved by this process, by id: `clear` deletes them through
    /// their own connections.
    held: Mutex<HashMap<u64, Weak<Held>>>,
}

/// A reserved job's own data: its id, what `stats-job` said at the
/// reserve, and the connection that holds the reservation (`None` once
/// settled, or once that connection failed and the reservation with it).
pub struct Held {
    /// The job's id.
    pub id: u64,
    /// Its tube.
    pub tube: String,
    /// What `stats-job` said right after the reserve.
    pub stats: JobStats,
    /// The connection that reserved it.
    pub conn: tokio::sync::Mutex<Option<Connection>>,
}

impl BeanstalkdQueue {
    /// The queue `spec` names. Nothing is sent yet: the first pop or push
    /// connects (and says so when the server cannot be reached).
    pub fn open(spec: &BeanstalkdQueueSpec) -> Self {
        BeanstalkdQueue {
            inner: Arc::new(Inner {
                addr: spec.addr(),
                spec: spec.clone(),
                idle: Mutex::new(Vec::new()),
                held: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The settings it was opened with.
    pub fn spec(&self) -> &BeanstalkdQueueSpec {
        &self.inner.spec
    }

    /// `beanstalkd at HOST:PORT`.
    pub fn describe(&self) -> String {
        format!("beanstalkd at {}", self.inner.addr)
    }

    /// An idle connection the server has not closed, or a new one (after
    /// a server restart every idle connection is closed).
    async fn connection(&self) -> Result<Connection> {
        loop {
            let idle = lock(&self.inner.idle).pop();
            match idle {
                Some(conn) if conn.is_closed() => continue,
                Some(conn) => return Ok(conn),
                None => {
                    return Connection::open(&self.inner.addr)
                        .await
                        .map_err(|e| e.at(&self.inner.addr));
                }
            }
        }
    }

    /// Gives `conn` back to the idle ones (closed when enough are idle).
    fn give_back(&self, conn: Connection) {
        let mut idle = lock(&self.inner.idle);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Runs `call` on a connection of the pool: given back after success,
    /// dropped after a failure.
    async fn with_connection<T>(
        &self,
        call: impl AsyncFnOnce(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.connection().await?;
        match call(&mut conn).await {
            Ok(value) => {
                self.give_back(conn);
                Ok(value)
            }
            Err(e) => Err(e.at(&self.inner.addr)),
        }
    }

    /// Reserves up to `count` jobs of `queue`, each on its own connection:
    /// the first waiting up to `block_for` seconds (Laravel's
    /// `reserveWithTimeout($blockFor)`), the others not at all. Each job's
    /// attempt is its `stats-job` `reserves` (`BeanstalkdJob::attempts()`).
    ///
    /// # Errors
    /// A queue name that is no tube name; the server cannot be reached
    /// (for the first job: later ones end the pop with what it has).
    pub async fn pop_jobs(
        &self,
        queue: &Arc<QueueHandle>,
        count: usize,
    ) -> Result<Vec<ReservedJob>> {
        check_tube(&queue.name)?;
        let mut jobs = Vec::new();
        let mut wait = self.inner.spec.block_for;
        while jobs.len() < count.max(1) {
            match self.reserve_one(queue, wait).await {
                Ok(Some(job)) => jobs.push(job),
                Ok(None) => break,
                Err(e) if jobs.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!("{}", e.message);
                    break;
                }
            }
            wait = 0;
        }
        Ok(jobs)
    }

    /// Reserves one job of `queue`, waiting up to `wait` seconds. A job
    /// this process still runs comes back when the server lost its
    /// reservation (a restart ends every connection): the new reservation
    /// is handed to the running job ([`BeanstalkdQueue::adopt`]) and the
    /// reserve goes on, so that no slot runs it a second time at once.
    async fn reserve_one(
        &self,
        queue: &Arc<QueueHandle>,
        wait: u64,
    ) -> Result<Option<ReservedJob>> {
        loop {
            let mut conn = self.connection().await?;
            let sent = Instant::now();
            let reserved = match conn.reserve(&queue.name, wait).await {
                Ok(Some(reserved)) => reserved,
                Ok(None) => {
                    self.give_back(conn);
                    return Ok(None);
                }
                Err(e) => return Err(e.at(&self.inner.addr)),
            };
            match self.adopt(reserved.id, conn).await {
                Some(conn) => return self.stats_of(queue, conn, reserved, sent).await,
                None => continue,
            }
        }
    }

    /// Hands the reservation of job `id` that `conn` just made to the job
    /// of that id this process holds, if it holds one (its own reservation
    /// ended with its connection while it runs): its renewals and its
    /// settle then go through `conn`. Gives `conn` back when no held job
    /// takes it. Each such reserve counted one more attempt on the server
    /// (`reserves`), as a reserve by any other worker would have.
    async fn adopt(&self, id: u64, conn: Connection) -> Option<Connection> {
        let held = lock(&self.inner.held).get(&id).and_then(Weak::upgrade);
        let Some(held) = held else {
            return Some(conn);
        };
        tracing::warn!(
            job = id,
            "the server gave back a job this worker still runs (its reservation ended with \
             its connection): the running job holds the new reservation"
        );
        *held.conn.lock().await = Some(conn);
        None
    }

    async fn stats_of(
        &self,
        queue: &Arc<QueueHandle>,
        mut conn: Connection,
        reserved: Reserved,
        sent: Instant,
    ) -> Result<Option<ReservedJob>> {
        // Dropping `conn` on a failure here hands the job back to the
        // server: the reservation ends with its connection.
        let stats = match conn.stats_job(reserved.id).await {
            Ok(Some(stats)) => stats,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.at(&self.inner.addr)),
        };
        Ok(Some(self.job(queue, conn, reserved, stats, sent)))
    }

    fn job(
        &self,
        queue: &Arc<QueueHandle>,
        conn: Connection,
        reserved: Reserved,
        stats: JobStats,
        sent: Instant,
    ) -> ReservedJob {
        let Reserved { id, body } = reserved;
        let held = Arc::new(Held {
            id,
            tube: queue.name.clone(),
            stats,
            conn: tokio::sync::Mutex::new(Some(conn)),
        });
        {
            let mut all = lock(&self.inner.held);
            if all.len() >= 1024 {
                all.retain(|_, held| held.strong_count() > 0);
            }
            all.insert(id, Arc::downgrade(&held));
        }
        ReservedJob {
            queue: Arc::clone(queue),
            payload: Payload::parse_stored(body.clone()),
            reserved: body.clone(),
            raw: body,
            // The job's own ttr: the server's clock for this reservation
            // (the pusher's `retry_after`, ours or a PHP app's).
            lease: Lease::new(Some(stats.ttr.max(1)), sent),
            reservation: Reservation::Handle(DriverHandle {
                id: id.to_string(),
                attempt: stats.reserves,
                data: held,
            }),
        }
    }

    /// Puts `payload` on `queue`'s tube, due in `delay` seconds, with
    /// priority 1024 and `ttr` = `retry_after` (`BeanstalkdQueue::pushRaw`
    /// and `later`); returns the job's id.
    ///
    /// # Errors
    /// The server cannot be reached or refused the job.
    pub async fn put(&self, queue: &str, payload: &[u8], delay: u64) -> Result<u64> {
        check_tube(queue)?;
        let ttr = self.inner.spec.retry_after;
        self.with_connection(async |conn| conn.put(queue, PRIORITY, delay, ttr, payload).await)
            .await
    }

    /// `queue`'s ready, delayed and reserved jobs (`stats-tube`).
    ///
    /// # Errors
    /// The server cannot be reached.
    pub async fn sizes(&self, queue: &str) -> Result<QueueSizes> {
        check_tube(queue)?;
        let [ready, delayed, reserved, _buried] = self
            .with_connection(async |conn| conn.stats_tube(queue).await)
            .await?;
        Ok(QueueSizes {
            pending: ready,
            delayed,
            delayed_due: 0,
            reserved,
            // beanstalkd does not say (Laravel gives null too).
            oldest_pending: None,
            head_bytes: 0,
        })
    }

    /// Deletes `queue`'s ready, delayed and buried jobs, and the jobs this
    /// process holds reserved there; returns how many. A job another
    /// process holds reserved cannot be deleted by anyone else
    /// (beanstalkd's rule) and stays.
    ///
    /// # Errors
    /// The server cannot be reached.
    pub async fn clear(&self, queue: &str) -> Result<u64> {
        check_tube(queue)?;
        let mut deleted = self
            .with_connection(async |conn| {
                let [ready, delayed, _, buried] = conn.stats_tube(queue).await?;
                let mut deleted = 0;
                for (state, count) in [("ready", ready), ("delayed", delayed), ("buried", buried)] {
                    // Bounded by the count at the start, and what came since.
                    for _ in 0..count.saturating_mul(2).saturating_add(64) {
                        let Some(id) = conn.peek(queue, state).await? else {
                            break;
                        };
                        let line = format!("delete {id}\r\n");
                        deleted += u64::from(conn.job_command(line, "delete").await?);
                    }
                }
                Ok(deleted)
            })
            .await?;
        for held in self.held_on(queue) {
            let mut slot = held.conn.lock().await;
            if let Some(conn) = slot.as_mut() {
                let line = format!("delete {}\r\n", held.id);
                match conn.job_command(line, "delete").await {
                    Ok(done) => deleted += u64::from(done),
                    Err(e) => {
                        *slot = None;
                        return Err(e.at(&self.inner.addr));
                    }
                }
            }
        }
        Ok(deleted)
    }

    /// The reservations this process holds on `queue`.
    fn held_on(&self, queue: &str) -> Vec<Arc<Held>> {
        lock(&self.inner.held)
            .values()
            .filter_map(Weak::upgrade)
            .filter(|held| held.tube == queue)
            .collect()
    }

    /// Runs `write` on `job`'s own connection while it holds the
    /// reservation: `Ok(false)` when it no longer does (settled, or its
    /// connection failed, which ended the reservation: the server gives a
    /// closed connection's jobs back; the failure is logged). `ends`: the
    /// write ends the reservation, and the connection goes back to the
    /// idle ones. A failed connection is dropped.
    ///
    /// # Errors
    /// The server refused the write (a hand back's copy too big, a
    /// release it had no memory for).
    pub async fn on_reservation(
        &self,
        job: &ReservedJob,
        ends: bool,
        write: impl AsyncFnOnce(&mut Connection, &Held) -> Result<bool>,
    ) -> Result<bool> {
        let Some(held) = held_of(job) else {
            return Ok(false);
        };
        let mut slot = held.conn.lock().await;
        let Some(conn) = slot.as_mut() else {
            return Ok(false);
        };
        match write(conn, held).await {
            Ok(done) => {
                if ends || !done {
                    self.forget(held.id);
                    if let Some(conn) = slot.take() {
                        self.give_back(conn);
                    }
                }
                Ok(done)
            }
            Err(e) => {
                *slot = None;
                self.forget(held.id);
                let e = e.at(&self.inner.addr);
                if e.kind == crate::queue::error::ErrorKind::Unavailable {
                    tracing::warn!(
                        job = held.id,
                        "the reservation ended with its connection: {}",
                        e.message
                    );
                    return Ok(false);
                }
                Err(e)
            }
        }
    }

    fn forget(&self, id: u64) {
        lock(&self.inner.held).remove(&id);
    }
}

/// The beanstalkd reservation of `job`, if this driver reserved it.
pub fn held_of(job: &ReservedJob) -> Option<&Held> {
    match &job.reservation {
        Reservation::Handle(handle) => handle.data::<Held>(),
        _ => None,
    }
}

/// Refuses a queue name beanstalkd would refuse as a tube name (1 to 200
/// bytes of letters, digits and `-+/;.$_()`, not starting with `-`).
fn check_tube(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(BeanstalkdError::bad_tube(name))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tube_names_as_beanstalkd_takes_them() {
        assert!(check_tube("default").is_ok());
        assert!(check_tube("emails-high_1.(x)$;+/").is_ok());
        assert!(check_tube("").is_err());
        assert!(check_tube("-leading").is_err());
        assert!(check_tube("with space").is_err());
        assert!(check_tube(&"x".repeat(201)).is_err());
    }

    #[test]
    fn an_ipv6_host_is_bracketed() {
        let spec = |host: &str| BeanstalkdQueueSpec {
            host: host.into(),
            port: 11300,
            retry_after: 90,
            block_for: 0,
        };
        assert_eq!(spec("127.0.0.1").addr(), "127.0.0.1:11300");
        assert_eq!(spec("::1").addr(), "[::1]:11300");
    }
}
