//! The MCP server's stdio transport: every line the client sends is judged
//! here before rmcp sees it, so that no frame goes unanswered (rmcp's own
//! stdio transport drops lines that are not JSON and answers a shape error
//! with id null, leaving a client that waits on its id waiting forever).
//!
//! - A frame that is not JSON (not UTF-8, a lone surrogate escape,
//!   truncated, trailing bytes) gets `-32700` (parse error). JSON-RPC asks
//!   for id null when the id cannot be detected; when the frame's top-level
//!   `"id"` can still be read from its start (a number or string before the
//!   bad part), the reply carries it, so the client waiting on that id
//!   hears of its failure instead of hanging ([`salvage_id`]).
//! - A batch (MCP has none since 2025-06-18), `"jsonrpc"` other than
//!   `"2.0"`, an id that is not a string or integer, or a request rmcp
//!   cannot read gets `-32600` (invalid request) with the frame's id (one
//!   reply per member of a batch that has one).
//! - `tools/call` without `params`, without a string `name`, or with
//!   `arguments` that are not an object gets `-32602` (invalid params), as
//!   does a known method whose params rmcp cannot read (rmcp would say
//!   "method not found").
//! - A notification that cannot be read is dropped (JSON-RPC never answers
//!   notifications); a blank line is skipped.
//! - Before `initialize`, a notification or a response from the client is
//!   dropped (rmcp's handshake would end the server on it); a request then
//!   is answered by rmcp with an error, and the server waits on.
//! - A request whose id is still in flight (sent, not yet answered, not
//!   cancelled) gets `-32600`: MCP forbids reusing an id, and the two
//!   replies could not be told apart ([`InFlight`]).
//!
//! Each refused frame also gets a warning on stderr. All of stdout goes
//! through one writer task, a line at a time, so rmcp's replies and ours
//! never interleave.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleServer;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Longest frame read (as rmcp's stdio transport): a longer line is
/// refused without being kept in memory.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Bytes of an over-long frame kept to read its id from.
const KEPT_OF_LONG_FRAME: usize = 64 << 10;
/// Characters of a parser's message put in a reply or log line (serde
/// quotes offending strings, which may be megabytes long).
const MAX_DETAIL_CHARS: usize = 200;

/// JSON-RPC's parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's invalid params.
pub const INVALID_PARAMS: i64 = -32602;

/// MCP request methods rmcp reads into typed requests: one of these that
/// rmcp can only read as a custom request had params it could not read.
const KNOWN_METHODS: [&str; 13] = [
    "initialize",
    "ping",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
];

/// What to do with one line from the client.
#[derive(Debug)]
pub enum Verdict {
    /// A message for rmcp.
    Forward(Box<ClientJsonRpcMessage>),
    /// Refused: these replies go out (none for a notification), and
    /// `reason` to the log.
    Refuse { replies: Vec<Value>, reason: String },
    /// A blank line: nothing to do.
    Skip,
}

/// An error reply.
pub fn error_reply(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn refuse(id: Value, code: i64, message: String) -> Verdict {
    Verdict::Refuse { replies: vec![error_reply(id, code, &message)], reason: message }
}

/// A parser's message cut to [`MAX_DETAIL_CHARS`].
fn clip(detail: &str) -> Cow<'_, str> {
    match detail.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((i, _)) => format!("{}…", &detail[..i]).into(),
        None => detail.into(),
    }
}

/// The id a reply to a frame carrying `id` takes: numbers and strings as
/// sent, anything else null.
fn reply_id(id: Option<&Value>) -> Value {
    match id {
        Some(v @ (Value::Number(_) | Value::String(_))) => v.clone(),
        _ => Value::Null,
    }
}

/// Judges one line (its newline removed).
pub fn judge(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    match serde_json::from_slice::<Value>(line) {
        Err(e) => {
            let id = salvage_id(line).unwrap_or(Value::Null);
            refuse(id, PARSE_ERROR, format!("Parse error: the frame is not JSON: {}", clip(&e.to_string())))
        }
        Ok(Value::Object(frame)) => judge_object(frame),
        Ok(Value::Array(members)) => judge_batch(&members),
        Ok(_) => refuse(Value::Null, INVALID_REQUEST, "Invalid Request: a frame must be a JSON object".into()),
    }
}

