//! Expressions inside a graph: CEL conditions and Jinja-style templates.
//!
//! Both are compiled when the graph is loaded, so a malformed expression is a
//! validation error rather than a surprise in the middle of a run. Evaluation
//! is pure (no I/O, no clock) so the run state machine can call it directly.
//!
//! Templates are rendered by `minijinja`. Two environments exist: a strict one
//! (an undefined name is an error naming the name) for prompts and map fields,
//! and a lenient one for `state_updates`, where an undefined name renders as
//! `""` (seed 003, "Reading `output_key` before writing it"). Both carry fuel,
//! so a template that would run away stops with an error instead of spinning.
//! CEL conditions live in [`super::cel`]; both share [`ExprError`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::OnceLock;

use minijinja::{Environment, UndefinedBehavior};

use super::cel_cost::{Cost, json_bytes};
use super::eval_meter::{Meter, Overdrawn};
use serde_json::{Map, Value};

/// Fuel a single template render may spend before it is stopped: an
/// instruction costs one, and minijinja charges one per 64 bytes of every
/// string, list or map it makes or writes, so this bounds a render at
/// about a million instructions and 64 MiB (as [`super::cel_cost::BYTE_BUDGET`]
/// bounds a CEL evaluation).
const TEMPLATE_FUEL: u64 = 1 << 20;

impl Overdrawn {
    /// The refusal of the evaluation of `source` that would have overdrawn
    /// its run's allowance.
    pub(crate) fn refusal(self, source: &str) -> ExprError {
        ExprError::TooCostly {
            expr: abbreviated(source),
            detail: self.0,
        }
    }
}

/// Why an expression or a template failed to compile or to evaluate. Each
/// message quotes the expression as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// A CEL expression does not parse.
    #[error(
        "CEL expression `{expr}` does not parse: {detail} (at column {column} of the expression)"
    )]
    CelSyntax {
        /// The expression.
        expr: String,
        /// What the parser said.
        detail: String,
        /// Where (1-based).
        column: usize,
    },
    /// A CEL expression names a variable other than `state` and `scope`.
    #[error(
        "CEL expression `{expr}` refers to unknown variable '{name}' \
         (expressions see `state` and `scope`: write `state.{name}`)"
    )]
    UnknownVariable {
        /// The expression.
        expr: String,
        /// The variable.
        name: String,
    },
    /// A CEL expression failed while evaluating (a missing field, a type
    /// mismatch, …).
    #[error("`{expr}` failed: {detail}")]
    CelFailed {
        /// The expression.
        expr: String,
        /// What CEL said.
        detail: String,
    },
    /// Evaluating the expression or template could take more steps or
    /// bytes than one evaluation may (`ExpressionTooCostly`).
    #[error("`{expr}` is too costly: {detail}")]
    TooCostly {
        /// The expression or template, as written.
        expr: String,
        /// Which limit, and by how much.
        detail: String,
    },
    /// A value cannot be handed to, or taken from, an expression as JSON.
    #[error("`{expr}` {detail}")]
    NotJson {
        /// The expression or template.
        expr: String,
        /// What could not be converted.
        detail: String,
    },
    /// A template does not parse.
    #[error("template `{template}` does not parse: {detail}")]
    TemplateSyntax {
        /// The template.
        template: String,
        /// What the parser said.
        detail: String,
    },
    /// A template reads a name nothing defines.
    #[error("undefined name `{name}` in template `{template}`")]
    UndefinedName {
        /// The template.
        template: String,
        /// The name.
        name: String,
    },
    /// A template's value has no JSON form.
    #[error("template `{template}` produced a value with no JSON form: {detail}")]
    TemplateNotJson {
        /// The template.
        template: String,
        /// What serde said.
        detail: String,
    },
    /// A template failed while rendering (an undefined name, fuel spent, …).
    #[error("template `{template}`: {detail}")]
    TemplateFailed {
        /// The template.
        template: String,
        /// What minijinja said.
        detail: String,
    },
}

impl ExprError {
    /// Whether the evaluation was refused for what it would cost (the same
    /// evaluation would be refused again).
    pub fn is_too_costly(&self) -> bool {
        matches!(self, Self::TooCostly { .. })
    }
}

