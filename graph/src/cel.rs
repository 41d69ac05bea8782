//! CEL conditions and routers: compiled at load with only `state` and
//! `scope` free (a macro's own variables are bound), evaluated on a state
//! whose whole numbers are CEL `int`s.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::cel_cost::bytes_text;
use super::eval_meter::Meter;
use super::expr::{ExprError, abbreviated, truthy};

/// Names a CEL condition may refer to: the state and the step's scope.
const CEL_VARIABLES: [&str; 2] = ["state", "scope"];

pub use super::cel_cost::{BYTE_BUDGET, Cost, STEP_BUDGET};

/// A compiled CEL expression together with its source text.
#[derive(Clone)]
pub struct CelExpr {
    source: String,
    program: Arc<cel::Program>,
    /// How deep its macros (comprehensions) nest: 0 for none.
    depth: u32,
    /// The state fields it reads (`state.NAME`), or `None` when it uses
    /// `state` some other way and needs all of it.
    state_fields: Option<Arc<BTreeSet<String>>>,
    /// The same for `scope`.
    scope_fields: Option<Arc<BTreeSet<String>>>,
    /// Set when the expression is one field of `state` or `scope`
    /// (`state.items`, a map's usual `over`): its value is the field's,
    /// read without converting the state to CEL and the result back.
    field: Option<(Variable, String)>,
}

/// The variable a plain field read reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variable {
    State,
    Scope,
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
        let depth = macro_depth(program.expression());
        let fields_of = |variable: &str| {
            let mut fields = BTreeSet::new();
            fields_read(program.expression(), variable, &mut fields).then(|| Arc::new(fields))
        };
        let field = match &program.expression().expr {
            cel::common::ast::Expr::Select(select) if !select.test => match &select.operand.expr {
                cel::common::ast::Expr::Ident(name) if name == "state" => {
                    Some((Variable::State, select.field.clone()))
                }
                cel::common::ast::Expr::Ident(name) if name == "scope" => {
                    Some((Variable::Scope, select.field.clone()))
                }
                _ => None,
            },
            _ => None,
        };
        Ok(Self {
            source: source.to_owned(),
            field,
            depth,
            state_fields: fields_of("state"),
            scope_fields: fields_of("scope"),
            program: Arc::new(program),
        })
    }

    /// The state fields it reads, or `None` when it needs the whole state.
    pub fn state_reads(&self) -> Option<&BTreeSet<String>> {
        self.state_fields.as_deref()
    }

    /// Whether evaluating it iterates (it uses `exists`, `all`, `map`, …),
    /// so its cost depends on the state's lists.
    pub fn iterates(&self) -> bool {
        self.depth > 0
    }

    /// Refuses an evaluation that could take more steps or bytes than
    /// one may ([`cel_cost`](super::cel_cost)): estimated on the sizes of
    /// what it reads, before anything is allocated.
    /// One that fits is charged to the run's `meter`, which refuses it
    /// when the run's allowance would be spent.
    pub fn check_cost(
        &self,
        state: &Map<String, Value>,
        scope: &Map<String, Value>,
        meter: &Meter,
    ) -> Result<Cost, ExprError> {
        let cost = super::cel_cost::estimate(
            self.program.expression(),
            (state, self.state_fields.as_deref()),
            (scope, self.scope_fields.as_deref()),
        );
        let detail = if cost.bytes > BYTE_BUDGET {
            format!(
                "it could allocate or read about {} on this state; an expression may use at most {}",
                bytes_text(cost.bytes),
                bytes_text(BYTE_BUDGET)
            )
        } else if cost.steps > STEP_BUDGET {
            format!(
                "it could take about {} steps on this state (macros iterate over lists{}); an expression may take at most {STEP_BUDGET}",
                cost.steps,
                if self.depth > 1 {
                    format!(", nested {} deep", self.depth)
                } else {
                    String::new()
                },
            )
        } else {
            meter
                .charge(cost)
                .map_err(|overdrawn| overdrawn.refusal(&self.source))?;
            return Ok(cost);
        };
        Err(ExprError::TooCostly {
            expr: abbreviated(&self.source),
            detail,
        })
    }

    /// Returns the expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the expression against a state and a scope, as JSON,
    /// charging `meter` what it may cost.
    pub fn evaluate(
        &self,
        state: &Map<String, Value>,
        scope: &Map<String, Value>,
        meter: &Meter,
    ) -> Result<Value, ExprError> {
        let cost = self.check_cost(state, scope, meter)?;
        meter.run(cost, || match self.field_value(state, scope) {
            Some(value) => Ok(value),
            None => self.execute(state, scope),
        })
    }

    /// The value of a plain field read (`state.NAME`, `scope.NAME`) of a
    /// field that is there: what CEL would give (a parsed value's numbers
    /// are all ones CEL keeps), but for an object's keys, which keep their
    /// order (CEL's maps have none). `None` for any other expression, and
    /// for a missing field (CEL says why).
    fn field_value(&self, state: &Map<String, Value>, scope: &Map<String, Value>) -> Option<Value> {
        let (variable, name) = self.field.as_ref()?;
        let of = match variable {
            Variable::State => state,
            Variable::Scope => scope,
        };
        of.get(name).cloned()
    }

    /// Evaluates the expression, its cost already checked.
    fn execute(
        &self,
        state: &Map<String, Value>,
        scope: &Map<String, Value>,
    ) -> Result<Value, ExprError> {
        let not_json = |what: &str, error: &dyn fmt::Display| ExprError::NotJson {
            expr: self.source.clone(),
            detail: format!("{what}: {error}"),
        };
        let mut context = cel::Context::default();
        // Only the fields the expression reads are handed over: a condition
        // on a counter next to a 10 MB field converts the counter alone.
        let state = cel::to_value(IntsFirstMap(state, self.state_fields.as_deref()))
            .map_err(|e| not_json("cannot read the state", &e))?;
        let scope = cel::to_value(IntsFirstMap(scope, self.scope_fields.as_deref()))
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
        meter: &Meter,
    ) -> Result<bool, ExprError> {
        self.evaluate(state, scope, meter)
            .map(|value| truthy(&value))
    }
}

