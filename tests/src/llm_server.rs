//! A local OpenAI-compatible test server: `POST /v1/chat/completions` on a
//! free loopback port, answering with scripted, deterministic replies, so
//! the `llm` and `agent` kinds are tested over real HTTP. It checks what
//! it is sent (the bearer key, a model, messages) and keeps every request
//! for the test to inspect. A request with `stream: true` is answered as
//! a provider streams: server-sent events of `chat.completion.chunk`s (the
//! text a word at a time, each tool call's name then its arguments in two
//! pieces, the usage last when `stream_options.include_usage` asks), then
//! `data: [DONE]`; [`Reply::Streamed`] sends its pieces one at a time, a
//! gap apart.
//!
//! With [`TestLlm::limit_rate`] it enforces a rate as a provider does: a
//! token bucket of one second's share of its per-minute figure; a request
//! beyond it is answered 429 with `Retry-After: 1` and counted
//! ([`TestLlm::throttled`]), and the times the others arrived are kept
//! ([`TestLlm::arrivals`]) for a test to check the rate it saw.
//!
//! `POST /v1/embeddings` answers with deterministic vectors: a hashed bag
//! of the input's words, [`EMBEDDING_DIMENSIONS`] long and of unit length,
//! so texts that share words are near and a query finds the passages that
//! use its words. Its requests are kept apart from the chat's.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A graph mapping `items` over one `llm` step each, 64 at a time,
/// collecting the answers: W10's shape (the flow-control tests, the
/// benchmark).
pub const ASK_EACH: &str = r#"
state:
  items: { type: array }
  answer: { type: string, default: "" }
  answers: { type: array, default: [] }
nodes:
  fan:
    kind: map
    start: true
    over: "{{ items }}"
    as: item
    branch: ask
    output_key: answer
    collect_into: answers
    max_concurrency: 64
  ask:
    kind: llm
    prompt: "Item {{ item }}?"
    max_tokens: 16
    state_updates: { answer: "{{ output }}" }
"#;

/// What the server answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A plain completion.
    Text(String),
    /// A completion whose content is this JSON (structured output).
    Json(Value),
    /// Tool calls: `(name, arguments)`.
    ToolCalls(Vec<(String, Value)>),
    /// An error status, with `Retry-After` seconds when given.
    Status(u16, Option<u64>),
    /// The reply after a delay.
    Slow(Duration, Box<Reply>),
    /// A 200 whose body is this text (not a chat completion).
    Malformed(String),
    /// Text in these pieces, sent `gap` apart when the request streams
    /// (one whole reply otherwise).
    Streamed(Vec<String>, Duration),
    /// A 200 stream whose events are these `data:` payloads, as they are.
    RawStream(Vec<String>),
    /// `count` pieces of text, the first `first` after the request and
    /// the rest `gap` apart, each the wall clock when it is sent (Unix
    /// microseconds, then `;`): a watcher measures how long a piece took
    /// to reach it (the streaming benchmark).
    Stamped {
        /// Pieces.
        count: usize,
        /// Before the first.
        first: Duration,
        /// Between two.
        gap: Duration,
    },
}

type Script = dyn Fn(&Value, usize) -> Reply + Send + Sync;

/// What the server answers an embeddings request with.
#[derive(Debug, Clone)]
pub enum EmbeddingReply {
    /// The deterministic vectors ([`embedding_of`]), in the input's order.
    Vectors,
    /// The same vectors listed last first, each with its `index`.
    Reversed,
    /// Vectors of this many dimensions instead.
    Dimensions(usize),
    /// An error status, with `Retry-After` seconds when given.
    Status(u16, Option<u64>),
    /// A 200 whose body is this text (not embeddings).
    Malformed(String),
    /// The deterministic vectors, after this long (a slow provider).
    After(std::time::Duration),
}

type EmbeddingScript = dyn Fn(&Value, usize) -> EmbeddingReply + Send + Sync;

/// How long the test server's embeddings are.
pub const EMBEDDING_DIMENSIONS: usize = 64;

/// A provider's rate limit: a bucket of one second's share of a
/// per-minute figure, refilled continuously.
#[derive(Debug)]
struct Limiter {
    rate: f64,
    capacity: f64,
    level: f64,
    at: Instant,
}

/// The server's rate limit and what it saw.
#[derive(Debug, Default)]
struct Gatekeeper {
    limiter: Option<Limiter>,
    throttled: u64,
    arrivals: Vec<Instant>,
}

