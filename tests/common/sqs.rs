//! A private SQS for tests: the `moto` server (PyPI, `moto[server]`)
//! started on a free port in its own process group, killed at the end, and
//! a small blocking client (the official AWS SDK, as the worker uses) to
//! create queues, send messages and read what is left.
//!
//! moto deviates from AWS where tests must not rely on it: a stale receipt
//! handle still deletes a message and still changes its visibility (AWS
//! does neither surely). Lost-visibility tests therefore watch the worker's
//! own clock (its handler runs), never moto's answer.
//!
//! moto's server answers each request on a thread of its own, and its SQS
//! calls take no lock: two `ReceiveMessage` calls at once can both find a
//! message visible and both hand it out (seen in the two-daemon drain as
//! one message run by both daemons with the same receive count, or with
//! counts 1 and 2 a few runs apart, neither daemon killed). AWS's standard
//! queues may deliver a message twice too, but seldom; here it came every
//! few thousand jobs. The server is therefore started with its message
//! calls serialized ([`SERIALIZED_MOTO`]), a long poll's wait excepted.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

use super::redis_topologies::free_port;
use super::skip;

/// The account id moto puts in every queue URL.
pub const ACCOUNT: &str = "123456789012";

/// A running moto server.
pub struct Moto {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    runtime: tokio::runtime::Runtime,
    client: Client,
}

/// `python3 -c` program: moto's server, with its SQS calls that read or
/// change messages taking one lock (released while a long poll waits), so
/// that no two receives take the same message (see the module's notes).
const SERIALIZED_MOTO: &str = "\
import functools, sys, threading
from moto.sqs import models
lock = threading.RLock()
def serialized(call):
    @functools.wraps(call)
    def locked(*args, **kwargs):
        with lock:
            return call(*args, **kwargs)
    return locked
for name in ['send_message', 'send_message_batch', 'receive_message', 'delete_message',
             'delete_message_batch', 'change_message_visibility',
             'change_message_visibility_batch', 'purge_queue', 'get_queue_attributes']:
    setattr(models.SQSBackend, name, serialized(getattr(models.SQSBackend, name)))
wait = models.Queue.wait_for_messages
def unlocked_wait(self, timeout):
    lock.release()
    try:
        return wait(self, timeout)
    finally:
        lock.acquire()
models.Queue.wait_for_messages = unlocked_wait
from moto.server import main
main(sys.argv[1:])
";

/// Whether `python3 -m moto.server` can run here.
fn moto_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import moto.server, flask"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Moto {
    /// Starts moto on a free port and waits until it answers; `None` (the
    /// skip recorded) when moto is not installed.
    pub fn start() -> Option<Moto> {
        if !moto_installed() {
            skip::note(
                "moto",
                "no local SQS (pip install 'moto[server]==5.2.1'): the SQS driver is not run",
            );
            return None;
        }
        let port = free_port();
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            SERIALIZED_MOTO,
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().expect("start moto");
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto did not start on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let config = aws_sdk_sqs::Config::builder()
            .http_client(http)
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .endpoint_url(&endpoint)
            .build();
        let client = Client::from_conf(config);
        Some(Moto {
            child,
            endpoint,
            runtime,
            client,
        })
    }

    /// `SQS_PREFIX` for this server: its queue URLs' base.
    pub fn prefix(&self) -> String {
        format!("{}/{ACCOUNT}", self.endpoint)
    }

    /// Creates queue `name` (`.fifo`: a FIFO queue) with the queue's
    /// default visibility timeout `visibility` (s); returns its URL.
    pub fn create_queue(&self, name: &str, visibility: u64) -> String {
        let mut create = self.client.create_queue().queue_name(name).attributes(
            QueueAttributeName::VisibilityTimeout,
            visibility.to_string(),
        );
        if name.ends_with(".fifo") {
            create = create.attributes(QueueAttributeName::FifoQueue, "true");
        }
        let out = self.runtime.block_on(create.send()).expect("create queue");
        out.queue_url.expect("queue url")
    }

    /// Sends `body` to `url`, visible in `delay` seconds.
    pub fn send(&self, url: &str, body: &str, delay: i32) -> String {
        let mut send = self.client.send_message().queue_url(url).message_body(body);
        if url.ends_with(".fifo") {
            send = send
                .message_group_id("g")
                .message_deduplication_id(uuid::Uuid::new_v4().to_string());
        } else {
            send = send.delay_seconds(delay);
        }
        let out = self.runtime.block_on(send.send()).expect("send");
        out.message_id.expect("message id")
    }

    /// Sends `bodies` (at most 10) to the standard queue at `url` in one
    /// `SendMessageBatch`, as Laravel 13.19+'s `bulk` does; panics unless
    /// every entry was sent.
    pub fn send_batch(&self, url: &str, bodies: &[String]) {
        let entries = bodies
            .iter()
            .enumerate()
            .map(|(n, body)| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .message_body(body)
                    .build()
                    .expect("a batch entry")
            })
            .collect::<Vec<_>>();
        let out = self
            .runtime
            .block_on(
                self.client
                    .send_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries))
                    .send(),
            )
            .expect("send batch");
        assert!(out.failed().is_empty(), "{:?}", out.failed());
        assert_eq!(out.successful().len(), bodies.len());
    }

    /// `(visible, delayed, in flight)` of the queue at `url`.
    pub fn counts(&self, url: &str) -> (u64, u64, u64) {
        let out = self
            .runtime
            .block_on(
                self.client
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(QueueAttributeName::All)
                    .send(),
            )
            .expect("attributes");
        let get = |n: QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(&n))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (
            get(QueueAttributeName::ApproximateNumberOfMessages),
            get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
            get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// Receives what is visible on `url` now (up to 10), with each body
    /// and receive count; the messages are hidden for `visibility` s.
    pub fn receive(&self, url: &str, visibility: i32) -> Vec<(String, u64)> {
        let out = self
            .runtime
            .block_on(
                self.client
                    .receive_message()
                    .queue_url(url)
                    .max_number_of_messages(10)
                    .visibility_timeout(visibility)
                    .message_system_attribute_names(
                        MessageSystemAttributeName::ApproximateReceiveCount,
                    )
                    .send(),
            )
            .expect("receive");
        out.messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let count = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (m.body.unwrap_or_default(), count)
            })
            .collect()
    }

    /// The FIFO attributes of what is visible on `url` now (up to 10
    /// messages, left visible): each message's `(MessageGroupId,
    /// MessageDeduplicationId)`.
    pub fn fifo_ids(&self, url: &str) -> Vec<(String, String)> {
        let out = self
            .runtime
            .block_on(
                self.client
                    .receive_message()
                    .queue_url(url)
                    .max_number_of_messages(10)
                    .visibility_timeout(0)
                    .message_system_attribute_names(MessageSystemAttributeName::All)
                    .send(),
            )
            .expect("receive");
        out.messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let get = |n: MessageSystemAttributeName| {
                    m.attributes()
                        .and_then(|a| a.get(&n))
                        .cloned()
                        .unwrap_or_default()
                };
                (
                    get(MessageSystemAttributeName::MessageGroupId),
                    get(MessageSystemAttributeName::MessageDeduplicationId),
                )
            })
            .collect()
    }

    /// Stops the server (SIGSTOP: it keeps its queues but answers nothing)
    /// or lets it go on (SIGCONT).
    pub fn pause(&self, paused: bool) {
        let signal = if paused {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        };
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::killpg(pid, signal).unwrap();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGCONT);
        let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}
