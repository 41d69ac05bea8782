//! The command line's commands.

pub mod commands;
pub mod connect;
pub mod files;
pub mod group;
pub mod indexes;
pub mod listing;
pub mod output;
pub mod progress;
pub mod prompt;
pub mod push;
mod python_check;
pub mod session;
mod stream_text;
pub mod terminal;

/// Exit statuses (SPEC section 12).
pub mod exit {
    /// The run completed (or the command succeeded).
    pub const OK: u8 = 0;
    /// The run failed or was cancelled.
    pub const FAILED: u8 = 1;
    /// Invalid graph, input or usage.
    pub const INVALID: u8 = 2;
    /// The run waits for input and nobody can answer here.
    pub const WAITING: u8 = 3;
    /// The coordinator cannot be reached.
    pub const UNREACHABLE: u8 = 4;
    /// The coordinator refused the identity or its role (SPEC 11).
    pub const DENIED: u8 = 5;
    /// Ctrl-C stopped the command (128 + SIGINT, as shells report it).
    pub const INTERRUPTED: u8 = 130;
}
