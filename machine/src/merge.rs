//! The wave merge (SPEC section 3, "Merge"): what each node changed relative
//! to the wave's starting state S0, and how concurrent changes combine.
//!
//! A field changed by one node is written directly; reducers are consulted
//! only when two or more nodes changed the same field, and a conflict with
//! no reducer is a [`ConcurrentUpdate`] rather than a silently lost write.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Number, Value};

use crate::graph::{Graph, Reducer, json_type_name};

/// The fields of `writes` whose value differs from S0's (deep equality);
/// a field S0 does not have counts as changed.
pub fn changed_fields(s0: &Map<String, Value>, writes: Map<String, Value>) -> Map<String, Value> {
    writes
        .into_iter()
        .filter(|(field, value)| s0.get(field) != Some(value))
        .collect()
}

/// As [`changed_fields`], where the fields in `held` have the value of
/// their JSON text rather than `s0`'s placeholder ([`crate::held`]): a
/// write of a held field is parsed against, only when there is one.
pub fn changed_fields_held(
    s0: &Map<String, Value>,
    writes: Map<String, Value>,
    held: &std::collections::BTreeMap<String, std::sync::Arc<str>>,
) -> Map<String, Value> {
    if held.is_empty() {
        return changed_fields(s0, writes);
    }
    writes
        .into_iter()
        .filter(|(field, value)| match held.get(field) {
            Some(text) => serde_json::from_str::<Value>(text).ok().as_ref() != Some(value),
            None => s0.get(field) != Some(value),
        })
        .collect()
}

/// Two or more nodes changed a field that has no reducer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcurrentUpdate {
    /// The field.
    pub field: String,
    /// The nodes that changed it, in declaration order.
    pub nodes: Vec<String>,
}

/// A reduction that a worker must compute (`reducer: fn:NAME`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HostedReduction {
    /// The field.
    pub field: String,
    /// The reducer's registered name.
    pub reducer: String,
    /// S0's value of the field.
    pub s0_value: Value,
    /// Each changing node's value, in declaration order.
    pub branch_values: Vec<Value>,
}

/// The result of merging a wave, before hosted reducers have answered.
///
/// It holds only the changed fields, so merging never copies the whole
/// state: a wave that touches a counter next to a 10 MB field moves the
/// counter alone.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MergeOutcome {
    /// The final value of every directly written and built-in-reduced field.
    pub overlay: Map<String, Value>,
    /// Fields still waiting for a worker-hosted reducer.
    pub hosted: Vec<HostedReduction>,
    /// Every changed field, in order of first change.
    pub changed: Vec<String>,
}

/// Merges the changes of a wave's nodes (given in declaration order, each
/// already reduced to its changed fields) onto S0.
pub fn merge_wave(
    graph: &Graph,
    s0: &Map<String, Value>,
    changes: &[(&str, &Map<String, Value>)],
) -> Result<MergeOutcome, MergeError> {
    // Field → indices into `changes` of the nodes that changed it, in order
    // of first change; the hash index keeps this linear in the writes.
    let mut writers: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut position: HashMap<&str, usize> = HashMap::new();
    for (i, (_, fields)) in changes.iter().enumerate() {
        for field in fields.keys() {
            match position.get(field.as_str()) {
                Some(&at) => writers[at].1.push(i),
                None => {
                    position.insert(field.as_str(), writers.len());
                    writers.push((field.as_str(), vec![i]));
                }
            }
        }
    }
    let mut overlay = Map::new();
    let mut hosted = Vec::new();
    for (field, who) in &writers {
        let value_of = |i: usize| changes[i].1[*field].clone();
        if who.len() == 1 {
            overlay.insert((*field).to_owned(), value_of(who[0]));
            continue;
        }
        let Some(reducer) = graph.field(field).and_then(|decl| decl.reducer.as_ref()) else {
            return Err(MergeError::Conflict(ConcurrentUpdate {
                field: (*field).to_owned(),
                nodes: who.iter().map(|&i| changes[i].0.to_owned()).collect(),
            }));
        };
        let s0_value = s0.get(*field).cloned().unwrap_or(Value::Null);
        let branch_values: Vec<Value> = who.iter().map(|&i| value_of(i)).collect();
        match reducer {
            Reducer::Hosted(name) => hosted.push(HostedReduction {
                field: (*field).to_owned(),
                reducer: name.key(),
                s0_value,
                branch_values,
            }),
            builtin => {
                let merged = reduce(builtin, &s0_value, &branch_values).map_err(|error| {
                    MergeError::Reducer {
                        field: (*field).to_owned(),
                        message: error.to_string(),
                    }
                })?;
                overlay.insert((*field).to_owned(), merged);
            }
        }
    }
    Ok(MergeOutcome {
        overlay,
        hosted,
        changed: writers.into_iter().map(|(f, _)| f.to_owned()).collect(),
    })
}

