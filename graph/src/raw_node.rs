//! A node as written in the file, before its references are resolved.
//!
//! Each kind takes a fixed set of fields; anything else is reported naming
//! the key and the node (with a "did you mean" when a known key is close), so
//! a misspelt key is never silently ignored. Values are then read into
//! [`RawNode`] with the path of any type error kept.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::document::did_you_mean;
use super::finding::Finding;

/// Every kind the parser accepts.
pub const KINDS: [&str; 13] = [
    "task", "script", "llm", "agent", "approval", "input", "map", "loop", "subgraph", "end",
    "function", "python", "rag",
];

/// Fields every kind takes.
pub(super) const COMMON_FIELDS: [&str; 9] = [
    "id",
    "kind",
    "description",
    "start",
    "end",
    "next",
    "depends_on",
    "routes",
    "fallback",
];

/// SPEC's common fields about running and writing, which only some kinds
/// can honour: each kind either executes one or refuses it here, naming why.
const RUN_FIELDS: [&str; 7] = [
    "retry",
    "max_attempts",
    "timeout",
    "state_updates",
    "output_schema",
    "concurrency",
    "cache",
];

/// Why `kind` does not take the run field `field`; `None` when it does.
fn refused_run_field(kind: &str, field: &str) -> Option<&'static str> {
    let retry = matches!(field, "retry" | "max_attempts");
    match kind {
        "task" | "script" | "llm" | "agent" | "rag" | "function" | "python" => None,
        "map" if field == "concurrency" => {
            Some("set it on the branch's nodes: each item's step counts one against the key")
        }
        "loop" | "subgraph" if field == "concurrency" => {
            Some("set it on its inner nodes: a key counts the steps that run on workers")
        }
        "approval" | "input" if field == "concurrency" => {
            Some("a person answers it; it takes no worker")
        }
        "map" if field == "cache" => {
            Some("set it on the branch's nodes: each item's step is cached on its own")
        }
        "loop" | "subgraph" if field == "cache" => {
            Some("set it on its inner nodes: the cache keeps what a step on a worker wrote")
        }
        "approval" | "input" if field == "cache" => {
            Some("a person answers it; there is no work to keep")
        }
        "map" if retry => Some("a map's items are retried by their branch nodes' own `retry`"),
        "map" if field == "timeout" => Some(
            "bound its items with their branch nodes' `timeout`, or the run with `settings.timeout`",
        ),
        "approval" | "input" if retry => Some("a person answers it; there is nothing to retry"),
        "approval" | "input" if field == "timeout" => Some(
            "it waits for a person for as long as the run lasts; bound the run with `settings.timeout`",
        ),
        "end" if field == "state_updates" => None,
        "end" => Some("it runs nothing and produces no output"),
        "loop" | "subgraph" if field == "state_updates" => None,
        // A failed child run is started again, as a task is retried.
        "subgraph" if retry => None,
        "loop" | "subgraph" => Some("its inner nodes take their own"),
        _ => None,
    }
}

/// Every field `kind` takes, in the order the format lists them: the
/// common ones, the run fields it honours, then its own. (The JSON Schema
/// in `docs/graph.schema.json` is tested against this.)
pub fn node_fields(kind: &str) -> Vec<&'static str> {
    COMMON_FIELDS
        .iter()
        .chain(
            RUN_FIELDS
                .iter()
                .filter(|f| refused_run_field(kind, f).is_none()),
        )
        .chain(kind_fields(kind))
        .copied()
        .collect()
}

