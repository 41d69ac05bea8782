//! JSON Schemas in a graph (`output_schema`, an input node's `schema`),
//! compiled when the graph loads so that a malformed schema is a validation
//! error, and checked against values during a run.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// Why a schema or a value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema itself is malformed.
    #[error("not a valid JSON Schema: {0}")]
    Invalid(String),
    /// A value does not match; `place` is the JSON pointer of the first
    /// failing part (empty for the whole value).
    #[error("does not match the schema{}: {detail}", if place.is_empty() { String::new() } else { format!(" at {place}") })]
    Mismatch {
        /// Where the value fails.
        place: String,
        /// How.
        detail: String,
    },
}

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
    pub fn compile(source: &Value) -> Result<Self, SchemaError> {
        let validator = jsonschema::validator_for(source)
            .map_err(|error| SchemaError::Invalid(error.to_string()))?;
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
    pub fn check(&self, value: &Value) -> Result<(), SchemaError> {
        match self.validator.iter_errors(value).next() {
            None => Ok(()),
            Some(error) => Err(SchemaError::Mismatch {
                place: error.instance_path().to_string(),
                detail: error.to_string(),
            }),
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
        assert!(matches!(&error, SchemaError::Mismatch { place, .. } if place == "/score"));
        assert!(error.to_string().contains("at /score"), "{error}");
        assert!(schema.check(&json!({})).is_err());
    }

    #[test]
    fn malformed_schema_is_rejected() {
        let error = Schema::compile(&json!({"type": "banana"})).unwrap_err();
        assert!(matches!(error, SchemaError::Invalid(_)));
        assert!(
            error.to_string().starts_with("not a valid JSON Schema"),
            "{error}"
        );
    }
}
