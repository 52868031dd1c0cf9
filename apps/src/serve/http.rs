//! The HTTP/1.1 side of `serve`: connections, requests and responses, over
//! `std::net`, so that no client can crash, starve or stall the server.
//!
//! - **One thread per connection** reads the request head and body, under
//!   a size bound ([`Limits`]) and read timeouts, and writes the response;
//!   the model answers on one thread ([`serve`]'s caller), fed through a
//!   bounded queue. A client that stalls mid-body, sends
//!   `Expect: 100-continue` and no body, or declares a body it never sends
//!   holds its own thread until its timeout (a 408), never the model's.
//! - **Sizes are checked before anything is read or kept:** a declared
//!   `Content-Length` over the bound is a 413 at once (the body is not
//!   read, and the connection is closed); a chunked body is counted as it
//!   arrives. Nothing is allocated from a number the client sent.
//! - **A hang-up is a failed write, not an end of stream** ([`Probe`]): a
//!   client may shut down its sending side after its request (HTTP/1.0,
//!   `Connection: close`, `nc -N`) and still read the answer. While the
//!   model generates, a peer whose stream has ended is probed with a write:
//!   the response's head (200, `Connection: close`, no length) and then one
//!   space at a time, which JSON parsers skip. A peer that closed its
//!   connection answers the first write with a reset; the next one fails,
//!   and the generation stops. A response whose head went out this way ends
//!   with its JSON body (an error object if the completion failed) and the
//!   close of the connection.
//! - Keep-alive (HTTP/1.1's default, HTTP/1.0 with `Connection:
//!   keep-alive`) and pipelining: requests on a connection are answered in
//!   order, each read only once the one before it is answered.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's bounds. Every one is a number the server chose, never one
/// a client sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest request body (a longer one is a 413, unread).
    pub max_body_bytes: usize,
    /// Largest request head: request line and headers (a longer one is a 431).
    pub max_head_bytes: usize,
    /// A request's head must arrive within this from its first byte (408).
    pub head_timeout: Duration,
    /// A body must arrive within this from the end of its head (408)...
    pub body_timeout: Duration,
    /// ... with no pause between bytes longer than this (408).
    pub idle_timeout: Duration,
    /// An idle keep-alive connection is closed after this.
    pub keep_alive: Duration,
    /// A response (or a probe) that cannot be written for this long is given up.
    pub write_timeout: Duration,
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Requests waiting for the model; one more is answered 503.
    pub max_queued: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 32 << 20,
            max_head_bytes: 1 << 20,
            head_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(20),
            keep_alive: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_queued: 256,
        }
    }
}

/// One request, read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    /// The request target as sent (`/v1/models?x=1`).
    pub path: String,
    pub body: Vec<u8>,
    /// The client asked for the connection to end after this response
    /// (`Connection: close`, or HTTP/1.0 without keep-alive).
    pub close: bool,
}

/// A response: status and JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Why a request could not be read: the response it gets, and whether the
/// connection can go on (only when the whole request was consumed).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    fn new(status: u16, message: impl Into<String>) -> Self {
        Refusal { status, message: message.into() }
    }
}

/// What a connection hands the model thread: the request, a way to tell
/// whether its client is still there, and where the answer goes.
pub struct Job {
    pub request: Request,
    pub probe: Probe,
    reply: mpsc::Sender<(Response, bool)>,
}

impl Job {
    /// Send the answer back to the connection (which writes it).
    pub fn answer(self, response: Response) {
        let committed = self.probe.committed.get();
        // The connection may be gone (its thread timed out writing): nothing to do.
        let _ = self.reply.send((response, committed));
    }
}

/// Tells, while the model generates, whether the client of one request is
/// still there (see the module doc). Used on the model's thread only.
pub struct Probe {
    stream: Option<TcpStream>,
    /// The response's head went out (a probe write): the connection's
    /// thread writes only the body, then closes.
    committed: Cell<bool>,
    gone: Cell<bool>,
    last_write: Cell<Option<Instant>>,
}

/// Probes a peer whose stream has ended at most this often.
const PROBE_EVERY: Duration = Duration::from_millis(100);

/// The head of a response whose length is not known yet: sent before a
/// probe write, the body follows and the close of the connection ends it.
const COMMITTED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";