/// Fields a kind takes beyond the common ones.
fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "task" => &["handler", "teammates"],
        "script" => &["run", "script", "args", "env", "teammates", "sandbox"],
        "llm" => &[
            "model",
            "system",
            "prompt",
            "temperature",
            "max_tokens",
            "provider",
        ],
        "agent" => &[
            "agent",
            "instructions",
            "prompt",
            "tools",
            "max_turns",
            "provider",
            "model",
            "teammates",
        ],
        "rag" => &[
            "knowledge",
            "query",
            "top_k",
            "mode",
            "graph",
            "rerank",
            "prompt",
            "system",
            "model",
            "provider",
            "temperature",
            "max_tokens",
        ],
        "approval" => &["prompt", "output_key", "approvers"],
        "input" => &["prompt", "output_key", "schema", "approvers"],
        "map" => &[
            "over",
            "as",
            "branch",
            "output_key",
            "collect_into",
            "max_concurrency",
        ],
        "loop" => &["body", "until", "max_iterations", "output_key"],
        "subgraph" => &["graph", "input_map", "output_map"],
        "end" => &["status", "message"],
        // Seed 002: `python` is the same thing as `function`.
        "function" | "python" => &["callable", "tool_args", "output_key", "sandbox"],
        _ => &[],
    }
}

/// `next:` takes one id or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// `next: X`
    One(String),
    /// `next: [X, Y]`
    Many(Vec<String>),
}

impl OneOrMany {
    /// The ids, in order.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(id) => vec![id],
            Self::Many(ids) => ids,
        }
    }
}

/// `retry:` takes a number of attempts or a full policy.
#[derive(Debug, Clone)]
pub enum RawRetry {
    /// `retry: 3`
    Attempts(u32),
    /// `retry: { max_attempts: 3, … }`
    Policy(RawRetryPolicy),
}

/// Read by hand rather than `untagged`, so a wrong value or key is named
/// (serde's untagged error says only that no variant matched).
impl<'de> Deserialize<'de> for RawRetry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        match &value {
            serde_json::Value::Number(n) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(RawRetry::Attempts)
                .ok_or_else(|| {
                    D::Error::custom(format!("attempts must be a whole number, got {n}"))
                }),
            serde_json::Value::Object(_) => serde_json::from_value(value)
                .map(RawRetry::Policy)
                .map_err(D::Error::custom),
            other => Err(D::Error::custom(format!(
                "expected a number of attempts (retry: 3) or a policy (retry: {{ max_attempts: 3, initial_interval: 0.5s }}), got {}",
                crate::json_type_name(other)
            ))),
        }
    }
}

/// A full retry policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetryPolicy {
    /// Attempts in all.
    pub max_attempts: Option<u32>,
    /// First delay.
    pub initial_interval: Option<RawDuration>,
    /// Growth factor.
    pub backoff: Option<f64>,
    /// Largest delay.
    pub max_interval: Option<RawDuration>,
}

/// A duration: `"500ms"`, `"0.5s"`, `"10m"`, `"1h"`, or a number of seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawDuration {
    /// Seconds.
    Seconds(f64),
    /// With a unit.
    Text(String),
}

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// Not a number with an optional unit.
    #[error("'{0}' is not a duration (write e.g. 500ms, 0.5s, 10m, 1h)")]
    Malformed(String),
    /// Negative, not finite, or longer than 10^9 seconds.
    #[error("duration {0}s is out of range")]
    OutOfRange(f64),
}

impl RawDuration {
    /// Parses into a duration, or says what is wrong.
    pub fn to_duration(&self) -> Result<std::time::Duration, DurationError> {
        let seconds = match self {
            Self::Seconds(s) => *s,
            Self::Text(text) => parse_duration_seconds(text)?,
        };
        if !seconds.is_finite() || !(0.0..=1e9).contains(&seconds) {
            return Err(DurationError::OutOfRange(seconds));
        }
        Ok(std::time::Duration::from_secs_f64(seconds))
    }
}

fn parse_duration_seconds(text: &str) -> Result<f64, DurationError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| DurationError::Malformed(text.to_owned()))?;
    let factor = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(DurationError::Malformed(text.to_owned())),
    };
    Ok(number * factor)
}

/// `routes:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoutes {
    /// CEL expression or `fn:NAME`.
    pub router: String,
    /// key → target id (or `END`); a key without a target is an error.
    pub map: Map<String, Value>,
}

