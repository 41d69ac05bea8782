//! Documents cut into passages ("chunks"): on headings first (a Markdown
//! document's sections never share a chunk, and each chunk is named by the
//! headings it is under, `Install › On Debian`), then on paragraphs (blank
//! lines; a fenced code block is one paragraph whatever it holds), packed
//! in order up to `size` characters. A chunk after the first of a section
//! begins with the last `overlap` characters of the one before, cut at a
//! word, when that still fits; a paragraph longer than `size` is cut into
//! windows of `size` characters at words, each starting `overlap`
//! characters before the last one ended.

use crate::document::{Document, Format};

/// The default size of a chunk, in characters.
pub const DEFAULT_SIZE: usize = 800;
/// The default overlap between chunks, in characters.
pub const DEFAULT_OVERLAP: usize = 120;
/// The smallest chunk size taken.
pub const MIN_SIZE: usize = 16;

/// How a knowledge base's documents are cut (`chunk: {size, overlap}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunking {
    size: usize,
    overlap: usize,
}

/// Why a `chunk:` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkingError {
    /// The size is too small.
    #[error("chunk.size {size} is below {MIN_SIZE} characters")]
    TooSmall {
        /// The size asked for.
        size: usize,
    },
    /// The overlap is not below half the size.
    #[error("chunk.overlap {overlap} must be less than half of chunk.size {size}")]
    OverlapTooLarge {
        /// The overlap asked for.
        overlap: usize,
        /// The size.
        size: usize,
    },
}

impl Default for Chunking {
    fn default() -> Self {
        Self {
            size: DEFAULT_SIZE,
            overlap: DEFAULT_OVERLAP,
        }
    }
}

impl Chunking {
    /// Chunks of at most `size` characters, `overlap` of them shared with
    /// the chunk before.
    pub fn new(size: usize, overlap: usize) -> Result<Self, ChunkingError> {
        if size < MIN_SIZE {
            return Err(ChunkingError::TooSmall { size });
        }
        if overlap * 2 >= size {
            return Err(ChunkingError::OverlapTooLarge { overlap, size });
        }
        Ok(Self { size, overlap })
    }

    /// The largest chunk, in characters.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The characters a chunk shares with the one before.
    pub fn overlap(&self) -> usize {
        self.overlap
    }
}

/// A passage of a document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Chunk {
    /// The document's source.
    pub source: String,
    /// The headings of the section it is from, outermost first, joined by
    /// ` › `; empty outside any.
    pub heading: String,
    /// Its place among its document's chunks, from 0.
    pub index: usize,
    /// Its text.
    pub text: String,
}

/// `document` cut as `chunking` says.
pub fn chunk(document: &Document, chunking: &Chunking) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    for (heading, body) in sections(&document.text, document.format) {
        for text in pack(&paragraphs(&body), chunking) {
            chunks.push(Chunk {
                source: document.source.clone(),
                heading: heading.clone(),
                index: chunks.len(),
                text,
            });
        }
    }
    chunks
}

/// A fence line's marker (```` ``` ```` or `~~~`).
fn fence(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("```") || line.starts_with("~~~")
}

/// A Markdown ATX heading's level and text: up to three spaces, one to
/// six `#`, a space (or nothing), the text, optional closing `#`s.
fn heading(line: &str) -> Option<(usize, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.len() - rest.trim_start_matches('#').len();
    if !(1..=6).contains(&level) {
        return None;
    }
    let after = &rest[level..];
    if !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return None;
    }
    let text = after.trim().trim_end_matches('#').trim_end();
    Some((level, text.to_owned()))
}

/// A document's sections: (the headings it is under, outermost first,
/// joined by ` › `; the text under them). Text before the first heading,
/// and a text document whole, have no heading; a heading with no text
/// under it before the next is named only in its subsections' paths.
fn sections(text: &str, format: Format) -> Vec<(String, String)> {
    if format == Format::Text {
        return vec![(String::new(), text.to_owned())];
    }
    let mut sections = vec![(String::new(), String::new())];
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if fence(line) {
            fenced = !fenced;
        } else if !fenced && let Some((level, title)) = heading(line) {
            while path.last().is_some_and(|(above, _)| *above >= level) {
                path.pop();
            }
            path.push((level, title));
            let named: Vec<&str> = path.iter().map(|(_, t)| t.as_str()).collect();
            sections.push((named.join(" › "), String::new()));
            continue;
        }
        let body = &mut sections.last_mut().expect("one at least").1;
        body.push_str(line);
        body.push('\n');
    }
    sections.retain(|(_, body)| !body.trim().is_empty());
    sections
}