/// An expression as an error quotes it: whole when short, else its
/// beginning and how long it is.
pub(crate) fn abbreviated(source: &str) -> String {
    const SHOWN: usize = 160;
    if source.len() <= SHOWN {
        return source.to_owned();
    }
    let mut end = SHOWN;
    while !source.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} characters)", &source[..end], source.len())
}

/// JSON truthiness: `false`, `null`, `0`, `""`, `[]` and `{}` are false.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// How undefined names are treated when a template is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// An undefined name is an error naming the template and the name.
    Strict,
    /// An undefined name renders as `""` (used by `state_updates`).
    Lenient,
}

/// A Jinja-style template, syntax-checked at load time.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    source: String,
    /// Set when the whole template is one `{{ expression }}`: the field then
    /// takes the expression's value (a list stays a list).
    whole_expression: Option<String>,
    /// The names it reads, so a rendering hands over only those.
    reads: std::sync::Arc<Reads>,
}

/// What a template reads of its context.
#[derive(Debug, Default, PartialEq)]
struct Reads {
    /// Top-level names (state fields, scope names, `output`, `state`).
    names: BTreeSet<String>,
    /// When it reads `state.NAME` only: those names; `None` when it uses
    /// `state` whole (or not at all).
    state_fields: Option<BTreeSet<String>>,
}

impl Reads {
    /// From minijinja's undeclared variables, top-level and nested.
    fn of(top: HashSet<String>, nested: HashSet<String>) -> Self {
        let state_fields = top.contains("state").then(|| {
            nested
                .iter()
                .filter_map(|path| path.strip_prefix("state."))
                .map(|field| field.split('.').next().unwrap_or(field).to_owned())
                .collect::<BTreeSet<String>>()
        });
        // `state` used bare (`state | length`, `state[key]`): all of it.
        let whole_state = nested.contains("state");
        Self {
            names: top.into_iter().collect(),
            state_fields: if whole_state { None } else { state_fields },
        }
    }
}

impl Template {
    /// Parses `source`; an error says what is wrong and where.
    pub fn parse(source: &str) -> Result<Self, ExprError> {
        let whole_expression = single_expression(source);
        let env = environment(Strictness::Strict);
        let syntax = |error: minijinja::Error| ExprError::TemplateSyntax {
            template: source.to_owned(),
            detail: describe(&error),
        };
        let reads = match &whole_expression {
            Some(expression) => {
                let compiled = env.compile_expression(expression).map_err(syntax)?;
                Reads::of(
                    compiled.undeclared_variables(false),
                    compiled.undeclared_variables(true),
                )
            }
            None => {
                let compiled = env.template_from_str(source).map_err(syntax)?;
                Reads::of(
                    compiled.undeclared_variables(false),
                    compiled.undeclared_variables(true),
                )
            }
        };
        Ok(Self {
            source: source.to_owned(),
            whole_expression,
            reads: std::sync::Arc::new(reads),
        })
    }

    /// Returns the template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The state fields it may read (as `NAME` or `state.NAME`), or `None`
    /// when it reads `state` whole.
    pub fn state_reads(&self) -> Option<BTreeSet<String>> {
        let mut fields: BTreeSet<String> = self
            .reads
            .names
            .iter()
            .filter(|name| !matches!(name.as_str(), "state" | "output"))
            .cloned()
            .collect();
        if self.reads.names.contains("state") {
            fields.extend(self.reads.state_fields.as_ref()?.iter().cloned());
        }
        Some(fields)
    }

    /// Whether it reads the top-level name `name` (a field, a scope name,
    /// a binding such as `output`).
    pub fn reads_name(&self, name: &str) -> bool {
        self.reads.names.contains(name)
    }

    /// Reports whether the template holds any `{{ }}` or `{% %}` markup.
    pub fn has_markup(&self) -> bool {
        self.source.contains("{{") || self.source.contains("{%")
    }