/// Every field any kind takes; [`check_fields`] has already rejected the
/// ones this node's kind does not take.
#[derive(Debug, Clone, Default, Deserialize)]
#[allow(missing_docs)]
pub struct RawNode {
    pub kind: Option<String>,
    pub description: Option<String>,
    pub start: Option<bool>,
    pub end: Option<bool>,
    pub next: Option<OneOrMany>,
    pub depends_on: Option<OneOrMany>,
    pub routes: Option<RawRoutes>,
    pub fallback: Option<String>,
    pub retry: Option<RawRetry>,
    pub max_attempts: Option<u32>,
    pub timeout: Option<RawDuration>,
    pub state_updates: Option<Map<String, Value>>,
    pub output_schema: Option<Value>,
    /// `{key: TEMPLATE, max: N}`, checked by the builder.
    pub concurrency: Option<Value>,
    /// `{key: TEMPLATE, ttl: DURATION}`, checked by the builder.
    pub cache: Option<Value>,
    pub teammates: Option<bool>,
    pub handler: Option<String>,
    pub run: Option<Vec<String>>,
    pub script: Option<String>,
    pub args: Option<Vec<String>>,
    pub env: Option<Map<String, Value>>,
    pub model: Option<String>,
    pub system: Option<String>,
    pub prompt: Option<String>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u32>,
    pub provider: Option<String>,
    pub instructions: Option<String>,
    pub tools: Option<Vec<String>>,
    pub max_turns: Option<u32>,
    pub output_key: Option<String>,
    pub schema: Option<Value>,
    pub approvers: Option<Vec<String>>,
    pub over: Option<String>,
    #[serde(rename = "as")]
    pub item_name: Option<String>,
    pub branch: Option<String>,
    pub collect_into: Option<String>,
    pub max_concurrency: Option<Value>,
    pub body: Option<String>,
    pub until: Option<String>,
    pub max_iterations: Option<u32>,
    /// A subgraph's file, or a `rag` node's graph search (`{hops}`).
    pub graph: Option<Value>,
    pub knowledge: Option<Value>,
    pub query: Option<String>,
    pub top_k: Option<i64>,
    pub mode: Option<String>,
    pub rerank: Option<Value>,
    pub input_map: Option<Map<String, Value>>,
    pub output_map: Option<Map<String, Value>>,
    pub status: Option<String>,
    pub message: Option<String>,
    pub callable: Option<String>,
    pub tool_args: Option<Map<String, Value>>,
    pub sandbox: Option<RawSandbox>,
}

/// A script node's `sandbox:` as written: `{memory: 1GiB, cpu: 5m,
/// processes: 64, open_files: 256, network: false}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    /// Bytes, or `512MiB`, `1GiB`, `100MB`.
    pub memory: Option<RawBytes>,
    /// CPU time.
    pub cpu: Option<RawDuration>,
    /// Processes and threads at once.
    pub processes: Option<u32>,
    /// Open files.
    pub open_files: Option<u32>,
    /// Whether the script reaches the network.
    pub network: Option<bool>,
}

/// A size: a number of bytes, or a number with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawBytes {
    /// Bytes.
    Bytes(u64),
    /// With a unit: `512MiB`, `1GiB`, `100MB`, `64k`.
    Text(String),
}

impl RawBytes {
    /// The bytes, or what is wrong.
    pub fn to_bytes(&self) -> Result<u64, String> {
        let text = match self {
            Self::Bytes(n) => return Ok(*n),
            Self::Text(text) => text.trim(),
        };
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let malformed =
            || format!("'{text}' is not a size (write e.g. 512MiB, 1GiB, or a number of bytes)");
        let number: u64 = number.parse().map_err(|_| malformed())?;
        let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "ki" | "kib" => 1 << 10,
            "m" | "mb" => 1_000_000,
            "mi" | "mib" => 1 << 20,
            "g" | "gb" => 1_000_000_000,
            "gi" | "gib" => 1 << 30,
            _ => return Err(malformed()),
        };
        number.checked_mul(factor).ok_or_else(malformed)
    }
}

