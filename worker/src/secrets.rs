//! `${NAME}` secrets in node configuration (SPEC 2).
//!
//! A graph names a secret; only the worker that runs the node knows its
//! value, from its own environment or its secrets file. Substitution happens
//! here, just before use, so values never travel in tasks, run records or
//! events. Each attempt keeps the values it substituted in a [`Redactor`],
//! which masks them as `***` in anything the attempt reports (errors,
//! stderr tails), so a script that echoes its credentials on failure does
//! not leak them into `weft` output.
//!
//! `${NAME}` (letters, digits, `_`, not starting with a digit) is a secret
//! reference; `$${NAME}` is the literal text `${NAME}`, for shells that use
//! the same syntax. An unset secret is an error naming it, never an empty
//! string.

use std::collections::HashMap;
use std::path::Path;

/// Why a configuration value cannot be substituted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// `${NAME}` names no secret this worker has.
    #[error(
        "secret ${{{0}}} is not set on this worker (set it in the worker's environment or secrets file)"
    )]
    Unset(String),
}

pub use weft_process::SecretsFileError;

/// The secrets a worker can substitute.
#[derive(Clone, Default)]
pub struct Secrets {
    values: HashMap<String, String>,
}

/// Names only: a worker's configuration may be logged.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.values.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Secrets").field("names", &names).finish()
    }
}

impl Secrets {
    /// Secrets from `(name, value)` pairs; a later pair wins.
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            values: pairs.into_iter().collect(),
        }
    }

    /// Reads a secrets file (see [`weft_process::read_secrets_file`]).
    pub fn read_file(path: &Path) -> Result<Vec<(String, String)>, SecretsFileError> {
        weft_process::read_secrets_file(path)
    }

    /// `text` with every `${NAME}` replaced; the values used are added to
    /// `used` so the attempt can redact them.
    pub fn substitute(&self, text: &str, used: &mut Redactor) -> Result<String, SecretError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find('$') {
            out.push_str(&rest[..start]);
            let after = &rest[start..];
            if let Some(name) = after.strip_prefix("$${").and_then(reference) {
                out.push_str("${");
                out.push_str(name);
                out.push('}');
                rest = &after[name.len() + 4..];
                continue;
            }
            if let Some(name) = after.strip_prefix("${").and_then(reference) {
                let value = self
                    .values
                    .get(name)
                    .ok_or_else(|| SecretError::Unset(name.to_owned()))?;
                out.push_str(value);
                used.add(value);
                rest = &after[name.len() + 3..];
                continue;
            }
            out.push('$');
            rest = &after[1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// The secret name at the start of `text` (after `${`), when `text` goes on
/// with a name and `}`.
fn reference(text: &str) -> Option<&str> {
    let end = text.find('}')?;
    let name = &text[..end];
    weft_process::is_secret_name(name).then_some(name)
}

/// The secret values one attempt substituted, to mask in what it reports.
#[derive(Clone, Default)]
pub struct Redactor {
    values: Vec<String>,
}

impl Redactor {
    pub(crate) fn add(&mut self, value: &str) {
        if !value.is_empty() && !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_owned());
            // Longest first, so a secret that contains another is masked whole.
            self.values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        }
    }

    /// The values substituted, longest first.
    pub(crate) fn values(&self) -> &[String] {
        &self.values
    }

    /// `text` with every substituted value replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for value in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), "***");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets::new([
            ("API_KEY".to_owned(), "s3cret".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ])
    }

    #[test]
    fn references_are_replaced_and_remembered_for_redaction() {
        let mut used = Redactor::default();
        let text = secrets()
            .substitute("Bearer ${API_KEY} and $API_KEY, ${EMPTY}.", &mut used)
            .unwrap();
        assert_eq!(text, "Bearer s3cret and $API_KEY, .");
        assert_eq!(
            used.redact("auth failed for s3cret (s3cret)"),
            "auth failed for *** (***)"
        );
    }

    #[test]
    fn an_unset_secret_is_an_error_naming_it() {
        let error = secrets()
            .substitute("${MISSING}-x", &mut Redactor::default())
            .unwrap_err();
        assert_eq!(error, SecretError::Unset("MISSING".into()));
        assert!(
            error
                .to_string()
                .starts_with("secret ${MISSING} is not set")
        );
    }

    #[test]
    fn escapes_and_non_names_stay_literal() {
        let mut used = Redactor::default();
        let s = secrets();
        assert_eq!(
            s.substitute("$${API_KEY}", &mut used).unwrap(),
            "${API_KEY}"
        );
        assert_eq!(
            s.substitute("${x:-default} ${1} no ${closing $", &mut used)
                .unwrap(),
            "${x:-default} ${1} no ${closing $"
        );
        assert_eq!(used.redact("s3cret"), "s3cret", "nothing was substituted");
    }
}
