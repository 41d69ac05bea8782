//! Partitions and the run each one holds.
//!
//! A group's runs are split into a fixed number of partitions, chosen when
//! the group's store is created. A run's partition is FNV-1a (64 bits) of
//! its id's bytes, modulo the count: a fixed, specified hash, so every
//! coordinator of every release puts a run in the same partition. A child
//! run lives in its parent's partition: its id is made so that it hashes
//! there ([`Partitioning::id_in`]), so any coordinator finds any run's
//! partition — and so its leader — from its id alone, with no lookup.

use std::fmt;
use std::hash::Hasher;

/// The most partitions a group may have: far more than any group has
/// coordinators, few enough that a placement is planned in microseconds.
pub const MAX_PARTITIONS: u32 = 65_536;

/// One partition of a group, `0..count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId(pub u32);

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "partition {}", self.0)
    }
}

/// Why a partition count is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// Zero, or more than [`MAX_PARTITIONS`].
    #[error("[cluster] partitions = {0}: a group has 1 to {MAX_PARTITIONS} partitions")]
    OutOfRange(u32),
    /// The configuration asks for another count than the store was made
    /// with: runs would move between partitions under their leaders.
    #[error(
        "[cluster] partitions = {configured}, but this group's store was created with {stored} partitions; the count is fixed when the store is created (set partitions = {stored}, or start a new group on an empty store)"
    )]
    Changed {
        /// The count the store was created with.
        stored: u32,
        /// The count the configuration gives.
        configured: u32,
    },
}

/// How a group's runs are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partitioning {
    count: u32,
}

impl Partitioning {
    /// `count` partitions; refused outside `1..=MAX_PARTITIONS`.
    pub fn new(count: u32) -> Result<Self, PartitionError> {
        if count == 0 || count > MAX_PARTITIONS {
            return Err(PartitionError::OutOfRange(count));
        }
        Ok(Self { count })
    }

    /// One partition: the embedded store and the local cluster, where one
    /// coordinator leads everything.
    pub fn single() -> Self {
        Self { count: 1 }
    }

    /// The configured count checked against the one the store was created
    /// with (`None` for a new store, which takes the configured one).
    pub fn against_store(self, stored: Option<u32>) -> Result<Self, PartitionError> {
        match stored {
            Some(stored) if stored != self.count => Err(PartitionError::Changed {
                stored,
                configured: self.count,
            }),
            _ => Ok(self),
        }
    }

    /// How many partitions there are.
    pub fn count(self) -> u32 {
        self.count
    }

    /// Every partition, in order.
    pub fn all(self) -> impl Iterator<Item = PartitionId> {
        (0..self.count).map(PartitionId)
    }

    /// The partition of the run `run_id`.
    pub fn of_run(self, run_id: &str) -> PartitionId {
        let mut hash = fnv::FnvHasher::default();
        hash.write(run_id.as_bytes());
        PartitionId((hash.finish() % u64::from(self.count)) as u32)
    }

    /// An id from `make` that lands in `partition` (a child run's, in its
    /// parent's): ids are made until one hashes there, the count's worth
    /// of tries on average — the first, with one partition. `make` must
    /// give a fresh random id each call.
    ///
    /// # Panics
    ///
    /// If `partition` is not one of this partitioning's (a caller's bug,
    /// which would otherwise loop forever).
    pub fn id_in(self, partition: PartitionId, mut make: impl FnMut() -> String) -> String {
        assert!(
            partition.0 < self.count,
            "{partition} of a group of {} partitions",
            self.count
        );
        loop {
            let id = make();
            if self.of_run(&id) == partition {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_keeps_its_partition_across_processes_and_releases() {
        let sixteen = Partitioning::new(16).unwrap();
        // FNV-1a's published values: these must never change, or stored
        // runs would be looked for under the wrong leader.
        assert_eq!(fnv_1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv_1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            sixteen.of_run("a"),
            PartitionId((0xaf63_dc4c_8601_ec8c_u64 % 16) as u32)
        );
        assert_eq!(Partitioning::single().of_run("run-0192"), PartitionId(0));
    }

    fn fnv_1a(bytes: &[u8]) -> u64 {
        let mut hash = fnv::FnvHasher::default();
        hash.write(bytes);
        hash.finish()
    }

    #[test]
    fn runs_spread_over_the_partitions() {
        let p = Partitioning::new(16).unwrap();
        let mut counts = [0u32; 16];
        for n in 0..16_000 {
            counts[p.of_run(&format!("run-{n:016x}")).0 as usize] += 1;
        }
        // 1,000 expected each; a fair hash stays well within ±20 %.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn an_id_made_for_a_partition_lands_there() {
        let p = Partitioning::new(16).unwrap();
        let mut n = 0u64;
        let mut made = || {
            n += 1;
            format!("run-{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        };
        for target in p.all() {
            let id = p.id_in(target, &mut made);
            assert_eq!(p.of_run(&id), target, "{id}");
        }
        // One partition: the first id made is taken.
        let mut calls = 0;
        let id = Partitioning::single().id_in(PartitionId(0), || {
            calls += 1;
            "run-x".to_owned()
        });
        assert_eq!((id.as_str(), calls), ("run-x", 1));
    }

    #[test]
    fn a_count_is_refused_out_of_range_or_changed() {
        assert_eq!(Partitioning::new(0), Err(PartitionError::OutOfRange(0)));
        assert!(Partitioning::new(MAX_PARTITIONS + 1).is_err());
        let p = Partitioning::new(32).unwrap();
        assert_eq!(p.against_store(None), Ok(p));
        assert_eq!(p.against_store(Some(32)), Ok(p));
        let changed = p.against_store(Some(16)).unwrap_err();
        assert_eq!(
            changed,
            PartitionError::Changed {
                stored: 16,
                configured: 32
            }
        );
        let text = changed.to_string();
        assert!(text.contains("created with 16 partitions"), "{text}");
        assert!(text.contains("partitions = 32"), "{text}");
    }
}