/// Why a merge failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeError {
    /// Concurrent writes with no reducer.
    Conflict(ConcurrentUpdate),
    /// A reducer could not combine the values.
    Reducer {
        /// The field.
        field: String,
        /// What went wrong.
        message: String,
    },
}

/// Why a built-in reducer could not combine a wave's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    /// A value is not of the kind the reducer combines.
    #[error("reducer {reducer} needs {needs}, got {got}")]
    WrongType {
        /// The reducer.
        reducer: &'static str,
        /// What it combines: arrays, objects or numbers.
        needs: &'static str,
        /// What it got.
        got: &'static str,
    },
    /// An integer sum left the 64-bit range.
    #[error("reducer add overflowed")]
    Overflow,
    /// A float sum is not finite.
    #[error("reducer add produced a non-finite number")]
    NotFinite,
    /// The reducer runs on a worker (`fn:NAME`), not here.
    #[error("reducer fn:{0} is hosted by a worker")]
    Hosted(String),
}

/// Applies a built-in reducer to S0's value and the branch values.
pub fn reduce(reducer: &Reducer, s0: &Value, branches: &[Value]) -> Result<Value, ReduceError> {
    match reducer {
        Reducer::Concat => concat(s0, branches),
        Reducer::Merge => merge_objects(s0, branches),
        Reducer::Add => add(s0, branches),
        Reducer::Union => union(s0, branches),
        Reducer::Min => extreme(s0, branches, "min", |a, b| a < b),
        Reducer::Max => extreme(s0, branches, "max", |a, b| a > b),
        Reducer::Hosted(code) => Err(ReduceError::Hosted(code.key())),
    }
}

fn as_array<'a>(reducer: &'static str, value: &'a Value) -> Result<&'a [Value], ReduceError> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Null => Ok(&[]),
        other => Err(ReduceError::WrongType {
            reducer,
            needs: "arrays",
            got: json_type_name(other),
        }),
    }
}

fn concat(s0: &Value, branches: &[Value]) -> Result<Value, ReduceError> {
    let base = as_array("concat", s0)?;
    let mut merged = base.to_vec();
    for branch in branches {
        let items = as_array("concat", branch)?;
        let additions = if items.starts_with(base) {
            &items[base.len()..]
        } else {
            items
        };
        merged.extend_from_slice(additions);
    }
    Ok(Value::Array(merged))
}

/// Items of S0 and every branch, first occurrences kept, in order. Items
/// are bucketed by a structural hash, so this is linear in the items.
fn union(s0: &Value, branches: &[Value]) -> Result<Value, ReduceError> {
    let mut merged: Vec<Value> = Vec::new();
    let mut buckets: HashMap<u64, Vec<usize>> = HashMap::new();
    for source in std::iter::once(s0).chain(branches) {
        for item in as_array("union", source)? {
            let bucket = buckets.entry(structural_hash(item)).or_default();
            if !bucket.iter().any(|&i| merged[i] == *item) {
                bucket.push(merged.len());
                merged.push(item.clone());
            }
        }
    }
    Ok(Value::Array(merged))
}

