//! What evaluating a CEL expression may cost on a given state, worked out
//! before it runs.
//!
//! `cel` has no budget of its own: a condition made of `state.s + state.s`
//! terms over a few megabytes asks for gigabytes, and the allocation that
//! fails aborts the process that evaluates it (the coordinator). So every
//! evaluation is first walked abstractly over the *sizes* of what it reads:
//! each value is bounded by its bytes, its length and a bound of its
//! elements, and each node of the syntax tree charges the steps it takes and
//! the bytes it allocates or scans, times the iterations of the macros
//! around it. An evaluation over either budget is refused before it starts,
//! naming which.
//!
//! The bounds are upper bounds: an expression refused may have needed less,
//! never more. They follow how `cel` evaluates: a `map` or `filter` appends
//! to its result in place (so each iteration pays for what it appends, not
//! for the whole list so far), a string or list `+` copies both operands,
//! comparisons and `contains`, `matches`, `in` read their operands whole.

use std::collections::HashMap;

use serde_json::{Map, Value};

use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};

/// Most steps one evaluation may take: about a second of work.
pub const STEP_BUDGET: u64 = 5_000_000;

/// Most bytes one evaluation may allocate or scan (its input's copy
/// included): 64 MiB.
pub const BYTE_BUDGET: u64 = 64 << 20;

/// What a scalar (a number, a bool, null) costs to hold.
const SCALAR: u64 = 16;
/// What a string, a list or a map costs to hold besides its contents.
const HEADER: u64 = 24;
/// What each item of a list or entry of a map costs besides its value.
const SLOT: u64 = 16;

/// What an evaluation was estimated to need.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cost {
    /// Nodes of the syntax tree evaluated, macro iterations included.
    pub steps: u64,
    /// Bytes allocated or read whole.
    pub bytes: u64,
}

/// An upper bound on a value: its size, its length (a string's bytes, a
/// list's items, a map's entries) and a bound on each of its elements
/// (a list's items; a map's keys and values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bound {
    bytes: u64,
    len: u64,
    elem: Option<Box<Bound>>,
}

impl Bound {
    fn scalar() -> Self {
        Self {
            bytes: SCALAR,
            len: 0,
            elem: None,
        }
    }

    fn text(len: usize) -> Self {
        Self {
            bytes: HEADER + len as u64,
            len: len as u64,
            elem: None,
        }
    }

    /// The bound of a JSON value, as `cel` will hold it.
    fn of_json(value: &Value) -> Self {
        match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Self::scalar(),
            Value::String(s) => Self::text(s.len()),
            Value::Array(items) => Self::container(items.iter().map(Self::of_json), items.len()),
            Value::Object(map) => Self::container(
                map.iter()
                    .flat_map(|(k, v)| [Self::text(k.len()), Self::of_json(v)]),
                map.len(),
            ),
        }
    }

    /// A list or map of `len` items or entries whose parts are `parts`.
    fn container(parts: impl Iterator<Item = Bound>, len: usize) -> Self {
        let mut bytes = HEADER.saturating_add(SLOT.saturating_mul(len as u64));
        let mut elem: Option<Bound> = None;
        for part in parts {
            bytes = bytes.saturating_add(part.bytes);
            elem = Some(match elem {
                None => part,
                Some(e) => e.join(part),
            });
        }
        Self {
            bytes,
            len: len as u64,
            elem: elem.map(Box::new),
        }
    }

    /// A bound on either of two values.
    fn join(self, other: Bound) -> Bound {
        Bound {
            bytes: self.bytes.max(other.bytes),
            len: self.len.max(other.len),
            elem: join_elems(self.elem, other.elem),
        }
    }

    /// A bound on both values side by side (a concatenation).
    fn concat(self, other: Bound) -> Bound {
        Bound {
            bytes: self.bytes.saturating_add(other.bytes),
            len: self.len.saturating_add(other.len),
            elem: join_elems(self.elem, other.elem),
        }
    }

    /// A bound on any part of the value: an element, a field, an entry.
    fn part(&self) -> Bound {
        match &self.elem {
            Some(elem) => (**elem).clone(),
            // Strings and scalars have no parts; a part of them is no
            // bigger than they are.
            None => self.clone(),
        }
    }
}

/// A bound on the elements of either of two values.
fn join_elems(a: Option<Box<Bound>>, b: Option<Box<Bound>>) -> Option<Box<Bound>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Box::new(a.join(*b))),
        (a, b) => a.or(b),
    }
}

