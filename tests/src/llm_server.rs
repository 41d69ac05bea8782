//! A local OpenAI-compatible test server: `POST /v1/chat/completions` on a
//! free loopback port, answering with scripted, deterministic replies, so
//! the `llm` and `agent` kinds are tested over real HTTP. It checks what
//! it is sent (the bearer key, a model, messages) and keeps every request
//! for the test to inspect.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

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
}

type Script = dyn Fn(&Value, usize) -> Reply + Send + Sync;

/// A running test server.
pub struct TestLlm {
    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    requests: Arc<Mutex<Vec<Value>>>,
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
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address: SocketAddr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let wanted = format!("Bearer {key}");
        let seen = requests.clone();
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let (script, seen, wanted) = (script.clone(), seen.clone(), wanted.clone());
                async move { answer(&headers, &body, &wanted, &seen, &*script).await }
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
            requests,
            stop,
        })
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests lock").clone()
    }
}

async fn answer(
    headers: &HeaderMap,
    body: &str,
    wanted: &str,
    seen: &Mutex<Vec<Value>>,
    script: &Script,
) -> (StatusCode, HeaderMap, String) {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if auth != Some(wanted) {
        return error(401, "wrong or missing bearer key");
    }
    let Ok(request) = serde_json::from_str::<Value>(body) else {
        return error(400, "the body is not JSON");
    };
    if !request["model"].is_string() || !request["messages"].is_array() {
        return error(400, "a chat completion needs `model` and `messages`");
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
            let (status, mut headers, body) = error(code, "scripted error");
            if let Some(seconds) = retry_after {
                headers.insert(header::RETRY_AFTER, seconds.into());
            }
            return (status, headers, body);
        }
        Reply::Malformed(text) => return (StatusCode::OK, HeaderMap::new(), text),
        Reply::Slow(..) => unreachable!("unwrapped above"),
    };
    let prompt_tokens = request["messages"].to_string().len() as u64 / 4;
    let completion = json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 7},
    });
    (StatusCode::OK, json_headers(), completion.to_string())
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
