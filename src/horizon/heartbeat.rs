//! The master and supervisor records Horizon's dashboard and its
//! `horizon:status`, `horizon:list`, `horizon:supervisors`,
//! `horizon:terminate`, `horizon:pause` and `horizon:continue` read.
//!
//! Every second, as Horizon's master loop does: `P master:{name}` (a hash:
//! `name, environment, pid, status, supervisors`, `EXPIRE 15`) scored now
//! in `P masters`, and one supervisor `P supervisor:{master}:laravel-worker`
//! (`name, master, pid, status, processes, options`, `EXPIRE 30`) scored
//! now in `P supervisors`. The daemon is both: its pid is the one
//! `horizon:terminate` (SIGTERM), `horizon:pause` (SIGUSR2) and
//! `horizon:continue` (SIGCONT) signal, which the worker already obeys.
//!
//! `processes` is `{"redis:q1,q2": concurrency}` when balance is off: the
//! daemon's job slots all take from every queue in priority order, which is
//! Horizon's `balance = false` pool, whose key is the comma-joined queue
//! list. A balanced worker (`[worker] balance`) reports one entry per queue,
//! `{"redis:q1": n1, "redis:q2": n2}`, as Horizon's balanced supervisors
//! do: the slots each queue had after the last round ([`LiveSlots`]).
//!
//! The commands Horizon queues for a master or a supervisor
//! (`P commands:master:{name}`, `P commands:{supervisor}`) are read and
//! emptied (LRANGE + LTRIM) each beat: `Pause`, `ContinueWorking` and
//! `Terminate` act as SIGUSR2, SIGCONT and SIGTERM.

use std::time::Duration;

use redis::AsyncCommands;
use serde_json::json;
use tokio::sync::watch;

use super::keys::Keys;
use crate::redis::RedisConn;
use crate::signals::Control;
use crate::worker::JobEvents;
use crate::worker::balance::Share;

/// The slots per queue a balanced worker reported last (the `rebalanced`
/// event, once at start and after every round that moved one), read by
/// each beat; empty while balance is off.
#[derive(Debug, Default)]
pub struct LiveSlots(std::sync::Mutex<Vec<(String, usize)>>);

impl JobEvents for LiveSlots {
    fn rebalanced(&self, slots: &[Share]) {
        let shares = slots.iter().map(|s| (s.queue.clone(), s.slots)).collect();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = shares;
    }
}

impl LiveSlots {
    /// The supervisor's `processes`: per queue when balanced, else one
    /// pool of `me.concurrency` over the comma-joined queues.
    pub fn processes(&self, me: &Identity) -> serde_json::Value {
        let shares = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if shares.is_empty() {
            return json!({ format!("{}:{}", me.connection, me.queues.join(",")): me.concurrency });
        }
        let per_queue: serde_json::Map<String, serde_json::Value> = shares
            .iter()
            .map(|(queue, n)| (format!("{}:{queue}", me.connection), json!(n)))
            .collect();
        serde_json::Value::Object(per_queue)
    }
}

/// Time between two beats.
pub const EVERY: Duration = Duration::from_secs(1);

/// The `environment` a daemon master reports: not one of an app's
/// `horizon.environments`, so the dashboard adds no phantom supervisors
/// from the app's provisioning plan.
pub const ENVIRONMENT: &str = "laravel-worker";

/// Who this daemon is, for Horizon.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The master's name (`host-a7Xq`).
    pub master: String,
    /// The queue connection's name (`redis`).
    pub connection: String,
    /// The queues worked, in priority order.
    pub queues: Vec<String>,
    /// Job slots.
    pub concurrency: usize,
    /// The options reported as the supervisor's (`queue`, `balance`,
    /// `connection`, `timeout`...).
    pub options: serde_json::Value,
}

impl Identity {
    /// The supervisor's full name, `{master}:laravel-worker`.
    pub fn supervisor(&self) -> String {
        format!("{}:laravel-worker", self.master)
    }
}