impl Gatekeeper {
    /// Whether a request arriving now is within the rate (and notes it).
    fn admit(&mut self) -> bool {
        let now = Instant::now();
        if let Some(limiter) = &mut self.limiter {
            let gained = limiter.rate * now.duration_since(limiter.at).as_secs_f64();
            limiter.level = (limiter.level + gained).min(limiter.capacity);
            limiter.at = now;
            if limiter.level < 1.0 {
                self.throttled += 1;
                return false;
            }
            limiter.level -= 1.0;
        }
        self.arrivals.push(now);
        true
    }
}

/// A running test server.
pub struct TestLlm {
    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    gate: Arc<Mutex<Gatekeeper>>,
    requests: Arc<Mutex<Vec<Value>>>,
    embedding_requests: Arc<Mutex<Vec<Value>>>,
    stop: CancellationToken,
}

impl Drop for TestLlm {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestLlm {
    /// Starts a server that wants `Authorization: Bearer {key}` and answers
    /// request number `n` (0-based) of body `request` with `script`.
    pub async fn start(
        key: &str,
        script: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static,
    ) -> Result<Self> {
        Self::start_with_embeddings(key, script, |_, _| EmbeddingReply::Vectors).await
    }

    /// The same, answering embeddings request number `n` (0-based, every
    /// authorized one counted) of body `request` with `embed`.
    pub async fn start_with_embeddings(
        key: &str,
        script: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static,
        embed: impl Fn(&Value, usize) -> EmbeddingReply + Send + Sync + 'static,
    ) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address: SocketAddr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let wanted = format!("Bearer {key}");
        let seen = requests.clone();
        let gate = Arc::new(Mutex::new(Gatekeeper::default()));
        let keeper = gate.clone();
        let embedding_requests = Arc::new(Mutex::new(Vec::new()));
        let (embedded, embedding_key) = (embedding_requests.clone(), wanted.clone());
        let embed: Arc<EmbeddingScript> = Arc::new(embed);
        let app = axum::Router::new()
            .route(
                "/v1/chat/completions",
                axum::routing::post(move |headers: HeaderMap, body: String| {
                    let (script, seen, wanted) = (script.clone(), seen.clone(), wanted.clone());
                    let keeper = keeper.clone();
                    async move {
                        use axum::response::IntoResponse;
                        if !keeper.lock().expect("gate lock").admit() {
                            return scripted_error(429, Some(1)).into_response();
                        }
                        answer(&headers, &body, &wanted, &seen, &*script).await
                    }
                }),
            )
            .route(
                "/v1/embeddings",
                axum::routing::post(move |headers: HeaderMap, body: String| {
                    let (seen, wanted) = (embedded.clone(), embedding_key.clone());
                    let embed = embed.clone();
                    async move { embeddings(&headers, &body, &wanted, &seen, &*embed).await }
                }),
            );
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
        });
        Ok(Self {
            url: format!("http://{address}/v1"),
            gate,
            requests,
            embedding_requests,
            stop,
        })
    }

    /// From now on, answers chat requests beyond `per_minute` (spread as
    /// a provider spreads it: one second's share at most at once) with 429
    /// and `Retry-After: 1`.
    pub fn limit_rate(&self, per_minute: u64) {
        let rate = per_minute as f64 / 60.0;
        let capacity = rate.max(1.0);
        self.gate.lock().expect("gate lock").limiter = Some(Limiter {
            rate,
            capacity,
            level: capacity,
            at: Instant::now(),
        });
    }

    /// Chat requests answered 429 for the rate limit.
    pub fn throttled(&self) -> u64 {
        self.gate.lock().expect("gate lock").throttled
    }

    /// When each chat request within the rate arrived, in order.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.gate.lock().expect("gate lock").arrivals.clone()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests lock").clone()
    }

    /// Every authorized embeddings request received so far, in order (the
    /// ones answered with an error too).
    pub fn embedding_requests(&self) -> Vec<Value> {
        self.embedding_requests
            .lock()
            .expect("requests lock")
            .clone()
    }
}

