//! A small HTTP/1.1 server on 127.0.0.1 for HTTP handler tests: the real
//! daemon POSTs real jobs to it over real sockets.
//!
//! Written on std's `TcpListener` rather than a framework: a test needs to
//! count accepted connections (keep-alive), hold a request without
//! answering (timeouts), and see the request bytes exactly as sent
//! (signatures), which is simplest with nothing in between.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Lower-cased names.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// Which accepted connection carried it (from 1).
    pub connection: usize,
}

impl Request {
    /// Header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Header `name` (lower case); fails the test when it was not sent.
    pub fn h(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// `X-Laravel-Worker-Mode` (`run` or `failed`).
    pub fn mode(&self) -> &str {
        self.h("x-laravel-worker-mode")
    }

    /// `X-Laravel-Worker-Job-Name`.
    pub fn name(&self) -> &str {
        self.h("x-laravel-worker-job-name")
    }
}

/// What the server does with a request.
pub enum Reply {
    /// Answer with this status, extra headers and body.
    Send(u16, Vec<(&'static str, String)>, String),
    /// Never answer; wait until the client closes the connection.
    Hang,
}

/// 200 with an empty body.
pub fn ok() -> Reply {
    Reply::Send(200, vec![], String::new())
}

/// `code` with `body`.
pub fn status(code: u16, body: &str) -> Reply {
    Reply::Send(code, vec![], body.to_string())
}

/// How the server answers each request.
pub type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// The running server; stopped when dropped.
pub struct Server {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Starts a server answering each request with `script`.
    pub fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        {
            let (requests, connections, stop) =
                (requests.clone(), connections.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let id = connections.fetch_add(1, Ordering::SeqCst) + 1;
                    let (requests, script) = (requests.clone(), script.clone());
                    std::thread::spawn(move || serve(stream, id, &requests, &*script));
                }
            });
        }
        Server {
            addr,
            requests,
            connections,
            stop,
        }
    }

    /// `http://ADDRESS{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// How many connections were accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Serves one connection: requests one after another (keep-alive) until
/// the client closes it.
fn serve(stream: TcpStream, connection: usize, log: &Mutex<Vec<Request>>, script: &Script) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
        let length: usize = headers
            .get("content-length")
            .map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Request {
            method,
            path,
            headers,
            body,
            connection,
        };
        let reply = script(&request);
        log.lock().unwrap().push(request);
        match reply {
            Reply::Send(code, extra, body) => {
                let mut head = format!(
                    "HTTP/1.1 {code} Status\r\nContent-Length: {}\r\n",
                    body.len()
                );
                for (name, value) in extra {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                if writer.write_all(head.as_bytes()).is_err()
                    || writer.write_all(body.as_bytes()).is_err()
                {
                    return;
                }
            }
            Reply::Hang => {
                // Until the client gives up and closes the connection.
                let mut sink = [0u8; 1024];
                while reader.read(&mut sink).unwrap_or(0) > 0 {}
                return;
            }
        }
    }
}

/// The value of the first line of a `/metrics` page `text` that starts
/// with `series` (a metric name with its labels), as written.
pub fn metric(text: &str, series: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with(series))?;
    line.rsplit(' ').next().map(str::to_string)
}

/// `GET path` from the HTTP server at `address` (`host:port`) →
/// (status, body).
pub fn get(address: &str, path: &str) -> (u16, String) {
    try_get(address, path).unwrap_or_else(|| panic!("GET {path}: no answer"))
}

/// [`get`], or `None` when the connection is refused or closed without
/// an answer.
pub fn try_get(address: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}