/// Beats every [`EVERY`] until the task is aborted; `control` tells
/// whether the worker is paused. Each beat also checks the finished jobs
/// a late producer's write may have undone ([`super::late`]).
pub async fn run(
    keys: Keys,
    me: Identity,
    slots: std::sync::Arc<LiveSlots>,
    late: std::sync::Arc<super::late::Late>,
    mut conn: RedisConn,
    control: watch::Receiver<Control>,
) {
    let mut limiter = crate::log_limit::RepeatLimiter::new(crate::log_limit::DEFAULT_INTERVAL);
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tick.tick().await;
        let paused = control.borrow().paused;
        let processes = slots.processes(&me);
        match beat(&keys, &me, &processes, &mut conn, paused).await {
            Ok(()) => limiter.log_resolved(SITE),
            Err(e) => limiter.log(tracing::Level::WARN, SITE, &e),
        }
        for queue in [
            format!("commands:master:{}", me.master),
            format!("commands:{}", me.supervisor()),
        ] {
            match pending_commands(&mut conn, &keys.key(&queue)).await {
                Ok(commands) => commands.iter().for_each(|c| obey(c)),
                Err(e) => limiter.log(tracing::Level::WARN, SITE, &e),
            }
        }
        if let Err(e) = late.check(&keys, &mut conn).await {
            limiter.log(tracing::Level::WARN, LATE_SITE, &e);
        }
    }
}

/// The log site of a failed check of the watched jobs.
const LATE_SITE: &str = "cannot check Horizon's records of finished jobs";

/// The log site of a failed beat.
const SITE: &str = "cannot write Horizon's master and supervisor records";

/// One beat: both records and their scores, in one pipeline.
async fn beat(
    keys: &Keys,
    me: &Identity,
    processes: &serde_json::Value,
    conn: &mut RedisConn,
    paused: bool,
) -> redis::RedisResult<()> {
    let now = crate::queue::now();
    let pid = std::process::id().to_string();
    let status = if paused { "paused" } else { "running" };
    let supervisor = me.supervisor();
    let master_key = keys.key(&format!("master:{}", me.master));
    let supervisor_key = keys.key(&format!("supervisor:{supervisor}"));
    redis::pipe()
        .hset_multiple(
            &master_key,
            &[
                ("name", me.master.as_str()),
                ("environment", ENVIRONMENT),
                ("pid", &pid),
                ("status", status),
                ("supervisors", &json!([supervisor]).to_string()),
            ],
        )
        .ignore()
        .zadd(keys.key("masters"), &me.master, now)
        .ignore()
        .expire(&master_key, 15)
        .ignore()
        .hset_multiple(
            &supervisor_key,
            &[
                ("name", supervisor.as_str()),
                ("master", me.master.as_str()),
                ("pid", &pid),
                ("status", status),
                ("processes", &processes.to_string()),
                ("options", &me.options.to_string()),
            ],
        )
        .ignore()
        .zadd(keys.key("supervisors"), &supervisor, now)
        .ignore()
        .expire(&supervisor_key, 30)
        .ignore()
        .query_async(conn)
        .await
}

/// `RedisHorizonCommandQueue::pending`: the commands in list `key`, which
/// is emptied of them.
async fn pending_commands(conn: &mut RedisConn, key: &str) -> redis::RedisResult<Vec<String>> {
    let length: isize = conn.llen(key).await?;
    if length < 1 {
        return Ok(Vec::new());
    }
    let (commands,): (Vec<String>,) = redis::pipe()
        .lrange(key, 0, length - 1)
        .ltrim(key, length, -1)
        .ignore()
        .query_async(conn)
        .await?;
    Ok(commands)
}

/// Acts on one queued command (`{"command": "Laravel\\Horizon\\…\\Pause",
/// "options": {}}`) by the signal the worker already obeys.
fn obey(text: &str) {
    let command = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| {
            v.get("command")
                .and_then(|c| c.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default();
    let class = command.rsplit('\\').next().unwrap_or_default();
    let signal = match class {
        "Pause" => nix::sys::signal::Signal::SIGUSR2,
        "ContinueWorking" | "Continue" => nix::sys::signal::Signal::SIGCONT,
        "Terminate" => nix::sys::signal::Signal::SIGTERM,
        _ => {
            tracing::info!(
                command,
                "Horizon command ignored (not pause, continue or terminate)"
            );
            return;
        }
    };
    tracing::info!(command, "Horizon command received");
    if let Err(e) = nix::sys::signal::kill(nix::unistd::getpid(), signal) {
        tracing::warn!(command, "cannot act on the Horizon command: {e}");
    }
}

/// Removes the master and supervisor records, as a master that stops
/// does (`horizon:status` then says inactive at once).
pub async fn forget(keys: &Keys, me: &Identity, conn: &mut RedisConn) -> redis::RedisResult<()> {
    let supervisor = me.supervisor();
    redis::pipe()
        .del(keys.key(&format!("master:{}", me.master)))
        .ignore()
        .zrem(keys.key("masters"), &me.master)
        .ignore()
        .del(keys.key(&format!("supervisor:{supervisor}")))
        .ignore()
        .zrem(keys.key("supervisors"), &supervisor)
        .ignore()
        .query_async(conn)
        .await
}
