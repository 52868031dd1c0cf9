//! Test helpers for every crate's tests. A test HTTP server: answers each
//! request by a closure, records what it was sent; the stand-in for an
//! OpenAI-compatible teacher or a vLLM server (one request per connection,
//! as our clients send them with `Connection: close` answers). And
//! [`Recorder`], a policy that keeps the conversation it was shown.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct StubRequest {
    /// `"POST /v1/completions"` (method and path, query included).
    pub what: String,
    /// The body as sent.
    pub body: String,
}

impl StubRequest {
    /// The body as JSON (`null` when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// An answer: status, body, extra headers.
#[derive(Debug, Clone, PartialEq)]
pub struct StubReply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

impl StubReply {
    pub fn json(status: u16, body: &Value) -> Self {
        StubReply { status, body: body.to_string(), headers: Vec::new() }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Self {
        StubReply { status, body: body.into(), headers: Vec::new() }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A running server (until the process ends).
#[derive(Debug, Clone)]
pub struct StubServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    seen: Arc<Mutex<Vec<StubRequest>>>,
}

impl StubServer {
    /// Serves on a free local port, answering each request by `reply`.
    pub fn start(mut reply: impl FnMut(&StubRequest) -> StubReply + Send + 'static) -> StubServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free local port");
        let url = format!("http://{}", listener.local_addr().expect("a bound address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let Some(request) = read_request(&stream) else { continue };
                let answer = reply(&request);
                log.lock().unwrap_or_else(|e| e.into_inner()).push(request);
                let mut head = format!("HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n", answer.status, answer.body.len());
                for (k, v) in &answer.headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                let mut stream = stream;
                let _ = write!(stream, "{head}\r\n{}", answer.body);
            }
        });
        StubServer { url, seen }
    }

    /// Answers the requests with `replies` in order (then 500s).
    pub fn canned(replies: Vec<StubReply>) -> StubServer {
        let mut replies = replies.into_iter();
        StubServer::start(move |_| replies.next().unwrap_or_else(|| StubReply::text(500, "no more canned replies")))
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<StubRequest> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn read_request(stream: &std::net::TcpStream) -> Option<StubRequest> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut len = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut buf = vec![0; len];
    reader.read_exact(&mut buf).ok()?;
    let what = request_line.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    Some(StubRequest { what, body: String::from_utf8_lossy(&buf).into_owned() })
}

/// A policy that plays another and keeps the messages of the first episode
/// of its last request: with the last turn appended, the conversation a
/// replay through the chat template renders.
pub struct Recorder<P>(pub P, pub Vec<Value>);

impl<P: crate::policy::Policy> crate::policy::Policy for Recorder<P> {
    fn name(&self) -> String {
        "recorder".into()
    }
    fn next_turns(&mut self, r: &[crate::policy::TurnRequest<'_>]) -> Result<Vec<crate::policy::TurnOutput>, crate::policy::PolicyError> {
        self.1 = r[0].messages.to_vec();
        self.0.next_turns(r)
    }
    fn max_live(&self) -> Option<usize> {
        self.0.max_live()
    }
    fn set_temperature(&mut self, temperature: f64) -> bool {
        self.0.set_temperature(temperature)
    }
}
