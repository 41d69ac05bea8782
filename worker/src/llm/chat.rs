//! One chat completion against an OpenAI-compatible endpoint
//! (`POST {base_url}/chat/completions`), within the step's deadline, asked
//! for as a stream (`stream: true`, with the usage in its last chunk) and
//! read as it arrives ([`super::stream`]); an endpoint that answers with
//! the whole reply instead is read as one. A 429
//! or a 5xx (or a connection that fails) is tried again after the reply's
//! `Retry-After`, or a short backoff, while the deadline allows; any other
//! error status, or a body that is not a chat completion, fails the
//! attempt naming the status and the start of the body, secrets masked.
//!
//! Each request goes through the step's [`CallGate`]: when the coordinator
//! paces the step's calls (SPEC 18), a request waits for its grant and its
//! usage (or its 429) is reported after it, and a 429 is tried again for
//! as long as the deadline allows rather than a fixed number of times.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::gate::{CallGate, Spent, Ticket};
use super::provider::Provider;
use crate::task::{Failure, FailureKind};
use weft_proto::worker_protocol::StreamKind;

/// Tries of one request, the first included.
const TRIES: u32 = 4;
/// Backoff before the first retry when the server names no delay.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Longest body text quoted in an error.
const QUOTED: usize = 500;

/// A chat completion's message, and what it cost.
#[derive(Debug)]
pub(crate) struct Completion {
    /// `choices[0].message`: `content`, and `tool_calls` for an agent.
    pub message: Value,
    /// The provider's name in the worker's configuration.
    pub provider: String,
    /// The model that answered (as the reply names it).
    pub model: String,
    /// The reply's `usage`, when it has one.
    pub usage: Value,
    /// From the first request to the reply.
    pub latency: Duration,
    /// Requests made (retries included).
    pub tries: u32,
}

impl Completion {
    /// The `model_called` note for the step's events.
    pub fn note(&self) -> Value {
        json!({
            "type": "model_called",
            "model": self.model,
            "prompt_tokens": self.usage.get("prompt_tokens"),
            "completion_tokens": self.usage.get("completion_tokens"),
            "cached_tokens": self.usage.pointer("/prompt_tokens_details/cached_tokens"),
            "provider": self.provider,
            "latency_ms": self.latency.as_millis() as u64,
            "tries": self.tries,
        })
    }
}

