//! Durable runs: what the coordinator keeps in its store so a run outlives
//! the process that started it (SPEC 9). [`records`] is the stored format;
//! every write goes through a [`Keeper`], which fences it on the leader key
//! when the store is shared by a group of coordinators.

use tokio_util::sync::CancellationToken;
use weft_store::{AnyStore, Fence, StoreError};

pub mod journal;
pub mod records;
pub mod restore;

/// The store runs are kept in, and the fence every write carries.
#[derive(Clone)]
pub struct Keeper {
    store: AnyStore,
    fence: Option<Fence>,
    deposed: CancellationToken,
}

impl Keeper {
    /// Writes to `store`, each conditional on `fence` when there is one (a
    /// leader's term); `deposed` is cancelled when a write finds the fence
    /// gone, which means another coordinator leads now.
    pub fn new(store: AnyStore, fence: Option<Fence>, deposed: CancellationToken) -> Self {
        Self {
            store,
            fence,
            deposed,
        }
    }

    /// The store, for reads.
    pub fn store(&self) -> &AnyStore {
        &self.store
    }

    /// The fence writes carry.
    pub fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    /// Passes a write's result on, noting a lost fence.
    pub fn checked<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Fenced { .. }) = &result {
            self.deposed.cancel();
        }
        result
    }
}
