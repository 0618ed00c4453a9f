//! A private beanstalkd (`beanstalkd -l 127.0.0.1 -p PORT -b DIR`), killed
//! when dropped, and a small blocking client for the test's side (put,
//! stats): the test never goes through the worker's own client.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A beanstalkd of one test, its jobs kept in a binlog in its directory
/// (so that a restart keeps them).
pub struct Beanstalkd {
    child: Option<Child>,
    pub port: u16,
    binlog: PathBuf,
}

impl Beanstalkd {
    /// Starts one on a free port with its binlog below `dir`; `None` (the
    /// skip recorded) where `beanstalkd` is not installed.
    pub fn start(dir: &Path) -> Option<Self> {
        if !super::skip::on_path("beanstalkd") {
            super::skip::note("beanstalkd", "the beanstalkd driver is not tested");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let binlog = dir.join("binlog");
        std::fs::create_dir_all(&binlog).unwrap();
        let mut server = Beanstalkd {
            child: None,
            port,
            binlog,
        };
        server.start_again();
        Some(server)
    }

    /// Starts the server (again) on the same port and binlog; waits until
    /// it answers.
    pub fn start_again(&mut self) {
        let child = Command::new("beanstalkd")
            .args(["-l", "127.0.0.1", "-p", &self.port.to_string(), "-b"])
            .arg(&self.binlog)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("beanstalkd starts");
        self.child = Some(child);
        super::wait_until("beanstalkd to listen", || {
            TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
    }

    /// Kills the server (SIGKILL: no clean shut-down) and waits for it to
    /// exit; its binlog keeps the jobs for [`Beanstalkd::start_again`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn conn(&self) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("beanstalkd answers");
        Conn(BufReader::new(stream))
    }

    /// Puts `body` on `tube` (priority 1024, `delay`, `ttr`); its id.
    pub fn put(&self, tube: &str, body: &str, delay: u64, ttr: u64) -> u64 {
        let mut c = self.conn();
        c.line(&format!("use {tube}\r\n"));
        let reply = c.line(&format!(
            "put 1024 {delay} {ttr} {}\r\n{body}\r\n",
            body.len()
        ));
        reply
            .strip_prefix("INSERTED ")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("put: {reply}"))
    }

    /// Takes the next ready job of `tube` off it (peeked, then deleted):
    /// its body.
    pub fn take_ready(&self, tube: &str) -> String {
        let mut c = self.conn();
        c.line(&format!("use {tube}\r\n"));
        let reply = c.line("peek-ready\r\n");
        let mut words = reply.split(' ').skip(1);
        let id: u64 = words
            .next()
            .and_then(|w| w.parse().ok())
            .expect("a ready job");
        let len: usize = words.next().and_then(|w| w.parse().ok()).expect("its size");
        let mut body = vec![0; len + 2];
        c.0.read_exact(&mut body).unwrap();
        assert_eq!(c.line(&format!("delete {id}\r\n")), "DELETED");
        body.truncate(len);
        String::from_utf8(body).unwrap()
    }

    /// The id of the next delayed job of `tube`, if any.
    pub fn peek_delayed(&self, tube: &str) -> Option<u64> {
        let mut c = self.conn();
        c.line(&format!("use {tube}\r\n"));
        let reply = c.line("peek-delayed\r\n");
        let mut words = reply.strip_prefix("FOUND ")?.split(' ');
        let id = words.next()?.parse().ok()?;
        let len: usize = words.next()?.parse().ok()?;
        let mut body = vec![0; len + 2];
        c.0.read_exact(&mut body).unwrap();
        Some(id)
    }

    /// The body of job `id`, if the server still holds it.
    pub fn body(&self, id: u64) -> Option<String> {
        let mut c = self.conn();
        let reply = c.line(&format!("peek {id}\r\n"));
        let len: usize = reply
            .strip_prefix("FOUND ")?
            .split(' ')
            .nth(1)?
            .parse()
            .ok()?;
        let mut body = vec![0; len + 2];
        c.0.read_exact(&mut body).unwrap();
        body.truncate(len);
        Some(String::from_utf8(body).unwrap())
    }

    /// Every job the server holds, oldest first: its id, `stats-job` and
    /// body. Ids are given out in order from 1, and `total-jobs` counts
    /// every put since the server started (one of its own).
    pub fn all_jobs(&self) -> Vec<(u64, HashMap<String, String>, String)> {
        let stats = self.conn().yaml("stats\r\n");
        let total: u64 = stats
            .get("total-jobs")
            .and_then(|n| n.parse().ok())
            .expect("stats: total-jobs");
        (1..=total)
            .filter_map(|id| {
                let body = self.body(id)?;
                Some((id, self.job(id), body))
            })
            .collect()
    }

    /// Moves up to 10,000 delayed jobs of `tube` to the ready ones
    /// (`kick`: buried ones first, and no job is ever buried here).
    pub fn kick(&self, tube: &str) {
        let mut c = self.conn();
        c.line(&format!("use {tube}\r\n"));
        let reply = c.line("kick 10000\r\n");
        assert!(reply.starts_with("KICKED "), "kick: {reply}");
    }

    /// `stats-tube tube` as `key → value` (empty when the tube is gone).
    pub fn tube(&self, tube: &str) -> HashMap<String, String> {
        self.conn().yaml(&format!("stats-tube {tube}\r\n"))
    }

    /// Ready + delayed + reserved + buried jobs of `tube`.
    pub fn jobs(&self, tube: &str) -> u64 {
        let stats = self.tube(tube);
        [
            "current-jobs-ready",
            "current-jobs-delayed",
            "current-jobs-reserved",
            "current-jobs-buried",
        ]
        .iter()
        .map(|k| {
            stats
                .get(*k)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
    }

    /// `stats-job id` as `key → value` (empty once the job is gone).
    pub fn job(&self, id: u64) -> HashMap<String, String> {
        self.conn().yaml(&format!("stats-job {id}\r\n"))
    }
}

impl Drop for Beanstalkd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Conn(BufReader<TcpStream>);

impl Conn {
    fn line(&mut self, command: &str) -> String {
        self.0.get_mut().write_all(command.as_bytes()).unwrap();
        let mut line = String::new();
        self.0.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    fn yaml(&mut self, command: &str) -> HashMap<String, String> {
        let reply = self.line(command);
        let Some(len) = reply
            .strip_prefix("OK ")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            return HashMap::new();
        };
        let mut body = vec![0; len + 2];
        self.0.read_exact(&mut body).unwrap();
        String::from_utf8_lossy(&body)
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
            .collect()
    }
}

/// The server's jobs as the parity scenario compares them: a job's
/// attempts are its `reserves` (as `BeanstalkdJob::attempts()` reads
/// them), its delay the one it was last put or released with.
impl super::parity::QueueUnderParity for Beanstalkd {
    fn jobs_left(&self) -> Vec<super::parity::JobLeft> {
        let number = |stats: &HashMap<String, String>, key: &str| -> i64 {
            stats
                .get(key)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("stats-job {key}: {stats:?}"))
        };
        self.all_jobs()
            .into_iter()
            .map(|(_, stats, payload)| super::parity::JobLeft {
                queue: stats.get("tube").cloned().unwrap_or_default(),
                attempts: number(&stats, "reserves"),
                reserved: stats.get("state").map(String::as_str) == Some("reserved"),
                delay: number(&stats, "delay"),
                payload,
            })
            .collect()
    }

    fn make_due(&self) {
        self.kick("default");
    }
}
