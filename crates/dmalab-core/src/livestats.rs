//! The layout of the live-stats page: `dmalab load --live-stats FILE` writes
//! it, `dmalab run` reads it. One definition for both sides.
//!
//! Little-endian u64 fields (the magic is 8 bytes) in a 4096-byte file:
//!
//! | offset | field                                         |
//! |-------:|-----------------------------------------------|
//! | 0      | magic `b"DMALSTAT"`                           |
//! | 8      | version = 1                                   |
//! | 16     | pid of the `dmalab load` process              |
//! | 24     | state: 0 starting, 1 running, 2 finished      |
//! | 32     | data bytes completed                          |
//! | 40     | commands completed                            |
//! | 48     | blocks completed                              |
//! | 56     | CLOCK_MONOTONIC ns of the last update         |
//! | 64     | CLOCK_MONOTONIC ns when the load started      |

/// Size of the file (one page).
pub const LEN: usize = 4096;
/// The magic at offset 0.
pub const MAGIC: &[u8; 8] = b"DMALSTAT";
/// Layout version.
pub const VERSION: u64 = 1;

/// Byte offsets of the fields.
pub mod off {
    /// The magic (8 bytes).
    pub const MAGIC: usize = 0;
    /// u64 layout version.
    pub const VERSION: usize = 8;
    /// u64 pid of the writer.
    pub const PID: usize = 16;
    /// u64 state (see [`super::state`]).
    pub const STATE: usize = 24;
    /// u64 data bytes completed.
    pub const BYTES: usize = 32;
    /// u64 commands completed.
    pub const COMMANDS: usize = 40;
    /// u64 blocks completed.
    pub const BLOCKS: usize = 48;
    /// u64 CLOCK_MONOTONIC ns of the last update.
    pub const UPDATED_NS: usize = 56;
    /// u64 CLOCK_MONOTONIC ns when the load started.
    pub const STARTED_NS: usize = 64;
}

/// State values at [`off::STATE`].
pub mod state {
    /// Set up, not yet issuing.
    pub const STARTING: u64 = 0;
    /// Issuing commands.
    pub const RUNNING: u64 = 1;
    /// Done; the counters are final.
    pub const FINISHED: u64 = 2;
}
