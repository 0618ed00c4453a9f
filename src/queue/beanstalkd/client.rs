//! A beanstalkd connection: the commands of protocol 1.3 the driver sends
//! (`use`, `watch`, `ignore`, `put`, `reserve-with-timeout`, `delete`,
//! `release`, `touch`, `stats-job`, `stats-tube`, `peek-*`, `stats`) over
//! one TCP stream, each answered in order.
//!
//! Our own client: the protocol is a page of text, and no maintained async
//! crate speaks it (crates.io has tokio-beanstalkd 0.4, last released in
//! 2018 on tokio 0.1, mamenoki 0.1, and blocking clients).
//!
//! Every read is bounded: a reply line at most [`MAX_LINE`] bytes, a job
//! body at most the server's own `max-job-size` (read from `stats` at
//! connect; the server refuses larger puts, so no job can be larger), a
//! YAML answer at most [`MAX_YAML`]. Every command has a time limit
//! ([`COMMAND_TIMEOUT`], plus the wait of a reserve). A connection whose
//! command failed or timed out is dropped, never reused: its replies may
//! be out of step.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::error::{BeanstalkdError, Result};
use crate::queue::COMMAND_TIMEOUT;

/// The longest reply line read (`RESERVED <id> <bytes>` and the like are
/// far shorter).
const MAX_LINE: usize = 512;

/// The largest `stats` or `stats-job` answer read (a few hundred bytes).
const MAX_YAML: usize = 64 * 1024;

/// The largest job body ever read, whatever the server says: beanstalkd's
/// own ceiling for `-z` (1 GiB).
const MAX_BODY_CEILING: usize = 1 << 30;

/// One connection to beanstalkd, with the tubes it uses and watches.
pub struct Connection {
    stream: BufReader<TcpStream>,
    /// The tube `put` and `peek-*` act on (`default` at connect).
    used: String,
    /// The one tube `reserve` takes from (`default` at connect).
    watched: String,
    /// The largest body the server holds (`max-job-size`).
    max_body: usize,
}

/// What a reserve gave.
pub struct Reserved {
    /// The job's id.
    pub id: u64,
    /// Its body: Laravel's payload.
    pub body: Bytes,
}

/// What `stats-job` says of a job, as far as the worker needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStats {
    /// How many times it was reserved (`BeanstalkdJob::attempts()`).
    pub reserves: u64,
    /// Its priority.
    pub pri: u32,
    /// Its time to run, in seconds.
    pub ttr: u64,
}

impl Connection {
    /// Connects to `addr` (`host:port`) and reads the server's
    /// `max-job-size`.
    ///
    /// # Errors
    /// The server cannot be reached or does not answer as beanstalkd.
    pub async fn open(addr: &str) -> Result<Connection> {
        let stream = tokio::time::timeout(COMMAND_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| BeanstalkdError::timed_out("connect"))?
            .map_err(|e| BeanstalkdError::io("connect", &e))?;
        let _ = stream.set_nodelay(true);
        let mut conn = Connection {
            stream: BufReader::new(stream),
            used: "default".into(),
            watched: "default".into(),
            max_body: 65_535,
        };
        let stats = conn.yaml(b"stats\r\n".to_vec(), "stats").await?;
        if let Some(size) = field(&stats, "max-job-size") {
            conn.max_body = usize::try_from(size)
                .unwrap_or(MAX_BODY_CEILING)
                .min(MAX_BODY_CEILING);
        }
        Ok(conn)
    }

    /// Whether the server closed this idle connection (or sent what no
    /// command asked for): it must not be used.
    pub fn is_closed(&self) -> bool {
        if !self.stream.buffer().is_empty() {
            return true;
        }
        let mut byte = [0u8; 1];
        !matches!(
            self.stream.get_ref().try_read(&mut byte),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
        )
    }

    /// Puts `body` on `tube` with priority `pri`, `delay` and `ttr`
    /// seconds; returns its id.
    ///
    /// # Errors
    /// The connection failed, or the server refused the job (too big,
    /// draining, out of memory).
    pub async fn put(
        &mut self,
        tube: &str,
        pri: u32,
        delay: u64,
        ttr: u64,
        body: &[u8],
    ) -> Result<u64> {
        self.use_tube(tube).await?;
        let mut command = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        command.extend_from_slice(body);
        command.extend_from_slice(b"\r\n");
        let line = self.call(command, "put", None).await?;
        match words(&line).as_slice() {
            ["INSERTED", id] => number(id, "put"),
            // Out of memory for its priority queue: the job is kept, buried.
            ["BURIED", id] => number(id, "put"),
            _ => Err(BeanstalkdError::reply("put", &line)),
        }
    }