/// A JSON value as CEL should see it: a whole number that fits is an `int`
/// (serde would hand a positive one over as a `uint`, and CEL does not mix
/// the two: `state.count * 2` would fail).
struct IntsFirst<'a>(&'a Value);

/// A map as CEL sees it: all of it, or only the named fields.
struct IntsFirstMap<'a>(&'a Map<String, Value>, Option<&'a BTreeSet<String>>);

impl serde::Serialize for IntsFirstMap<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.1 {
            None => serializer.collect_map(self.0.iter().map(|(k, v)| (k, IntsFirst(v)))),
            Some(fields) => serializer.collect_map(
                fields
                    .iter()
                    .filter_map(|f| self.0.get_key_value(f))
                    .map(|(k, v)| (k, IntsFirst(v))),
            ),
        }
    }
}

/// Adds to `fields` the names read as `VARIABLE.NAME`; false when
/// `variable` is used any other way (passed whole, indexed, iterated).
fn fields_read(expr: &cel::IdedExpr, variable: &str, fields: &mut BTreeSet<String>) -> bool {
    use cel::common::ast::{EntryExpr, Expr};
    let all = |children: &mut dyn Iterator<Item = &cel::IdedExpr>,
               fields: &mut BTreeSet<String>| {
        let mut alone = true;
        for child in children {
            alone &= fields_read(child, variable, fields);
        }
        alone
    };
    match &expr.expr {
        Expr::Select(select) => match &select.operand.expr {
            Expr::Ident(name) if name == variable => {
                fields.insert(select.field.clone());
                true
            }
            _ => fields_read(&select.operand, variable, fields),
        },
        Expr::Ident(name) => name != variable,
        Expr::Unspecified | Expr::Literal(_) => true,
        Expr::Call(call) => all(
            &mut call.target.iter().map(|t| &**t).chain(call.args.iter()),
            fields,
        ),
        Expr::List(list) => all(&mut list.elements.iter(), fields),
        Expr::Map(cel::common::ast::MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
            entries.iter().all(|entry| match &entry.expr {
                EntryExpr::StructField(field) => fields_read(&field.value, variable, fields),
                EntryExpr::MapEntry(pair) => {
                    fields_read(&pair.key, variable, fields)
                        && fields_read(&pair.value, variable, fields)
                }
            })
        }
        Expr::Comprehension(c) => all(
            &mut [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
            .into_iter(),
            fields,
        ),
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
            Value::Object(map) => IntsFirstMap(map, None).serialize(serializer),
            other => other.serialize(serializer),
        }
    }
}

