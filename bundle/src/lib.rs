//! A bundle is a graph file and the files shipped beside it (scripts,
//! Python modules, embedded graphs), uploaded with a run so that workers
//! need no shared file system. This crate decides what a bundle path may
//! be and how a name in a graph resolves to one; the client that packs a
//! bundle, the graph loader that reads Python beside a graph, the
//! coordinator that accepts it and the worker that lays it out on disk all
//! decide it here, so a path one of them accepts the others accept too.

#![warn(missing_docs)]

mod layout;
mod path;

pub use layout::{LayoutError, PathError, check_layout, check_path};
pub use path::{dir_of, join, normal_form, stays_inside};
