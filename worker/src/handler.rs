//! Rust handlers and functions, registered by name.
//!
//! A handler is an async function over a serde-typed state: it receives the
//! state the task sees (deserialized into the handler's own type, so fields
//! it does not name are skipped) and a [`TaskContext`], and returns anything
//! that serializes to a JSON object — a whole state or a partial update.
//! Wrap it in [`Output`] to route with `_next`.
//!
//! A function backs a `fn:NAME` reducer, predicate or router: it takes the
//! JSON arguments and returns a JSON value.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use weft_proto::worker_protocol::ItemRef;
use weft_proto::{NodeId, RunId, TaskKey};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::Scope;
use crate::field::{FieldDeserializer, FieldValue};
use crate::team::{Team, TeamError, TeamMessage};

/// What a handler knows about the task it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContext {
    /// The run.
    pub run_id: RunId,
    /// The node.
    pub node: NodeId,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The attempt's key within the run, as the coordinator numbers it:
    /// the same for a delivery of the same attempt again.
    pub key: TaskKey,
    /// The map item's index, for a step of a map item's chain.
    pub item: Option<u64>,
    /// For a step of a map item's chain: the map, the item and the
    /// step's place in the chain (`None` for a tool's call).
    pub place: Option<ItemRef>,
    /// The node's kind fields as the graph gives them (`handler`, and
    /// whatever else the node sets); empty for a tool's call.
    pub config: Arc<Value>,
    /// The step's scope: a map item's `as` binding, by name (read it as
    /// a map, or one value with [`TaskContext::scope`], which does not
    /// make the map).
    pub scope: Scope,
    /// For a `teammates: true` step of a map item with a team: the team,
    /// through which the handler sends and reads messages.
    pub team: Option<Team>,
}

/// The idempotency key of an attempt (see [`TaskContext::task_key`]).
pub(crate) fn task_key(run_id: &str, node: &str, item: Option<u64>, attempt: u32) -> String {
    let item = item.map_or_else(|| "-".to_owned(), |i| i.to_string());
    format!("{run_id}/{node}/{item}/{attempt}")
}

/// Why a handler, tool or function failed: what its author said
/// (`"…".into()`, or `?` on a `Result<_, String>`), or why the SDK could
/// not read its input or build its output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// The code's own error.
    #[error("{0}")]
    Failed(String),
    /// The task's state does not fit the handler's type.
    #[error("handler '{handler}' cannot read the state: {detail}")]
    State {
        /// The handler.
        handler: String,
        /// What serde said.
        detail: String,
    },
    /// The scope has no value of that name.
    #[error("no '{0}' in the task's scope")]
    NoScopeValue(String),
    /// A scope value does not fit the type asked for.
    #[error("scope '{name}': {detail}")]
    ScopeType {
        /// The scope value.
        name: String,
        /// What serde said.
        detail: String,
    },
    /// The output does not serialize.
    #[error("the handler's result does not serialize: {0}")]
    Unserializable(String),
    /// The output is not a JSON object.
    #[error("a handler must return an object, not {0}")]
    NotAnObject(Value),
}

/// Handlers whose errors are strings can use `?` on these.
impl From<HandlerError> for String {
    fn from(error: HandlerError) -> Self {
        error.to_string()
    }
}

impl From<String> for HandlerError {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

impl From<&str> for HandlerError {
    fn from(message: &str) -> Self {
        Self::Failed(message.to_owned())
    }
}

impl TaskContext {
    /// The context of `task`'s attempt, its scope `scope` (the task's,
    /// moved or copied by the caller), with its team when it has one.
    pub(crate) fn of(task: &crate::Task, scope: Scope, team: Option<Team>) -> Self {
        Self {
            run_id: task.run_id.clone(),
            node: task.node.clone(),
            attempt: task.attempt,
            key: task.key,
            item: task.item,
            place: task.place.clone(),
            config: task.config.clone(),
            scope,
            team,
        }
    }

    /// This attempt's idempotency key, `RUN/NODE/ITEM/ATTEMPT` (`-` for no
    /// item), the same as a script's `WEFT_TASK_KEY`. Delivery is at least
    /// once: after a lost worker the attempt runs again elsewhere while the
    /// first may still be running, with the same key, so a handler with
    /// side effects can use it to do them once.
    pub fn task_key(&self) -> String {
        task_key(&self.run_id, &self.node, self.item, self.attempt)
    }

