//! Which bundle paths, and which sets of them, a worker can lay out as
//! files: checked when a bundle is accepted, so that no run starts with
//! files no worker can create.

use std::collections::HashSet;
use std::path::{Component, Path};

use crate::path::{normal_form, stays_inside};

/// Longest bundle path, in bytes; each part at most 255 (file systems'
/// own limit).
const MAX_PATH_BYTES: usize = 1024;
const MAX_PART_BYTES: usize = 255;

/// Why one bundle path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// It escapes the bundle or is absolute.
    #[error("bundle path '{0}' must be relative and stay inside the bundle")]
    Unsafe(String),
    /// No file system can hold it as a file (`.`, control characters,
    /// over-long, a directory).
    #[error("bundle path {0:?} {1}")]
    Unusable(String, &'static str),
}

/// Why a set of bundle paths is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bundle path '{path}' {why}")]
pub struct LayoutError {
    /// The path in conflict.
    pub path: String,
    /// `appears twice` or `is both a file and a directory`.
    pub why: &'static str,
}

/// Checks that a bundle path is relative, cannot climb out of the bundle,
/// and names a file a worker can create.
pub fn check_path(path: &str) -> Result<(), PathError> {
    if !stays_inside(path) {
        return Err(PathError::Unsafe(path.to_owned()));
    }
    let unusable = |why| Err(PathError::Unusable(path.to_owned(), why));
    let parts = || Path::new(path).components();
    if path.chars().any(char::is_control) {
        return unusable("holds a control character");
    }
    if path.len() > MAX_PATH_BYTES || parts().any(|part| part.as_os_str().len() > MAX_PART_BYTES) {
        return unusable("is too long for a file system");
    }
    if path.ends_with('/') || !parts().any(|part| matches!(part, Component::Normal(_))) {
        return unusable("names a directory, not a file");
    }
    Ok(())
}

/// Refuses two files at one path (`./a.py` and `a.py` are one), and a
/// path that is a file and also the directory of another.
pub fn check_layout<'a>(paths: impl IntoIterator<Item = &'a str>) -> Result<(), LayoutError> {
    let mut files = HashSet::new();
    let mut dirs = HashSet::new();
    for path in paths {
        let normal = normal_form(path);
        for (slash, _) in normal.match_indices('/') {
            dirs.insert(normal[..slash].to_owned());
        }
        if !files.insert(normal) {
            return Err(LayoutError {
                path: path.to_owned(),
                why: "appears twice",
            });
        }
    }
    match files.iter().find(|file| dirs.contains(*file)) {
        Some(both) => Err(LayoutError {
            path: both.clone(),
            why: "is both a file and a directory",
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_must_name_a_file_inside_the_bundle() {
        assert!(check_path("scripts/a.py").is_ok());
        assert!(matches!(check_path("../x"), Err(PathError::Unsafe(_))));
        assert!(matches!(
            check_path("/etc/passwd"),
            Err(PathError::Unsafe(_))
        ));
        assert_eq!(
            check_path("a\nb").unwrap_err().to_string(),
            "bundle path \"a\\nb\" holds a control character"
        );
        assert!(matches!(check_path("."), Err(PathError::Unusable(..))));
        assert!(matches!(check_path("dir/"), Err(PathError::Unusable(..))));
        assert!(matches!(
            check_path(&"x".repeat(256)),
            Err(PathError::Unusable(..))
        ));
    }

    #[test]
    fn two_files_at_one_path_or_a_file_used_as_a_directory_clash() {
        assert!(check_layout(["a.py", "b/c.py"]).is_ok());
        let twice = check_layout(["a.py", "./a.py"]).unwrap_err();
        assert_eq!(twice.why, "appears twice");
        let both = check_layout(["b", "b/c.py"]).unwrap_err();
        assert_eq!(
            both.to_string(),
            "bundle path 'b' is both a file and a directory"
        );
    }
}
