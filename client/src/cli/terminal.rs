//! Writing to stdout and stderr safely.
//!
//! `weft … | head` closes stdout early: the rest of the output is dropped
//! quietly and the command still ends with its own exit status, instead of
//! panicking. Text that comes from elsewhere (script stderr in errors,
//! prompts rendered from the state, node ids) may carry control
//! characters; on a terminal they are shown escaped, so an escape sequence
//! cannot hide or rewrite what a person is asked to approve. Redirected
//! output is written as it is (JSON output escapes them itself).

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);
/// Stderr's last line is a model's text still being written (no newline
/// after it yet): a line written now starts on a line of its own.
static TEXT_OPEN: AtomicBool = AtomicBool::new(false);

/// Writes `text` and a newline to stdout.
pub fn write_out(text: &str) {
    write_line(std::io::stdout().lock(), text, &STDOUT_CLOSED);
}

/// Writes `text` and a newline to stderr, on a line of its own.
pub fn write_err(text: &str) {
    // Under the lock: no other writer comes between the check and the
    // line.
    let stream = std::io::stderr().lock();
    if TEXT_OPEN.swap(false, Ordering::Relaxed) {
        write_line(stream, &format!("\n{text}"), &STDERR_CLOSED);
    } else {
        write_line(stream, text, &STDERR_CLOSED);
    }
}

/// Whether stderr's last line is text still being written
/// ([`write_err_part`]).
pub fn text_open() -> bool {
    TEXT_OPEN.load(Ordering::Relaxed)
}

/// Writes `text` to stderr without a newline (a model's reply as it
/// streams), escaped on a terminal, flushed at once.
pub fn write_err_part(text: &str) {
    if STDERR_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stream = std::io::stderr().lock();
    let shown = if stream.is_terminal() {
        escape_controls(text)
    } else {
        Cow::Borrowed(text)
    };
    let written = write!(stream, "{shown}").and_then(|()| stream.flush());
    if written.is_err() {
        STDERR_CLOSED.store(true, Ordering::Relaxed);
    }
    if !text.is_empty() {
        TEXT_OPEN.store(!text.ends_with('\n'), Ordering::Relaxed);
    }
}

/// `text` as it may be shown on a terminal (stderr's), e.g. by a progress
/// bar that writes it itself.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    escape_controls(text)
}

/// Writes a line, escaped when the stream is a terminal; after the first
/// failed write (a closed pipe, a full disk) the stream is left alone.
fn write_line(mut stream: impl Write + IsTerminal, text: &str, closed: &AtomicBool) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let shown = if stream.is_terminal() {
        escape_controls(text)
    } else {
        Cow::Borrowed(text)
    };
    let written = writeln!(stream, "{shown}").and_then(|()| stream.flush());
    if written.is_err() {
        closed.store(true, Ordering::Relaxed);
    }
}

/// Control characters other than newline and tab, shown as escapes
/// (`\u{1b}`).
fn escape_controls(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    Cow::Owned(shown)
}

/// `println!` that survives a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::terminal::write_out(&format!($($arg)*)) };
}

/// `eprintln!` that survives a closed stderr.
macro_rules! err {
    ($($arg:tt)*) => { $crate::cli::terminal::write_err(&format!($($arg)*)) };
}

pub(crate) use {err, out};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_but_lines_and_tabs_kept() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            escape_controls("ok\u{1b}[2K\rapprove?"),
            "ok\\u{1b}[2K\\u{d}approve?"
        );
    }
}
