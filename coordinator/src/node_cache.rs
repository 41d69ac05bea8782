//! The node cache (SPEC 20): what cached steps returned, by namespace and
//! entry key, so that a later step with the same key takes the answer
//! instead of running.
//!
//! A step's entry key is made by the run machine (the graph's name, the
//! node's id, a hash of the node's definition and its rendered `cache.key`);
//! the namespace keeps tenants apart: a namespace's entries answer only its
//! own runs. The machine asks for an answer to be kept only once it has
//! accepted it ([`crate::run_actor::Effect::Cache`]), so a failed attempt is
//! never kept.
//!
//! Entries live in memory, where a run's actor looks them up without
//! waiting, and in the store (`node-cache/<namespace>/<entry>`), so that they
//! outlive the leader's term; a new term reads them back before it restores
//! any run. One writer task puts and deletes them in the order they were
//! decided. An entry answers for its node's `ttl`; expired entries are
//! collected every [`COLLECT_EVERY`]. At most `max_cache_bytes` are kept over
//! every namespace, the least recently used dropped first; an answer larger
//! than `max_cache_entry_bytes` is not kept, and its run is told so.
//!
//! The coordinators of a partitioned group share the store's copy: each
//! follows it ([`NodeCache::follow`]), so an answer one of them keeps is
//! found by the runs of every partition, and one it drops (expired,
//! evicted) goes from every member's memory too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use weft_store::{AnyStore, Store, StoreError, WatchEvent, chunks};

use crate::durable::Keeper;

/// Where entries are kept in the store.
const PREFIX: &str = "node-cache/";
/// How often expired entries are collected.
pub const COLLECT_EVERY: Duration = Duration::from_secs(10);

/// An entry as it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Stored {
    /// The node, for operators reading the store.
    node: String,
    /// The writes, as the worker sent them.
    writes: String,
    /// The transient output (an `llm` step's completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<Value>,
    /// The run whose step stored it.
    stored_by: String,
    /// When (Unix milliseconds).
    stored_at_ms: u64,
    /// When it stops answering (Unix milliseconds).
    expires_at_ms: u64,
}

/// A cached answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The writes, as JSON text.
    pub writes: String,
    /// The transient output.
    pub output: Option<Value>,
    /// The run whose step stored it.
    pub stored_by: String,
    /// How long ago, in milliseconds.
    pub age_ms: u64,
}

/// An answer to keep.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The node.
    pub node: String,
    /// The writes, as JSON text.
    pub writes: String,
    /// The transient output.
    pub output: Option<Value>,
    /// The run whose step returned it.
    pub run: String,
    /// How long it answers.
    pub ttl: Duration,
}

/// Why an answer was not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotKept {
    /// Larger than one entry may be.
    #[error(
        "its answer is {bytes} bytes, more than the {max} a cache entry may hold (coordinator key max_cache_entry_bytes)"
    )]
    TooLarge {
        /// The answer's size.
        bytes: u64,
        /// The limit.
        max: u64,
    },
}

/// The limits of a cache.
#[derive(Debug, Clone, Copy)]
pub struct CacheLimits {
    /// Bytes kept over every namespace.
    pub max_bytes: u64,
    /// The largest one entry may be.
    pub max_entry_bytes: u64,
}

impl Default for CacheLimits {
    /// The coordinator's defaults: 256 MiB, 1 MiB an entry.
    fn default() -> Self {
        Self {
            max_bytes: 256 << 20,
            max_entry_bytes: 1 << 20,
        }
    }
}

impl Default for NodeCache {
    /// An empty cache in memory, of the default limits.
    fn default() -> Self {
        Self::in_memory(CacheLimits::default())
    }
}

type Id = (Arc<str>, String);

struct Kept {
    stored: Arc<Stored>,
    bytes: u64,
    used: u64,
}

#[derive(Default)]
struct Shelf {
    entries: HashMap<Id, Kept>,
    bytes: u64,
    /// A counter, bumped by every use: the least recently used entry has
    /// the smallest.
    used: u64,
}

