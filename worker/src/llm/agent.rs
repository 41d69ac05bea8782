//! The `agent` kind (SPEC 4): a tool-calling loop in the OpenAI tool-call
//! format. The instructions are the system message and the prompt the
//! first user message; each turn the model either calls tools — they run
//! at once, and their results go back to it as `tool` messages in the
//! order of the calls — or answers, and the answer is the step's `output`.
//! Up to `max_turns` turns (default 10).
//!
//! Tools are the graph's declared ones (a bundled script: the arguments as
//! JSON on stdin, stdout the result) or registered ones: this worker's, or
//! another worker's, called through the coordinator; with `teammates: true`
//! in a map, also `send_message` and `read_messages`.
//! Arguments are checked against the tool's schema before it runs, and a
//! tool's error goes back to the model as its result, never failing the
//! step. Every call is a `tool_called` note.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::{Value, json};

use super::chat;
use super::{Prompts, Providers, invalid, model_for, structured};
use crate::handler::{HandlerError, RegisteredTool, Registry, TaskContext};
use crate::remote_tools::RemoteTools;
use crate::script::ScriptRunner;
use crate::task::{Completed, Failure, FailureKind, Task, ToolInfo};
use crate::team::{Team, TeamError};

/// Why a tool call has no result; the model reads it as the call's result.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    /// The model named a tool the step does not have.
    #[error("there is no tool '{0}'")]
    Unknown(String),
    /// The arguments are not JSON.
    #[error("the arguments are not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// The arguments break the tool's schema.
    #[error("invalid arguments at '{path}': {message}")]
    Invalid {
        /// Where, as a JSON pointer.
        path: String,
        /// What the schema says.
        message: String,
    },
    /// A script tool failed (its secrets masked).
    #[error("{0}")]
    Script(String),
    /// A registered tool returned an error.
    #[error(transparent)]
    Failed(#[from] HandlerError),
    /// A tool on another worker failed, or could not be reached.
    #[error("{0}")]
    Elsewhere(String),
    /// The tool outlived the step.
    #[error("the tool did not finish within the step's time")]
    TimedOut,
    /// A teammate tool, in a step without a team.
    #[error("no team")]
    NoTeam,
    /// A teammate message was not sent.
    #[error(transparent)]
    Team(#[from] TeamError),
}

/// Turns when the node says none.
const DEFAULT_TURNS: u32 = 10;
/// Longest tool result (or message) shown to a step's watchers.
const STREAMED_RESULT: usize = 1024;

/// `text` cut to at most `max` bytes, on a character boundary, marked.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Longest tool result given back to the model.
const MAX_RESULT: usize = 32 * 1024;

#[derive(Debug, Deserialize)]
struct AgentTask {
    #[serde(default)]
    tools: Vec<ToolSpec>,
    model: Option<String>,
    provider: Option<String>,
    max_turns: Option<u32>,
    output_schema: Option<Value>,
}

/// A tool as the coordinator describes it (`binding.rs`).
#[derive(Debug, Deserialize)]
struct ToolSpec {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
    run: Option<Vec<String>>,
    handler: Option<String>,
}

/// How a tool runs.
enum Runner {
    Script(Vec<String>),
    Registered(RegisteredTool),
    /// A tool another worker registered, by its name there.
    Remote(String),
    SendMessage,
    ReadMessages,
}

struct Tool {
    name: String,
    description: String,
    parameters: Value,
    validator: jsonschema::Validator,
    runner: Runner,
}

impl Tool {
    fn new(
        name: &str,
        description: String,
        parameters: Value,
        runner: Runner,
    ) -> Result<Self, Failure> {
        let validator = jsonschema::validator_for(&parameters)
            .map_err(|e| invalid(&format!("tool '{name}': parameters"), e))?;
        Ok(Self {
            name: name.to_owned(),
            description,
            parameters,
            validator,
            runner,
        })
    }

    /// The tool as the model is told of it.
    fn offered(&self) -> Value {
        json!({"type": "function", "function": {
            "name": self.name, "description": self.description, "parameters": self.parameters,
        }})
    }
}

/// The agent's tools: the node's, then the teammate tools. A registered
/// tool this worker lacks is one another worker hosts (`remote`).
fn tools(
    registry: &Registry,
    remote: &[ToolInfo],
    specs: Vec<ToolSpec>,
    team: Option<&Team>,
) -> Result<Vec<Tool>, Failure> {
    let mut tools = Vec::new();
    for spec in specs {
        let tool = match (spec.run, spec.handler) {
            (Some(argv), _) => Tool::new(
                &spec.name,
                spec.description.unwrap_or_default(),
                spec.parameters.unwrap_or_else(|| json!({"type": "object"})),
                Runner::Script(argv),
            )?,
            (None, Some(handler)) => {
                let (description, parameters, runner) = match registry.tools.get(&handler) {
                    Some(registered) => (
                        registered.description.clone(),
                        registered.parameters.clone(),
                        Runner::Registered(registered.clone()),
                    ),
                    None => {
                        let elsewhere =
                            remote.iter().find(|t| t.name == handler).ok_or_else(|| {
                                Failure::new(
                                    FailureKind::UnsupportedKind,
                                    format!("no connected worker hosts the tool '{handler}'"),
                                )
                            })?;
                        (
                            elsewhere.description.clone(),
                            elsewhere.parameters.clone(),
                            Runner::Remote(handler),
                        )
                    }
                };
                Tool::new(
                    &spec.name,
                    spec.description.unwrap_or(description),
                    spec.parameters.unwrap_or(parameters),
                    runner,
                )?
            }
            (None, None) => {
                return Err(invalid(
                    "agent configuration",
                    format!("tool '{}' has nothing to run", spec.name),
                ));
            }
        };
        tools.push(tool);
    }
    if let Some(team) = team {
        tools.push(Tool::new(
            "send_message",
            "Send a message to a teammate. `to` is one of your teammates' identities.".into(),
            json!({"type": "object", "properties": {
                "to": {"type": "string", "enum": team.members()},
                "content": {"description": "the message: text or any JSON"},
            }, "required": ["to", "content"]}),
            Runner::SendMessage,
        )?);
        tools.push(Tool::new(
            "read_messages",
            "Read the messages your teammates sent you since you last read (may be none).".into(),
            json!({"type": "object", "properties": {}}),
            Runner::ReadMessages,
        )?);
    }
    Ok(tools)
}

/// What an agent step runs with: the models it may ask, the tools it may
/// call, its task and its team.
pub(crate) struct Agent<'a> {
    pub providers: &'a Providers,
    /// Registered tools.
    pub registry: &'a Registry,
    /// Script tools.
    pub scripts: &'a ScriptRunner,
    /// Registered tools other workers host.
    pub remote: &'a RemoteTools,
    /// Paces its model calls (SPEC 18).
    pub gate: &'a super::CallGate,
    pub task: &'a Task,
    pub team: Option<Team>,
}

