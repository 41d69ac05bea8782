//! Templates and CEL expressions against a state: compiling and evaluating
//! never panic, and never allocate past their budgets (`fuzz/run.sh` runs
//! this with a malloc limit far below what an unbounded `+` of the state's
//! 1 MiB `big` field reaches). The input is an expression, a NUL byte, and
//! a JSON object for the state.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use weft_graph::{CelExpr, Meter, Strictness, Template, TemplateContext};

/// A field big enough that a few doublings of it pass the malloc limit.
fn big() -> &'static str {
    static BIG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIG.get_or_init(|| "x".repeat(1 << 20))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (source, state) = text.split_once('\0').unwrap_or((text, "{}"));
    let state: Map<String, Value> = match serde_json::from_str(state) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let mut state = state;
    state.insert("big".to_owned(), Value::String(big().to_owned()));
    let scope = Map::new();
    // Each evaluation alone is what is bounded here; a run's allowance
    // only ever refuses more.
    let meter = Meter::unmetered();
    if let Ok(template) = Template::parse(source) {
        let context = TemplateContext {
            state: Some(&state),
            scope: Some(&scope),
            output: None,
        };
        for strictness in [Strictness::Strict, Strictness::Lenient] {
            let _ = template.evaluate(&context, strictness, &meter);
        }
    }
    if let Ok(expr) = CelExpr::compile(source) {
        let _ = expr.evaluate(&state, &scope, &meter);
    }
});