/// A batch: MCP has none; each member with an id hears so (or one reply
/// with id null when none has one).
fn judge_batch(members: &[Value]) -> Verdict {
    let reason = format!("Invalid Request: a JSON-RPC batch ({} messages); MCP takes one message per line", members.len());
    let mut replies: Vec<Value> = members
        .iter()
        .filter_map(|m| m.get("id"))
        .map(|id| reply_id(Some(id)))
        .filter(|id| !id.is_null())
        .map(|id| error_reply(id, INVALID_REQUEST, &reason))
        .collect();
    if replies.is_empty() {
        replies.push(error_reply(Value::Null, INVALID_REQUEST, &reason));
    }
    Verdict::Refuse { replies, reason }
}

fn judge_object(frame: Map<String, Value>) -> Verdict {
    let id = frame.get("id").cloned();
    let id = id.as_ref();
    let notification = id.is_none() && frame.get("method").is_some_and(Value::is_string);
    let reply = |code: i64, message: String| {
        if notification {
            Verdict::Refuse { replies: Vec::new(), reason: format!("dropped a notification: {message}") }
        } else {
            refuse(reply_id(id), code, message)
        }
    };
    if frame.get("jsonrpc") != Some(&json!("2.0")) {
        return reply(INVALID_REQUEST, "Invalid Request: `jsonrpc` must be \"2.0\"".into());
    }
    if let Some(id) = id {
        if !is_request_id(id) {
            return reply(INVALID_REQUEST, "Invalid Request: `id` must be a string or an integer".into());
        }
    }
    let method = frame.get("method").and_then(Value::as_str).map(str::to_string);
    if let (Some("tools/call"), false) = (method.as_deref(), notification) {
        if let Err(message) = check_tool_call(frame.get("params")) {
            return reply(INVALID_PARAMS, format!("Invalid params of tools/call: {message}"));
        }
    }
    let known = method.as_deref().filter(|m| KNOWN_METHODS.contains(m));
    let bad_params = |m: &str| format!("Invalid params: the params of {m} do not fit its MCP schema");
    match (serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(frame)), known) {
        (Ok(JsonRpcMessage::Request(r)), Some(m)) if matches!(r.request, ClientRequest::CustomRequest(_)) => reply(INVALID_PARAMS, bad_params(m)),
        (Ok(message), _) => Verdict::Forward(Box::new(message)),
        (Err(_), Some(m)) => reply(INVALID_PARAMS, bad_params(m)),
        (Err(e), None) => reply(INVALID_REQUEST, format!("Invalid Request: {}", clip(&e.to_string()))),
    }
}

/// A string, or an integer rmcp can keep (it holds ids as `i64`).
fn is_request_id(id: &Value) -> bool {
    match id {
        Value::String(_) => true,
        Value::Number(n) => n.as_i64().is_some() || n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0),
        _ => false,
    }
}

/// `tools/call` needs params with a string `name` and, if any, object `arguments`.
fn check_tool_call(params: Option<&Value>) -> Result<(), String> {
    let Some(params) = params else { return Err("`params` is missing; give {\"name\": TOOL, \"arguments\": {...}}".into()) };
    let Some(params) = params.as_object() else { return Err("`params` must be an object".into()) };
    match params.get("name") {
        None => return Err("`params.name` (the tool's name) is missing".into()),
        Some(Value::String(_)) => {}
        Some(_) => return Err("`params.name` must be a string".into()),
    }
    match params.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => Ok(()),
        Some(_) => Err("`params.arguments` must be an object".into()),
    }
}

/// The top-level `"id"` (a number or string) of a frame that is not valid
/// JSON, read from its start as far as it is well formed: `None` when the
/// frame breaks before its id, or is no object.
pub fn salvage_id(line: &[u8]) -> Option<Value> {
    let mut s = Scan { b: line, i: 0 };
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key = s.string()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        if &line[key] == b"\"id\"" {
            let start = s.i;
            if s.peek()? == b'"' {
                s.string()?;
            } else {
                while s.peek().is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(&c)) {
                    s.i += 1;
                }
            }
            return match serde_json::from_slice::<Value>(&line[start..s.i]).ok()? {
                v @ (Value::Number(_) | Value::String(_)) => Some(v),
                _ => None,
            };
        }
        s.skip_value()?;
        s.ws();
        s.eat(b',')?;
    }
}