/// A section's paragraphs: runs of lines between blank ones, a fenced
/// block kept whole.
fn paragraphs(text: &str) -> Vec<String> {
    let mut paragraphs = Vec::new();
    let mut current = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if fence(line) {
            fenced = !fenced;
        }
        if !fenced && line.trim().is_empty() && !fence(line) {
            if !current.trim().is_empty() {
                paragraphs.push(current.trim_end().to_owned());
            }
            current.clear();
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        paragraphs.push(current.trim_end().to_owned());
    }
    paragraphs
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

/// Paragraphs packed in order into chunks of at most `size` characters.
fn pack(paragraphs: &[String], chunking: &Chunking) -> Vec<String> {
    let size = chunking.size;
    let mut chunks: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut current_len = 0;
    for paragraph in paragraphs {
        let len = chars(paragraph);
        if len > size {
            if !current.is_empty() {
                chunks.push(std::mem::take(&mut current));
                current_len = 0;
            }
            chunks.extend(windows(paragraph, chunking));
            continue;
        }
        if current.is_empty() {
            (current, current_len) = (paragraph.clone(), len);
            continue;
        }
        if current_len + 2 + len <= size {
            current.push_str("\n\n");
            current.push_str(paragraph);
            current_len += 2 + len;
            continue;
        }
        let tail = tail(&current, chunking.overlap);
        chunks.push(std::mem::take(&mut current));
        let tail_len = chars(&tail);
        if !tail.is_empty() && tail_len + 2 + len <= size {
            current = format!("{tail}\n\n{paragraph}");
            current_len = tail_len + 2 + len;
        } else {
            (current, current_len) = (paragraph.clone(), len);
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// The last `overlap` characters of `text`, from the start of a word.
fn tail(text: &str, overlap: usize) -> String {
    if overlap == 0 {
        return String::new();
    }
    let total = chars(text);
    if total <= overlap {
        return text.to_owned();
    }
    let start = text
        .char_indices()
        .nth(total - overlap)
        .map_or(text.len(), |(i, _)| i);
    let from = &text[start..];
    // From the next word, unless the cut falls at one already.
    let at_word = text[..start].ends_with(char::is_whitespace);
    let from = if at_word {
        from
    } else {
        from.split_once(char::is_whitespace)
            .map_or("", |(_, rest)| rest)
    };
    from.trim_start().to_owned()
}

/// A paragraph longer than `size` cut into windows of at most `size`
/// characters, at whitespace where there is some in a window's second
/// half, each after the first starting `overlap` characters before the
/// last one ended (at a word).
fn windows(paragraph: &str, chunking: &Chunking) -> Vec<String> {
    let (size, overlap) = (chunking.size, chunking.overlap);
    let bounds: Vec<usize> = paragraph
        .char_indices()
        .map(|(i, _)| i)
        .chain([paragraph.len()])
        .collect();
    let total = bounds.len() - 1;
    let is_space = |at: usize| paragraph[bounds[at]..].starts_with(char::is_whitespace);
    let mut windows = Vec::new();
    let mut start = 0;
    while start < total {
        let mut end = (start + size).min(total);
        if end < total
            && let Some(space) = (start + size / 2..end).rev().find(|&at| is_space(at))
        {
            end = space;
        }
        let text = paragraph[bounds[start]..bounds[end]].trim();
        if !text.is_empty() {
            windows.push(text.to_owned());
        }
        if end == total {
            break;
        }
        // The next window starts `overlap` before this one's end, at a
        // word, and always after this one's start.
        let mut next = end.saturating_sub(overlap).max(start + 1);
        if let Some(word) = (next..end).find(|&at| at > 0 && is_space(at - 1) && !is_space(at)) {
            next = word;
        } else {
            next = end;
        }
        while next < total && is_space(next) {
            next += 1;
        }
        start = next;
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn markdown(text: &str) -> Document {
        Document {
            source: "doc.md".into(),
            text: text.into(),
            format: Format::Markdown,
            links: Vec::new(),
        }
    }

    #[test]
    fn sections_are_cut_on_headings_and_never_share_a_chunk() {
        let doc = markdown(
            "Intro line.\n\n# Install\n\nRun the installer.\n\n## On Debian\n\nUse apt.\n\n```\n# not a heading\n\nstill code\n```\n# Usage ##\nCall it.\n",
        );
        let chunks = chunk(&doc, &Chunking::default());
        let got: Vec<(&str, &str)> = chunks
            .iter()
            .map(|c| (c.heading.as_str(), c.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("", "Intro line."),
                ("Install", "Run the installer."),
                (
                    "Install › On Debian",
                    "Use apt.\n\n```\n# not a heading\n\nstill code\n```"
                ),
                ("Usage", "Call it."),
            ]
        );
        assert_eq!(
            chunks.iter().map(|c| c.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn paragraphs_are_packed_up_to_the_size_with_an_overlap() {
        let chunking = Chunking::new(40, 10).unwrap();
        let doc = markdown("alpha beta gamma\n\ndelta epsilon zeta\n\neta theta iota kappa\n");
        let texts: Vec<String> = chunk(&doc, &chunking).into_iter().map(|c| c.text).collect();
        assert_eq!(
            texts,
            vec![
                "alpha beta gamma\n\ndelta epsilon zeta",
                // The last ten characters of the chunk before, from a word.
                "zeta\n\neta theta iota kappa",
            ]
        );
    }

    #[test]
    fn a_long_paragraph_is_cut_into_overlapping_windows_at_words() {
        let chunking = Chunking::new(20, 5).unwrap();
        let text = "one two three four five six seven eight nine ten";
        let windows = windows(text, &chunking);
        assert!(windows.iter().all(|w| chars(w) <= 20), "{windows:?}");
        assert_eq!(
            windows.first().map(String::as_str),
            Some("one two three four")
        );
        assert!(windows.last().unwrap().ends_with("ten"), "{windows:?}");
        // Consecutive windows share a word.
        for pair in windows.windows(2) {
            let last_word = pair[0].split_whitespace().last().unwrap();
            assert!(pair[1].starts_with(last_word), "{pair:?}");
        }
    }

    #[test]
    fn a_chunking_too_small_or_overlapping_too_much_is_refused() {
        assert_eq!(
            Chunking::new(8, 0).unwrap_err().to_string(),
            "chunk.size 8 is below 16 characters"
        );
        assert_eq!(
            Chunking::new(100, 50).unwrap_err().to_string(),
            "chunk.overlap 50 must be less than half of chunk.size 100"
        );
    }

    proptest! {
        /// Whatever the text, no chunk is longer than the size, and every
        /// word of the text is in some chunk.
        #[test]
        fn chunks_fit_and_lose_no_word(
            words in proptest::collection::vec("[a-z]{1,12}|\n\n|#{1,3} [A-Z]{1,5}\n|[a-z]{30,60}", 0..120),
            size in 16usize..200,
            overlap_share in 0usize..50,
        ) {
            let text = words.join(" ");
            let chunking = Chunking::new(size, size * overlap_share / 100).unwrap();
            let chunks = chunk(&markdown(&text), &chunking);
            for c in &chunks {
                prop_assert!(chars(&c.text) <= size, "{} > {size}: {:?}", chars(&c.text), c.text);
            }
            let all: String = chunks.iter().map(|c| format!("{}\n", c.text)).collect();
            // Words, not headings (a heading with nothing under it is
            // named by no chunk); a word longer than a quarter of a chunk
            // may be cut.
            let is_word = |w: &&str| w.starts_with(|c: char| c.is_ascii_lowercase()) && w.len() <= size / 4;
            for word in text.split_whitespace().filter(is_word) {
                prop_assert!(all.contains(word), "'{word}' lost");
            }
        }
    }
}
