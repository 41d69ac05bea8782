//! CEL conditions and routers: compiled at load with only `state` and
//! `scope` free (a macro's own variables are bound), evaluated on a state
//! whose whole numbers are CEL `int`s.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::expr::{ExprError, truthy};

/// Names a CEL condition may refer to: the state and the step's scope.
const CEL_VARIABLES: [&str; 2] = ["state", "scope"];

/// A compiled CEL expression together with its source text.
#[derive(Clone)]
pub struct CelExpr {
    source: String,
    program: Arc<cel::Program>,
}

impl fmt::Debug for CelExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CelExpr").field(&self.source).finish()
    }
}

impl PartialEq for CelExpr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl CelExpr {
    /// Compiles `source`, checking that it refers only to `state` and `scope`.
    pub fn compile(source: &str) -> Result<Self, ExprError> {
        let program = cel::Program::compile(source).map_err(|errors| {
            let first = errors.errors.first();
            ExprError::CelSyntax {
                expr: source.to_owned(),
                detail: first.map_or_else(|| "no detail".to_owned(), |e| e.msg.clone()),
                column: first.map_or(1, |e| usize::try_from(e.pos.1 + 1).unwrap_or(1)),
            }
        })?;
        // Macros (`exists`, `all`, `exists_one`, `map`, `filter`) bind their
        // own variables: only the free ones must be `state` or `scope`.
        let mut free = std::collections::BTreeSet::new();
        free_variables(program.expression(), &mut Vec::new(), &mut free);
        let unknown: Vec<&str> = free
            .iter()
            .map(String::as_str)
            .filter(|name| !CEL_VARIABLES.contains(name))
            .collect();
        if let Some(name) = unknown.first() {
            return Err(ExprError::UnknownVariable {
                expr: source.to_owned(),
                name: (*name).to_owned(),
            });
        }
        Ok(Self {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// Returns the expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the expression against a state and a scope, as JSON.
    pub fn evaluate(
        &self,
        state: &Map<String, Value>,
        scope: &Map<String, Value>,
    ) -> Result<Value, ExprError> {
        let not_json = |what: &str, error: &dyn fmt::Display| ExprError::NotJson {
            expr: self.source.clone(),
            detail: format!("{what}: {error}"),
        };
        let mut context = cel::Context::default();
        let state = cel::to_value(IntsFirstMap(state))
            .map_err(|e| not_json("cannot read the state", &e))?;
        let scope = cel::to_value(IntsFirstMap(scope))
            .map_err(|e| not_json("cannot read the scope", &e))?;
        context.add_variable_from_value("state", state);
        context.add_variable_from_value("scope", scope);
        let value = self
            .program
            .execute(&context)
            .map_err(|error| ExprError::CelFailed {
                expr: self.source.clone(),
                detail: error.to_string(),
            })?;
        value
            .json()
            .map_err(|e| not_json("returned a value with no JSON form", &e))
    }

    /// Evaluates the expression and reads the result as a truth value.
    pub fn is_true(
        &self,
        state: &Map<String, Value>,
        scope: &Map<String, Value>,
    ) -> Result<bool, ExprError> {
        self.evaluate(state, scope).map(|value| truthy(&value))
    }
}

/// A JSON value as CEL should see it: a whole number that fits is an `int`
/// (serde would hand a positive one over as a `uint`, and CEL does not mix
/// the two: `state.count * 2` would fail).
struct IntsFirst<'a>(&'a Value);

struct IntsFirstMap<'a>(&'a Map<String, Value>);

impl serde::Serialize for IntsFirstMap<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(k, v)| (k, IntsFirst(v))))
    }
}

impl serde::Serialize for IntsFirst<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => serializer.serialize_i64(i),
                (None, Some(u)) => serializer.serialize_u64(u),
                _ => serializer.serialize_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::Array(items) => serializer.collect_seq(items.iter().map(IntsFirst)),
            Value::Object(map) => IntsFirstMap(map).serialize(serializer),
            other => other.serialize(serializer),
        }
    }
}

/// Collects the variables `expr` reads that no enclosing comprehension
/// (a macro's bound variable or accumulator) binds.
fn free_variables(
    expr: &cel::IdedExpr,
    bound: &mut Vec<String>,
    free: &mut std::collections::BTreeSet<String>,
) {
    use cel::common::ast::{EntryExpr, Expr};
    let mut walk = |e: &cel::IdedExpr, bound: &mut Vec<String>| free_variables(e, bound, free);
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) {
                free.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(target, bound);
            }
            for arg in &call.args {
                walk(arg, bound);
            }
        }
        Expr::Select(select) => walk(&select.operand, bound),
        Expr::List(list) => {
            for element in &list.elements {
                walk(element, bound);
            }
        }
        Expr::Map(cel::common::ast::MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => walk(&field.value, bound),
                    EntryExpr::MapEntry(pair) => {
                        walk(&pair.key, bound);
                        walk(&pair.value, bound);
                    }
                }
            }
        }
        Expr::Comprehension(comprehension) => {
            // The range and the accumulator's start see the outer scope.
            walk(&comprehension.iter_range, bound);
            walk(&comprehension.accu_init, bound);
            let depth = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            walk(&comprehension.loop_cond, bound);
            walk(&comprehension.loop_step, bound);
            walk(&comprehension.result, bound);
            bound.truncate(depth);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn state(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn cel_condition_reads_state() {
        let expr = CelExpr::compile("state.score < 0.8").unwrap();
        let empty = Map::new();
        assert!(expr.is_true(&state(json!({"score": 0.5})), &empty).unwrap());
        assert!(!expr.is_true(&state(json!({"score": 0.9})), &empty).unwrap());
    }

    #[test]
    fn cel_syntax_error_is_reported() {
        let error = CelExpr::compile("state.score <").unwrap_err().to_string();
        assert!(error.contains("does not parse"), "{error}");
    }

    #[test]
    fn cel_unknown_variable_gets_a_hint() {
        let error = CelExpr::compile("score < 0.8").unwrap_err().to_string();
        assert!(error.contains("unknown variable 'score'"), "{error}");
        assert!(error.contains("state.score"), "{error}");
    }

    #[test]
    fn cel_missing_field_is_an_error_at_evaluation() {
        let expr = CelExpr::compile("state.missing > 1").unwrap();
        assert!(expr.is_true(&Map::new(), &Map::new()).is_err());
    }

    #[test]
    fn cel_macros_bind_their_own_variables() {
        let state = json!({"scores": [0.9, 0.3], "items": [1, 2, 3]});
        let state = state.as_object().unwrap();
        let scope = json!({"limit": 2});
        let scope = scope.as_object().unwrap();
        let cases = [
            ("state.scores.exists(s, s < 0.5)", json!(true)),
            ("state.scores.all(s, s < 0.5)", json!(false)),
            ("state.items.exists_one(i, i == 2)", json!(true)),
            ("state.items.map(i, i * 2)", json!([2, 4, 6])),
            ("state.items.filter(i, i > scope.limit)", json!([3])),
            (
                "state.items.all(i, state.scores.exists(s, s < i))",
                json!(true),
            ),
        ];
        for (source, expected) in cases {
            let expr = CelExpr::compile(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert_eq!(expr.evaluate(state, scope).unwrap(), expected, "{source}");
        }
        // A macro's variable is bound inside the macro only.
        let error = CelExpr::compile("state.items.exists(i, i > 1) && i > 0")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown variable 'i'"), "{error}");
    }
}
