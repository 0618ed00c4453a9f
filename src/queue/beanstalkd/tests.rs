//! The driver's own cases on a real beanstalkd, one private server per
//! test (`beanstalkd -l 127.0.0.1 -p PORT`); skipped, saying so, where
//! Debian's `beanstalkd` is not installed. The seam's contract runs on it
//! with every other driver (`tests/integration/seam_contract.rs`).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use super::{BeanstalkdQueue, BeanstalkdQueueSpec};
use crate::queue::Queue;
use crate::queue::contract;
use crate::queue::driver::Driver;

/// A beanstalkd of this test, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts one on a free port; `None` (the skip printed) without
    /// `beanstalkd`.
    fn start() -> Option<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = match Command::new("beanstalkd")
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("SKIP: beanstalkd is not installed (apt-get install beanstalkd)");
                return None;
            }
            Err(e) => panic!("cannot start beanstalkd: {e}"),
        };
        let server = Server { child, port };
        // Ready once it accepts a connection (it listens before serving).
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(server);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("beanstalkd did not listen on {port}");
    }

    fn queue(&self) -> Queue {
        let queue = BeanstalkdQueue::open(&BeanstalkdQueueSpec {
            host: "127.0.0.1".into(),
            port: self.port,
            retry_after: 60,
            block_for: 0,
        });
        Queue::shared(Arc::new(queue) as Arc<dyn Driver>)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job handed back on a later attempt is released (one attempt
/// counted), not copied: a copy would start its `reserves` again.
#[tokio::test]
async fn a_later_attempt_handed_back_keeps_its_count() {
    let Some(server) = Server::start() else {
        return;
    };
    let queue = server.queue();
    let keys = queue.handle("default");
    queue
        .push(&keys, &contract::payload(7))
        .await
        .expect("push");
    let job = queue.pop(&keys, 1).await.expect("pop").remove(0);
    assert!(queue.release(&job, 0).await.expect("release"));
    let job = queue.pop(&keys, 1).await.expect("pop").remove(0);
    assert_eq!(job.attempt(), 2);
    let id = job.id();
    assert!(queue.hand_back(&job, 0).await.expect("hand back"));
    let job = queue.pop(&keys, 1).await.expect("pop").remove(0);
    assert_eq!((job.id(), job.attempt()), (id, 3), "released, not copied");
}

/// A server that is not there is an outage (tried again later), named
/// with its address.
#[tokio::test]
async fn an_unreachable_server_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let queue = BeanstalkdQueue::open(&BeanstalkdQueueSpec {
        host: "127.0.0.1".into(),
        port,
        retry_after: 60,
        block_for: 0,
    });
    let e = queue
        .pop_jobs(&queue.handle("default"), 1)
        .await
        .expect_err("no server");
    assert_eq!(e.kind, crate::queue::error::ErrorKind::Unavailable);
    assert!(
        e.message.contains(&format!("127.0.0.1:{port}")),
        "{}",
        e.message
    );
}