/// A cursor over the bytes of a frame, lenient about everything but
/// structure.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }
    /// Where a string is, its quotes included (escapes skipped, not checked).
    fn string(&mut self) -> Option<std::ops::Range<usize>> {
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(start..self.i);
                }
                _ => self.i += 1,
            }
        }
    }
    /// A value of any kind: strings and nesting followed, scalars up to
    /// the next `,`, `}` or `]`.
    fn skip_value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    self.i += 1;
                }
                b',' | b'}' | b']' if depth == 0 => return Some(()),
                _ => self.i += 1,
            }
            if depth == 0 && matches!(self.b.get(self.i.wrapping_sub(1)), Some(b'"' | b'}' | b']')) {
                return Some(());
            }
        }
    }
}

/// One line read from the client: complete, or longer than the cap (its
/// first [`KEPT_OF_LONG_FRAME`] bytes kept).
enum Line {
    Whole(Vec<u8>),
    TooLong(Vec<u8>),
}

/// Reads the next line, never holding more than the cap; `None` at the end
/// of input (a last line without a newline still counts).
async fn read_line(input: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<Option<Line>> {
    let (mut line, mut seen) = (Vec::new(), 0usize);
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (seen, seen > MAX_FRAME_BYTES) {
                (0, _) => None,
                (_, true) => Some(Line::TooLong(line)),
                (_, false) => Some(Line::Whole(line)),
            });
        }
        let newline = available.iter().position(|&c| c == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        let body = &available[..newline.unwrap_or(take)];
        seen += body.len();
        let keep = if seen > MAX_FRAME_BYTES { KEPT_OF_LONG_FRAME } else { MAX_FRAME_BYTES };
        let room = keep.saturating_sub(line.len());
        line.extend_from_slice(&body[..body.len().min(room)]);
        input.consume(take);
        if newline.is_some() {
            return Ok(Some(if seen > MAX_FRAME_BYTES { Line::TooLong(line) } else { Line::Whole(line) }));
        }
    }
}

/// What the reader makes of one line.
fn verdict(line: Line) -> Verdict {
    match line {
        Line::Whole(bytes) => judge(&bytes),
        Line::TooLong(start) => {
            let id = salvage_id(&start).unwrap_or(Value::Null);
            refuse(id, INVALID_REQUEST, format!("Invalid Request: the frame is longer than {MAX_FRAME_BYTES} bytes"))
        }
    }
}

/// Reads frames from `input` until its end: good ones to `forward`, the
/// replies to refused ones to `out`.
async fn read_frames(
    input: impl tokio::io::AsyncRead + Unpin,
    forward: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    out: mpsc::WeakUnboundedSender<Vec<u8>>,
    in_flight: InFlight,
) {
    let mut input = tokio::io::BufReader::new(input);
    let mut number = 0u64;
    // rmcp's handshake ends the service on anything but a request before
    // `initialize`: notifications and responses wait out the handshake here.
    let mut initialized = false;
    loop {
        let line = match read_line(&mut input).await {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                tracing::error!("fusegrpo mcp: reading stdin: {e}");
                return;
            }
        };
        number += 1;
        let verdict = match verdict(line) {
            Verdict::Forward(message) => admit(*message, &mut initialized, &in_flight),
            other => other,
        };
        match verdict {
            Verdict::Skip => {}
            Verdict::Forward(message) => {
                if forward.send(*message).await.is_err() {
                    return;
                }
            }
            Verdict::Refuse { replies, reason } => {
                let ids: Vec<String> = replies.iter().map(|r| r["id"].to_string()).collect();
                tracing::warn!("fusegrpo mcp: frame {number} (id {}) refused: {reason}", ids.join(", "));
                let Some(out) = out.upgrade() else { return };
                for reply in replies {
                    let _ = out.send(line_of(&reply));
                }
            }
        }
    }
}

/// The ids of the client's requests that rmcp has and has not answered
/// yet (JSON text of each id): a second request with one of them is
/// refused, since its reply could not be told from the first's.
pub type InFlight = Arc<Mutex<HashSet<String>>>;

