//! Bundle paths and how names resolve to them: a path in a bundle is
//! relative and never climbs out of the bundle's directory; a name in a
//! graph is resolved against the directory of the graph that names it.

use std::path::{Component, Path};

/// Whether `path` is relative and stays inside the directory it is joined
/// to: no root, no `..` part (a name with `..` inside it, `a..b`, is fine),
/// and not empty.
pub fn stays_inside(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|part| matches!(part, Component::Normal(_) | Component::CurDir))
}

/// `named` joined to the bundle directory `dir` (`""` for the bundle's
/// root), as a bundle path: `.` parts dropped, `..` taken back a level.
/// `None` when it climbs out of the bundle, is absolute, names nothing, or
/// is not UTF-8.
pub fn join(dir: &str, named: &str) -> Option<String> {
    let joined = Path::new(dir).join(named);
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.components() {
        match part {
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The directory of the bundle file at `path` (`""` at the root).
pub fn dir_of(path: &str) -> &str {
    path.rfind('/').map_or("", |slash| &path[..slash])
}

/// A path with its `.` parts dropped: `./a.py` and `a.py` are one file.
pub fn normal_form(path: &str) -> String {
    Path::new(path)
        .components()
        .filter_map(|part| match part {
            Component::Normal(part) => part.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_stays_inside_unless_it_climbs_or_is_rooted() {
        assert!(stays_inside("scripts/a.py"));
        assert!(stays_inside("./a.py"));
        assert!(stays_inside("a..b.py"), "'..' inside a name is no climb");
        assert!(!stays_inside("../a.py"));
        assert!(!stays_inside("a/../../b"));
        assert!(!stays_inside("/usr/bin/env"));
        assert!(!stays_inside(""));
    }

    #[test]
    fn joining_resolves_dots_and_refuses_to_climb_out() {
        assert_eq!(join("", "a.py").as_deref(), Some("a.py"));
        assert_eq!(join("sub", "../b.yaml").as_deref(), Some("b.yaml"));
        assert_eq!(join("sub", "./c/d.py").as_deref(), Some("sub/c/d.py"));
        assert_eq!(join("sub", "../../x"), None);
        assert_eq!(join("", "/etc/passwd"), None);
        assert_eq!(join("", "."), None);
    }

    #[test]
    fn directories_and_normal_forms() {
        assert_eq!(dir_of("a/b/g.yaml"), "a/b");
        assert_eq!(dir_of("g.yaml"), "");
        assert_eq!(normal_form("./a/./b.py"), "a/b.py");
    }
}