impl Probe {
    /// A probe that never reports a hang-up (a request not from a socket).
    pub fn none() -> Probe {
        Probe { stream: None, committed: Cell::new(false), gone: Cell::new(false), last_write: Cell::new(None) }
    }

    fn of(stream: &TcpStream) -> Probe {
        Probe { stream: stream.try_clone().ok(), ..Probe::none() }
    }

    /// True once the client is known to be gone: its connection was reset,
    /// or a write to it failed.
    pub fn hung_up(&self) -> bool {
        if self.gone.get() {
            return true;
        }
        let Some(stream) = &self.stream else { return false };
        match peek(stream) {
            Peek::Data | Peek::Nothing => false,
            Peek::Reset => {
                self.gone.set(true);
                true
            }
            Peek::End => {
                // Half-closed or gone: a write tells.
                if self.last_write.get().is_some_and(|t| t.elapsed() < PROBE_EVERY) {
                    return false;
                }
                self.last_write.set(Some(Instant::now()));
                let mut w = stream;
                let head: &[u8] = if self.committed.replace(true) { b"" } else { COMMITTED_HEAD };
                let wrote = w.write_all(head).and_then(|()| w.write_all(b" ")).and_then(|()| w.flush());
                if wrote.is_err() {
                    self.gone.set(true);
                }
                self.gone.get()
            }
        }
    }
}

enum Peek {
    Data,
    Nothing,
    End,
    Reset,
}

/// Look at the socket without reading or blocking.
#[cfg(unix)]
fn peek(stream: &TcpStream) -> Peek {
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    // SAFETY: a one-byte buffer we own; MSG_PEEK consumes nothing and
    // MSG_DONTWAIT leaves the descriptor's own flags alone.
    let n = unsafe { libc::recv(stream.as_raw_fd(), byte.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    match n {
        0 => Peek::End,
        n if n > 0 => Peek::Data,
        _ => match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Peek::Nothing,
            _ => Peek::Reset,
        },
    }
}

/// Off unix nothing is seen: generation runs to its end.
#[cfg(not(unix))]
fn peek(_stream: &TcpStream) -> Peek {
    Peek::Nothing
}

/// Accept connections on `listener` forever, each on its own thread; the
/// requests they read come out of the returned receiver, in arrival
/// order, for one thread to answer ([`Job::answer`]).
pub fn serve(listener: TcpListener, limits: Limits) -> Receiver<Job> {
    let (tx, rx) = mpsc::sync_channel::<Job>(limits.max_queued);
    let open = Arc::new(AtomicUsize::new(0));
    let limits = Arc::new(limits);
    std::thread::Builder::new()
        .name("serve-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let stream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of descriptors and the like: wait, then go on.
                        tracing::warn!(error = %e, "accepting a connection");
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                };
                if open.fetch_add(1, Ordering::SeqCst) >= limits.max_connections {
                    open.fetch_sub(1, Ordering::SeqCst);
                    let refusal = Refusal::new(503, format!("the server has {} connections open, its most; try again", limits.max_connections));
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let _ = write_response(&stream, &refusal_response(&refusal), true);
                    continue;
                }
                let (tx, open, limits) = (tx.clone(), open.clone(), limits.clone());
                let spawned = std::thread::Builder::new().name("serve-conn".into()).spawn(move || {
                    connection(stream, &limits, &tx);
                    open.fetch_sub(1, Ordering::SeqCst);
                });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "no thread for a connection");
                }
            }
        })
        .expect("spawning the accept thread");
    rx
}

/// The JSON body of an error, in OpenAI's shape.
pub fn error_body(status: u16, message: &str) -> String {
    let kind = if status >= 500 { "server_error" } else { "invalid_request_error" };
    serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": null}}).to_string()
}

fn refusal_response(r: &Refusal) -> Response {
    Response { status: r.status, body: error_body(r.status, &r.message) }
}