/// The test server's embedding of `text`: each lower-cased word (a run of
/// letters and digits) adds one to the bucket its hash picks (FNV-1a, so
/// it is the same in every process), and the vector is scaled to unit
/// length. A text with no words is the zero vector.
pub fn embedding_of(text: &str) -> Vec<f32> {
    let mut vector = vec![0f32; EMBEDDING_DIMENSIONS];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in word.to_lowercase().bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        vector[(hash % EMBEDDING_DIMENSIONS as u64) as usize] += 1.0;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

async fn embeddings(
    headers: &HeaderMap,
    body: &str,
    wanted: &str,
    seen: &Mutex<Vec<Value>>,
    embed: &EmbeddingScript,
) -> (StatusCode, HeaderMap, String) {
    let request = match authorized(headers, body, wanted) {
        Ok(request) => request,
        Err((code, message)) => return error(code, message),
    };
    let n = {
        let mut seen = seen.lock().expect("requests lock");
        seen.push(request.clone());
        seen.len() - 1
    };
    let mut dimensions = None;
    let mut reversed = false;
    match embed(&request, n) {
        EmbeddingReply::Vectors => {}
        EmbeddingReply::Reversed => reversed = true,
        EmbeddingReply::Dimensions(length) => dimensions = Some(length),
        EmbeddingReply::Status(code, retry_after) => return scripted_error(code, retry_after),
        EmbeddingReply::Malformed(text) => return (StatusCode::OK, HeaderMap::new(), text),
        EmbeddingReply::After(delay) => tokio::time::sleep(delay).await,
    }
    let texts: Option<Vec<&str>> = match &request["input"] {
        Value::String(text) => Some(vec![text.as_str()]),
        Value::Array(items) => items.iter().map(Value::as_str).collect(),
        _ => None,
    };
    let (Some(texts), Some(model)) = (texts, request["model"].as_str()) else {
        return error(
            400,
            "an embeddings request needs `model` and `input` (a string or a list of strings)",
        );
    };
    let mut data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let mut vector = embedding_of(text);
            if let Some(length) = dimensions {
                vector.resize(length, 0.5);
            }
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    if reversed {
        data.reverse();
    }
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    let reply = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    (StatusCode::OK, json_headers(), reply.to_string())
}

async fn answer(
    headers: &HeaderMap,
    body: &str,
    wanted: &str,
    seen: &Mutex<Vec<Value>>,
    script: &Script,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let request = match authorized(headers, body, wanted) {
        Ok(request) => request,
        Err((code, message)) => return error(code, message).into_response(),
    };
    if !request["model"].is_string() || !request["messages"].is_array() {
        return error(400, "a chat completion needs `model` and `messages`").into_response();
    }
    let n = {
        let mut seen = seen.lock().expect("requests lock");
        seen.push(request.clone());
        seen.len() - 1
    };
    let mut reply = script(&request, n);
    while let Reply::Slow(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    let streams = request["stream"] == json!(true);
    let usage_asked = request.pointer("/stream_options/include_usage") == Some(&json!(true));
    let prompt_tokens = request["messages"].to_string().len() as u64 / 4;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": 7,
                       "total_tokens": prompt_tokens + 7,
                       "prompt_tokens_details": {"cached_tokens": prompt_tokens / 2}});
    let reply = match reply {
        Reply::RawStream(events) => {
            let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
            return (StatusCode::OK, stream_headers(), body).into_response();
        }
        Reply::Streamed(pieces, gap) if streams => {
            let mut events = vec![chunk(&request, n, json!({"role": "assistant"}))];
            events.extend(
                pieces
                    .iter()
                    .map(|p| chunk(&request, n, json!({"content": p}))),
            );
            events.extend(finish(&request, n, usage_asked.then_some(usage)));
            let (sender, receiver) = tokio::sync::mpsc::channel(4);
            tokio::spawn(async move {
                for (i, event) in events.into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(gap).await;
                    }
                    let sent = Ok::<_, std::convert::Infallible>(event);
                    if sender.send(sent).await.is_err() {
                        return;
                    }
                }
            });
            let paced = tokio_stream::wrappers::ReceiverStream::new(receiver);
            let body = axum::body::Body::from_stream(paced);
            return (StatusCode::OK, stream_headers(), body).into_response();
        }
        Reply::Stamped { count, first, gap } if streams => {
            let (sender, receiver) = tokio::sync::mpsc::channel(4);
            let opening = chunk(&request, n, json!({"role": "assistant"}));
            let ending = finish(&request, n, usage_asked.then_some(usage));
            tokio::spawn(async move {
                let mut events = vec![opening];
                for i in 0..count {
                    tokio::time::sleep(if i == 0 { first } else { gap }).await;
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros());
                    events.push(chunk(&request, n, json!({"content": format!("{now};")})));
                    for event in events.drain(..) {
                        if sender
                            .send(Ok::<_, std::convert::Infallible>(event))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                for event in ending {
                    if sender.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
            });
            let paced = tokio_stream::wrappers::ReceiverStream::new(receiver);
            let body = axum::body::Body::from_stream(paced);
            return (StatusCode::OK, stream_headers(), body).into_response();
        }
        Reply::Streamed(pieces, _) => Reply::Text(pieces.concat()),
        Reply::Stamped { count, .. } => Reply::Text("0;".repeat(count)),
        other => other,
    };
    let message = match reply {
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::Json(value) => json!({"role": "assistant", "content": value.to_string()}),
        Reply::ToolCalls(calls) => {
            let calls: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({"id": format!("call_{n}_{i}"), "type": "function",
                           "function": {"name": name, "arguments": arguments.to_string()}})
                })
                .collect();
            json!({"role": "assistant", "content": null, "tool_calls": calls})
        }
        Reply::Status(code, retry_after) => {
            return scripted_error(code, retry_after).into_response();
        }
        Reply::Malformed(text) => return (StatusCode::OK, HeaderMap::new(), text).into_response(),
        Reply::Slow(..) | Reply::Streamed(..) | Reply::RawStream(_) | Reply::Stamped { .. } => {
            unreachable!("unwrapped above")
        }
    };
    if streams {
        let body: String = streamed(&request, n, &message, usage_asked.then_some(usage)).concat();
        return (StatusCode::OK, stream_headers(), body).into_response();
    }
    let completion = json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage,
    });
    (StatusCode::OK, json_headers(), completion.to_string()).into_response()
}