    /// Renders the template to a JSON value: the expression's own value when
    /// the template is a single `{{ expression }}`, else the rendered text.
    ///
    /// The run's `meter` is charged what the render read and made; one
    /// that takes the run past its allowance is refused.
    pub fn evaluate(
        &self,
        context: &TemplateContext,
        strictness: Strictness,
        meter: &Meter,
    ) -> Result<Value, ExprError> {
        let (ctx, read) = context.to_minijinja(&self.reads);
        // What it reads is known before it runs; its fuel bounds the rest.
        let reading = Cost {
            steps: 0,
            bytes: read,
        };
        let value = meter.run(reading, || self.evaluate_in(ctx, context, strictness))?;
        let made = match &value {
            Value::String(text) => text.len() as u64,
            other => json_bytes(other),
        };
        let cost = Cost {
            steps: 1 + self.source.len() as u64,
            bytes: read.saturating_add(made),
        };
        meter
            .charge(cost)
            .map_err(|overdrawn| overdrawn.refusal(&self.source))?;
        Ok(value)
    }

    fn evaluate_in(
        &self,
        ctx: minijinja::Value,
        context: &TemplateContext,
        strictness: Strictness,
    ) -> Result<Value, ExprError> {
        let env = environment(strictness);
        match &self.whole_expression {
            Some(expression) => {
                let compiled = env
                    .compile_expression(expression)
                    .map_err(|error| self.failure(&error, context, Some(expression)))?;
                let value = compiled
                    .eval(ctx)
                    .map_err(|error| self.failure(&error, context, Some(expression)))?;
                if value.is_undefined() {
                    if strictness == Strictness::Strict {
                        return Err(self.undefined(context, expression));
                    }
                    return Ok(Value::String(String::new()));
                }
                serde_json::to_value(&value).map_err(|error| ExprError::TemplateNotJson {
                    template: self.source.clone(),
                    detail: error.to_string(),
                })
            }
            None => env
                .render_str(&self.source, ctx)
                .map(Value::String)
                .map_err(|error| {
                    let span = error.range().and_then(|r| self.source.get(r));
                    self.failure(&error, context, span)
                }),
        }
    }

    /// Renders the template as text (a non-string value is shown as JSON).
    pub fn render(
        &self,
        context: &TemplateContext,
        strictness: Strictness,
        meter: &Meter,
    ) -> Result<String, ExprError> {
        Ok(match self.evaluate(context, strictness, meter)? {
            Value::String(text) => text,
            other => other.to_string(),
        })
    }

    /// A render error; an undefined value is reported by the name that
    /// is missing when `expression` (the failing part) starts with one.
    fn failure(
        &self,
        error: &minijinja::Error,
        context: &TemplateContext,
        expression: Option<&str>,
    ) -> ExprError {
        if error.kind() == minijinja::ErrorKind::UndefinedError
            && let Some(expression) = expression
        {
            return self.undefined(context, expression);
        }
        if error.kind() == minijinja::ErrorKind::OutOfFuel {
            return ExprError::TooCostly {
                expr: abbreviated(&self.source),
                detail: format!(
                    "rendering it on this state would take more than {TEMPLATE_FUEL} instructions or allocate more than {}",
                    super::cel_cost::bytes_text(TEMPLATE_FUEL * 64)
                ),
            };
        }
        ExprError::TemplateFailed {
            template: self.source.clone(),
            detail: describe(error),
        }
    }

    /// The error for an undefined value in `expression`: its root name when
    /// the context lacks it, else the expression itself.
    fn undefined(&self, context: &TemplateContext, expression: &str) -> ExprError {
        let expression = expression
            .trim()
            .trim_start_matches("{{")
            .trim_end_matches("}}")
            .trim();
        let root: String = expression
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !root.is_empty() && !context.defines(&root) {
            return ExprError::UndefinedName {
                template: self.source.clone(),
                name: root,
            };
        }
        ExprError::TemplateFailed {
            template: self.source.clone(),
            detail: format!("`{expression}` is undefined"),
        }
    }
}

/// The names a template can see: the state's fields (and `state` itself), the
/// step's scope (a map item's `as` name) and, after a step, `output`.
#[derive(Debug, Default)]
pub struct TemplateContext<'a> {
    /// The state the template reads.
    pub state: Option<&'a Map<String, Value>>,
    /// The step's scope.
    pub scope: Option<&'a Map<String, Value>>,
    /// The transient output of the step that just ran.
    pub output: Option<&'a Value>,
}