impl Shelf {
    /// Keeps `stored` (`bytes` as stored) under `id`, as just used.
    fn insert(&mut self, id: Id, stored: Stored, bytes: u64) {
        self.remove(&id);
        self.used += 1;
        self.bytes += bytes;
        let used = self.used;
        let kept = Kept {
            stored: Arc::new(stored),
            bytes,
            used,
        };
        self.entries.insert(id, kept);
    }

    fn remove(&mut self, id: &Id) -> bool {
        match self.entries.remove(id) {
            Some(kept) => {
                self.bytes -= kept.bytes;
                true
            }
            None => false,
        }
    }

    fn record(&self) {
        metrics::gauge!(crate::metrics::CACHE_ENTRIES).set(self.entries.len() as f64);
        metrics::gauge!(crate::metrics::CACHE_BYTES).set(self.bytes as f64);
    }
}

/// A write of the store's copy, in the order it was decided.
enum Write {
    Put(String, Vec<u8>),
    Delete(Vec<String>),
}

/// The node cache of a leader's term.
#[derive(Clone)]
pub struct NodeCache {
    inner: Arc<Inner>,
}

struct Inner {
    limits: CacheLimits,
    shelf: Mutex<Shelf>,
    /// To the store's writer; `None` for a coordinator without a store.
    writes: Option<mpsc::UnboundedSender<Write>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn store_key(id: &Id) -> String {
    format!("{PREFIX}{}/{}", id.0, id.1)
}

/// The entry a store key names.
fn entry_id(key: &str) -> Option<Id> {
    let (namespace, entry) = key.strip_prefix(PREFIX)?.rsplit_once('/')?;
    Some((namespace.into(), entry.to_owned()))
}

/// The entry stored under `key` as `value`; `None` when this version
/// cannot read it.
fn read_entry(key: &str, value: &[u8]) -> Option<(Id, Stored)> {
    Some((entry_id(key)?, serde_json::from_slice(value).ok()?))
}

impl NodeCache {
    /// A cache kept in memory only.
    pub fn in_memory(limits: CacheLimits) -> Self {
        Self {
            inner: Arc::new(Inner {
                limits,
                shelf: Mutex::default(),
                writes: None,
            }),
        }
    }

    /// A cache kept through `keeper` as well, its entries read back from
    /// the store; its writer and collector stop with `ended`.
    pub async fn kept(
        limits: CacheLimits,
        keeper: Keeper,
        ended: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<Self, StoreError> {
        let stored = chunks::scan(keeper.store(), PREFIX).await?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let cache = Self {
            inner: Arc::new(Inner {
                limits,
                shelf: Mutex::default(),
                writes: Some(sender),
            }),
        };
        let now = now_ms();
        let mut gone = Vec::new();
        {
            let mut shelf = cache.shelf();
            for (key, value) in stored {
                match read_entry(&key, &value) {
                    Some((id, stored)) if stored.expires_at_ms > now => {
                        shelf.insert(id, stored, value.len() as u64);
                    }
                    // Expired, or unreadable by this version: a miss.
                    _ => gone.push(key),
                }
            }
            cache.evict(&mut shelf);
            shelf.record();
        }
        if !gone.is_empty() {
            cache.write(Write::Delete(gone));
        }
        tracker.spawn(write_through(keeper, receiver, ended.clone()));
        tracker.spawn(collect_every(cache.clone(), ended.clone()));
        Ok(cache)
    }

    /// Follows the store's copy, which the other coordinators of a
    /// partitioned group write too, until `ended`: an entry one of them
    /// keeps is kept here, one it drops is dropped here. A watch that ends
    /// (its etcd member gone) is opened again, and what is kept read anew.
    pub fn follow(&self, store: AnyStore, ended: &CancellationToken, tracker: &TaskTracker) {
        tracker.spawn(follow_store(self.clone(), store, ended.clone()));
    }

    /// Takes the entry the store keeps under `key` (`value`, whole) from
    /// another member: kept unless it has expired or is already here.
    fn adopt(&self, key: &str, value: &[u8]) {
        let Some((id, stored)) = read_entry(key, value) else {
            return;
        };
        if stored.expires_at_ms <= now_ms() {
            return;
        }
        let evicted = {
            let mut shelf = self.shelf();
            let known = shelf.entries.get(&id).is_some_and(|kept| {
                kept.stored.stored_at_ms == stored.stored_at_ms
                    && kept.stored.stored_by == stored.stored_by
            });
            if known {
                return;
            }
            shelf.insert(id, stored, value.len() as u64);
            let evicted = self.evict(&mut shelf);
            shelf.record();
            evicted
        };
        if !evicted.is_empty() {
            self.write(Write::Delete(evicted));
        }
    }

    /// Drops the entry under the store's `key`, which another member
    /// deleted.
    fn forget(&self, key: &str) {
        let Some(id) = entry_id(key) else {
            return;
        };
        let mut shelf = self.shelf();
        if shelf.remove(&id) {
            shelf.record();
        }
    }

    fn shelf(&self) -> std::sync::MutexGuard<'_, Shelf> {
        self.inner.shelf.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, write: Write) {
        if let Some(writes) = &self.inner.writes {
            // The writer stops with the term; what is not written then
            // is a cache entry lost, never a wrong answer.
            let _ = writes.send(write);
        }
    }