/// One `data:` event of a chunk of reply `n` carrying `delta`.
fn chunk(request: &Value, n: usize, delta: Value) -> String {
    let chunk = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                       "model": request["model"], "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

/// The events that end reply `n`: the finish reason, the usage when
/// asked, `[DONE]`.
fn finish(request: &Value, n: usize, usage: Option<Value>) -> Vec<String> {
    let done = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                      "model": request["model"], "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    let mut events = vec![format!("data: {done}\n\n")];
    if let Some(usage) = usage {
        let last = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                          "model": request["model"], "choices": [], "usage": usage});
        events.push(format!("data: {last}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// `message` as the events of a stream: its text a word at a time, each
/// tool call's id and name, then its arguments in two pieces.
fn streamed(request: &Value, n: usize, message: &Value, usage: Option<Value>) -> Vec<String> {
    let mut events = vec![chunk(request, n, json!({"role": "assistant"}))];
    if let Some(text) = message["content"].as_str() {
        for word in text.split_inclusive(' ') {
            events.push(chunk(request, n, json!({"content": word})));
        }
    }
    for (index, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let start = json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                            "function": {"name": call["function"]["name"], "arguments": ""}}]});
        events.push(chunk(request, n, start));
        let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
        let mut cut = arguments.len() / 2;
        while !arguments.is_char_boundary(cut) {
            cut -= 1;
        }
        for piece in [&arguments[..cut], &arguments[cut..]] {
            let more = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            events.push(chunk(request, n, more));
        }
    }
    events.extend(finish(request, n, usage));
    events
}

fn stream_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers
}

/// A request's JSON body, if it carries the wanted bearer key; else the
/// status and message to refuse it with (401, or 400 for a body that is
/// not JSON).
fn authorized(headers: &HeaderMap, body: &str, wanted: &str) -> Result<Value, (u16, &'static str)> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth != Some(wanted) {
        return Err((401, "wrong or missing bearer key"));
    }
    serde_json::from_str::<Value>(body).map_err(|_| (400, "the body is not JSON"))
}

/// A scripted error status, with `Retry-After` seconds when given.
fn scripted_error(code: u16, retry_after: Option<u64>) -> (StatusCode, HeaderMap, String) {
    let (status, mut headers, body) = error(code, "scripted error");
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, seconds.into());
    }
    (status, headers, body)
}

fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    headers
}

fn error(code: u16, message: &str) -> (StatusCode, HeaderMap, String) {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": message}}).to_string();
    (status, json_headers(), body)
}

/// The last user or tool message's text of a request: what scripts
/// usually key their replies on.
pub fn last_message(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}