/// Checks the node's kind and keys, then reads it; every problem is pushed
/// to `findings`. Returns `None` when the node cannot be read at all.
pub fn read_node(id: &str, value: &Value, findings: &mut Vec<Finding>) -> Option<RawNode> {
    let Some(object) = value.as_object() else {
        findings.push(Finding::error(
            format!(
                "node '{id}': expected a map of fields, found {}",
                super::json_type_name(value)
            ),
            &[id],
        ));
        return None;
    };
    let kind = match object.get("kind") {
        None => {
            let hint = if object.contains_key("type") {
                " (this format names it `kind`, not `type`)"
            } else {
                ""
            };
            findings.push(Finding::error(
                format!("node '{id}': missing field 'kind'{hint}"),
                &[id],
            ));
            return None;
        }
        Some(Value::String(kind)) if KINDS.contains(&kind.as_str()) => kind.clone(),
        Some(other) => {
            let shown = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_owned);
            let hint = did_you_mean(&shown, &KINDS)
                .map(|k| format!("did you mean '{k}'? "))
                .unwrap_or_default();
            findings.push(Finding::error(
                format!(
                    "node '{id}': unknown kind '{shown}' ({hint}kinds: {})",
                    KINDS.join(", ")
                ),
                &[id],
            ));
            return None;
        }
    };
    let ok_fields = check_fields(id, &kind, object, findings);
    match serde_path_to_error::deserialize::<_, RawNode>(value) {
        Ok(node) if ok_fields => Some(node),
        Ok(_) => None,
        Err(error) => {
            findings.push(Finding::error(
                format!("node '{id}': field '{}': {}", error.path(), error.inner()),
                &[id],
            ));
            None
        }
    }
}