    /// The answer kept under `entry` in `namespace`, if one is and has not
    /// expired.
    pub fn lookup(&self, namespace: &str, entry: &str) -> Option<Hit> {
        let now = now_ms();
        let id: Id = (namespace.into(), entry.to_owned());
        let mut shelf = self.shelf();
        shelf.used += 1;
        let used = shelf.used;
        let kept = shelf.entries.get_mut(&id)?;
        if kept.stored.expires_at_ms <= now {
            shelf.remove(&id);
            shelf.record();
            drop(shelf);
            self.write(Write::Delete(vec![store_key(&id)]));
            metrics::counter!(crate::metrics::CACHE_LOOKUPS, "result" => "expired").increment(1);
            return None;
        }
        kept.used = used;
        let stored = kept.stored.clone();
        drop(shelf);
        metrics::counter!(crate::metrics::CACHE_LOOKUPS, "result" => "hit").increment(1);
        Some(Hit {
            writes: stored.writes.clone(),
            output: stored.output.clone(),
            stored_by: stored.stored_by.clone(),
            age_ms: now.saturating_sub(stored.stored_at_ms),
        })
    }

    /// Counts a lookup that found nothing.
    pub fn missed(&self) {
        metrics::counter!(crate::metrics::CACHE_LOOKUPS, "result" => "miss").increment(1);
    }

    /// Keeps `answer` under `entry` in `namespace`, for its `ttl`.
    pub fn keep(&self, namespace: &str, entry: String, answer: Answer) -> Result<(), NotKept> {
        let now = now_ms();
        let ttl_ms = u64::try_from(answer.ttl.as_millis()).unwrap_or(u64::MAX);
        let stored = Stored {
            node: answer.node,
            writes: answer.writes,
            output: answer.output,
            stored_by: answer.run,
            stored_at_ms: now,
            expires_at_ms: now.saturating_add(ttl_ms),
        };
        let value = serde_json::to_vec(&stored).unwrap_or_default();
        let bytes = value.len() as u64;
        let max = self
            .inner
            .limits
            .max_entry_bytes
            .min(self.inner.limits.max_bytes);
        if bytes > max {
            return Err(NotKept::TooLarge { bytes, max });
        }
        let id: Id = (namespace.into(), entry);
        let key = store_key(&id);
        let evicted = {
            let mut shelf = self.shelf();
            shelf.insert(id, stored, bytes);
            let evicted = self.evict(&mut shelf);
            shelf.record();
            evicted
        };
        self.write(Write::Put(key, value));
        if !evicted.is_empty() {
            self.write(Write::Delete(evicted));
        }
        Ok(())
    }