/// A hash consistent with JSON equality: object keys are hashed in sorted
/// order and numbers by their value, so equal values hash alike.
fn structural_hash(value: &Value) -> u64 {
    fn feed(value: &Value, hasher: &mut impl Hasher) {
        match value {
            Value::Null => 0u8.hash(hasher),
            Value::Bool(b) => (1u8, b).hash(hasher),
            Value::Number(n) => (2u8, n.to_string()).hash(hasher),
            Value::String(s) => (3u8, s).hash(hasher),
            Value::Array(items) => {
                (4u8, items.len()).hash(hasher);
                items.iter().for_each(|item| feed(item, hasher));
            }
            Value::Object(map) => {
                (5u8, map.len()).hash(hasher);
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                for key in keys {
                    key.hash(hasher);
                    feed(&map[key], hasher);
                }
            }
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    feed(value, &mut hasher);
    hasher.finish()
}

fn merge_objects(s0: &Value, branches: &[Value]) -> Result<Value, ReduceError> {
    let not_object = |other: &Value| ReduceError::WrongType {
        reducer: "merge",
        needs: "objects",
        got: json_type_name(other),
    };
    let empty = Map::new();
    let base = match s0 {
        Value::Object(map) => map,
        Value::Null => &empty,
        other => return Err(not_object(other)),
    };
    let mut merged = base.clone();
    for branch in branches {
        let Value::Object(map) = branch else {
            return Err(not_object(branch));
        };
        for (key, value) in map {
            if base.get(key) != Some(value) {
                merged.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(Value::Object(merged))
}

fn number(reducer: &'static str, value: &Value) -> Result<Option<Number>, ReduceError> {
    match value {
        Value::Number(n) => Ok(Some(n.clone())),
        Value::Null => Ok(None),
        other => Err(ReduceError::WrongType {
            reducer,
            needs: "numbers",
            got: json_type_name(other),
        }),
    }
}

fn add(s0: &Value, branches: &[Value]) -> Result<Value, ReduceError> {
    let base = number("add", s0)?;
    let all: Vec<Number> = branches
        .iter()
        .map(|b| number("add", b).map(|n| n.unwrap_or_else(|| Number::from(0))))
        .collect::<Result<_, _>>()?;
    let integers = base.as_ref().is_none_or(Number::is_i64) && all.iter().all(Number::is_i64);
    if integers {
        let base = base.and_then(|n| n.as_i64()).unwrap_or(0);
        let mut total = base;
        for n in &all {
            let delta = n.as_i64().unwrap_or(0).checked_sub(base);
            total = delta
                .and_then(|d| total.checked_add(d))
                .ok_or(ReduceError::Overflow)?;
        }
        return Ok(Value::from(total));
    }
    let base = base.and_then(|n| n.as_f64()).unwrap_or(0.0);
    let total = all
        .iter()
        .fold(base, |acc, n| acc + (n.as_f64().unwrap_or(0.0) - base));
    Number::from_f64(total)
        .map(Value::Number)
        .ok_or(ReduceError::NotFinite)
}

fn extreme(
    s0: &Value,
    branches: &[Value],
    name: &'static str,
    better: fn(f64, f64) -> bool,
) -> Result<Value, ReduceError> {
    let mut best: Option<(f64, Value)> = None;
    for value in std::iter::once(s0).chain(branches) {
        let Some(n) = number(name, value)? else {
            continue;
        };
        let f = n.as_f64().unwrap_or(0.0);
        if best.as_ref().is_none_or(|(b, _)| better(f, *b)) {
            best = Some((f, value.clone()));
        }
    }
    Ok(best.map_or(Value::Null, |(_, v)| v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn unchanged_fields_are_not_writes() {
        let s0 = obj(json!({"a": 1, "b": [1]}));
        let changed = changed_fields(&s0, obj(json!({"a": 1, "b": [1, 2], "c": null})));
        assert_eq!(Value::Object(changed), json!({"b": [1, 2], "c": null}));
    }

    #[test]
    fn concat_appends_each_branch_addition() {
        let merged = reduce(
            &Reducer::Concat,
            &json!(["x"]),
            &[json!(["x", "a"]), json!(["x", "b", "c"])],
        )
        .unwrap();
        assert_eq!(merged, json!(["x", "a", "b", "c"]));
        // A branch that rewrote the list contributes all of it.
        let merged = reduce(
            &Reducer::Concat,
            &json!(["x"]),
            &[json!(["y"]), json!(["x", "z"])],
        )
        .unwrap();
        assert_eq!(merged, json!(["x", "y", "z"]));
        assert!(reduce(&Reducer::Concat, &json!([]), &[json!("s"), json!([1])]).is_err());
    }

    #[test]
    fn merge_takes_changed_keys_later_wins() {
        let merged = reduce(
            &Reducer::Merge,
            &json!({"k": 0, "keep": 1}),
            &[
                json!({"k": 1, "keep": 1, "a": 1}),
                json!({"k": 2, "keep": 1, "b": 2}),
            ],
        )
        .unwrap();
        assert_eq!(merged, json!({"k": 2, "keep": 1, "a": 1, "b": 2}));
    }

    #[test]
    fn add_sums_deltas() {
        assert_eq!(
            reduce(&Reducer::Add, &json!(10), &[json!(11), json!(15)]).unwrap(),
            json!(16)
        );
        assert_eq!(
            reduce(&Reducer::Add, &json!(1.5), &[json!(2.0), json!(2.5)]).unwrap(),
            json!(3.0)
        );
        assert_eq!(
            reduce(&Reducer::Add, &json!(null), &[json!(1), json!(2)]).unwrap(),
            json!(3)
        );
    }

    #[test]
    fn union_keeps_first_seen_order() {
        let merged = reduce(
            &Reducer::Union,
            &json!([1, 2]),
            &[json!([2, 3]), json!([4, 1, 3])],
        )
        .unwrap();
        assert_eq!(merged, json!([1, 2, 3, 4]));
    }

    #[test]
    fn union_compares_objects_whatever_their_key_order() {
        let merged = reduce(
            &Reducer::Union,
            &json!([{"a": 1, "b": 2}]),
            &[serde_json::from_str::<Value>(r#"[{"b": 2, "a": 1}, {"a": 1}, 1, 1.0]"#).unwrap()],
        )
        .unwrap();
        assert_eq!(merged, json!([{"a": 1, "b": 2}, {"a": 1}, 1, 1.0]));
    }

    #[test]
    fn a_wide_output_merges_in_one_pass() {
        // 100,000 fields took 16 s with a linear search per field.
        let wide: Map<String, Value> = (0..100_000).map(|i| (format!("f{i}"), json!(i))).collect();
        let (graph, _) = crate::graph::parse_graph(
            "nodes:\n  a: { kind: end, start: true }\n",
            crate::graph::Format::Yaml,
            "g",
        );
        let outcome = merge_wave(&graph, &Map::new(), &[("a", &wide)]).unwrap();
        assert_eq!(outcome.changed.len(), 100_000);
        assert_eq!(outcome.overlay["f99999"], json!(99_999));
        let items: Vec<Value> = (0..50_000).map(|i| json!({"id": i})).collect();
        let merged = reduce(
            &Reducer::Union,
            &Value::Array(items.clone()),
            &[Value::Array(items)],
        )
        .unwrap();
        assert_eq!(merged.as_array().map(Vec::len), Some(50_000));
    }

    #[test]
    fn min_and_max_include_s0() {
        assert_eq!(
            reduce(&Reducer::Min, &json!(5), &[json!(7), json!(3)]).unwrap(),
            json!(3)
        );
        assert_eq!(
            reduce(&Reducer::Max, &json!(5), &[json!(7), json!(3)]).unwrap(),
            json!(7)
        );
        assert_eq!(
            reduce(&Reducer::Max, &json!(9), &[json!(7), json!(3)]).unwrap(),
            json!(9)
        );
        assert!(reduce(&Reducer::Min, &json!(1), &[json!("a")]).is_err());
    }
}