/// Reports keys the kind does not take; returns whether all were known.
fn check_fields(
    id: &str,
    kind: &str,
    object: &Map<String, Value>,
    findings: &mut Vec<Finding>,
) -> bool {
    let specific = kind_fields(kind);
    let mut all_known = true;
    for key in object.keys() {
        if COMMON_FIELDS.contains(&key.as_str()) || specific.contains(&key.as_str()) {
            continue;
        }
        if RUN_FIELDS.contains(&key.as_str()) {
            if let Some(why) = refused_run_field(kind, key) {
                all_known = false;
                findings.push(Finding::error(
                    format!(
                        "node '{id}': '{key}' is a field the kind '{kind}' does not take ({why})"
                    ),
                    &[id],
                ));
            }
            continue;
        }
        all_known = false;
        let allowed: Vec<&str> = COMMON_FIELDS
            .iter()
            .chain(&RUN_FIELDS)
            .filter(|f| refused_run_field(kind, f).is_none())
            .chain(specific)
            .copied()
            .collect();
        let other_kinds: Vec<&str> = KINDS
            .iter()
            .copied()
            .filter(|k| kind_fields(k).contains(&key.as_str()))
            .collect();
        let hint = if kind == "rag" && key == "teammates" {
            " (a rag step never gets a teammate identity: it retrieves and answers, and sends no messages)".to_owned()
        } else if let Some(suggestion) = did_you_mean(key, &allowed) {
            format!(" (did you mean '{suggestion}'?)")
        } else if !other_kinds.is_empty() {
            format!(" (it belongs to kind {})", other_kinds.join(", "))
        } else {
            String::new()
        };
        findings.push(Finding::error(
            format!("node '{id}': unknown field '{key}' for kind '{kind}'{hint}"),
            &[id],
        ));
    }
    all_known
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: Value) -> (Option<RawNode>, Vec<String>) {
        let mut findings = Vec::new();
        let node = read_node("n", &value, &mut findings);
        (node, findings.into_iter().map(|f| f.message).collect())
    }

    #[test]
    fn misspelt_key_is_named_with_a_suggestion() {
        let (_, errors) = read(json!({"kind": "task", "hanlder": "x"}));
        assert_eq!(
            errors,
            ["node 'n': unknown field 'hanlder' for kind 'task' (did you mean 'handler'?)"]
        );
    }

    #[test]
    fn key_of_another_kind_says_which_kind_takes_it() {
        let (_, errors) = read(json!({"kind": "task", "handler": "h", "collect_into": "x"}));
        assert_eq!(
            errors,
            ["node 'n': unknown field 'collect_into' for kind 'task' (it belongs to kind map)"]
        );
    }

    #[test]
    fn unknown_kind_lists_the_kinds() {
        let (_, errors) = read(json!({"kind": "taks"}));
        assert!(
            errors[0].starts_with("node 'n': unknown kind 'taks' (did you mean 'task'?"),
            "{errors:?}"
        );
    }

    #[test]
    fn missing_kind_hints_at_type() {
        let (_, errors) = read(json!({"type": "llm"}));
        assert_eq!(
            errors,
            ["node 'n': missing field 'kind' (this format names it `kind`, not `type`)"]
        );
    }

    #[test]
    fn type_error_names_the_field_path() {
        let (_, errors) =
            read(json!({"kind": "task", "handler": "h", "retry": {"max_attempts": "three"}}));
        assert!(
            errors[0].starts_with("node 'n': field 'retry"),
            "{errors:?}"
        );
    }

    #[test]
    fn durations_parse_with_units() {
        let d = |t: &str| RawDuration::Text(t.into()).to_duration();
        assert_eq!(d("500ms").unwrap().as_millis(), 500);
        assert_eq!(d("0.5s").unwrap().as_millis(), 500);
        assert_eq!(d("10m").unwrap().as_secs(), 600);
        assert_eq!(d("1h").unwrap().as_secs(), 3600);
        assert!(d("ten").is_err());
        assert!(d("5 fortnights").is_err());
        assert_eq!(
            RawDuration::Seconds(2.0).to_duration().unwrap().as_secs(),
            2
        );
    }

    #[test]
    fn run_fields_are_taken_where_they_run_and_refused_with_a_reason_elsewhere() {
        for kind in ["task", "script", "llm", "agent"] {
            for field in RUN_FIELDS {
                assert_eq!(refused_run_field(kind, field), None, "{kind}.{field}");
            }
        }
        let (_, errors) = read(json!({"kind": "map", "retry": 3, "timeout": "5s",
            "state_updates": {"n": "{{ results | length }}"}, "output_schema": {"type": "object"}}));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("node 'n': 'retry' is a field the kind 'map' does not take ("),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with("node 'n': 'timeout' is a field the kind 'map' does not take ("),
            "{errors:?}"
        );
        let (_, errors) = read(json!({"kind": "end", "state_updates": {"done": true}}));
        assert!(errors.is_empty(), "{errors:?}");
        let (_, errors) = read(json!({"kind": "end", "output_schema": {}}));
        assert_eq!(
            errors,
            [
                "node 'n': 'output_schema' is a field the kind 'end' does not take (it runs nothing and produces no output)"
            ]
        );
        let (_, errors) = read(json!({"kind": "approval", "max_attempts": 2}));
        assert!(
            errors[0].contains("'max_attempts' is a field the kind 'approval' does not take"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_retry_that_is_neither_a_count_nor_a_policy_is_named() {
        let (_, errors) = read(json!({"kind": "script", "run": ["x"], "retry": "twice"}));
        assert!(
            errors[0].contains("expected a number of attempts (retry: 3) or a policy"),
            "{errors:?}"
        );
        let (_, errors) = read(json!({"kind": "script", "run": ["x"], "retry": {"delay": 1}}));
        assert!(errors[0].contains("unknown field `delay`"), "{errors:?}");
    }

    #[test]
    fn teammates_belongs_to_agent_task_and_script_nodes() {
        for kind in ["task", "script", "agent"] {
            let fields = kind_fields(kind);
            assert!(fields.contains(&"teammates"), "{kind}");
        }
        let (_, errors) = read(json!({"kind": "approval", "teammates": true}));
        assert!(
            errors.iter().any(|e| e.contains(
                "unknown field 'teammates' for kind 'approval' (it belongs to kind task, script, agent)"
            )),
            "{errors:?}"
        );
    }
}
