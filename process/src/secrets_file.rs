//! Secrets files: `NAME=value` lines, read by the worker (values for
//! `${NAME}` in node configuration) and by the coordinator (token secrets
//! named by `[[tokens]]`). Blank lines and lines starting with `#` are
//! skipped; the value is the rest of the line after the first `=`. An
//! error names the file and the line, never the line's text: it may hold
//! a value.

use std::path::Path;

/// Why a secrets file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretsFileError {
    /// The file cannot be read.
    #[error("cannot read secrets file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line that is not `NAME=value`.
    #[error("secrets file {path}, line {line}: expected NAME=value")]
    Malformed {
        /// The file.
        path: String,
        /// 1-based line number (the line itself is not shown: it may hold a value).
        line: usize,
    },
}

/// The `(name, value)` pairs of a secrets file, in order.
pub fn read_secrets_file(path: &Path) -> Result<Vec<(String, String)>, SecretsFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| SecretsFileError::Read {
        path: shown.clone(),
        source,
    })?;
    let mut pairs = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match trimmed.split_once('=') {
            Some((name, value)) if is_secret_name(name.trim()) => {
                pairs.push((name.trim().to_owned(), value.to_owned()));
            }
            _ => {
                return Err(SecretsFileError::Malformed {
                    path: shown,
                    line: index + 1,
                });
            }
        }
    }
    Ok(pairs)
}

/// Whether `name` can name a secret: letters, digits and `_`, not
/// starting with a digit.
pub fn is_secret_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secrets_file_is_name_value_lines() {
        let path = std::env::temp_dir().join(format!("weft-secrets-{}", std::process::id()));
        std::fs::write(&path, "# tokens\n\nAPI_KEY=a=b c\n  OTHER = x\n").unwrap();
        let pairs = read_secrets_file(&path).unwrap();
        assert_eq!(
            pairs,
            [
                ("API_KEY".to_owned(), "a=b c".to_owned()),
                ("OTHER".to_owned(), " x".to_owned())
            ]
        );
        std::fs::write(&path, "API_KEY=1\nnot a pair\n").unwrap();
        let error = read_secrets_file(&path).unwrap_err().to_string();
        assert!(error.ends_with("line 2: expected NAME=value"), "{error}");
        std::fs::remove_file(&path).ok();
    }
}
