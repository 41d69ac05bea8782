//! Text passed on without a copy: [`SharedText`].
//!
//! A task's texts cross the worker stream for every map item: the run's
//! id, the item's map and its scope. Written from a coordinator's own
//! shared text and read as a view of the message they arrived in, they
//! are neither copied into the generated message before it is encoded nor
//! copied out of the received bytes after it is decoded.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// Text shared rather than copied: short text held in place, shared text
/// this process made (an `Arc<str>`), or bytes (a received message's, or a `String`'s own
/// buffer), which are read as bytes ([`SharedText::as_bytes`]; JSON is
/// parsed from them, which checks them) or checked as UTF-8 when read as
/// text ([`SharedText::to_str`]).
#[derive(Clone, Default)]
pub struct SharedText(Repr);

#[derive(Clone)]
enum Repr {
    /// Short text, held in place: made and cloned without allocating.
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    Made(Arc<str>),
    Bytes(Bytes),
}

/// The longest text held in place: as long as the other forms are, so
/// holding it makes a `SharedText` no larger.
const INLINE: usize = 30;

impl Default for Repr {
    fn default() -> Self {
        Self::Bytes(Bytes::new())
    }
}

impl SharedText {
    /// Bytes received in a message, not yet checked to be UTF-8.
    pub fn received(bytes: Bytes) -> Self {
        Self(Repr::Bytes(bytes))
    }

    /// `text`, held in place when it is short, else copied into shared
    /// text of its own.
    pub fn copied(text: &str) -> Self {
        if text.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            return Self(Repr::Inline {
                len: text.len() as u8,
                bytes,
            });
        }
        Self(Repr::Made(Arc::from(text)))
    }

    /// The text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Made(text) => text.as_bytes(),
            Repr::Bytes(bytes) => bytes,
        }
    }

    /// The text, or why its bytes are not UTF-8 (received bytes are
    /// checked at each call).
    pub fn to_str(&self) -> Result<&str, std::str::Utf8Error> {
        match &self.0 {
            Repr::Made(text) => Ok(text),
            Repr::Inline { .. } | Repr::Bytes(_) => std::str::from_utf8(self.as_bytes()),
        }
    }

    /// The text as shared text of its own: the text made here as it is,
    /// received bytes checked and copied.
    pub fn to_shared(&self) -> Result<Arc<str>, std::str::Utf8Error> {
        match &self.0 {
            Repr::Made(text) => Ok(text.clone()),
            Repr::Inline { .. } | Repr::Bytes(_) => {
                std::str::from_utf8(self.as_bytes()).map(Arc::from)
            }
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Arc<str>> for SharedText {
    fn from(text: Arc<str>) -> Self {
        Self(Repr::Made(text))
    }
}

impl From<String> for SharedText {
    /// The string's own buffer, taken as it is (not copied).
    fn from(text: String) -> Self {
        Self(Repr::Bytes(Bytes::from(text)))
    }
}

impl From<&str> for SharedText {
    fn from(text: &str) -> Self {
        Self::copied(text)
    }
}

impl PartialEq for SharedText {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for SharedText {}

impl fmt::Debug for SharedText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&String::from_utf8_lossy(self.as_bytes()), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_made_and_received_read_and_compare_alike() {
        let made = SharedText::from("{\"item\":1}");
        let received = SharedText::received(Bytes::from_static(b"{\"item\":1}"));
        assert_eq!(made, received);
        assert_eq!(received.to_str().unwrap(), "{\"item\":1}");
        assert_eq!(made.len(), 10);
        assert!(SharedText::default().is_empty());
    }

    #[test]
    fn short_text_is_held_in_place_and_long_text_shared() {
        let short = SharedText::copied("{\"item\":12}");
        assert!(matches!(short.0, Repr::Inline { .. }));
        assert_eq!(short.clone().to_str().unwrap(), "{\"item\":12}");
        let longest = "x".repeat(INLINE);
        assert!(matches!(
            SharedText::copied(&longest).0,
            Repr::Inline { .. }
        ));
        let long = SharedText::copied(&"x".repeat(INLINE + 1));
        assert!(matches!(long.0, Repr::Made(_)));
        assert_eq!(long.len(), INLINE + 1);
        assert_eq!(
            short,
            SharedText::received(Bytes::from_static(b"{\"item\":12}"))
        );
        assert!(std::mem::size_of::<SharedText>() <= 40);
    }

    #[test]
    fn received_bytes_that_are_not_utf8_are_named_when_read_as_text() {
        let received = SharedText::received(Bytes::from_static(b"\xff\xfe"));
        assert!(received.to_str().is_err());
        assert!(received.to_shared().is_err());
        assert_eq!(received.as_bytes(), b"\xff\xfe");
    }
}