/// How deep an expression's comprehensions (macros) nest: 0 for none.
fn macro_depth(expr: &cel::IdedExpr) -> u32 {
    use cel::common::ast::{EntryExpr, Expr};
    let deepest = |children: &mut dyn Iterator<Item = &cel::IdedExpr>| {
        children.map(macro_depth).max().unwrap_or(0)
    };
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) => 0,
        Expr::Call(call) => deepest(&mut call.target.iter().map(|t| &**t).chain(call.args.iter())),
        Expr::Select(select) => macro_depth(&select.operand),
        Expr::List(list) => deepest(&mut list.elements.iter()),
        Expr::Map(cel::common::ast::MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
            deepest(&mut entries.iter().flat_map(|entry| match &entry.expr {
                EntryExpr::StructField(field) => vec![&field.value],
                EntryExpr::MapEntry(pair) => vec![&pair.key, &pair.value],
            }))
        }
        Expr::Comprehension(c) => deepest(&mut [&c.iter_range, &c.accu_init].into_iter())
            .max(1 + deepest(&mut [&c.loop_cond, &c.loop_step, &c.result].into_iter())),
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
        assert!(
            expr.is_true(&state(json!({"score": 0.5})), &empty, &Meter::unmetered())
                .unwrap()
        );
        assert!(
            !expr
                .is_true(&state(json!({"score": 0.9})), &empty, &Meter::unmetered())
                .unwrap()
        );
    }

    #[test]
    fn a_plain_field_read_gives_what_cel_gives_and_keeps_an_objects_key_order() {
        let state = state(json!({
            "items": [1, -2, 18446744073709551615u64, 2.5, "x", null, true, [[]], {"b": 1, "a": {"d": 2, "c": 3}}],
            "flag": false,
        }));
        let scope = Map::from_iter([("item".to_owned(), json!({"z": 1, "y": [2]}))]);
        for source in ["state.items", "state.flag", "scope.item"] {
            let expr = CelExpr::compile(source).unwrap();
            assert!(expr.field.is_some(), "{source} is a plain read");
            let read = expr.evaluate(&state, &scope, &Meter::unmetered()).unwrap();
            let through_cel = expr.execute(&state, &scope).unwrap();
            // (A map's equality ignores its keys' order.)
            assert_eq!(read, through_cel, "{source}");
        }
        let item = CelExpr::compile("scope.item").unwrap();
        let read = item.evaluate(&state, &scope, &Meter::unmetered()).unwrap();
        assert_eq!(
            read.to_string(),
            r#"{"z":1,"y":[2]}"#,
            "keys in their order"
        );
        // A field that is not there fails as CEL says.
        let missing = CelExpr::compile("state.nothing").unwrap();
        assert_eq!(
            missing
                .evaluate(&state, &scope, &Meter::unmetered())
                .unwrap_err(),
            missing.execute(&state, &scope).unwrap_err()
        );
        // Anything more than one field's read goes through CEL.
        for source in [
            "state.items.size()",
            "has(state.items)",
            "state.items[0]",
            "state",
        ] {
            assert!(
                CelExpr::compile(source).unwrap().field.is_none(),
                "{source}"
            );
        }
    }

    #[test]
    fn nested_macros_over_long_lists_are_refused_before_they_run() {
        let expr =
            CelExpr::compile("state.l.all(x, state.l.all(y, state.l.all(z, true)))").unwrap();
        let items: Vec<Value> = (0..400).map(Value::from).collect();
        let long = state(json!({ "l": items }));
        // This took 17 s on the coordinator's thread.
        let error = expr
            .is_true(&long, &Map::new(), &Meter::unmetered())
            .unwrap_err();
        assert!(matches!(error, ExprError::TooCostly { .. }), "{error}");
        let text = error.to_string();
        assert!(
            text.contains("an expression may take at most 5000000"),
            "{text}"
        );
        assert!(text.contains("nested 3 deep"), "{text}");
        // The same expression on short lists runs.
        assert!(
            expr.is_true(
                &state(json!({"l": [1, 2, 3]})),
                &Map::new(),
                &Meter::unmetered()
            )
            .unwrap()
        );
        // One level over the same long list is cheap.
        let one = CelExpr::compile("state.l.exists(x, x > 398)").unwrap();
        assert!(
            one.is_true(&long, &Map::new(), &Meter::unmetered())
                .unwrap()
        );
    }

    #[test]
    fn string_sums_are_refused_by_the_bytes_they_would_allocate() {
        // A tree of 512 `state.s + state.s` terms over 8 MB asked for 4 GiB
        // and aborted the coordinator inside `cel`'s string add.
        let mut tree = "state.s".to_owned();
        for _ in 0..9 {
            tree = format!("({tree} + {tree})");
        }
        let expr = CelExpr::compile(&format!("size({tree}) > 0")).unwrap();
        let big = state(json!({"s": "x".repeat(8 << 20)}));
        let error = expr
            .is_true(&big, &Map::new(), &Meter::unmetered())
            .unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, ExprError::TooCostly { .. }), "{text}");
        assert!(
            text.contains("could allocate or read about 36.0 GiB"),
            "{text}"
        );
        assert!(text.contains(" characters)` is too costly"), "{text}");
        assert!(text.contains("at most 64 MiB"), "{text}");
        assert!(
            text.starts_with("`size((((((((((state.s + state.s)"),
            "{text}"
        );
        // The same expression on a short string runs.
        assert!(
            expr.is_true(&state(json!({"s": "ab"})), &Map::new(), &Meter::unmetered())
                .unwrap()
        );

        // A left-leaning chain copies what it has so far at each `+`:
        // 250 terms over 1 MB would copy about 31 GB.
        let chain = vec!["state.s"; 250].join(" + ");
        let expr = CelExpr::compile(&format!("size({chain}) > 0")).unwrap();
        let mb = state(json!({"s": "x".repeat(1 << 20)}));
        let text = expr
            .is_true(&mb, &Map::new(), &Meter::unmetered())
            .unwrap_err()
            .to_string();
        assert!(text.contains("could allocate or read about 30."), "{text}");
        // Lists grow the same way.
        let lists = CelExpr::compile("size(state.l + state.l + state.l + state.l) > 0").unwrap();
        let items: Vec<Value> = (0..200_000).map(|i| json!(format!("item {i}"))).collect();
        let long = state(json!({ "l": items }));
        let error = lists
            .is_true(&long, &Map::new(), &Meter::unmetered())
            .unwrap_err();
        assert!(matches!(error, ExprError::TooCostly { .. }), "{error}");
    }

    #[test]
    fn ordinary_expressions_over_big_states_stay_within_budget() {
        let items: Vec<Value> = (0..10_000).map(|i| json!(format!("item {i}"))).collect();
        let big = state(json!({
            "s": "x".repeat(8 << 20),
            "l": items,
            "n": 3,
        }));
        let fine = [
            "size(state.s) > 0",
            "state.s.contains('y') || state.n > 2",
            "state.s.startsWith('x') && state.s != ''",
            "state.l.exists(x, x == 'item 9999')",
            "size(state.l.map(x, x + '!')) == 10000",
            "state.l.filter(x, x.endsWith('7')).size() > 0",
            "'item 5' in state.l",
        ];
        for source in fine {
            let expr = CelExpr::compile(source).unwrap();
            let cost = expr.check_cost(&big, &Map::new(), &Meter::unmetered());
            assert!(cost.is_ok(), "{source}: {cost:?}");
            assert!(
                expr.is_true(&big, &Map::new(), &Meter::unmetered())
                    .unwrap(),
                "{source}"
            );
        }
    }

    #[test]
    fn the_estimate_bounds_what_an_evaluation_allocates() {
        // A map's result grows by what each iteration appends.
        let expr = CelExpr::compile("state.l.map(x, x + x)").unwrap();
        let items: Vec<Value> = (0..1000).map(|_| json!("abcd")).collect();
        let st = state(json!({ "l": items }));
        let cost = expr
            .check_cost(&st, &Map::new(), &Meter::unmetered())
            .unwrap();
        // Each of the 1000 iterations allocates an 8-byte string and a
        // one-item list: far less than the whole list each time.
        assert!(cost.bytes < 500_000, "{cost:?}");
        assert!(cost.bytes > 8 * 1000, "{cost:?}");
        assert!(cost.steps >= 1000, "{cost:?}");
    }

    #[test]
    fn only_the_fields_an_expression_reads_are_handed_to_it() {
        let expr = CelExpr::compile("state.count > 2 && scope.item.size() > 0").unwrap();
        assert_eq!(
            expr.state_fields
                .as_deref()
                .map(|f| f.iter().cloned().collect::<Vec<_>>()),
            Some(vec!["count".to_owned()])
        );
        // A field it does not read may be anything, even huge.
        let big = state(json!({"count": 3, "blob": "x".repeat(1 << 20)}));
        assert!(
            expr.is_true(&big, &state(json!({"item": "a"})), &Meter::unmetered())
                .unwrap()
        );
        // `state` used whole: every field is handed over.
        let whole = CelExpr::compile("size(state) > 1").unwrap();
        assert!(whole.state_fields.is_none());
        assert!(
            whole
                .is_true(&big, &Map::new(), &Meter::unmetered())
                .unwrap()
        );
        // Indexing by a computed key needs the whole state too.
        let index = CelExpr::compile("state['count'] == 3").unwrap();
        assert!(index.state_fields.is_none());
        assert!(
            index
                .is_true(&big, &Map::new(), &Meter::unmetered())
                .unwrap()
        );
        // A macro's own variable named like a field is not the state's.
        let bound = CelExpr::compile("state.l.exists(x, x == state.target)").unwrap();
        assert!(
            bound
                .is_true(
                    &state(json!({"l": [1, 2], "target": 2})),
                    &Map::new(),
                    &Meter::unmetered()
                )
                .unwrap()
        );
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
        assert!(
            expr.is_true(&Map::new(), &Map::new(), &Meter::unmetered())
                .is_err()
        );
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
            assert_eq!(
                expr.evaluate(state, scope, &Meter::unmetered()).unwrap(),
                expected,
                "{source}"
            );
        }
        // A macro's variable is bound inside the macro only.
        let error = CelExpr::compile("state.items.exists(i, i > 1) && i > 0")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown variable 'i'"), "{error}");
    }

    #[test]
    fn evaluations_are_charged_to_the_run_until_its_allowance_is_spent() {
        let expr = CelExpr::compile("size(state.s) > 0").unwrap();
        let st = state(json!({"s": "x".repeat(1000)}));
        let meter = Meter::new(Cost {
            steps: u64::MAX,
            bytes: 10_000,
        });
        let mut passed = 0;
        let refused = loop {
            match expr.is_true(&st, &Map::new(), &meter) {
                Ok(_) => passed += 1,
                Err(error) => break error,
            }
            assert!(passed < 100, "the allowance is never spent");
        };
        assert!(refused.is_too_costly(), "{refused}");
        assert!(
            refused.to_string().contains("max_run_eval_bytes"),
            "{refused}"
        );
        // Each evaluation reads the 1 KB string: about ten fit.
        assert!((5..=10).contains(&passed), "{passed} evaluations passed");
    }
}
