//! Asking a person at the terminal for the answers a waiting run needs.

use std::io::{BufRead, Write};

use serde_json::Value;
use weft_client::WaitingNode;

/// An answer typed at the prompt.
pub struct Answer {
    /// The value to resume with.
    pub value: Value,
    /// An optional comment.
    pub comment: Option<String>,
}

/// Asks for one node's answer; `None` when stdin ends.
pub async fn ask(node: WaitingNode) -> Option<Answer> {
    tokio::task::spawn_blocking(move || ask_blocking(&node))
        .await
        .ok()
        .flatten()
}

fn ask_blocking(node: &WaitingNode) -> Option<Answer> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut stderr = std::io::stderr();
    let _ = writeln!(
        stderr,
        "\n{} asks: {}",
        super::terminal::for_terminal(&node.node),
        super::terminal::for_terminal(&node.prompt)
    );
    if node.kind == "approval" {
        loop {
            let _ = write!(stderr, "approve or reject? [a/r] ");
            let _ = stderr.flush();
            let line = lines.next()?.ok()?;
            let value = match line.trim().to_ascii_lowercase().as_str() {
                "a" | "approve" | "y" | "yes" => "approve",
                "r" | "reject" | "n" | "no" => "reject",
                _ => continue,
            };
            let _ = write!(stderr, "comment (optional): ");
            let _ = stderr.flush();
            let comment = lines
                .next()
                .and_then(Result::ok)
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty());
            return Some(Answer {
                value: Value::from(value),
                comment,
            });
        }
    }
    let _ = write!(stderr, "> ");
    let _ = stderr.flush();
    let line = lines.next()?.ok()?;
    let text = line.trim();
    let value = serde_json::from_str(text).unwrap_or_else(|_| Value::from(text));
    Some(Answer {
        value,
        comment: None,
    })
}
