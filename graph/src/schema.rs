//! JSON Schemas in a graph (`output_schema`, an input node's `schema`),
//! compiled when the graph loads so that a malformed schema is a validation
//! error, and checked against values during a run.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// A compiled JSON Schema and its source.
#[derive(Clone)]
pub struct Schema {
    source: Value,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Schema").field(&self.source).finish()
    }
}

impl Schema {
    /// Compiles a schema, or says why it is not one.
    pub fn compile(source: &Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(source)
            .map_err(|error| format!("not a valid JSON Schema: {error}"))?;
        Ok(Self {
            source: source.clone(),
            validator: Arc::new(validator),
        })
    }

    /// The schema as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Checks a value; the error names the first failing place.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(error) => {
                let path = error.instance_path().to_string();
                let place = if path.is_empty() {
                    String::new()
                } else {
                    format!(" at {path}")
                };
                Err(format!("does not match the schema{place}: {error}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn checks_values_and_names_the_place() {
        let schema = Schema::compile(&json!({
            "type": "object",
            "properties": {"score": {"type": "number"}},
            "required": ["score"]
        }))
        .unwrap();
        assert!(schema.check(&json!({"score": 0.5})).is_ok());
        let error = schema.check(&json!({"score": "high"})).unwrap_err();
        assert!(error.contains("at /score"), "{error}");
        assert!(schema.check(&json!({})).is_err());
    }

    #[test]
    fn malformed_schema_is_rejected() {
        let error = Schema::compile(&json!({"type": "banana"})).unwrap_err();
        assert!(error.starts_with("not a valid JSON Schema"), "{error}");
    }
}