/// Answer requests on one connection until it closes, fails or idles out.
fn connection(stream: TcpStream, limits: &Limits, jobs: &SyncSender<Job>) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::with_capacity(16 << 10, read_half);
    let mut first = true;
    loop {
        let request = match read_request(&mut reader, &stream, limits, first) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(refusal) => {
                log_refusal(peer, &refusal);
                let _ = write_response(&stream, &refusal_response(&refusal), true);
                return;
            }
        };
        first = false;
        let (reply, answer) = mpsc::channel();
        let close = request.close;
        let job = Job { request, probe: Probe::of(&stream), reply };
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                let refusal = Refusal::new(503, format!("{} requests are waiting for the model, its most; try again", limits.max_queued));
                log_refusal(peer, &refusal);
                let _ = write_response(&stream, &refusal_response(&refusal), job.request.close);
                if job.request.close {
                    return;
                }
                continue;
            }
            Err(TrySendError::Disconnected(_)) => return,
        }
        let Ok((response, committed)) = answer.recv() else { return };
        if committed {
            // The head went out with a probe: the body, then the close ends it.
            let mut w = &stream;
            let _ = w.write_all(response.body.as_bytes()).and_then(|()| w.flush());
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
        if let Err(e) = write_response(&stream, &response, close) {
            tracing::debug!(error = %e, "could not send the response");
            return;
        }
        if close {
            let _ = stream.shutdown(std::net::Shutdown::Write);
            return;
        }
    }
}

fn log_refusal(peer: Option<SocketAddr>, r: &Refusal) {
    let peer = peer.map(|p| p.to_string()).unwrap_or_default();
    tracing::warn!(%peer, status = r.status, error = %r.message, "request refused");
}

/// Write one response with its length.
fn write_response(stream: &TcpStream, r: &Response, close: bool) -> std::io::Result<()> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{connection}\r\n",
        r.status,
        reason(r.status),
        r.body.len()
    );
    let mut w = stream;
    w.write_all(head.as_bytes())?;
    w.write_all(r.body.as_bytes())?;
    w.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        499 => "Client Closed Request",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// A read that fails on a timeout or the end of the stream, with the
/// refusal to send (if any can be sent).
fn io_refusal(e: &std::io::Error, what: &str) -> Refusal {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Refusal::new(408, format!("{what} did not arrive in time")),
        std::io::ErrorKind::UnexpectedEof => Refusal::new(400, format!("the connection ended inside {what}")),
        _ => Refusal::new(400, format!("reading {what}: {e}")),
    }
}

/// Read one request: `Ok(None)` when the connection ended or idled out
/// before a new request began.
pub fn read_request<R: Read>(reader: &mut BufReader<R>, stream: &TcpStream, limits: &Limits, first: bool) -> Result<Option<Request>, Refusal> {
    // Wait for the first byte of a request (keep-alive: idle for up to `keep_alive`).
    let wait = if first { limits.head_timeout } else { limits.keep_alive };
    let _ = stream.set_read_timeout(Some(wait));
    match reader.fill_buf() {
        Ok([]) => return Ok(None),
        Ok(_) => {}
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) && !first => return Ok(None),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            return Err(Refusal::new(408, "no request arrived in time"))
        }
        Err(_) => return Ok(None),
    }
    let head = read_head(reader, stream, limits)?;
    let head = parse_head(&head)?;
    let body_deadline = Instant::now() + limits.body_timeout;
    let body = match head.length {
        BodyLength::None => Vec::new(),
        BodyLength::Fixed(n) => {
            if n > limits.max_body_bytes as u64 {
                return Err(Refusal::new(413, format!("the request body is {n} bytes, larger than {} bytes", limits.max_body_bytes)));
            }
            if head.expect_continue {
                continue_(stream)?;
            }
            read_exact_within(reader, stream, n as usize, body_deadline, limits)?
        }
        BodyLength::Chunked => {
            if head.expect_continue {
                continue_(stream)?;
            }
            read_chunked(reader, stream, body_deadline, limits)?
        }
    };
    Ok(Some(Request { method: head.method, path: head.path, body, close: head.close }))
}

fn continue_(stream: &TcpStream) -> Result<(), Refusal> {
    let mut w = stream;
    w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|e| Refusal::new(400, format!("writing 100 Continue: {e}")))
}