impl TemplateContext<'_> {
    /// Whether a template can see `name`.
    fn defines(&self, name: &str) -> bool {
        let in_map = |map: Option<&Map<String, Value>>| map.is_some_and(|m| m.contains_key(name));
        in_map(self.state)
            || in_map(self.scope)
            || (name == "state" && self.state.is_some())
            || (name == "output" && self.output.is_some())
    }

    /// The minijinja context with only what the template reads (a prompt
    /// that names one field of a 10 MB state converts that field alone),
    /// and about how many bytes that is.
    fn to_minijinja(&self, reads: &Reads) -> (minijinja::Value, u64) {
        let read = std::cell::Cell::new(0u64);
        let value = |v: &Value| {
            read.set(read.get().saturating_add(json_bytes(v)));
            minijinja::Value::from(minijinja::value::Serde(v))
        };
        let mut names: BTreeMap<&str, minijinja::Value> = BTreeMap::new();
        for name in &reads.names {
            let found = self
                .scope
                .and_then(|scope| scope.get_key_value(name))
                .or_else(|| self.state.and_then(|state| state.get_key_value(name)));
            if let Some((key, v)) = found {
                names.insert(key, value(v));
            }
        }
        if let Some(state) = self.state.filter(|_| reads.names.contains("state")) {
            let whole = match &reads.state_fields {
                None => {
                    let all = state.values().map(json_bytes);
                    read.set(read.get().saturating_add(all.sum()));
                    minijinja::Value::from(minijinja::value::Serde(state))
                }
                Some(fields) => minijinja::Value::from_pairs(
                    fields
                        .iter()
                        .filter_map(|f| state.get_key_value(f))
                        .map(|(k, v)| (k.as_str(), value(v)))
                        .collect::<Vec<_>>(),
                ),
            };
            names.insert("state", whole);
        }
        if let Some(output) = self.output.filter(|_| reads.names.contains("output")) {
            names.insert("output", value(output));
        }
        (minijinja::Value::from_pairs(names), read.get())
    }
}

/// Returns the inner expression when `source` is exactly one `{{ … }}`.
fn single_expression(source: &str) -> Option<String> {
    let trimmed = source.trim();
    let inner = trimmed.strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    Some(inner.trim().to_owned())
}

fn environment(strictness: Strictness) -> &'static Environment<'static> {
    static STRICT: OnceLock<Environment<'static>> = OnceLock::new();
    static LENIENT: OnceLock<Environment<'static>> = OnceLock::new();
    let (cell, behavior) = match strictness {
        Strictness::Strict => (&STRICT, UndefinedBehavior::Strict),
        Strictness::Lenient => (&LENIENT, UndefinedBehavior::Lenient),
    };
    cell.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(behavior);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env
    })
}

