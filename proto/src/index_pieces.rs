//! A packed knowledge index on the wire (`ShareIndex`): cut into
//! [`v1::IndexPiece`]s of at most [`PIECE_BYTES`], the last one marked and
//! carrying the whole's SHA-256, and put back together, checked, on the
//! other side. Both sides — the coordinator sending a kept index, a worker
//! uploading one it built — cut and join pieces here.

use sha2::{Digest, Sha256};

use crate::v1;

/// Bytes of a packed index per message.
pub const PIECE_BYTES: usize = 1 << 20;

/// Why pieces do not make an index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PieceError {
    /// More bytes than the receiver takes.
    #[error("the index packs to more than the {max} bytes taken (max_index_bytes)")]
    TooLarge {
        /// The most taken.
        max: u64,
    },
    /// The bytes are not those the last piece names.
    #[error("the index arrived with hash {actual}, not the {expected} its last piece names")]
    Hash {
        /// Their hash.
        actual: String,
        /// The hash named.
        expected: String,
    },
}

/// `bytes` hashed by SHA-256, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `blob` cut into pieces, in order, each made as it is sent (a large
/// index is not copied whole first); the last carries its hash and
/// `built_json` (an uploader's `index_built` figures; empty otherwise).
pub fn pieces<'a>(
    blob: &'a [u8],
    built_json: &'a str,
) -> impl Iterator<Item = v1::IndexPiece> + 'a {
    let count = blob.len().div_ceil(PIECE_BYTES).max(1);
    let sha256 = sha256_hex(blob);
    (0..count).map(move |n| {
        let start = (n * PIECE_BYTES).min(blob.len());
        let end = ((n + 1) * PIECE_BYTES).min(blob.len());
        let last = n + 1 == count;
        v1::IndexPiece {
            data: blob[start..end].to_vec(),
            sha256: if last { sha256.clone() } else { String::new() },
            last,
            built_json: if last {
                built_json.to_owned()
            } else {
                String::new()
            },
        }
    })
}

/// Pieces being put back together.
#[derive(Debug)]
pub struct Joined {
    blob: Vec<u8>,
    max: u64,
}

impl Joined {
    /// Pieces of an index of at most `max` bytes.
    pub fn new(max: u64) -> Self {
        Self {
            blob: Vec::new(),
            max,
        }
    }

    /// Adds the next piece; after the last, the index and the figures it
    /// carried.
    pub fn add(&mut self, piece: v1::IndexPiece) -> Result<Option<(Vec<u8>, String)>, PieceError> {
        if (self.blob.len() + piece.data.len()) as u64 > self.max {
            return Err(PieceError::TooLarge { max: self.max });
        }
        self.blob.extend_from_slice(&piece.data);
        if !piece.last {
            return Ok(None);
        }
        let actual = sha256_hex(&self.blob);
        if actual != piece.sha256 {
            return Err(PieceError::Hash {
                actual,
                expected: piece.sha256,
            });
        }
        Ok(Some((std::mem::take(&mut self.blob), piece.built_json)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_into_the_index_checked() {
        let blob: Vec<u8> = (0..PIECE_BYTES * 2 + 5).map(|i| (i % 251) as u8).collect();
        let cut: Vec<v1::IndexPiece> = pieces(&blob, "{\"chunks\":3}").collect();
        assert_eq!(cut.len(), 3);
        assert!(cut[..2].iter().all(|p| !p.last && p.sha256.is_empty()));
        let mut joined = Joined::new(u64::MAX);
        let mut whole = None;
        for piece in cut.clone() {
            whole = joined.add(piece).unwrap();
        }
        assert_eq!(whole, Some((blob.clone(), "{\"chunks\":3}".to_owned())));
        // An empty index is one piece.
        assert_eq!(pieces(&[], "").count(), 1);
        // A piece changed on the way, or too many bytes, is refused.
        let mut tampered = cut.clone();
        tampered[1].data[0] ^= 1;
        let mut joined = Joined::new(u64::MAX);
        let refused = tampered
            .into_iter()
            .map(|p| joined.add(p))
            .find(Result::is_err);
        assert!(matches!(refused, Some(Err(PieceError::Hash { .. }))));
        let mut small = Joined::new(10);
        assert_eq!(
            small.add(cut[0].clone()),
            Err(PieceError::TooLarge { max: 10 })
        );
    }
}