/// The request head up to its blank line, at most `max_head_bytes`, within
/// `head_timeout`.
fn read_head<R: Read>(reader: &mut BufReader<R>, stream: &TcpStream, limits: &Limits) -> Result<Vec<u8>, Refusal> {
    let deadline = Instant::now() + limits.head_timeout;
    let mut head = Vec::with_capacity(1024);
    loop {
        set_deadline(stream, deadline, limits.idle_timeout).map_err(|r| Refusal::new(408, format!("the request head {r}")))?;
        let buf = match reader.fill_buf() {
            Ok([]) => return Err(Refusal::new(400, "the connection ended inside the request head")),
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_refusal(&e, "the request head")),
        };
        // Look for the blank line in what came, counting what was already kept.
        let start = head.len().saturating_sub(3);
        let room = limits.max_head_bytes + 4 - head.len();
        let take = buf.len().min(room);
        head.extend_from_slice(&buf[..take]);
        let end = find_head_end(&head, start);
        let used = match end {
            Some(end) => take - (head.len() - end),
            None => take,
        };
        reader.consume(used);
        if let Some(end) = end {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > limits.max_head_bytes {
            return Err(Refusal::new(431, format!("the request head is larger than {} bytes", limits.max_head_bytes)));
        }
    }
}

/// The end of the head (past its blank line: `\r\n\r\n`, or `\n\n`) in
/// `bytes`, looking from `from`.
fn find_head_end(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len()).find_map(|i| {
        if bytes[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if bytes[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// A read timeout of at most `idle`, and none past `deadline`.
fn set_deadline(stream: &TcpStream, deadline: Instant, idle: Duration) -> Result<(), &'static str> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err("did not arrive in time");
    }
    let _ = stream.set_read_timeout(Some(left.min(idle)));
    Ok(())
}

#[derive(Debug, PartialEq)]
enum BodyLength {
    None,
    Fixed(u64),
    Chunked,
}

#[derive(Debug)]
struct Head {
    method: String,
    path: String,
    length: BodyLength,
    close: bool,
    expect_continue: bool,
}

/// Parse the request line and the headers this server acts on.
fn parse_head(head: &[u8]) -> Result<Head, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| Refusal::new(400, "the request head is not UTF-8"))?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(path), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(Refusal::new(400, format!("a malformed request line: {:?}", truncate(line, 200))));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(Refusal::new(400, format!("a malformed method: {:?}", truncate(method, 40))));
    }
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        v if v.starts_with("HTTP/") => return Err(Refusal::new(505, format!("{} is not supported (HTTP/1.1 and HTTP/1.0 are)", truncate(v, 40)))),
        v => return Err(Refusal::new(400, format!("a malformed HTTP version: {:?}", truncate(v, 40)))),
    };
    if !path.starts_with('/') {
        return Err(Refusal::new(400, format!("the request target must be a path starting with /, got {:?}", truncate(path, 200))));
    }
    let (mut length, mut chunked, mut close, mut keep_alive, mut expect_continue) = (None::<u64>, false, false, false, false);
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Refusal::new(400, format!("a header line without a colon: {:?}", truncate(line, 200))));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(Refusal::new(400, format!("a malformed header name: {:?}", truncate(name, 100))));
        }
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => {
                let n: u64 = value
                    .parse()
                    .ok()
                    .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| Refusal::new(400, format!("Content-Length {:?} is not a byte count", truncate(value, 40))))?;
                if length.is_some_and(|m| m != n) {
                    return Err(Refusal::new(400, "two different Content-Length headers"));
                }
                length = Some(n);
            }
            "transfer-encoding" => {
                if value.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                } else {
                    return Err(Refusal::new(501, format!("Transfer-Encoding {:?} is not supported (chunked is)", truncate(value, 40))));
                }
            }
            "connection" => {
                for token in value.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") {
                        keep_alive = true;
                    }
                }
            }
            "expect" => {
                if value.eq_ignore_ascii_case("100-continue") {
                    expect_continue = true;
                } else {
                    return Err(Refusal::new(417, format!("Expect {:?} is not supported", truncate(value, 40))));
                }
            }
            _ => {}
        }
    }
    // HTTP/1.0 closes after each response unless it asked to keep alive.
    close |= http10 && !keep_alive;
    let length = match (length, chunked) {
        (Some(_), true) => return Err(Refusal::new(400, "both Content-Length and Transfer-Encoding: chunked")),
        (Some(0) | None, false) => BodyLength::None,
        (Some(n), false) => BodyLength::Fixed(n),
        (None, true) => BodyLength::Chunked,
    };
    Ok(Head { method: method.to_ascii_uppercase(), path: path.to_string(), length, close, expect_continue })
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Exactly `n` bytes (already checked against the bound), by the deadline.
fn read_exact_within<R: Read>(reader: &mut BufReader<R>, stream: &TcpStream, n: usize, deadline: Instant, limits: &Limits) -> Result<Vec<u8>, Refusal> {
    // Grown as bytes arrive: a declared length is not an allocation.
    let mut body = Vec::with_capacity(n.min(64 << 10));
    while body.len() < n {
        set_deadline(stream, deadline, limits.idle_timeout).map_err(|r| Refusal::new(408, format!("the request body {r}")))?;
        let buf = match reader.fill_buf() {
            Ok([]) => return Err(Refusal::new(400, format!("the connection ended after {} of the {n} body bytes its Content-Length declares", body.len()))),
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_refusal(&e, &format!("the request body ({} of {n} bytes came)", body.len()))),
        };
        let take = buf.len().min(n - body.len());
        body.extend_from_slice(&buf[..take]);
        reader.consume(take);
    }
    Ok(body)
}