    /// Sends `content` to the teammate `to` (an identity of
    /// [`Team::members`]); returns once the coordinator accepted it. Fails
    /// for a step without a team, a stranger, or a full inbox.
    pub async fn send(&self, to: &str, content: impl Serialize) -> Result<(), TeamError> {
        self.team
            .as_ref()
            .ok_or(TeamError::NoTeam)?
            .send(to, content)
            .await
    }

    /// Takes the messages that have arrived, without waiting (none for a
    /// step without a team).
    pub fn inbox(&self) -> Vec<TeamMessage> {
        self.team.as_ref().map(Team::inbox).unwrap_or_default()
    }

    /// Waits up to `timeout` for the next message; `None` at once for a
    /// step without a team.
    pub async fn recv(&self, timeout: std::time::Duration) -> Option<TeamMessage> {
        self.team.as_ref()?.recv(timeout).await
    }

    /// A scope value by name, deserialized.
    pub fn scope<T: DeserializeOwned>(&self, name: &str) -> Result<T, HandlerError> {
        self.scope
            .value(name)
            .ok_or_else(|| HandlerError::NoScopeValue(name.to_owned()))?
            .map_err(|error| HandlerError::ScopeType {
                name: name.to_owned(),
                detail: error.to_string(),
            })
    }
}

/// A handler's result with a route: the fields to write and `_next`.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    writes: Value,
    next: Option<String>,
}

impl Output {
    /// Writes `value` (a struct or map that serializes to an object).
    pub fn update(value: impl Serialize) -> Result<Self, HandlerError> {
        let writes =
            serde_json::to_value(value).map_err(|e| HandlerError::Unserializable(e.to_string()))?;
        Ok(Self { writes, next: None })
    }

    /// Routes to `node` alone after this step.
    pub fn next(mut self, node: impl Into<String>) -> Self {
        self.next = Some(node.into());
        self
    }
}

/// Turns what a handler returns into the task's JSON output.
pub trait IntoOutput {
    /// The output object, with `_next` when routed.
    fn into_output(self) -> Result<Value, HandlerError>;
}

impl<T: Serialize + 'static> IntoOutput for T {
    fn into_output(self) -> Result<Value, HandlerError> {
        // A handler that returns a `Value` (`json!({…})`) has its output
        // already: it is taken as it is rather than serialized into a copy.
        let mut output = Some(self);
        let any: &mut dyn std::any::Any = &mut output;
        if let Some(value) = any.downcast_mut::<Option<Value>>() {
            return Ok(value.take().expect("the output is set above"));
        }
        let output = output.expect("the output is set above");
        serde_json::to_value(output).map_err(|e| HandlerError::Unserializable(e.to_string()))
    }
}