fn describe(error: &minijinja::Error) -> String {
    let mut text = match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.kind().to_string(),
    };
    if let Some(line) = error.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn state(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn whole_expression_template_keeps_its_type() {
        let template = Template::parse("{{ subjects }}").unwrap();
        let st = state(json!({"subjects": ["a", "b"]}));
        let ctx = TemplateContext {
            state: Some(&st),
            ..Default::default()
        };
        assert_eq!(
            template
                .evaluate(&ctx, Strictness::Strict, &Meter::unmetered())
                .unwrap(),
            json!(["a", "b"])
        );
    }

    #[test]
    fn text_template_renders_state_and_scope() {
        let template = Template::parse("Research {{ subject }} for {{ state.topic }}.").unwrap();
        let st = state(json!({"topic": "rust"}));
        let scope = state(json!({"subject": "tokio"}));
        let ctx = TemplateContext {
            state: Some(&st),
            scope: Some(&scope),
            output: None,
        };
        assert_eq!(
            template
                .render(&ctx, Strictness::Strict, &Meter::unmetered())
                .unwrap(),
            "Research tokio for rust."
        );
    }

    #[test]
    fn a_template_is_handed_only_the_names_it_reads() {
        let template = Template::parse("{{ subject }} for {{ state.topic }}").unwrap();
        let names: Vec<&str> = template.reads.names.iter().map(String::as_str).collect();
        assert_eq!(names, ["state", "subject"]);
        let fields = template
            .reads
            .state_fields
            .as_ref()
            .expect("fields of state");
        assert_eq!(fields.iter().collect::<Vec<_>>(), ["topic"]);
        let whole = Template::parse("{{ state | length }}").unwrap();
        assert_eq!(whole.reads.state_fields, None, "state used whole");
        let looped = Template::parse("{% for s in subjects %}{{ s }}{% endfor %}").unwrap();
        let names: Vec<&str> = looped.reads.names.iter().map(String::as_str).collect();
        assert_eq!(names, ["subjects"], "a loop's own variable is not read");
        // Renders see the same values as before.
        let st = state(json!({"topic": "rust", "blob": "x".repeat(1 << 20), "n": 1}));
        let ctx = TemplateContext {
            state: Some(&st),
            scope: None,
            output: None,
        };
        assert_eq!(
            whole
                .evaluate(&ctx, Strictness::Strict, &Meter::unmetered())
                .unwrap(),
            json!(3)
        );
    }

    #[test]
    fn strict_template_names_the_undefined_name() {
        let template = Template::parse("Hello {{ nobody }}").unwrap();
        let st = Map::new();
        let ctx = TemplateContext {
            state: Some(&st),
            ..Default::default()
        };
        let error = template
            .render(&ctx, Strictness::Strict, &Meter::unmetered())
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "undefined name `nobody` in template `Hello {{ nobody }}`"
        );
        let whole = Template::parse("{{ subjects }}").unwrap();
        let error = whole
            .evaluate(&ctx, Strictness::Strict, &Meter::unmetered())
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "undefined name `subjects` in template `{{ subjects }}`"
        );
    }

    #[test]
    fn lenient_template_renders_undefined_as_empty() {
        let template = Template::parse("{{ summary }}\n{{ output }}").unwrap();
        let st = Map::new();
        let out = json!("x");
        let ctx = TemplateContext {
            state: Some(&st),
            scope: None,
            output: Some(&out),
        };
        assert_eq!(
            template
                .render(&ctx, Strictness::Lenient, &Meter::unmetered())
                .unwrap(),
            "\nx"
        );
        let whole = Template::parse("{{ summary }}").unwrap();
        assert_eq!(
            whole
                .evaluate(&ctx, Strictness::Lenient, &Meter::unmetered())
                .unwrap(),
            json!("")
        );
    }

    #[test]
    fn template_syntax_error_is_reported() {
        let error = Template::parse("{{ a + }}").unwrap_err().to_string();
        assert!(error.contains("does not parse"), "{error}");
        let error = Template::parse("{% if x %}open").unwrap_err().to_string();
        assert!(error.contains("does not parse"), "{error}");
    }

    #[test]
    fn runaway_template_is_stopped_by_fuel() {
        let template = Template::parse(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        )
        .unwrap();
        let st = Map::new();
        let ctx = TemplateContext {
            state: Some(&st),
            ..Default::default()
        };
        assert!(
            template
                .render(&ctx, Strictness::Strict, &Meter::unmetered())
                .is_err()
        );
    }

    #[test]
    fn templates_are_bounded_by_the_bytes_they_make() {
        let st = state(json!({"s": "x".repeat(8 << 20)}));
        let ctx = TemplateContext {
            state: Some(&st),
            ..Default::default()
        };
        let bombs = [
            // Each `~` copies what it has so far.
            format!("{{{{ {} }}}}", vec!["s"; 64].join(" ~ ")),
            // One repetition asks for it all at once.
            "{{ 'x' * 99000000 }}".to_owned(),
            "{% for i in range(100) %}{{ s }}{% endfor %}".to_owned(),
        ];
        for bomb in &bombs {
            let template = Template::parse(bomb).unwrap();
            let error = template
                .render(&ctx, Strictness::Strict, &Meter::unmetered())
                .unwrap_err();
            assert!(
                matches!(error, ExprError::TooCostly { .. }),
                "{bomb}: {error}"
            );
            assert!(error.to_string().contains("64 MiB"), "{error}");
        }
        // Passing a big field through, or writing it once, is fine.
        for fine in ["{{ s }}", "head {{ s }} tail", "{{ s | length }}"] {
            let template = Template::parse(fine).unwrap();
            assert!(
                template
                    .render(&ctx, Strictness::Strict, &Meter::unmetered())
                    .is_ok(),
                "{fine}"
            );
        }
    }

    #[test]
    fn truthiness_follows_json() {
        assert!(!truthy(&json!(null)));
        assert!(!truthy(&json!(0)));
        assert!(truthy(&json!(2)));
        assert!(!truthy(&json!("")));
        assert!(truthy(&json!([1])));
    }
}
