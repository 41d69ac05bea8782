//! The worker's work directory: its file cache (`files/`), its knowledge
//! bases' indexes (`knowledge/`) and the scratch directories of its
//! attempts (`scratch/`).
//!
//! Both hold what runs carry (bundle files, state files with whatever the
//! state holds), so both are private to the worker's user: created `0700`
//! (and made so if they already exist), with files written `0600` or with
//! their bundle mode. Without `--work-dir` the worker makes a fresh
//! directory with an unpredictable name under the system's temporary
//! directory (as `mkdtemp` does) and removes it on exit; a configured one
//! is kept, and only its two subdirectories are the worker's.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A prepared work directory.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    /// Made by this worker for itself: removed when it ends.
    owned: bool,
}

impl WorkDir {
    /// Prepares `configured`, or a fresh private directory.
    pub fn prepare(configured: Option<&Path>) -> io::Result<Self> {
        let (path, owned) = match configured {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                (dir.to_path_buf(), false)
            }
            None => (private_dir_under(&std::env::temp_dir())?, true),
        };
        let dir = Self { path, owned };
        private(&dir.files())?;
        private(&dir.scratch())?;
        private(&dir.knowledge())?;
        Ok(dir)
    }

    /// The directory itself: what the worker's scripts never see whole.
    pub fn root(&self) -> &Path {
        &self.path
    }

    /// Where bundle files are cached by hash.
    pub fn files(&self) -> PathBuf {
        self.path.join("files")
    }

    /// Where bundles' Python modules live, one directory per bundle.
    pub fn python(&self) -> PathBuf {
        self.path.join("python")
    }

    /// Where knowledge bases' indexes are kept (`KEY.kb`) and opened.
    pub fn knowledge(&self) -> PathBuf {
        self.path.join("knowledge")
    }

    /// Where attempts get their scratch directories.
    pub fn scratch(&self) -> PathBuf {
        self.path.join("scratch")
    }

    /// Removes what no later worker may use: the scratch area, and the
    /// whole directory when this worker made it.
    pub fn clean_up(&self) {
        let _ = std::fs::remove_dir_all(self.scratch());
        let _ = std::fs::remove_dir_all(self.python());
        let _ = std::fs::remove_dir_all(self.knowledge().join("open"));
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Creates (or takes over) `dir` with mode 0700.
fn private(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// A new directory `weft-worker-<random>` under `parent`, mode 0700,
/// failing rather than reusing one that exists.
fn private_dir_under(parent: &Path) -> io::Result<PathBuf> {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..16 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let path = parent.join(format!("weft-worker-{:016x}", hasher.finish()));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free name for a work directory",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_default_directory_is_fresh_private_and_removed() {
        let a = WorkDir::prepare(None).unwrap();
        let b = WorkDir::prepare(None).unwrap();
        assert_ne!(a.path, b.path, "names are not predictable");
        assert_eq!(mode(&a.path), 0o700);
        assert_eq!(mode(&a.scratch()), 0o700);
        assert_eq!(mode(&a.files()), 0o700);
        a.clean_up();
        b.clean_up();
        assert!(!a.path.exists());
    }

    #[test]
    fn a_configured_directory_is_kept_and_its_parts_made_private() {
        let dir = std::env::temp_dir().join(format!("weft-workdir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("files")).unwrap();
        std::fs::set_permissions(dir.join("files"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let work = WorkDir::prepare(Some(&dir)).unwrap();
        assert_eq!(mode(&work.files()), 0o700);
        work.clean_up();
        assert!(dir.exists(), "a configured directory stays");
        assert!(!work.scratch().exists());
        std::fs::remove_dir_all(dir).ok();
    }
}