impl Agent<'_> {
    /// Runs the loop; the final answer is the step's output.
    pub(crate) async fn run(self) -> Result<Completed, Failure> {
        let task = self.task;
        let config =
            AgentTask::deserialize(&*task.config).map_err(|e| invalid("agent configuration", e))?;
        let prompts = Prompts::of(task)?;
        let provider = self
            .providers
            .get(config.provider.as_deref())
            .map_err(|error| Failure::new(FailureKind::UnsupportedKind, error.to_string()))?;
        let model = model_for(config.model, provider)?;
        let tools = tools(
            self.registry,
            &task.remote_tools,
            config.tools,
            self.team.as_ref(),
        )?;
        let mut messages = vec![json!({"role": "system", "content": self.system(&prompts)})];
        messages.push(json!({"role": "user", "content": prompts.prompt}));
        let deadline = Instant::now() + task.timeout;
        let turns = config.max_turns.unwrap_or(DEFAULT_TURNS).max(1);
        let mut notes = Vec::new();
        for _ in 0..turns {
            let mut body = json!({"model": model, "messages": messages});
            if !tools.is_empty() {
                body["tools"] = tools.iter().map(Tool::offered).collect();
            }
            let completion = match chat::complete(provider, body, deadline, self.gate).await {
                Ok(completion) => completion,
                Err(failure) => return Err(failure.with_notes(notes)),
            };
            notes.push(completion.note());
            let message = completion.message;
            let calls = message["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if calls.is_empty() {
                let answer = message["content"].as_str().unwrap_or_default().to_owned();
                return answered(answer, config.output_schema.is_some(), notes);
            }
            messages.push(message);
            // The calls of one turn were made together, so none waits for
            // another: they run at once, their results go back in order.
            let outcomes =
                join_all(calls.iter().map(|call| self.call(&tools, call, deadline))).await;
            for (call, (result, note)) in calls.iter().zip(outcomes) {
                notes.push(note);
                self.stream_result(call, &provider.redactor.redact(&result))
                    .await;
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": provider.redactor.redact(&result),
                }));
            }
        }
        Err(Failure::new(
            FailureKind::ModelError,
            format!(
                "the agent used its {turns} turns without a final answer (raise `max_turns`, or \
                 ask for an answer sooner)"
            ),
        )
        .with_notes(notes))
    }

    /// Tells the step's watchers what a tool call gave (SPEC 19): its
    /// result, cut to [`STREAMED_RESULT`] bytes, and for `send_message`
    /// the message sent.
    async fn stream_result(&self, call: &Value, result: &str) {
        use weft_proto::worker_protocol::StreamKind;
        let name = call["function"]["name"].as_str().unwrap_or_default();
        if name == "send_message" {
            let arguments: Value = call["function"]["arguments"]
                .as_str()
                .and_then(|text| serde_json::from_str(text).ok())
                .unwrap_or(Value::Null);
            let to = arguments["to"].as_str().unwrap_or("?");
            let content = match &arguments["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let message = format!("to {to}: {}", cut(&content, STREAMED_RESULT));
            self.gate.stream(StreamKind::Message, message).await;
        }
        let shown = format!("{name}: {}", cut(result, STREAMED_RESULT));
        self.gate.stream(StreamKind::ToolResult, shown).await;
    }

    /// The system message: the instructions, and who the team is.
    fn system(&self, prompts: &Prompts) -> String {
        let mut system = prompts.system.clone().unwrap_or_default();
        if let Some(team) = &self.team {
            let others: Vec<&str> = team
                .members()
                .iter()
                .map(String::as_str)
                .filter(|m| *m != team.me())
                .collect();
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(&format!(
                "You are {}, one of a team. Your teammates are: {}. Talk to them with \
                 send_message and read what they sent with read_messages.",
                team.me(),
                others.join(", ")
            ));
        }
        system
    }

    /// Runs one tool call: its result for the model, and its note.
    async fn call(&self, tools: &[Tool], call: &Value, deadline: Instant) -> (String, Value) {
        let name = call["function"]["name"].as_str().unwrap_or_default();
        let started = Instant::now();
        let outcome = match tools.iter().find(|tool| tool.name == name) {
            None => Err(ToolError::Unknown(name.to_owned())),
            Some(tool) => self.run_tool(tool, call, deadline).await,
        };
        let note = json!({
            "type": "tool_called",
            "tool": name,
            "error": outcome.as_ref().err().map(ToString::to_string),
            "latency_ms": started.elapsed().as_millis() as u64,
        });
        let result = match outcome {
            Ok(result) => clip(result),
            Err(error) => format!("error: {error}"),
        };
        (result, note)
    }

    async fn run_tool(
        &self,
        tool: &Tool,
        call: &Value,
        deadline: Instant,
    ) -> Result<String, ToolError> {
        let text = call["function"]["arguments"].as_str().unwrap_or("{}");
        let arguments: Value = if text.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(text).map_err(ToolError::NotJson)?
        };
        if let Some(error) = tool.validator.iter_errors(&arguments).next() {
            return Err(ToolError::Invalid {
                path: error.instance_path().to_string(),
                message: error.to_string(),
            });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match &tool.runner {
            Runner::Script(argv) => self
                .scripts
                .run_tool(
                    self.task,
                    argv,
                    &arguments,
                    left.max(Duration::from_millis(1)),
                )
                .await
                .map_err(|failure| ToolError::Script(failure.message)),
            Runner::Registered(registered) => {
                let run = (registered.call)(arguments, self.context());
                match tokio::time::timeout(left, run).await {
                    Ok(result) => Ok(match result? {
                        Value::String(text) => text,
                        other => other.to_string(),
                    }),
                    Err(_) => Err(ToolError::TimedOut),
                }
            }
            Runner::Remote(name) => {
                let answer = self
                    .remote
                    .call(&self.task.run_id, self.task.key, name, arguments, left)
                    .await
                    .map_err(ToolError::Elsewhere)?;
                Ok(match answer {
                    Value::String(text) => text,
                    other => other.to_string(),
                })
            }
            Runner::SendMessage => {
                let team = self.team.as_ref().ok_or(ToolError::NoTeam)?;
                let to = arguments["to"].as_str().unwrap_or_default();
                team.send(to, &arguments["content"]).await?;
                Ok(format!("Message delivered to teammate {to}"))
            }
            Runner::ReadMessages => {
                let team = self.team.as_ref().ok_or(ToolError::NoTeam)?;
                let messages: Vec<Value> = team
                    .inbox()
                    .into_iter()
                    .map(|m| json!({"from": m.from, "content": m.content}))
                    .collect();
                Ok(Value::Array(messages).to_string())
            }
        }
    }

    /// The context a registered tool is called with.
    fn context(&self) -> TaskContext {
        TaskContext::of(self.task, self.task.scope.clone(), self.team.clone())
    }
}

/// The step's result from the final answer.
fn answered(
    answer: String,
    structured_output: bool,
    notes: Vec<Value>,
) -> Result<Completed, Failure> {
    if !structured_output {
        return Ok(Completed {
            writes: json!({}),
            output: Some(Value::String(answer)),
            notes,
        });
    }
    let value = match structured(&answer) {
        Ok(value) => value,
        Err(why) => {
            let failure = Failure::new(
                FailureKind::InvalidOutput,
                format!(
                    "the agent's final answer is {why}: {}",
                    answer.chars().take(300).collect::<String>()
                ),
            );
            return Err(failure.with_notes(notes));
        }
    };
    Ok(Completed {
        writes: value.clone(),
        output: Some(value),
        notes,
    })
}

/// A tool result cut to what the model is given.
fn clip(mut text: String) -> String {
    if text.len() > MAX_RESULT {
        let mut end = MAX_RESULT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" … [cut]");
    }
    text
}
