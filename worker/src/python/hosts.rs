//! The worker's Python pools, one per bundle: its files are materialized
//! once under `python/<key>/` of the work directory (the key a hash of the
//! files' paths and contents, so two runs of one graph share a pool and
//! two graphs' `helpers.py` never meet), and a pool of long-lived
//! processes works in the graph's directory there. Pools not used lately
//! are dropped past [`MAX_BUNDLES`], which kills their processes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, OnceCell};

use super::PythonPool;
use crate::blobs::BlobCache;
use crate::confinement::NodeSandbox;
use crate::task::{BlobRef, Failure, FailureKind};

/// Bundles whose pools are kept at once.
const MAX_BUNDLES: usize = 16;
/// How long reading a module's signatures may take (its import included).
const SIGNATURES_TIMEOUT: Duration = Duration::from_secs(30);

/// How the worker runs Python (`[python]` in its configuration file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonSettings {
    /// The interpreter (default `python3`; a virtualenv's for its packages).
    pub interpreter: String,
    /// Processes per bundle; `None`: one per two slots.
    pub pool_size: Option<usize>,
    /// Whether the worker hosts Python at all (when the interpreter runs).
    pub enabled: bool,
}

impl Default for PythonSettings {
    fn default() -> Self {
        Self {
            interpreter: "python3".into(),
            pool_size: None,
            enabled: true,
        }
    }
}

/// A function's parameters as its module reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Names it takes by keyword.
    pub params: Vec<String>,
    /// It takes `**kwargs`.
    pub var_keyword: bool,
}

impl Signature {
    /// Whether the function takes keyword argument `name`.
    pub fn takes(&self, name: &str) -> bool {
        self.var_keyword || self.params.iter().any(|p| p == name)
    }
}

/// A module's functions' signatures, by name.
type Signatures = HashMap<String, Signature>;

/// One bundle's files and pool.
struct BundleHost {
    /// The bundle's root.
    root: PathBuf,
    ready: OnceCell<()>,
    /// Per graph directory and `sandbox:` (a `function` node's own, or
    /// none), its pool.
    pools: Mutex<HashMap<(String, NodeSandbox), Arc<PythonPool>>>,
    /// Per `module` (`dir` first), its functions' signatures.
    signatures: Mutex<HashMap<(String, String), Arc<Signatures>>>,
}