impl IntoOutput for Output {
    fn into_output(self) -> Result<Value, HandlerError> {
        let mut object = match self.writes {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => return Err(HandlerError::NotAnObject(other)),
        };
        if let Some(next) = self.next {
            object.insert("_next".into(), Value::String(next));
        }
        Ok(Value::Object(object))
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Value, HandlerError>> + Send>>;

/// A task's state, field by field, shared with the worker's cache.
pub(crate) type Fields = [(Arc<str>, Arc<FieldValue>)];

/// A registered handler, type-erased. It reads its typed state straight
/// from the shared fields (fields the type does not name are skipped, never
/// copied), then returns the future that runs it.
pub(crate) type ErasedHandler =
    Arc<dyn Fn(&Fields, TaskContext) -> Result<BoxFuture, HandlerError> + Send + Sync>;

/// Deserializes a handler's state type from the task's fields: the fields
/// it names are parsed (once: the cache keeps them parsed), the others not.
fn read_state<S: DeserializeOwned>(name: &str, fields: &Fields) -> Result<S, HandlerError> {
    let pairs = fields.iter().map(|(name, value)| {
        let name = &**name;
        (name, FieldDeserializer { name, value })
    });
    let map = serde::de::value::MapDeserializer::<_, serde_json::Error>::new(pairs);
    S::deserialize(map).map_err(|e| HandlerError::State {
        handler: name.to_owned(),
        detail: e.to_string(),
    })
}

/// A registered function, type-erased.
pub(crate) type ErasedFunction =
    Arc<dyn Fn(Vec<Value>) -> Result<Value, HandlerError> + Send + Sync>;

/// A tool agents may call: what the model reads about it, and the call.
#[derive(Clone)]
pub(crate) struct RegisteredTool {
    pub description: String,
    pub parameters: Value,
    pub call: Arc<dyn Fn(Value, TaskContext) -> BoxFuture + Send + Sync>,
}

/// Handlers and functions by name.
#[derive(Clone, Default)]
pub struct Registry {
    pub(crate) handlers: BTreeMap<String, ErasedHandler>,
    /// The state fields each handler reads, for those whose state type
    /// names them ([`crate::handler_reads`]).
    pub(crate) reads: BTreeMap<String, Vec<String>>,
    pub(crate) functions: BTreeMap<String, ErasedFunction>,
    pub(crate) tools: BTreeMap<String, RegisteredTool>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .field("functions", &self.functions.keys().collect::<Vec<_>>())
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Registry {
    /// Registers a handler returning a state or an update.
    pub fn handler<S, O, E, F, Fut>(&mut self, name: &str, handler: F) -> &mut Self
    where
        S: DeserializeOwned + Send + 'static,
        O: IntoOutput + Send + 'static,
        E: Display + Send + 'static,
        F: Fn(S, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let name_owned = name.to_owned();
        let erased: ErasedHandler = Arc::new(move |fields: &Fields, ctx: TaskContext| {
            let typed: S = read_state(&name_owned, fields)?;
            let handler = handler.clone();
            let future: BoxFuture = Box::pin(async move {
                let output = handler(typed, ctx)
                    .await
                    .map_err(|e| HandlerError::Failed(e.to_string()))?;
                output.into_output()
            });
            Ok(future)
        });
        self.handlers.insert(name.to_owned(), erased);
        match crate::handler_reads::fields_read::<S>() {
            Some(fields) => self.reads.insert(name.to_owned(), fields),
            None => self.reads.remove(name),
        };
        self
    }

    /// Registers a handler over the task's fields as the worker holds
    /// them: each a shared [`FieldValue`], the same for every task of the
    /// run that sees its version, parsed when first read. For an SDK that
    /// keeps its own form of each version (the Python SDK's objects); a
    /// typed handler ([`Registry::handler`]) suits Rust code better. The
    /// coordinator sends it every field (it names none it reads); it
    /// returns the writes as JSON.
    pub fn field_handler<F, Fut>(&mut self, name: &str, handler: F) -> &mut Self
    where
        F: Fn(Vec<(Arc<str>, Arc<FieldValue>)>, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, HandlerError>> + Send + 'static,
    {
        let erased: ErasedHandler = Arc::new(move |fields: &Fields, ctx: TaskContext| {
            let future: BoxFuture = Box::pin(handler(fields.to_vec(), ctx));
            Ok(future)
        });
        self.handlers.insert(name.to_owned(), erased);
        self.reads.remove(name);
        self
    }

    /// Registers a handler that routes: it returns an [`Output`]. The same
    /// as [`Registry::handler`], named for what it does.
    pub fn routing_handler<S, E, F, Fut>(&mut self, name: &str, handler: F) -> &mut Self
    where
        S: DeserializeOwned + Send + 'static,
        E: Display + Send + 'static,
        F: Fn(S, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Output, E>> + Send + 'static,
    {
        self.handler(name, handler)
    }

    /// Registers a tool `agent` steps may call: `description` and
    /// `parameters` (a JSON Schema of its arguments, an object) are what the
    /// model reads, unless the graph's `tools:` declares the tool with its
    /// own. The arguments are checked against the schema before `call`
    /// runs; its error goes back to the model as the tool's result.
    pub fn tool<F, Fut>(
        &mut self,
        name: &str,
        description: &str,
        parameters: Value,
        call: F,
    ) -> &mut Self
    where
        F: Fn(Value, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, HandlerError>> + Send + 'static,
    {
        let call = Arc::new(call);
        let erased = move |arguments: Value, ctx: TaskContext| -> BoxFuture {
            Box::pin((*call)(arguments, ctx))
        };
        let tool = RegisteredTool {
            description: description.to_owned(),
            parameters,
            call: Arc::new(erased),
        };
        self.tools.insert(name.to_owned(), tool);
        self
    }

    /// Registers a function for `fn:NAME` reducers, predicates and routers.
    /// A reducer receives `[s0_value, [branch_values]]`; a predicate or
    /// router receives `[state]`. Its error (`"…".into()`) fails the
    /// call.
    pub fn function<F>(&mut self, name: &str, function: F) -> &mut Self
    where
        F: Fn(Vec<Value>) -> Result<Value, HandlerError> + Send + Sync + 'static,
    {
        self.functions.insert(name.to_owned(), Arc::new(function));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Counter {
        counter: i64,
    }

    #[derive(Serialize)]
    struct CounterUpdate {
        counter: i64,
    }

    fn field(value: Value) -> Arc<FieldValue> {
        Arc::new(FieldValue::from_value(value))
    }

    fn ctx() -> TaskContext {
        TaskContext {
            run_id: "r".into(),
            node: "n".into(),
            attempt: 1,
            key: TaskKey(1),
            item: None,
            place: None,
            config: Arc::default(),
            scope: Scope::default(),
            team: None,
        }
    }

    #[test]
    fn an_output_value_is_taken_as_it_is_and_a_type_is_serialized() {
        let value = json!({"b": 1, "a": [1, 2], "_next": "n"});
        assert_eq!(value.clone().into_output().unwrap(), value);
        assert_eq!(Value::Null.into_output().unwrap(), Value::Null);
        assert_eq!(
            CounterUpdate { counter: 3 }.into_output().unwrap(),
            json!({"counter": 3})
        );
        let routed = Output::update(CounterUpdate { counter: 4 })
            .unwrap()
            .next("m");
        assert_eq!(
            routed.into_output().unwrap(),
            json!({"counter": 4, "_next": "m"})
        );
    }

    #[tokio::test]
    async fn typed_handler_reads_only_its_fields() {
        let mut registry = Registry::default();
        registry.handler("inc", |s: Counter, _| async move {
            Ok::<_, String>(CounterUpdate {
                counter: s.counter + 1,
            })
        });
        let handler = registry.handlers["inc"].clone();
        let fields: Vec<(Arc<str>, _)> = vec![
            ("counter".into(), field(json!(41))),
            (
                "blob".into(),
                Arc::new(FieldValue::from_json(
                    format!("\"{}\"", "x".repeat(1000)).into(),
                )),
            ),
        ];
        let out = handler(&fields, ctx()).unwrap().await.unwrap();
        assert_eq!(out, json!({"counter": 42}));
        assert!(!fields[1].1.is_parsed(), "a field not named was parsed");
        let bad: Vec<(Arc<str>, _)> = vec![("counter".into(), field(json!("x")))];
        let error = handler(&bad, ctx()).err().expect("a type error");
        assert!(
            error
                .to_string()
                .starts_with("handler 'inc' cannot read the state"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn routing_handler_adds_next() {
        let mut registry = Registry::default();
        registry.routing_handler("gate", |_: serde::de::IgnoredAny, _| async move {
            Output::update(json!({"ok": true})).map(|o| o.next("publish"))
        });
        let fields: Vec<(Arc<str>, _)> = vec![("big".into(), field(json!("x".repeat(1000))))];
        let out = registry.handlers["gate"].clone()(&fields, ctx())
            .unwrap()
            .await
            .unwrap();
        assert_eq!(out, json!({"ok": true, "_next": "publish"}));
    }

    #[test]
    fn a_context_carries_the_attempts_key_place_and_node_fields() {
        let mut task = crate::Task::example(
            weft_proto::types::WorkerKind::Task,
            json!({"handler": "h", "tone": "dry"}),
        );
        task.key = TaskKey(42);
        task.place = Some(ItemRef {
            map: "fan".into(),
            index: 3,
            step: 2,
        });
        task.item = Some(3);
        let context = TaskContext::of(&task, Scope::default(), None);
        assert_eq!(context.key, TaskKey(42));
        assert_eq!(context.item, Some(3));
        let place = context.place.as_ref().expect("a chain step's place");
        assert_eq!((place.map.as_str(), place.index, place.step), ("fan", 3, 2));
        assert_eq!(*context.config, json!({"handler": "h", "tone": "dry"}));
        assert_eq!(context.task_key(), "r/n/3/1");
    }

    #[test]
    fn scope_values_deserialize() {
        let mut context = ctx();
        context.scope.insert("item".into(), json!(7));
        assert_eq!(context.scope::<i64>("item").unwrap(), 7);
        assert!(context.scope::<i64>("other").is_err());
    }
}
