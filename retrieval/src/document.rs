//! A knowledge base's files read as documents.
//!
//! A Markdown file (`.md`, `.markdown`) is one document whose headings
//! split it and whose links join it to others; any other text file is one
//! document of paragraphs. A JSON Lines file (`.jsonl`) holds one document
//! per line: `{"text": …, "source": …, "links": […]}`, where only `text`
//! is required, `source` defaults to `FILE#LINE` and `links` names other
//! documents by their sources. A file that is not UTF-8, or a line that
//! is not such an object, is refused naming the file and the line.

use serde::Deserialize;

/// How a document's text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Headings split it; links join it to other documents.
    Markdown,
    /// Paragraphs only.
    Text,
}

/// One document of a knowledge base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where it comes from: the file's path in the bundle, or a JSON Lines
    /// record's `source`.
    pub source: String,
    /// Its text.
    pub text: String,
    /// How its text is read.
    pub format: Format,
    /// The sources it links to, as a JSON Lines record gives them (a
    /// Markdown document's links are read from its text: [`crate::links`]).
    pub links: Vec<String>,
}

/// Why a file could not be read as documents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The file is not text.
    #[error("knowledge source '{file}' is not UTF-8 text (byte {offset})")]
    NotText {
        /// The file.
        file: String,
        /// Where its first invalid byte is.
        offset: usize,
    },
    /// A JSON Lines record is malformed.
    #[error("knowledge source '{file}' line {line}: {reason}")]
    Record {
        /// The file.
        file: String,
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// A JSON Lines record.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    text: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    links: Vec<String>,
}

/// The documents of file `path` (its path in the bundle) holding
/// `content`.
pub fn read(path: &str, content: &[u8]) -> Result<Vec<Document>, DocumentError> {
    let text = std::str::from_utf8(content).map_err(|e| DocumentError::NotText {
        file: path.to_owned(),
        offset: e.valid_up_to(),
    })?;
    let extension = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let whole = |format| {
        vec![Document {
            source: path.to_owned(),
            text: text.to_owned(),
            format,
            links: Vec::new(),
        }]
    };
    match extension.as_str() {
        "md" | "markdown" => Ok(whole(Format::Markdown)),
        "jsonl" => json_lines(path, text),
        _ => Ok(whole(Format::Text)),
    }
}

fn json_lines(path: &str, text: &str) -> Result<Vec<Document>, DocumentError> {
    let mut documents = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(line).map_err(|e| DocumentError::Record {
            file: path.to_owned(),
            line: index + 1,
            reason: reason_of(&e),
        })?;
        documents.push(Document {
            source: record
                .source
                .unwrap_or_else(|| format!("{path}#{}", index + 1)),
            text: record.text,
            format: Format::Text,
            links: record.links,
        });
    }
    Ok(documents)
}

/// serde's message without its position (the line is named already; a
/// record is one line).
fn reason_of(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_text_files_are_one_document_each() {
        let docs = read("docs/a.md", b"# A\n\ntext").unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].source, "docs/a.md");
        assert_eq!(docs[0].format, Format::Markdown);
        let docs = read("notes.txt", b"plain").unwrap();
        assert_eq!(docs[0].format, Format::Text);
    }

    #[test]
    fn a_json_lines_file_is_a_document_per_line() {
        let content = br#"{"text": "first", "source": "kb/1", "links": ["kb/2"]}

{"text": "second"}
"#;
        let docs = read("faq.jsonl", content).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].source, "kb/1");
        assert_eq!(docs[0].links, vec!["kb/2".to_owned()]);
        assert_eq!(
            docs[1].source, "faq.jsonl#3",
            "its line, blank lines counted"
        );
        assert_eq!(docs[1].text, "second");
    }

    #[test]
    fn a_bad_record_or_file_is_named_with_its_line() {
        let error = read("faq.jsonl", b"{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "knowledge source 'faq.jsonl' line 2: unknown field `txt`, expected one of `text`, `source`, `links`"
        );
        let error = read("faq.jsonl", b"{\"source\": \"s\"}").unwrap_err();
        assert_eq!(
            error.to_string(),
            "knowledge source 'faq.jsonl' line 1: missing field `text`"
        );
        let error = read("faq.jsonl", b"[1, 2]").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("knowledge source 'faq.jsonl' line 1: invalid type"),
            "{error}"
        );
        let error = read("blob.md", b"ok \xff\xfe").unwrap_err();
        assert_eq!(
            error.to_string(),
            "knowledge source 'blob.md' is not UTF-8 text (byte 3)"
        );
    }
}