    /// Reserves a job of `tube`, waiting up to `wait` seconds;
    /// `None` when none came.
    ///
    /// # Errors
    /// The connection failed or the reply was not one of reserve's.
    pub async fn reserve(&mut self, tube: &str, wait: u64) -> Result<Option<Reserved>> {
        self.watch_only(tube).await?;
        let command = format!("reserve-with-timeout {wait}\r\n").into_bytes();
        let limit = COMMAND_TIMEOUT.saturating_add(Duration::from_secs(wait));
        let line = self.call(command, "reserve", Some(limit)).await?;
        match words(&line).as_slice() {
            ["RESERVED", id, bytes] => {
                let id = number(id, "reserve")?;
                let body = self.body(bytes, "reserve").await?;
                Ok(Some(Reserved { id, body }))
            }
            // DEADLINE_SOON: a job of this connection nears its ttr; the
            // driver reserves on connections that hold none, so it is
            // taken as "nothing now".
            ["TIMED_OUT"] | ["DEADLINE_SOON"] => Ok(None),
            _ => Err(BeanstalkdError::reply("reserve", &line)),
        }
    }

    /// `delete`, `touch` or `release` of job `id` (`command` is the whole
    /// line): true when the server did it, false on `NOT_FOUND` (the job
    /// is not reserved by this connection any more).
    ///
    /// # Errors
    /// The connection failed, or the server answered otherwise (`BURIED`
    /// on a release the server had no memory for).
    pub async fn job_command(&mut self, command: String, name: &'static str) -> Result<bool> {
        let line = self.call(command.into_bytes(), name, None).await?;
        match line.as_str() {
            "DELETED" | "TOUCHED" | "RELEASED" => Ok(true),
            "NOT_FOUND" => Ok(false),
            _ => Err(BeanstalkdError::reply(name, &line)),
        }
    }

    /// `stats-job id`; `None` when the job is gone.
    ///
    /// # Errors
    /// The connection failed or the answer is not `stats-job`'s.
    pub async fn stats_job(&mut self, id: u64) -> Result<Option<JobStats>> {
        let command = format!("stats-job {id}\r\n").into_bytes();
        let Some(yaml) = self.yaml_or_none(command, "stats-job").await? else {
            return Ok(None);
        };
        let get = |key| field(&yaml, key).unwrap_or(0);
        Ok(Some(JobStats {
            reserves: get("reserves"),
            pri: u32::try_from(get("pri")).unwrap_or(u32::MAX),
            ttr: get("ttr"),
        }))
    }

    /// `stats-tube tube`: ready, delayed, reserved and buried jobs; zeros
    /// when the tube does not exist (beanstalkd drops an empty tube no
    /// connection uses).
    ///
    /// # Errors
    /// The connection failed or the answer is not `stats-tube`'s.
    pub async fn stats_tube(&mut self, tube: &str) -> Result<[u64; 4]> {
        let command = format!("stats-tube {tube}\r\n").into_bytes();
        let Some(yaml) = self.yaml_or_none(command, "stats-tube").await? else {
            return Ok([0; 4]);
        };
        let get = |key| field(&yaml, key).unwrap_or(0);
        Ok([
            get("current-jobs-ready"),
            get("current-jobs-delayed"),
            get("current-jobs-reserved"),
            get("current-jobs-buried"),
        ])
    }

    /// The id of the next job of `tube` in `state` (`ready`, `delayed`,
    /// `buried`), `None` when there is none.
    ///
    /// # Errors
    /// The connection failed or the reply is not `peek`'s.
    pub async fn peek(&mut self, tube: &str, state: &str) -> Result<Option<u64>> {
        self.use_tube(tube).await?;
        let command = format!("peek-{state}\r\n").into_bytes();
        let line = self.call(command, "peek", None).await?;
        match words(&line).as_slice() {
            ["FOUND", id, bytes] => {
                let id = number(id, "peek")?;
                self.body(bytes, "peek").await?;
                Ok(Some(id))
            }
            ["NOT_FOUND"] => Ok(None),
            _ => Err(BeanstalkdError::reply("peek", &line)),
        }
    }

    async fn use_tube(&mut self, tube: &str) -> Result<()> {
        if self.used == tube {
            return Ok(());
        }
        let line = self
            .call(format!("use {tube}\r\n").into_bytes(), "use", None)
            .await?;
        if !line.starts_with("USING ") {
            return Err(BeanstalkdError::reply("use", &line));
        }
        self.used = tube.to_string();
        Ok(())
    }