/// What a JSON value costs to hold, as [`Bound`]'s bytes count it, without
/// building the bound (a template's reads and output are charged this).
pub(crate) fn json_bytes(value: &Value) -> u64 {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => SCALAR,
        Value::String(s) => HEADER + s.len() as u64,
        Value::Array(items) => items.iter().fold(
            HEADER.saturating_add(SLOT.saturating_mul(items.len() as u64)),
            |bytes, item| bytes.saturating_add(json_bytes(item)),
        ),
        Value::Object(map) => map.iter().fold(
            HEADER.saturating_add(SLOT.saturating_mul(map.len() as u64)),
            |bytes, (key, value)| {
                bytes
                    .saturating_add(HEADER + key.len() as u64)
                    .saturating_add(json_bytes(value))
            },
        ),
    }
}

/// A byte count as people read it: `4.0 GiB`, `64 MiB`, `512 bytes`.
pub(crate) fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Estimates what evaluating `expr` on `state` and `scope` costs.
/// `state_fields` and `scope_fields` are the fields it reads, or `None`
/// when it reads the variable whole (which is then converted whole).
pub fn estimate(
    expr: &cel::IdedExpr,
    state: (
        &Map<String, Value>,
        Option<&std::collections::BTreeSet<String>>,
    ),
    scope: (
        &Map<String, Value>,
        Option<&std::collections::BTreeSet<String>>,
    ),
) -> Cost {
    let mut estimator = Estimator {
        state: state.0,
        scope: scope.0,
        bound: Vec::new(),
        iterations: 1,
        cost: Cost::default(),
        fields: HashMap::new(),
    };
    // The fields read are copied into `cel`'s values first.
    for (variable, (map, fields)) in [("state", state), ("scope", scope)] {
        let names: Vec<&str> = match fields {
            Some(fields) => fields.iter().map(String::as_str).collect(),
            None => map.keys().map(String::as_str).collect(),
        };
        let copied = names
            .into_iter()
            .map(|name| estimator.field(variable, name).bytes)
            .fold(0u64, u64::saturating_add);
        estimator.charge(copied);
    }
    estimator.eval(expr);
    estimator.cost
}