/// A chunked body, counted against the bound as it arrives.
fn read_chunked<R: Read>(reader: &mut BufReader<R>, stream: &TcpStream, deadline: Instant, limits: &Limits) -> Result<Vec<u8>, Refusal> {
    let mut body = Vec::new();
    loop {
        let line = read_line_within(reader, stream, deadline, limits, "a chunk size")?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let n = u64::from_str_radix(size, 16)
            .ok()
            .filter(|_| !size.is_empty() && size.len() <= 16)
            .ok_or_else(|| Refusal::new(400, format!("a malformed chunk size: {:?}", truncate(size, 40))))?;
        if n == 0 {
            // Trailers, up to the blank line.
            loop {
                let t = read_line_within(reader, stream, deadline, limits, "the chunked body's trailer")?;
                if t.is_empty() {
                    return Ok(body);
                }
            }
        }
        if n > (limits.max_body_bytes - body.len()) as u64 {
            return Err(Refusal::new(413, format!("the chunked request body is larger than {} bytes", limits.max_body_bytes)));
        }
        let chunk = read_exact_within(reader, stream, n as usize, deadline, limits)?;
        body.extend_from_slice(&chunk);
        let end = read_line_within(reader, stream, deadline, limits, "a chunk's end")?;
        if !end.is_empty() {
            return Err(Refusal::new(400, "a chunk longer than its size"));
        }
    }
}

/// One line (without its end), at most 4 KiB.
fn read_line_within<R: Read>(reader: &mut BufReader<R>, stream: &TcpStream, deadline: Instant, limits: &Limits, what: &str) -> Result<String, Refusal> {
    let mut line = Vec::new();
    loop {
        set_deadline(stream, deadline, limits.idle_timeout).map_err(|r| Refusal::new(408, format!("{what} {r}")))?;
        let buf = match reader.fill_buf() {
            Ok([]) => return Err(Refusal::new(400, format!("the connection ended inside {what}"))),
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_refusal(&e, what)),
        };
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if line.len() > 4096 {
            return Err(Refusal::new(400, format!("{what} is longer than 4096 bytes")));
        }
        if done {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return String::from_utf8(line).map_err(|_| Refusal::new(400, format!("{what} is not UTF-8")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_and_bad_ones_are_refused_by_status() {
        let h = parse_head(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: 12\r\n").unwrap();
        assert_eq!((h.method.as_str(), h.length, h.close), ("POST", BodyLength::Fixed(12), true));
        let h = parse_head(b"POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked").unwrap();
        assert_eq!((h.length, h.close), (BodyLength::Chunked, false));
        let h = parse_head(b"GET /health HTTP/1.1\nConnection: close\nExpect: 100-continue").unwrap();
        assert!(h.close && h.expect_continue);
        let status = |head: &[u8]| parse_head(head).unwrap_err().status;
        assert_eq!(status(b"GET /x HTTP/9.9"), 505);
        assert_eq!(status(b"GET /x"), 400);
        assert_eq!(status(b"GET http://x/ HTTP/1.1"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: -1"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\nNo colon here"), 400);
        assert_eq!(status(b"POST / HTTP/1.1\r\n\xff: x"), 400);
    }

    #[test]
    fn the_head_ends_at_its_blank_line_either_way() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nrest", 0), Some(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\nrest", 0), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nA: b\r\n", 0), None);
    }
}