/// Asks `provider` for one completion of `body` before `deadline`, each
/// request let through by `gate`. The call is a `chat MODEL` span (under
/// the step's) with OpenTelemetry's GenAI attributes.
pub(crate) async fn complete(
    provider: &Provider,
    mut body: Value,
    deadline: Instant,
    gate: &CallGate,
) -> Result<Completion, Failure> {
    use tracing::Instrument;
    let model = body["model"].as_str().unwrap_or_default();
    let span = tracing::info_span!(
        "chat",
        otel.name = format!("chat {model}").as_str(),
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider.name.as_str(),
        gen_ai.request.model = model,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Value::Object(fields) = &mut body {
        fields.insert("stream".into(), Value::Bool(true));
        fields.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let call = async {
        let _permit = provider.permits.acquire().await;
        let started = Instant::now();
        let read = |response| read_body(provider, gate, response);
        let (reply, tries, ticket) = post_reading(
            provider,
            "chat/completions",
            &body,
            deadline,
            started,
            gate,
            read,
        )
        .await?;
        let completion = match reply {
            Body::Whole(text) => read_reply(provider, &text, started, tries),
            Body::Streamed(message, model, usage) => Ok(Completion {
                message,
                provider: provider.name.clone(),
                model,
                usage,
                latency: started.elapsed(),
                tries,
            }),
        };
        if gate.paced() {
            let usage = completion.as_ref().ok().map(|c| c.usage.clone());
            gate.report(ticket, spent(provider, &body, usage, None))
                .await;
        }
        completion
    };
    let completion = call.instrument(span.clone()).await;
    match &completion {
        Ok(done) => {
            span.record("gen_ai.response.model", done.model.as_str());
            for (field, key) in [
                ("gen_ai.usage.input_tokens", "prompt_tokens"),
                ("gen_ai.usage.output_tokens", "completion_tokens"),
            ] {
                if let Some(tokens) = done.usage.get(key).and_then(Value::as_u64) {
                    span.record(field, tokens);
                }
            }
        }
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
    completion
}

/// What a request to `provider` of `body` spent, for the gate's report.
fn spent(
    provider: &Provider,
    body: &Value,
    usage: Option<Value>,
    rate_limited: Option<Option<Duration>>,
) -> Spent {
    Spent {
        provider: provider.name.clone(),
        model: body["model"].as_str().unwrap_or_default().to_owned(),
        usage,
        rate_limited,
    }
}

/// A successful chat reply's body.
enum Body {
    /// Not a stream: the whole reply's text.
    Whole(String),
    /// A stream, put back together: the message, the model, the usage.
    Streamed(Value, String, Value),
}

/// Reads a successful reply: a stream of events as they come, or a whole
/// body.
async fn read_body(
    provider: &Provider,
    gate: &CallGate,
    mut response: reqwest::Response,
) -> Result<Body, Failure> {
    let streamed = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|kind| kind.starts_with("text/event-stream"));
    let read_error = |error: reqwest::Error| {
        if error.is_timeout() {
            Failure::new(
                FailureKind::Timeout,
                format!(
                    "provider '{}' did not finish its reply within the step's time",
                    provider.name
                ),
            )
        } else {
            model_error(provider, &error)
        }
    };
    if !streamed {
        return response.text().await.map(Body::Whole).map_err(read_error);
    }
    let broken = |error: super::stream::StreamError| {
        Failure::new(
            FailureKind::ModelError,
            provider.redactor.redact(&format!(
                "provider '{}' sent a stream that is not a chat completion: {error}",
                provider.name
            )),
        )
    };
    let mut assembler = super::stream::Assembler::default();
    while let Some(bytes) = response.chunk().await.map_err(read_error)? {
        // What one read completes goes as one piece of text (and one per
        // tool call begun), in order.
        let mut text = String::new();
        let mut deltas = Vec::new();
        let pushed = assembler.push(&bytes, &mut deltas);
        for delta in deltas {
            match delta {
                super::stream::Delta::Text(more) => text.push_str(&more),
                super::stream::Delta::ToolCall(name) => {
                    if !text.is_empty() {
                        gate.stream(StreamKind::Text, std::mem::take(&mut text))
                            .await;
                    }
                    gate.stream(StreamKind::ToolCall, name).await;
                }
            }
        }
        if !text.is_empty() {
            gate.stream(StreamKind::Text, text).await;
        }
        // What came before an error went out first.
        pushed.map_err(broken)?;
    }
    let (message, model, usage) = assembler.finish().map_err(broken)?;
    Ok(Body::Streamed(message, model, usage))
}

/// POSTs `body` to `provider`'s `path` (under its base URL) before
/// `deadline`, tried again on a 429, a 5xx or a failed connection as the
/// module says; the successful reply's body, how many requests it took,
/// and the grant of the request that succeeded (whose usage the caller
/// reports). The caller holds one of the provider's permits.
pub(super) async fn post(
    provider: &Provider,
    path: &str,
    body: &Value,
    deadline: Instant,
    started: Instant,
    gate: &CallGate,
) -> Result<(String, u32, Ticket), Failure> {
    let read = |response: reqwest::Response| async move {
        response
            .text()
            .await
            .map_err(|error| model_error(provider, &error))
    };
    post_reading(provider, path, body, deadline, started, gate, read).await
}

/// [`post`], the successful reply read by `read`.
async fn post_reading<T, Read>(
    provider: &Provider,
    path: &str,
    body: &Value,
    deadline: Instant,
    started: Instant,
    gate: &CallGate,
    read: impl Fn(reqwest::Response) -> Read,
) -> Result<(T, u32, Ticket), Failure>
where
    Read: std::future::Future<Output = Result<T, Failure>>,
{
    let url = format!("{}/{path}", provider.base_url);
    let mut backoff = FIRST_BACKOFF;
    let mut tries = 0;
    loop {
        tries += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(provider, started));
        }
        let ticket = gate.acquire(&provider.name, body, deadline).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(provider, started));
        }
        // A request that fails is reported with nothing used; one that
        // succeeds is reported by the caller, with the reply's usage.
        let failed = |rate_limited| async move {
            if gate.paced() {
                gate.report(ticket, spent(provider, body, None, rate_limited))
                    .await;
            }
        };
        let last = tries >= TRIES;
        let mut request = provider
            .http
            .post(&url)
            .timeout(left.min(provider.timeout))
            .json(body);
        if let Some(key) = &provider.api_key {
            request = request.bearer_auth(key);
        }
        let retry_after = match request.send().await {
            Ok(response) if response.status().is_success() => {
                return match read(response).await {
                    Ok(body) => Ok((body, tries, ticket)),
                    Err(failure) => {
                        failed(None).await;
                        Err(failure)
                    }
                };
            }
            Ok(response) if retryable(response.status()) => {
                let named = retry_after(&response);
                let wait = named.unwrap_or(backoff);
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                let throttled = status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                failed(throttled.then_some(named)).await;
                // A paced step's 429 is tried again for as long as the
                // deadline allows: the coordinator holds it back.
                let last = last && !(throttled && gate.paced());
                if last || Instant::now() + wait >= deadline {
                    return Err(http_error(provider, status, &text, tries));
                }
                wait
            }
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                failed(None).await;
                return Err(http_error(provider, status, &text, tries));
            }
            Err(error) if error.is_timeout() => {
                failed(None).await;
                return Err(timed_out(provider, started));
            }
            Err(error) if last => {
                failed(None).await;
                return Err(model_error(provider, &error));
            }
            Err(_) => {
                failed(None).await;
                backoff
            }
        };
        tokio::time::sleep(retry_after).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

