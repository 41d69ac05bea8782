//! Values larger than one key holds, split across keys and never truncated.
//!
//! A value that fits is stored under its key behind a `0` byte. A larger
//! one is written as chunks under `KEY\u{1}N` first, then its key gets a
//! head (`1`, chunk count, total size) — last, and fenced like any write, so
//! a reader never sees a head whose chunks are not there. Chunk keys sort
//! under their key's prefix; [`scan`] reassembles and skips them. Above
//! [`MAX_TOTAL_BYTES`] a value is refused with an error naming its key.

use super::{Fence, Revision, Store, StoreError};

/// The largest value stored at all.
pub const MAX_TOTAL_BYTES: usize = 256 << 20;
/// Separates a key from its chunk numbers.
const CHUNK_MARK: char = '\u{1}';
const INLINE: u8 = 0;
const CHUNKED: u8 = 1;

/// Whether `key` is a chunk of another key's value.
pub fn is_chunk_key(key: &str) -> bool {
    key.contains(CHUNK_MARK)
}

fn chunk_key(key: &str, index: usize) -> String {
    format!("{key}{CHUNK_MARK}{index}")
}

/// Writes `value` under `key`, split when it is larger than the store
/// takes in one key. For keys written once (or not read until a later
/// write names them): chunks are written before the head, so a key being
/// rewritten could be read with some chunks new and the head old.
pub async fn put<S: Store>(
    store: &S,
    key: &str,
    value: &[u8],
    fence: Option<&Fence>,
) -> Result<Revision, StoreError> {
    if value.len() > MAX_TOTAL_BYTES {
        return Err(StoreError::TooLarge {
            key: key.to_owned(),
            size: value.len(),
            limit: MAX_TOTAL_BYTES,
        });
    }
    let room = store.max_value_bytes() - 1;
    if value.len() <= room {
        return store.put(key, inline(value), fence).await;
    }
    let pieces: Vec<&[u8]> = value.chunks(store.max_value_bytes()).collect();
    for (index, piece) in pieces.iter().enumerate() {
        store
            .put(&chunk_key(key, index), piece.to_vec(), fence)
            .await?;
    }
    let mut head = vec![CHUNKED];
    head.extend_from_slice(&(pieces.len() as u32).to_le_bytes());
    head.extend_from_slice(&(value.len() as u64).to_le_bytes());
    store.put(key, head, fence).await
}

/// Writes several values in one transaction, all or none (a checkpoint's
/// record, events and fields). Values that do not fit one request together
/// are refused, naming the largest: never written apart, where a crash
/// could leave some of them newer than the others.
pub async fn put_together<S: Store>(
    store: &S,
    values: &[(&str, &[u8])],
    fence: Option<&Fence>,
) -> Result<Revision, StoreError> {
    if values.len() > store.max_writes() {
        return Err(StoreError::TooManyWrites {
            count: values.len(),
            limit: store.max_writes(),
        });
    }
    let total: usize = values.iter().map(|(k, v)| k.len() + v.len() + 1).sum();
    if total > store.max_value_bytes() {
        let (key, _) = values
            .iter()
            .max_by_key(|(_, v)| v.len())
            .copied()
            .unwrap_or_default();
        return Err(StoreError::TooLarge {
            key: key.to_owned(),
            size: total,
            limit: store.max_value_bytes(),
        });
    }
    let writes = values
        .iter()
        .map(|(key, value)| ((*key).to_owned(), inline(value)))
        .collect();
    store.put_all(writes, fence).await
}

/// A value stored whole under its key.
fn inline(value: &[u8]) -> Vec<u8> {
    let mut stored = Vec::with_capacity(value.len() + 1);
    stored.push(INLINE);
    stored.extend_from_slice(value);
    stored
}

/// The value under `key`, reassembled.
pub async fn get<S: Store>(store: &S, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
    match store.get(key).await? {
        Some(entry) => assemble(store, key, entry.value).await.map(Some),
        None => Ok(None),
    }
}

/// The value of `entry` as a scan or a watch delivered it: inline values
/// as they are, a split one's chunks read and joined.
pub async fn value_of<S: Store>(store: &S, entry: super::Entry) -> Result<Vec<u8>, StoreError> {
    assemble(store, &entry.key, entry.value).await
}

/// Every value under `prefix` (chunk keys folded into theirs), in key order.
pub async fn scan<S: Store>(store: &S, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let mut values = Vec::new();
    for entry in store.scan(prefix).await? {
        if is_chunk_key(&entry.key) {
            continue;
        }
        let value = assemble(store, &entry.key, entry.value).await?;
        values.push((entry.key, value));
    }
    Ok(values)
}

/// A stored value as written: inline, or its chunks joined.
async fn assemble<S: Store>(store: &S, key: &str, stored: Vec<u8>) -> Result<Vec<u8>, StoreError> {
    let corrupt = |reason: &str| StoreError::Corrupt {
        key: key.to_owned(),
        reason: reason.to_owned(),
    };
    match stored.first() {
        Some(&INLINE) => Ok(stored[1..].to_vec()),
        Some(&CHUNKED) if stored.len() == 13 => {
            let count = u32::from_le_bytes(stored[1..5].try_into().expect("4 bytes")) as usize;
            let size = u64::from_le_bytes(stored[5..13].try_into().expect("8 bytes")) as usize;
            let mut value = Vec::with_capacity(size);
            for index in 0..count {
                let piece = store
                    .get(&chunk_key(key, index))
                    .await?
                    .ok_or_else(|| corrupt(&format!("chunk {index} of {count} is missing")))?;
                value.extend_from_slice(&piece.value);
            }
            if value.len() != size {
                return Err(corrupt(&format!("{} bytes of {size}", value.len())));
            }
            Ok(value)
        }
        _ => Err(corrupt("not a value written by this store")),
    }
}