fn id_key(id: &impl serde::Serialize) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// A well-formed message, judged against the session's state: before
/// `initialize`, a notification or a response from the client is dropped
/// (rmcp's handshake would end the server on it); a request whose id is
/// in flight is refused (-32600); `notifications/cancelled` frees its id.
fn admit(message: ClientJsonRpcMessage, initialized: &mut bool, in_flight: &InFlight) -> Verdict {
    let mut ids = in_flight.lock().unwrap_or_else(|p| p.into_inner());
    match &message {
        JsonRpcMessage::Request(r) => {
            if matches!(r.request, ClientRequest::InitializeRequest(_)) {
                *initialized = true;
            }
            let key = id_key(&r.id);
            if !ids.insert(key.clone()) {
                let reason = format!("Invalid Request: id {key} is already used by a request in flight; give each request its own id");
                return Verdict::Refuse { replies: vec![error_reply(serde_json::from_str(&key).unwrap_or(Value::Null), INVALID_REQUEST, &reason)], reason };
            }
        }
        JsonRpcMessage::Notification(_) | JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) if !*initialized => {
            return Verdict::Refuse { replies: Vec::new(), reason: "dropped: a notification or response before `initialize`".into() };
        }
        JsonRpcMessage::Notification(n) => {
            if let ClientNotification::CancelledNotification(c) = &n.notification {
                ids.remove(&id_key(&c.params.request_id));
            }
        }
        _ => {}
    }
    Verdict::Forward(Box::new(message))
}

/// A message as one line of stdout.
fn line_of(v: &impl serde::Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(v).unwrap_or_else(|e| {
        serde_json::to_vec(&error_reply(Value::Null, -32603, &format!("Internal error: serializing a reply: {e}"))).unwrap_or_default()
    });
    line.push(b'\n');
    line
}

/// Writes lines to `output` in the order sent, flushing each, until every
/// sender is gone or the output fails.
async fn write_lines(mut output: impl AsyncWrite + Unpin, mut lines: mpsc::UnboundedReceiver<Vec<u8>>) {
    while let Some(line) = lines.recv().await {
        if let Err(e) = async {
            output.write_all(&line).await?;
            output.flush().await
        }
        .await
        {
            tracing::error!("fusegrpo mcp: writing stdout: {e}");
            return;
        }
    }
}

/// rmcp's side of the transport: the frames the reader let through, and
/// the writer's queue.
pub struct Frames {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    outgoing: Option<mpsc::UnboundedSender<Vec<u8>>>,
    in_flight: InFlight,
}

/// Why a message could not be queued for stdout.
#[derive(Debug, thiserror::Error)]
#[error("stdout is closed")]
pub struct Closed;

impl Transport<RoleServer> for Frames {
    type Error = Closed;

    fn send(&mut self, item: TxJsonRpcMessage<RoleServer>) -> impl std::future::Future<Output = Result<(), Closed>> + Send + 'static {
        let answered = match &item {
            JsonRpcMessage::Response(r) => Some(id_key(&r.id)),
            JsonRpcMessage::Error(e) => Some(id_key(&e.id)),
            _ => None,
        };
        if let Some(key) = answered {
            self.in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        }
        let sent = self.outgoing.as_ref().ok_or(Closed).and_then(|out| out.send(line_of(&item)).map_err(|_| Closed));
        std::future::ready(sent)
    }

    fn receive(&mut self) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Closed> {
        self.outgoing = None;
        Ok(())
    }
}