    /// Watches `tube` alone (Laravel's `watchOnly`).
    async fn watch_only(&mut self, tube: &str) -> Result<()> {
        if self.watched == tube {
            return Ok(());
        }
        let line = self
            .call(format!("watch {tube}\r\n").into_bytes(), "watch", None)
            .await?;
        if !line.starts_with("WATCHING ") {
            return Err(BeanstalkdError::reply("watch", &line));
        }
        let old = std::mem::replace(&mut self.watched, tube.to_string());
        let line = self
            .call(format!("ignore {old}\r\n").into_bytes(), "ignore", None)
            .await?;
        if !line.starts_with("WATCHING ") {
            return Err(BeanstalkdError::reply("ignore", &line));
        }
        Ok(())
    }

    /// Sends `command` and reads its reply line, within `limit` (default
    /// [`COMMAND_TIMEOUT`]).
    async fn call(
        &mut self,
        command: Vec<u8>,
        name: &'static str,
        limit: Option<Duration>,
    ) -> Result<String> {
        let exchange = async {
            let stream = self.stream.get_mut();
            stream.write_all(&command).await?;
            stream.flush().await?;
            read_line(&mut self.stream).await
        };
        match tokio::time::timeout(limit.unwrap_or(COMMAND_TIMEOUT), exchange).await {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(e)) => Err(BeanstalkdError::io(name, &e)),
            Err(_) => Err(BeanstalkdError::timed_out(name)),
        }
    }

    /// Reads a body of `bytes` (as the reply line gave it) and its CRLF.
    async fn body(&mut self, bytes: &str, name: &'static str) -> Result<Bytes> {
        let len = usize::try_from(number(bytes, name)?).unwrap_or(usize::MAX);
        if len > self.max_body {
            return Err(BeanstalkdError::too_big(name, len, self.max_body));
        }
        let mut buffer = vec![0u8; len + 2];
        tokio::time::timeout(COMMAND_TIMEOUT, self.stream.read_exact(&mut buffer))
            .await
            .map_err(|_| BeanstalkdError::timed_out(name))?
            .map_err(|e| BeanstalkdError::io(name, &e))?;
        if !buffer.ends_with(b"\r\n") {
            return Err(BeanstalkdError::reply(name, "a body without its CRLF"));
        }
        buffer.truncate(len);
        Ok(Bytes::from(buffer))
    }

    /// A YAML answer (`OK <bytes>`), as text.
    async fn yaml(&mut self, command: Vec<u8>, name: &'static str) -> Result<String> {
        self.yaml_or_none(command, name)
            .await?
            .ok_or_else(|| BeanstalkdError::reply(name, "NOT_FOUND"))
    }

    /// A YAML answer, or `None` on `NOT_FOUND`.
    async fn yaml_or_none(
        &mut self,
        command: Vec<u8>,
        name: &'static str,
    ) -> Result<Option<String>> {
        let line = self.call(command, name, None).await?;
        match words(&line).as_slice() {
            ["OK", bytes] => {
                let len = usize::try_from(number(bytes, name)?).unwrap_or(usize::MAX);
                if len > MAX_YAML {
                    return Err(BeanstalkdError::too_big(name, len, MAX_YAML));
                }
                let body = self.body(bytes, name).await?;
                Ok(Some(String::from_utf8_lossy(&body).into_owned()))
            }
            ["NOT_FOUND"] => Ok(None),
            _ => Err(BeanstalkdError::reply(name, &line)),
        }
    }
}

/// Reads one reply line (without its CRLF), at most [`MAX_LINE`] bytes.
async fn read_line(stream: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    let mut line = Vec::new();
    loop {
        let available = stream.fill_buf().await?;
        if available.is_empty() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let (taken, done) = match available.iter().position(|&b| b == b'\n') {
            Some(end) => (end + 1, true),
            None => (available.len(), false),
        };
        line.extend_from_slice(&available[..taken]);
        stream.consume(taken);
        if line.len() > MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a reply line longer than 512 bytes",
            ));
        }
        if done {
            let text = String::from_utf8_lossy(&line);
            return Ok(text.trim_end_matches(['\r', '\n']).to_string());
        }
    }
}

fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

fn number(text: &str, name: &'static str) -> Result<u64> {
    text.parse()
        .map_err(|_| BeanstalkdError::reply(name, &format!("not a number: {text}")))
}

/// The number under `key` in a `key: value` YAML answer.
fn field(yaml: &str, key: &str) -> Option<u64> {
    yaml.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_fields_are_read_by_key() {
        let yaml = "---\nid: 7\ntube: \"default\"\nreserves: 3\npri: 1024\nttr: 90\n";
        assert_eq!(field(yaml, "reserves"), Some(3));
        assert_eq!(field(yaml, "ttr"), Some(90));
        assert_eq!(field(yaml, "tube"), None);
        assert_eq!(field(yaml, "missing"), None);
    }
}