struct Estimator<'a> {
    state: &'a Map<String, Value>,
    scope: &'a Map<String, Value>,
    /// Variables bound by the macros around the node: name and bound.
    bound: Vec<(&'a str, Bound)>,
    /// How many times the node is evaluated: the product of the lengths
    /// of the lists the macros around it iterate over.
    iterations: u64,
    cost: Cost,
    /// The bounds of `state`'s and `scope`'s fields, each walked once
    /// however often the expression reads it.
    fields: HashMap<(&'static str, String), Bound>,
}

impl<'a> Estimator<'a> {
    /// The bound of field `name` of `variable` (`state` or `scope`): a
    /// scalar when it is missing.
    fn field(&mut self, variable: &'static str, name: &str) -> Bound {
        let map = if variable == "state" {
            self.state
        } else {
            self.scope
        };
        self.fields
            .entry((variable, name.to_owned()))
            .or_insert_with(|| map.get(name).map_or_else(Bound::scalar, Bound::of_json))
            .clone()
    }

    fn charge(&mut self, bytes: u64) {
        self.cost.bytes = self
            .cost
            .bytes
            .saturating_add(bytes.saturating_mul(self.iterations));
    }

    fn lookup(&self, name: &str) -> Option<&Bound> {
        self.bound
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b)
    }

    /// A variable read whole: a bound macro variable, `state`, `scope`.
    fn variable(&mut self, name: &str) -> Bound {
        if let Some(bound) = self.lookup(name) {
            return bound.clone();
        }
        let (variable, map) = match name {
            "state" => ("state", self.state),
            "scope" => ("scope", self.scope),
            _ => return Bound::scalar(),
        };
        let parts: Vec<Bound> = map
            .keys()
            .flat_map(|k| [Bound::text(k.len()), self.field(variable, k)])
            .collect();
        Bound::container(parts.into_iter(), map.len())
    }

    fn eval(&mut self, expr: &'a cel::IdedExpr) -> Bound {
        self.cost.steps = self.cost.steps.saturating_add(self.iterations);
        match &expr.expr {
            Expr::Unspecified => Bound::scalar(),
            Expr::Literal(literal) => match literal {
                LiteralValue::String(s) => Bound::text(s.inner().len()),
                LiteralValue::Bytes(b) => Bound::text(b.inner().len()),
                _ => Bound::scalar(),
            },
            Expr::Ident(name) => self.variable(name),
            Expr::Select(select) => {
                if select.test {
                    // `has(x.f)`: a bool.
                    self.eval(&select.operand);
                    return Bound::scalar();
                }
                if let Expr::Ident(name) = &select.operand.expr
                    && self.lookup(name).is_none()
                {
                    let variable = match name.as_str() {
                        "state" => Some("state"),
                        "scope" => Some("scope"),
                        _ => None,
                    };
                    if let Some(variable) = variable {
                        self.cost.steps = self.cost.steps.saturating_add(self.iterations);
                        return self.field(variable, &select.field);
                    }
                }
                self.eval(&select.operand).part()
            }
            Expr::Call(call) => self.call(call),
            Expr::List(list) => {
                let parts: Vec<Bound> = list.elements.iter().map(|e| self.eval(e)).collect();
                let len = parts.len();
                let bound = Bound::container(parts.into_iter(), len);
                self.charge(bound.bytes);
                bound
            }
            Expr::Map(cel::common::ast::MapExpr { entries })
            | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
                let mut parts = Vec::with_capacity(entries.len() * 2);
                for entry in entries {
                    match &entry.expr {
                        EntryExpr::StructField(field) => {
                            parts.push(Bound::text(field.field.len()));
                            parts.push(self.eval(&field.value));
                        }
                        EntryExpr::MapEntry(pair) => {
                            parts.push(self.eval(&pair.key));
                            parts.push(self.eval(&pair.value));
                        }
                    }
                }
                let bound = Bound::container(parts.into_iter(), entries.len());
                self.charge(bound.bytes);
                bound
            }
            Expr::Comprehension(c) => {
                let range = self.eval(&c.iter_range);
                let init = self.eval(&c.accu_init);
                let outer = self.iterations;
                let count = range.len;
                self.iterations = outer.saturating_mul(count.max(1));
                let depth = self.bound.len();
                let item = range.part();
                self.bound.push((&c.iter_var, item.clone()));
                if let Some(second) = &c.iter_var2 {
                    self.bound.push((second, item));
                }
                self.bound.push((&c.accu_var, init.clone()));
                self.eval(&c.loop_cond);
                // One iteration's step, from the initial accumulator: what
                // it adds to it, each iteration adds at most.
                let step = self.eval(&c.loop_step);
                self.bound.truncate(depth);
                self.iterations = outer;
                let grown = Bound {
                    bytes: init.bytes.saturating_add(
                        step.bytes.saturating_sub(init.bytes).saturating_mul(count),
                    ),
                    len: init
                        .len
                        .saturating_add(step.len.saturating_sub(init.len).saturating_mul(count)),
                    elem: init.join(step).elem,
                };
                self.bound.push((&c.accu_var, grown));
                let result = self.eval(&c.result);
                self.bound.truncate(depth);
                result
            }
        }
    }

    fn call(&mut self, call: &'a cel::common::ast::CallExpr) -> Bound {
        let target = call.target.as_deref().map(|t| self.eval(t));
        let args: Vec<Bound> = call.args.iter().map(|a| self.eval(a)).collect();
        let operand = |i: usize| -> Bound {
            target
                .iter()
                .chain(args.iter())
                .nth(i)
                .cloned()
                .unwrap_or_else(Bound::scalar)
        };
        let read_all = target
            .iter()
            .chain(args.iter())
            .map(|b| b.bytes)
            .fold(0u64, u64::saturating_add);
        match call.func_name.as_str() {
            operators::ADD => {
                let (left, right) = (operand(0), operand(1));
                // `@result + [x]` in a `map` or `filter` appends in place.
                let appends = matches!(
                    call.args.first().map(|a| &a.expr),
                    Some(Expr::Ident(name)) if name.starts_with('@')
                );
                let appended = right.bytes;
                let sum = left.concat(right);
                self.charge(if appends { appended } else { sum.bytes });
                sum
            }
            operators::CONDITIONAL => operand(1).join(operand(2)),
            operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT => operand(0).part(),
            operators::IN => {
                // An item looked for in a list is compared with each.
                let (item, list) = (operand(0), operand(1));
                self.charge(
                    item.bytes
                        .saturating_mul(list.len.max(1))
                        .saturating_add(list.bytes),
                );
                Bound::scalar()
            }
            // Conversions keep their operand's size.
            "string" | "bytes" | "dyn" => {
                let value = operand(0);
                self.charge(value.bytes);
                value
            }
            // Optional values and their defaults.
            "optional.of" | "optional.ofNonZeroValue" | "value" | "orValue" | "or" => {
                (0..target.iter().len() + args.len())
                    .map(operand)
                    .reduce(Bound::join)
                    .unwrap_or_else(Bound::scalar)
            }
            // Answered without reading the operands whole.
            "size"
            | "int"
            | "uint"
            | "double"
            | "bool"
            | "type"
            | operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::NOT_STRICTLY_FALSE
            | operators::NEGATE
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO => Bound::scalar(),
            // Everything else answers a scalar after reading its operands
            // (comparisons, `contains`, `startsWith`, `matches`, …).
            _ => {
                self.charge(read_all);
                Bound::scalar()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_bytes_counts_what_a_bound_counts() {
        let value =
            serde_json::json!({"a": [1, "two", {"b": null}], "long": "x".repeat(300), "n": 2.5});
        assert_eq!(json_bytes(&value), Bound::of_json(&value).bytes);
    }
}