fn retryable(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// `Retry-After` in seconds (a date is read as no delay given).
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    let seconds: f64 = value.to_str().ok()?.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(600.0)))
}

fn read_reply(
    provider: &Provider,
    text: &str,
    started: Instant,
    tries: u32,
) -> Result<Completion, Failure> {
    let malformed = |why: &str| {
        Failure::new(
            FailureKind::ModelError,
            provider.redactor.redact(&format!(
                "provider '{}' sent a reply that is not a chat completion ({why}): {}",
                provider.name,
                quote(text)
            )),
        )
    };
    let reply: Value = serde_json::from_str(text).map_err(|_| malformed("not JSON"))?;
    let message = reply
        .pointer("/choices/0/message")
        .filter(|m| m.is_object())
        .cloned()
        .ok_or_else(|| malformed("no choices[0].message"))?;
    Ok(Completion {
        message,
        provider: provider.name.clone(),
        model: reply["model"].as_str().unwrap_or_default().to_owned(),
        usage: reply.get("usage").cloned().unwrap_or(Value::Null),
        latency: started.elapsed(),
        tries,
    })
}

fn http_error(provider: &Provider, status: reqwest::StatusCode, body: &str, tries: u32) -> Failure {
    let after = if tries > 1 {
        format!(" (after {tries} tries)")
    } else {
        String::new()
    };
    Failure::new(
        FailureKind::ModelError,
        provider.redactor.redact(&format!(
            "provider '{}' answered HTTP {status}{after}: {}",
            provider.name,
            quote(body)
        )),
    )
}

fn model_error(provider: &Provider, error: &reqwest::Error) -> Failure {
    Failure::new(
        FailureKind::ModelError,
        provider.redactor.redact(&format!(
            "provider '{}' could not be reached: {error}",
            provider.name
        )),
    )
}

fn timed_out(provider: &Provider, started: Instant) -> Failure {
    Failure::new(
        FailureKind::Timeout,
        format!(
            "provider '{}' did not answer within the step's time ({:.1} s)",
            provider.name,
            started.elapsed().as_secs_f64()
        ),
    )
}

/// The start of `text`, cut on a character boundary.
pub(super) fn quote(text: &str) -> String {
    let text = text.trim();
    if text.len() <= QUOTED {
        return text.to_owned();
    }
    let mut end = QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