/// The transport over `input` and `output` (stdin and stdout), and the
/// writer task: await it after the service ends, so that every reply is
/// written before the process exits.
pub fn transport(
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> (Frames, tokio::task::JoinHandle<()>) {
    let (forward, incoming) = mpsc::channel(64);
    let (outgoing, lines) = mpsc::unbounded_channel();
    let in_flight = InFlight::default();
    tokio::spawn(read_frames(input, forward, outgoing.downgrade(), in_flight.clone()));
    let writer = tokio::spawn(write_lines(output, lines));
    (Frames { incoming, outgoing: Some(outgoing), in_flight }, writer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(line: &[u8]) -> Vec<Value> {
        match judge(line) {
            Verdict::Refuse { replies, .. } => replies,
            other => panic!("{} was not refused: {other:?}", String::from_utf8_lossy(line)),
        }
    }

    fn code_and_id(line: &[u8]) -> (i64, Value) {
        let r = refused(line);
        assert_eq!(r.len(), 1, "{r:?}");
        (r[0]["error"]["code"].as_i64().unwrap(), r[0]["id"].clone())
    }

    /// Every malformed frame of issue 52 gets its code, with the id when it
    /// can be read; good frames and notifications go through.
    #[test]
    fn malformed_frames_get_their_json_rpc_error() {
        assert_eq!(code_and_id(b"hello"), (PARSE_ERROR, Value::Null));
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","id":4,"method":"tools/li"#), (PARSE_ERROR, json!(4)));
        let surrogate = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"\ud800"}}}"#;
        assert_eq!(code_and_id(surrogate), (PARSE_ERROR, json!(7)));
        let utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"\xff\xfe\"}}";
        assert_eq!(code_and_id(utf8), (PARSE_ERROR, json!("a")));
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","method":"x","params":{"a":[1,{"b":"}"}]},"id":12 x"#), (PARSE_ERROR, json!(12)));
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","id":1,"method":"ping"} trailing"#), (PARSE_ERROR, json!(1)));
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","id":"#), (PARSE_ERROR, Value::Null));
        assert_eq!(code_and_id(br#"{"jsonrpc":"1.0","id":3,"method":"tools/list"}"#), (INVALID_REQUEST, json!(3)));
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","id":3}"#), (INVALID_REQUEST, json!(3)));
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","id":[3],"method":"ping"}"#), (INVALID_REQUEST, Value::Null));
        assert_eq!(code_and_id(b"[]"), (INVALID_REQUEST, Value::Null));
        assert_eq!(code_and_id(b"42"), (INVALID_REQUEST, Value::Null));
        let batch = refused(br#"[{"jsonrpc":"2.0","id":5,"method":"ping"},{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","id":"six","method":"ping"}]"#);
        assert_eq!(batch.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(), vec![json!(5), json!("six")]);
        assert!(batch.iter().all(|r| r["error"]["code"] == INVALID_REQUEST));
        for params in [r#""#, r#","params":{"arguments":{}}"#, r#","params":{"name":"grep","arguments":"x"}"#, r#","params":[1]"#, r#","params":{"name":3}"#] {
            let frame = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call"{params}}}"#);
            assert_eq!(code_and_id(frame.as_bytes()), (INVALID_PARAMS, json!(9)), "{frame}");
        }
        assert_eq!(code_and_id(br#"{"jsonrpc":"2.0","id":9,"method":"resources/read","params":7}"#), (INVALID_PARAMS, json!(9)));
        // Notifications are never answered; blank lines are no frames.
        assert!(refused(br#"{"jsonrpc":"1.0","method":"notifications/initialized"}"#).is_empty());
        assert!(matches!(judge(b"  \r"), Verdict::Skip));
        for good in [
            &br#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#[..],
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"grep","arguments":{"pattern":"x"}}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
            br#"{"jsonrpc":"2.0","method":"$/lsp-style","params":{}}"#,
            b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"foo/bar\"}\r",
        ] {
            assert!(matches!(judge(good), Verdict::Forward(_)), "{}", String::from_utf8_lossy(good));
        }
    }

    /// A reply never echoes a long string of the frame.
    #[test]
    fn replies_do_not_echo_the_frame() {
        let long = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{}","arguments":5}}}}"#, "p".repeat(100_000));
        let r = refused(long.as_bytes());
        assert!(r[0].to_string().len() < 1000, "{}", r[0].to_string().len());
        let r = refused(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":"{}"}}"#, "q".repeat(100_000)).as_bytes());
        assert!(r[0].to_string().len() < 1000);
    }

    /// Lines over the cap are refused whole, with the id from their start,
    /// and the next line is read as usual.
    #[test]
    fn an_over_long_line_is_refused_and_reading_goes_on() {
        let mut input = format!(r#"{{"jsonrpc":"2.0","id":31,"method":"x","params":"{}"}}"#, "z".repeat(MAX_FRAME_BYTES)).into_bytes();
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":32,\"method\":\"ping\"}");
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut reader = tokio::io::BufReader::new(&input[..]);
        let (first, second) = rt.block_on(async {
            let a = read_line(&mut reader).await.unwrap().unwrap();
            let b = read_line(&mut reader).await.unwrap().unwrap();
            assert!(read_line(&mut reader).await.unwrap().is_none());
            (a, b)
        });
        match verdict(first) {
            Verdict::Refuse { replies, .. } => assert_eq!((replies[0]["id"].clone(), replies[0]["error"]["code"].as_i64()), (json!(31), Some(INVALID_REQUEST))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(verdict(second), Verdict::Forward(_)));
    }
}
