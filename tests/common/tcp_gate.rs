//! A TCP port in front of a server's unix socket that the test can close
//! and open again: while closed, connects to the port are refused (as to a
//! stopped server's port) and the connections through it are cut; the
//! server behind it, and its data, stay as they were. The port stays the
//! same, so a worker's URL keeps pointing at it.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The gate; closed when dropped.
pub struct TcpGate {
    port: u16,
    target: PathBuf,
    /// The connections through the gate, to cut when it closes.
    open: Arc<Mutex<Vec<TcpStream>>>,
    accepting: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl TcpGate {
    /// Opens a gate on a free port of 127.0.0.1 to the unix socket `target`.
    pub fn open(target: &Path) -> Self {
        let mut gate = TcpGate {
            port: 0,
            target: target.to_path_buf(),
            open: Arc::default(),
            accepting: None,
        };
        gate.reopen();
        gate
    }

    /// The port of 127.0.0.1 the gate listens on (the same across closes).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Refuses new connections and cuts those through the gate.
    pub fn close(&mut self) {
        if let Some((stop, thread)) = self.accepting.take() {
            stop.store(true, Ordering::SeqCst);
            // Wakes the accept loop, which sees `stop` and drops the
            // listener: the port refuses from then on.
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            thread.join().unwrap();
        }
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again, on the same port.
    pub fn reopen(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        self.port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (target, open, stopped) = (self.target.clone(), self.open.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(client) = client {
                    pass(client, &target, &open);
                }
            }
        });
        self.accepting = Some((stop, thread));
    }
}

impl Drop for TcpGate {
    fn drop(&mut self) {
        self.close();
    }
}

/// Joins `client` to a new connection to `target`, both ways, each way on
/// a thread of its own that ends when either side closes.
fn pass(client: TcpStream, target: &Path, open: &Mutex<Vec<TcpStream>>) {
    let Ok(server) = UnixStream::connect(target) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_out), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    if let Ok(kept) = client.try_clone() {
        open.lock().unwrap().push(kept);
    }
    std::thread::spawn(move || copy(client, server_in));
    std::thread::spawn(move || copy_back(server, client_out));
}

/// Client to server, until either ends.
fn copy(mut from: TcpStream, mut to: UnixStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// Server to client, until either ends.
fn copy_back(mut from: UnixStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
