//! What a graph declares besides its nodes: run settings, state fields with
//! their types and reducers, and task retry policies.

use std::time::Duration;

use serde_json::Value;

/// Run settings (`settings:`), with the SPEC defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Waves a run may start; exceeding raises `StepLimitExceeded`.
    pub max_steps: u32,
    /// Default cap on a map node's items in flight.
    pub max_concurrency: u32,
    /// Cap on one run's tasks in flight; 0 = no cap.
    pub max_node_concurrency: u32,
    /// Per-item visit bound for a node inside a map chain.
    pub max_loop_iterations: u32,
    /// Whole-run deadline.
    pub timeout: Option<Duration>,
    /// Default per-attempt task timeout.
    pub node_timeout: Duration,
    /// Reject writes to undeclared fields.
    pub strict_state: bool,
    /// When checkpoints are written.
    pub durability: Durability,
    /// Where its steps go in its namespace's queue.
    pub priority: Priority,
    /// What its model calls may spend, its children and items included.
    pub budget: Option<RunBudget>,
    /// Whether its nodes' `cache:` is used (`settings.cache: false` turns
    /// every node's cache off: nothing is looked up or stored).
    pub cache: bool,
}

/// `settings.budget` (SPEC 18): what a run's model calls may spend, its
/// map items and subgraph children included. At least one is set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunBudget {
    /// Prompt and completion tokens.
    pub tokens: Option<u64>,
    /// Cost, by the coordinator's `[prices]`.
    pub cost: Option<f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_steps: 50,
            max_concurrency: 8,
            max_node_concurrency: 0,
            max_loop_iterations: 10,
            timeout: None,
            node_timeout: Duration::from_secs(60),
            strict_state: false,
            durability: Durability::Sync,
            priority: Priority::Normal,
            budget: None,
            cache: true,
        }
    }
}

/// A run's priority within its namespace (SPEC 18): its steps are
/// dispatched before those of lower priority runs of the namespace.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Goes first.
    High,
    /// The default.
    #[default]
    Normal,
    /// Goes when nothing else of the namespace waits.
    Low,
}

impl Priority {
    /// Every priority, first served first.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// Parses `high`, `normal` or `low`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "high" => Self::High,
            "normal" => Self::Normal,
            "low" => Self::Low,
            _ => return None,
        })
    }

    /// Its name in the graph format.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::High => "high",
            Self::Normal => "normal",
            Self::Low => "low",
        }
    }

    /// Its place in [`Priority::ALL`].
    pub fn rank(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When checkpoints are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Before the next wave starts.
    Sync,
    /// While the next wave runs.
    Async,
    /// Only at the end or on a pause.
    Exit,
}

/// A declared state field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDecl {
    /// Field name.
    pub name: String,
    /// Declared JSON type.
    pub ty: FieldType,
    /// Initial value.
    pub default: Value,
    /// How concurrent writes combine.
    pub reducer: Option<Reducer>,
}

/// The JSON type of a declared field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Any JSON value.
    Any,
    /// A string.
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON array.
    Array,
    /// A JSON object.
    Object,
}

impl FieldType {
    /// Parses a `type:` value.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "any" => Self::Any,
            "string" => Self::String,
            "number" => Self::Number,
            "integer" => Self::Integer,
            "boolean" | "bool" => Self::Boolean,
            "array" | "list" => Self::Array,
            "object" | "map" => Self::Object,
            _ => return None,
        })
    }

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::String => "string",
            Self::Number => "number",
            Self::Integer => "integer",
            Self::Boolean => "boolean",
            Self::Array => "array",
            Self::Object => "object",
        }
    }

    /// Reports whether `value` fits this type. `null` fits every type, so a
    /// field can be cleared.
    pub fn admits(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) | (Self::Any, _) => true,
            (Self::String, Value::String(_)) => true,
            (Self::Number, Value::Number(_)) => true,
            (Self::Integer, Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            (Self::Boolean, Value::Bool(_)) => true,
            (Self::Array, Value::Array(_)) => true,
            (Self::Object, Value::Object(_)) => true,
            _ => false,
        }
    }
}

/// Names the JSON type of a value, for messages.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// How two or more concurrent writes to one field combine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reducer {
    /// Arrays: S0 followed by each branch's additions.
    Concat,
    /// Objects: shallow merge of each branch's changed keys.
    Merge,
    /// Numbers: S0 plus each branch's delta.
    Add,
    /// Arrays as sets, first-seen order.
    Union,
    /// The smallest number.
    Min,
    /// The largest number.
    Max,
    /// A reducer run by a worker: a Rust worker's `fn:NAME`, or Python.
    Hosted(crate::Code),
}

impl Reducer {
    /// Parses a built-in `reducer:` name.
    pub fn builtin(text: &str) -> Option<Self> {
        Some(match text {
            "concat" => Self::Concat,
            "merge" => Self::Merge,
            "add" => Self::Add,
            "union" => Self::Union,
            "min" => Self::Min,
            "max" => Self::Max,
            _ => return None,
        })
    }

    /// The field types this reducer can combine.
    pub fn fits(&self, ty: FieldType) -> bool {
        match self {
            Self::Concat | Self::Union => matches!(ty, FieldType::Array | FieldType::Any),
            Self::Merge => matches!(ty, FieldType::Object | FieldType::Any),
            Self::Add | Self::Min | Self::Max => {
                matches!(ty, FieldType::Number | FieldType::Integer | FieldType::Any)
            }
            Self::Hosted(_) => true,
        }
    }

    /// The name as written in a graph file.
    pub fn name(&self) -> String {
        match self {
            Self::Concat => "concat".into(),
            Self::Merge => "merge".into(),
            Self::Add => "add".into(),
            Self::Union => "union".into(),
            Self::Min => "min".into(),
            Self::Max => "max".into(),
            Self::Hosted(code) => code.label(),
        }
    }
}

/// Task retry policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub initial_interval: Duration,
    /// Factor applied to the delay after each attempt.
    pub backoff: f64,
    /// Upper bound on the delay.
    pub max_interval: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            initial_interval: Duration::from_millis(500),
            backoff: 2.0,
            max_interval: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Delay before attempt `next_attempt` (2 for the first retry).
    pub fn delay_before(&self, next_attempt: u32) -> Duration {
        let exponent = next_attempt.saturating_sub(2).min(64) as i32;
        let seconds = self.initial_interval.as_secs_f64() * self.backoff.powi(exponent);
        let capped = seconds.min(self.max_interval.as_secs_f64()).max(0.0);
        Duration::from_secs_f64(capped)
    }
}