    /// Drops the least recently used entries until what is kept fits
    /// `max_bytes`; their store keys.
    fn evict(&self, shelf: &mut Shelf) -> Vec<String> {
        let mut evicted = Vec::new();
        while shelf.bytes > self.inner.limits.max_bytes {
            let Some(oldest) = shelf
                .entries
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            shelf.remove(&oldest);
            evicted.push(store_key(&oldest));
        }
        if !evicted.is_empty() {
            metrics::counter!(crate::metrics::CACHE_EVICTED).increment(evicted.len() as u64);
        }
        evicted
    }

    /// Drops the entries expired at `now` (Unix milliseconds); how many.
    pub fn collect(&self, now: u64) -> usize {
        let expired: Vec<Id> = {
            let mut shelf = self.shelf();
            let expired: Vec<Id> = shelf
                .entries
                .iter()
                .filter(|(_, kept)| kept.stored.expires_at_ms <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &expired {
                shelf.remove(id);
            }
            shelf.record();
            expired
        };
        if !expired.is_empty() {
            self.write(Write::Delete(expired.iter().map(store_key).collect()));
        }
        expired.len()
    }

    /// The entries kept and their bytes.
    pub fn size(&self) -> (usize, u64) {
        let shelf = self.shelf();
        (shelf.entries.len(), shelf.bytes)
    }
}

/// Collects expired entries every [`COLLECT_EVERY`] until `ended`.
async fn collect_every(cache: NodeCache, ended: CancellationToken) {
    let mut every = tokio::time::interval(COLLECT_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = ended.cancelled() => return,
            _ = every.tick() => {
                let collected = cache.collect(now_ms());
                if collected > 0 {
                    tracing::debug!(entries = collected, "expired node cache entries collected");
                }
            }
        }
    }
}

/// [`NodeCache::follow`]'s task: the store's changes under the cache's
/// prefix taken into `cache`, the watch opened before what is kept is
/// read, so nothing written between the two is missed.
async fn follow_store(cache: NodeCache, store: AnyStore, ended: CancellationToken) {
    loop {
        let watched = tokio::select! {
            () = ended.cancelled() => return,
            watched = store.watch(PREFIX) => watched,
        };
        match watched {
            Ok(mut changes) => {
                match chunks::scan(&store, PREFIX).await {
                    Ok(kept) => {
                        for (key, value) in kept {
                            cache.adopt(&key, &value);
                        }
                    }
                    Err(error) => tracing::warn!(%error, "reading the shared node cache failed"),
                }
                loop {
                    let change = tokio::select! {
                        () = ended.cancelled() => return,
                        change = changes.recv() => change,
                    };
                    match change {
                        None => break,
                        Some(WatchEvent::Put(entry)) if !chunks::is_chunk_key(&entry.key) => {
                            // The watch carries the value: a split one's
                            // chunks are read, an inline one is as it came.
                            let key = entry.key.clone();
                            match chunks::value_of(&store, entry).await {
                                Ok(value) => cache.adopt(&key, &value),
                                Err(error) => {
                                    tracing::warn!(%error, %key, "reading a shared node cache entry failed");
                                }
                            }
                        }
                        Some(WatchEvent::Delete { key }) if !chunks::is_chunk_key(&key) => {
                            cache.forget(&key);
                        }
                        Some(_) => {}
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "watching the shared node cache failed"),
        }
        tokio::select! {
            () = ended.cancelled() => return,
            () = tokio::time::sleep(FOLLOW_AGAIN) => {}
        }
    }
}

/// How long after its watch ended a cache follows the store again.
const FOLLOW_AGAIN: Duration = Duration::from_millis(500);

/// Writes the cache's changes to the store, in order, until `ended`. A
/// write that fails is logged and dropped: the store's copy then lacks an
/// entry (a later miss), or keeps one the memory dropped (read back by the
/// next term, and collected once it expires).
async fn write_through(
    keeper: Keeper,
    mut writes: mpsc::UnboundedReceiver<Write>,
    ended: CancellationToken,
) {
    loop {
        let write = tokio::select! {
            () = ended.cancelled() => return,
            write = writes.recv() => match write {
                Some(write) => write,
                None => return,
            },
        };
        let result = match write {
            Write::Put(key, value) => keeper
                .checked(chunks::put(keeper.store(), &key, &value, keeper.fence()).await)
                .map(drop),
            Write::Delete(keys) => keeper.delete_prefixes(&keys).await,
        };
        if let Err(error) = result {
            tracing::warn!(%error, "the node cache's store copy was not updated");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(writes: &str, ttl: Duration) -> Answer {
        Answer {
            node: "ask".into(),
            writes: writes.into(),
            output: None,
            run: "r1".into(),
            ttl,
        }
    }

    fn limits(max_bytes: u64) -> CacheLimits {
        CacheLimits {
            max_bytes,
            max_entry_bytes: 1 << 20,
        }
    }

    #[test]
    fn an_answer_is_found_in_its_namespace_only() {
        let cache = NodeCache::in_memory(limits(1 << 20));
        cache
            .keep(
                "team-a",
                "k".into(),
                answer(r#"{"x":1}"#, Duration::from_secs(60)),
            )
            .unwrap();
        let hit = cache.lookup("team-a", "k").expect("kept");
        assert_eq!(hit.writes, r#"{"x":1}"#);
        assert_eq!(hit.stored_by, "r1");
        assert_eq!(cache.lookup("team-b", "k"), None, "another namespace");
        assert_eq!(cache.lookup("team-a", "other"), None);
    }

    #[test]
    fn an_expired_entry_misses_and_is_collected() {
        let cache = NodeCache::in_memory(limits(1 << 20));
        cache
            .keep("a", "gone".into(), answer("{}", Duration::from_millis(1)))
            .unwrap();
        cache
            .keep("a", "kept".into(), answer("{}", Duration::from_secs(600)))
            .unwrap();
        // Collected as of a minute from now: the first has expired.
        assert_eq!(cache.collect(now_ms() + 60_000), 1);
        assert_eq!(cache.size().0, 1);
        assert!(cache.lookup("a", "kept").is_some());
        assert!(cache.lookup("a", "gone").is_none());
    }

    #[test]
    fn the_least_recently_used_go_first_when_the_cache_is_full() {
        let one = serde_json::to_vec(&Stored {
            node: "ask".into(),
            writes: "{}".into(),
            output: None,
            stored_by: "r1".into(),
            stored_at_ms: now_ms(),
            expires_at_ms: now_ms() + 60_000,
        })
        .unwrap()
        .len() as u64;
        // Room for two entries.
        let cache = NodeCache::in_memory(limits(2 * one + one / 2));
        let ttl = Duration::from_secs(60);
        cache.keep("a", "1".into(), answer("{}", ttl)).unwrap();
        cache.keep("a", "2".into(), answer("{}", ttl)).unwrap();
        assert!(cache.lookup("a", "1").is_some(), "1 used after 2");
        cache.keep("a", "3".into(), answer("{}", ttl)).unwrap();
        assert!(cache.lookup("a", "2").is_none(), "the least recently used");
        assert!(cache.lookup("a", "1").is_some());
        assert!(cache.lookup("a", "3").is_some());
        assert!(cache.size().1 <= 2 * one + one / 2);
    }

    #[test]
    fn an_answer_larger_than_an_entry_is_refused_naming_the_limit() {
        let cache = NodeCache::in_memory(CacheLimits {
            max_bytes: 1 << 20,
            max_entry_bytes: 100,
        });
        let big = format!(r#"{{"text":"{}"}}"#, "x".repeat(200));
        let error = cache
            .keep("a", "k".into(), answer(&big, Duration::from_secs(60)))
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("max_cache_entry_bytes"), "{message}");
        assert!(message.contains("more than the 100"), "{message}");
        assert!(cache.lookup("a", "k").is_none());
    }
}