/// The worker's Python pools.
pub struct PythonHosts {
    settings: PythonSettings,
    pool_size: usize,
    root: PathBuf,
    confinement: Arc<crate::confinement::Confinement>,
    bundles: std::sync::Mutex<Vec<(String, Arc<BundleHost>)>>,
    /// Each run's name in the Python processes' state caches, never used
    /// twice: a field version names a value only within one life of a run
    /// on one connection (a restarted coordinator, or a run revived by
    /// `retry`, numbers versions afresh).
    lives: std::sync::Mutex<HashMap<String, u64>>,
    next_life: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for PythonHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonHosts")
            .field("settings", &self.settings)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// A pool ready for calls, and where its signatures are kept.
pub struct Hosted {
    host: Arc<BundleHost>,
    dir: String,
    /// The pool.
    pub pool: Arc<PythonPool>,
}

impl PythonHosts {
    /// Pools under `root`; `slots` sizes them by default.
    pub fn new(
        settings: PythonSettings,
        slots: u32,
        root: PathBuf,
        confinement: Arc<crate::confinement::Confinement>,
    ) -> Self {
        let pool_size = settings
            .pool_size
            .unwrap_or_else(|| (slots as usize).div_ceil(2))
            .max(1);
        Self {
            settings,
            pool_size,
            root,
            confinement,
            bundles: std::sync::Mutex::new(Vec::new()),
            lives: std::sync::Mutex::default(),
            next_life: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The name run `run_id`'s state goes by in the Python processes.
    pub fn state_key(&self, run_id: &str) -> String {
        let mut lives = self.lives.lock().unwrap_or_else(|e| e.into_inner());
        let life = *lives.entry(run_id.to_owned()).or_insert_with(|| {
            self.next_life
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        });
        format!("{life}")
    }

    /// Run `run_id` ended: its state is named afresh if it comes back.
    pub fn forget(&self, run_id: &str) {
        let mut lives = self.lives.lock().unwrap_or_else(|e| e.into_inner());
        lives.remove(run_id);
    }

    /// A new connection to a coordinator: every run is named afresh.
    pub fn new_session(&self) {
        let mut lives = self.lives.lock().unwrap_or_else(|e| e.into_inner());
        lives.clear();
    }

    /// The pool for `bundle`'s graph directory `dir` whose processes are
    /// confined within `sandbox`, its files put in place (fetched through
    /// `blobs`) on first use.
    pub async fn pool(
        &self,
        blobs: &BlobCache,
        bundle: &[BlobRef],
        dir: &str,
        sandbox: NodeSandbox,
    ) -> Result<Hosted, Failure> {
        // `""`: the graph lies at the bundle's root.
        if !dir.is_empty() && !weft_bundle::stays_inside(dir) {
            return Err(Failure::new(
                FailureKind::InvalidTask,
                format!("graph directory '{dir}' escapes the bundle"),
            ));
        }
        let key = bundle_key(bundle);
        let host = self.host(&key);
        host.ready
            .get_or_try_init(|| async {
                for file in bundle {
                    blobs.materialize(file, &host.root).await?;
                }
                Ok::<_, Failure>(())
            })
            .await?;
        let pool = host
            .pools
            .lock()
            .await
            .entry((dir.to_owned(), sandbox))
            .or_insert_with(|| {
                Arc::new(
                    PythonPool::new(
                        self.settings.interpreter.clone(),
                        host.root.join(dir),
                        self.pool_size,
                    )
                    .confined(
                        self.confinement.clone(),
                        host.root.clone(),
                        sandbox,
                    ),
                )
            })
            .clone();
        Ok(Hosted {
            host,
            dir: dir.to_owned(),
            pool,
        })
    }

    /// The bundle's host, made (and the least recently used dropped)
    /// when new.
    fn host(&self, key: &str) -> Arc<BundleHost> {
        let mut bundles = self.bundles.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = bundles.iter().position(|(k, _)| k == key) {
            let entry = bundles.remove(at);
            let host = entry.1.clone();
            bundles.push(entry);
            return host;
        }
        let host = Arc::new(BundleHost {
            root: self.root.join(key),
            ready: OnceCell::new(),
            pools: Mutex::default(),
            signatures: Mutex::default(),
        });
        bundles.push((key.to_owned(), host.clone()));
        if bundles.len() > MAX_BUNDLES
            && let Some(at) = bundles.iter().position(|(_, h)| Arc::strong_count(h) == 1)
        {
            let (_, dropped) = bundles.remove(at);
            let root = dropped.root.clone();
            drop(dropped);
            let _ = std::fs::remove_dir_all(root);
        }
        host
    }
}

impl Hosted {
    /// The signature of `module`'s `function`, read once per module; `None`
    /// when the module does not report it (an imported name, a class).
    pub async fn signature(&self, module: &str, function: &str) -> Option<Signature> {
        let key = (self.dir.clone(), module.to_owned());
        let known = self.host.signatures.lock().await.get(&key).cloned();
        let table = match known {
            Some(table) => table,
            None => {
                // A module that fails to import answers nothing here; its
                // call reports the traceback.
                let read = self
                    .pool
                    .signatures(module, SIGNATURES_TIMEOUT)
                    .await
                    .ok()?;
                let table = Arc::new(signature_table(&read));
                self.host.signatures.lock().await.insert(key, table.clone());
                table
            }
        };
        table.get(function).cloned()
    }
}

fn signature_table(read: &Value) -> Signatures {
    read.as_object()
        .into_iter()
        .flatten()
        .map(|(name, entry)| {
            let params = entry["params"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            let var_keyword = entry["var_keyword"].as_bool().unwrap_or(true);
            (
                name.clone(),
                Signature {
                    params,
                    var_keyword,
                },
            )
        })
        .collect()
}

/// A name for a bundle's set of files: its paths and contents' hashes.
fn bundle_key(bundle: &[BlobRef]) -> String {
    let mut files: Vec<&BlobRef> = bundle.iter().collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(file.path.as_bytes());
        hasher.update([0]);
        hasher.update(file.sha256.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    hex::encode(&digest[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_named_afresh_after_it_ends_and_on_a_new_connection() {
        let hosts = PythonHosts::new(
            PythonSettings::default(),
            2,
            PathBuf::from("/nonexistent"),
            Arc::new(crate::confinement::Confinement::off(
                crate::confinement::Limits::default(),
            )),
        );
        let first = hosts.state_key("r");
        assert_eq!(hosts.state_key("r"), first, "one name while it lives");
        assert_ne!(hosts.state_key("s"), first);
        hosts.forget("r");
        let revived = hosts.state_key("r");
        assert_ne!(revived, first, "a revived run numbers its versions afresh");
        hosts.new_session();
        assert_ne!(hosts.state_key("r"), revived);
    }
}
