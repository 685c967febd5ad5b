//! The pattern stream: which buffer region, device offset and block count each
//! command uses.
//!
//! All workers draw from one shared stream (behind a mutex, as nvme-memload's
//! patterns are), so `--workers 4 --pattern single` still walks the buffer
//! once, block after block; which worker completes which command first is
//! not guaranteed. The stream is deterministic for a given seed: the unit
//! tests below pin its exact sequences.

use crate::engine::{Command, Op};
use dmalab_core::UsageError;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// `--pattern`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// One block per command, walking the buffer sequentially.
    Single,
    /// --max-blocks blocks per command at a uniformly random block-aligned
    /// buffer offset.
    Random,
    /// --max-blocks blocks per command, walking the buffer sequentially.
    Full,
    /// Flush commands only: no data, command traffic only.
    Flush,
    /// No I/O at all (baselines).
    Noop,
}

impl Pattern {
    /// True for patterns that move data.
    pub fn moves_data(self) -> bool {
        matches!(self, Pattern::Single | Pattern::Random | Pattern::Full)
    }
}

/// `--device-offsets`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum DeviceOffsets {
    /// Always offset 0 (the thesis' reads of block 0).
    Same,
    /// Walk the region, wrapping at its end.
    Sequential,
    /// Uniformly random, block-aligned, within the region.
    Random,
}

/// `--max-blocks`: blocks per command for the random and full patterns,
/// a number or `mdts`, the device's own largest transfer (nvme-memload
/// read it from Identify Controller: "the SSD allows transferring up to 32
/// blocks of 4096 byte per command").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxBlocks {
    /// This many blocks.
    Count(u32),
    /// The most blocks of `--bs` one command of the target may carry (its
    /// maximum transfer: MDTS, the kernel's limit, NLB's range).
    Mdts,
}

impl MaxBlocks {
    /// Parses `N` or `mdts`.
    pub fn parse(option: &str, text: &str) -> Result<Self, UsageError> {
        if text.eq_ignore_ascii_case("mdts") {
            return Ok(Self::Mdts);
        }
        match text.parse::<u32>() {
            Ok(n) => Ok(Self::Count(n)),
            Err(_) => Err(UsageError::new(
                option,
                format!("'{text}' is neither a number of blocks nor mdts; give e.g. 32 or mdts"),
            )),
        }
    }

    /// The number of blocks: `Count` as given; `Mdts` as the whole blocks
    /// of `bs_bytes` in `max_transfer_bytes`, the engine's reading of its
    /// device (`None`: the engine has no such limit to read, refused).
    pub fn resolve(
        self,
        option: &str,
        bs_bytes: u64,
        max_transfer_bytes: Option<u64>,
    ) -> Result<u32, UsageError> {
        let n = match self {
            Self::Count(n) => return Ok(n),
            Self::Mdts => {
                let Some(max) = max_transfer_bytes else {
                    return Err(UsageError::new(
                        option,
                        "mdts reads the device's maximum transfer from Identify Controller: use it with --engine nvme, or give a number of blocks",
                    ));
                };
                max / bs_bytes.max(1)
            }
        };
        if n == 0 {
            return Err(UsageError::new(
                option,
                format!(
                    "mdts: the device moves at most {} bytes per command, less than one --bs block of {bs_bytes} bytes; use a smaller --bs",
                    max_transfer_bytes.unwrap_or(0)
                ),
            ));
        }
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

/// What the stream needs to know.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamConfig {
    /// The pattern.
    pub pattern: Pattern,
    /// Read (storage read, device writes memory) or Write.
    pub write_storage: bool,
    /// `--direction both`: data commands alternate, even ones [`Op::Read`]
    /// (the device writes memory), odd ones [`Op::Write`] (the device
    /// reads memory), counted over the one shared stream; `write_storage`
    /// is then ignored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alternate: bool,
    /// Block size, bytes.
    pub bs_bytes: u64,
    /// Blocks per command for random and full.
    pub max_blocks: u32,
    /// Buffer size, bytes (a multiple of bs).
    pub buffer_bytes: u64,
    /// Registration piece size, bytes (a multiple of bs; the last piece may
    /// be shorter).
    pub piece_bytes: u64,
    /// Device region, bytes (a multiple of bs).
    pub region_bytes: u64,
    /// Device offsets.
    pub device_offsets: DeviceOffsets,
    /// Seed of the random choices.
    pub seed: u64,
}

impl StreamConfig {
    /// Blocks of `bs` in one command: 1 for `single`, `max_blocks` for
    /// `random` and `full`, 0 for patterns that move no data. The one rule
    /// of command size: the stream, [`Plan::validate`](crate::plan::Plan::validate)
    /// and the engines' transfer-limit checks all use it.
    pub fn command_blocks(&self) -> u64 {
        match self.pattern {
            Pattern::Single => 1,
            Pattern::Random | Pattern::Full => u64::from(self.max_blocks),
            Pattern::Flush | Pattern::Noop => 0,
        }
    }

    /// Bytes one data command moves (0 for flush and noop).
    pub fn command_bytes(&self) -> u64 {
        self.command_blocks() * self.bs_bytes
    }
}

/// Why a stream cannot be built (the caller maps these to usage errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The buffer cannot hold one command inside one piece.
    #[error("the buffer ({buffer_bytes} bytes) cannot hold one command of {command_bytes} bytes")]
    BufferTooSmall {
        /// Buffer size.
        buffer_bytes: u64,
        /// Command size.
        command_bytes: u64,
    },
    /// The region cannot hold one command.
    #[error(
        "the device region ({region_bytes} bytes) cannot hold one command of {command_bytes} bytes"
    )]
    RegionTooSmall {
        /// Region size.
        region_bytes: u64,
        /// Command size.
        command_bytes: u64,
    },
}

/// The shared stream of commands.
#[derive(Debug)]
pub struct PatternStream {
    cfg: StreamConfig,
    /// Next buffer block for single/full.
    buf_block: u64,
    /// Next device offset for sequential.
    dev_pos: u64,
    /// Data commands handed out so far (for `alternate`).
    data_commands: u64,
    rng: ChaCha8Rng,
    /// For random: (piece index, valid start positions in it).
    starts: Vec<(u16, u64)>,
    total_starts: u64,
}

impl PatternStream {
    /// Builds the stream, checking that one command fits the buffer (inside
    /// a piece) and the region.
    pub fn new(cfg: StreamConfig) -> Result<Self, StreamError> {
        let bs = cfg.bs_bytes;
        let cmd_blocks = cfg.command_blocks();
        let command_bytes = cfg.command_bytes();
        let mut starts = Vec::new();
        if cmd_blocks > 0 {
            let piece_blocks = cfg.piece_bytes / bs;
            let nblocks = cfg.buffer_bytes / bs;
            let mut start = 0u64;
            let mut idx = 0u16;
            while start < nblocks {
                let len = piece_blocks.min(nblocks - start);
                if len >= cmd_blocks {
                    starts.push((idx, len - cmd_blocks + 1));
                }
                start += len;
                idx += 1;
            }
            // single and full shorten at a piece end; random needs a whole
            // command inside a piece. All need one block at least.
            let fits = match cfg.pattern {
                Pattern::Random => !starts.is_empty(),
                _ => nblocks >= cmd_blocks.min(piece_blocks) && nblocks > 0,
            };
            if !fits || cfg.buffer_bytes < command_bytes {
                return Err(StreamError::BufferTooSmall {
                    buffer_bytes: cfg.buffer_bytes,
                    command_bytes,
                });
            }
            if cfg.region_bytes < command_bytes {
                return Err(StreamError::RegionTooSmall {
                    region_bytes: cfg.region_bytes,
                    command_bytes,
                });
            }
        }
        let total_starts = starts.iter().map(|s| s.1).sum();
        Ok(Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            buf_block: 0,
            dev_pos: 0,
            data_commands: 0,
            starts,
            total_starts,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StreamConfig {
        &self.cfg
    }

    /// The next command; `max_blocks_left` caps its block count (for
    /// `--blocks`), and must be at least 1 for data patterns.
    pub fn next_command(&mut self, max_blocks_left: u64) -> Command {
        let bs = self.cfg.bs_bytes;
        let write = if self.cfg.alternate {
            self.data_commands % 2 == 1
        } else {
            self.cfg.write_storage
        };
        let op = if write { Op::Write } else { Op::Read };
        let piece_blocks = self.cfg.piece_bytes / bs;
        let nblocks = self.cfg.buffer_bytes / bs;
        let (buf_block, blocks) = match self.cfg.pattern {
            Pattern::Flush | Pattern::Noop => {
                let op = if self.cfg.pattern == Pattern::Flush {
                    Op::Flush
                } else {
                    Op::Noop
                };
                return Command {
                    op,
                    buf_offset: 0,
                    piece: 0,
                    dev_offset: 0,
                    len: 0,
                    blocks: 0,
                };
            }
            Pattern::Single => {
                let b = self.buf_block;
                self.buf_block = (b + 1) % nblocks;
                (b, 1)
            }
            Pattern::Full => {
                let b = self.buf_block;
                let to_piece_end = piece_blocks - (b % piece_blocks);
                let to_buf_end = nblocks - b;
                let n = u64::from(self.cfg.max_blocks)
                    .min(to_piece_end)
                    .min(to_buf_end);
                self.buf_block = (b + n) % nblocks;
                (b, n)
            }
            Pattern::Random => {
                let mut r = self.rng.gen_range(0..self.total_starts);
                let mut chosen = 0;
                for &(idx, n) in &self.starts {
                    if r < n {
                        chosen = u64::from(idx) * piece_blocks + r;
                        break;
                    }
                    r -= n;
                }
                (chosen, u64::from(self.cfg.max_blocks))
            }
        };
        let blocks = blocks.min(max_blocks_left.max(1));
        let len = blocks * bs;
        let dev_offset = match self.cfg.device_offsets {
            DeviceOffsets::Same => 0,
            DeviceOffsets::Sequential => {
                if self.dev_pos + len > self.cfg.region_bytes {
                    self.dev_pos = 0;
                }
                let off = self.dev_pos;
                self.dev_pos += len;
                off
            }
            DeviceOffsets::Random => {
                let region_blocks = self.cfg.region_bytes / bs;
                self.rng.gen_range(0..=(region_blocks - blocks)) * bs
            }
        };
        self.data_commands += 1;
        Command {
            op,
            buf_offset: buf_block * bs,
            piece: (buf_block / piece_blocks) as u16,
            dev_offset,
            len: len as u32,
            blocks: blocks as u32,
        }
    }
}

/// Splits a buffer into registration pieces of at most `limit` bytes, each a
/// multiple of `bs`: returns the piece size.
pub fn piece_bytes(bs: u64, limit: u64) -> u64 {
    (limit / bs).max(1) * bs
}

#[cfg(test)]
mod tests {
    use super::*;

    const K4: u64 = 4096;

    fn cfg(pattern: Pattern, buffer_blocks: u64, piece_blocks: u64) -> StreamConfig {
        StreamConfig {
            pattern,
            write_storage: false,
            alternate: false,
            bs_bytes: K4,
            max_blocks: 4,
            buffer_bytes: buffer_blocks * K4,
            piece_bytes: piece_blocks * K4,
            region_bytes: 16 * K4,
            device_offsets: DeviceOffsets::Sequential,
            seed: 1,
        }
    }

    fn take(s: &mut PatternStream, n: usize) -> Vec<(u64, u16, u64, u32)> {
        (0..n)
            .map(|_| {
                let c = s.next_command(u64::MAX);
                (c.buf_offset / K4, c.piece, c.dev_offset / K4, c.blocks)
            })
            .collect()
    }

    #[test]
    fn single_walks_every_block_and_wraps() {
        let mut s = PatternStream::new(cfg(Pattern::Single, 5, 3)).unwrap();
        assert_eq!(
            take(&mut s, 7),
            vec![
                (0, 0, 0, 1),
                (1, 0, 1, 1),
                (2, 0, 2, 1),
                (3, 1, 3, 1),
                (4, 1, 4, 1),
                (0, 0, 5, 1),
                (1, 0, 6, 1)
            ]
        );
    }

    #[test]
    fn full_stops_at_piece_and_buffer_ends() {
        // Pieces of 6 blocks over a 10-block buffer: [0,6) and [6,10).
        let mut s = PatternStream::new(cfg(Pattern::Full, 10, 6)).unwrap();
        assert_eq!(
            take(&mut s, 6),
            vec![
                (0, 0, 0, 4),
                (4, 0, 4, 2),
                (6, 1, 6, 4),
                (0, 0, 10, 4),
                (4, 0, 14, 2), // ends exactly at the 16-block region's end
                (6, 1, 0, 4),  // 16 + 4 > 16: wraps to 0
            ]
        );
    }

    #[test]
    fn random_is_pinned_and_never_crosses_a_piece() {
        let mut s = PatternStream::new(cfg(Pattern::Random, 10, 6)).unwrap();
        let got = take(&mut s, 8);
        // The exact sequence for seed 1 (ChaCha8): pinned so a change of
        // generator or mapping is noticed.
        assert_eq!(
            got,
            vec![
                (0, 0, 0, 4),
                (2, 0, 4, 4),
                (1, 0, 8, 4),
                (6, 1, 12, 4),
                (2, 0, 0, 4),
                (0, 0, 4, 4),
                (1, 0, 8, 4),
                (1, 0, 12, 4)
            ]
        );
        let mut s = PatternStream::new(cfg(Pattern::Random, 10, 6)).unwrap();
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let c = s.next_command(u64::MAX);
            let b = c.buf_offset / K4;
            // Valid starts: 0..=2 in piece 0, 6 in piece 1.
            assert!(b <= 2 || b == 6, "start {b}");
            assert_eq!(c.piece as u64, b / 6);
            seen[b as usize] += 1;
        }
        // Uniform over the 4 valid starts.
        for b in [0usize, 1, 2, 6] {
            assert!((2300..2700).contains(&seen[b]), "{seen:?}");
        }
    }

    #[test]
    fn device_offsets() {
        let mut c = cfg(Pattern::Single, 4, 4);
        c.device_offsets = DeviceOffsets::Same;
        let mut s = PatternStream::new(c.clone()).unwrap();
        assert!(take(&mut s, 5).iter().all(|t| t.2 == 0));
        c.device_offsets = DeviceOffsets::Random;
        c.pattern = Pattern::Random;
        let mut s = PatternStream::new(c).unwrap();
        for _ in 0..1000 {
            let cmd = s.next_command(u64::MAX);
            assert_eq!(cmd.dev_offset % K4, 0);
            assert!(cmd.dev_offset + u64::from(cmd.len) <= 16 * K4);
        }
    }

    #[test]
    fn flush_and_noop_move_nothing() {
        let mut s = PatternStream::new(cfg(Pattern::Flush, 1, 1)).unwrap();
        let c = s.next_command(u64::MAX);
        assert_eq!((c.op, c.len, c.blocks), (Op::Flush, 0, 0));
        let mut s = PatternStream::new(cfg(Pattern::Noop, 1, 1)).unwrap();
        assert_eq!(s.next_command(1).op, Op::Noop);
    }

    #[test]
    fn blocks_cap_and_direction() {
        let mut c = cfg(Pattern::Full, 8, 8);
        c.write_storage = true;
        let mut s = PatternStream::new(c).unwrap();
        let cmd = s.next_command(3);
        assert_eq!((cmd.op, cmd.blocks, cmd.len), (Op::Write, 3, 3 * 4096));
    }

    #[test]
    fn both_alternates_read_and_write_from_the_first_command() {
        let mut c = cfg(Pattern::Random, 10, 6);
        c.alternate = true;
        // write_storage is ignored when alternating.
        c.write_storage = true;
        let mut s = PatternStream::new(c.clone()).unwrap();
        let ops: Vec<Op> = (0..6).map(|_| s.next_command(u64::MAX).op).collect();
        use Op::{Read, Write};
        assert_eq!(ops, vec![Read, Write, Read, Write, Read, Write]);
        // The offsets are the same as without alternation: only the op
        // changes.
        c.alternate = false;
        let mut plain = PatternStream::new(c.clone()).unwrap();
        c.alternate = true;
        let mut alt = PatternStream::new(c).unwrap();
        assert_eq!(take(&mut alt, 8), take(&mut plain, 8));
        // The --blocks cap shortens a command without skipping a turn.
        let mut c = cfg(Pattern::Full, 8, 8);
        c.alternate = true;
        let mut s = PatternStream::new(c).unwrap();
        let a = s.next_command(3);
        let b = s.next_command(1);
        assert_eq!((a.op, a.blocks, b.op, b.blocks), (Read, 3, Write, 1));
    }

    #[test]
    fn too_small() {
        assert!(matches!(
            PatternStream::new(cfg(Pattern::Random, 3, 3)),
            Err(StreamError::BufferTooSmall { .. })
        ));
        let mut c = cfg(Pattern::Random, 8, 8);
        c.region_bytes = K4;
        assert!(matches!(
            PatternStream::new(c),
            Err(StreamError::RegionTooSmall { .. })
        ));
        assert_eq!(piece_bytes(3 * 512, 1 << 30), (1 << 30) / 1536 * 1536);
    }

    #[test]
    fn max_blocks_mdts_is_the_device_limit_in_whole_blocks_of_bs() {
        assert_eq!(
            MaxBlocks::parse("--max-blocks", "mdts"),
            Ok(MaxBlocks::Mdts)
        );
        assert_eq!(
            MaxBlocks::parse("--max-blocks", "8"),
            Ok(MaxBlocks::Count(8))
        );
        assert!(MaxBlocks::parse("--max-blocks", "lots").is_err());
        // The thesis' SSD: 128 KiB per command = 32 blocks of 4 KiB.
        let m = MaxBlocks::Mdts;
        assert_eq!(m.resolve("--max-blocks", 4096, Some(128 << 10)), Ok(32));
        assert_eq!(m.resolve("--max-blocks", 512, Some(128 << 10)), Ok(256));
        // Whole blocks only.
        assert_eq!(m.resolve("--max-blocks", 3 << 12, Some(128 << 10)), Ok(10));
        // A number is kept whatever the device says.
        let c = MaxBlocks::Count(7);
        assert_eq!(c.resolve("--max-blocks", 4096, None), Ok(7));
    }

    #[test]
    fn max_blocks_mdts_without_a_device_limit_or_below_one_block_is_refused() {
        let e = MaxBlocks::Mdts
            .resolve("--max-blocks", 4096, None)
            .unwrap_err();
        assert_eq!(e.option, "--max-blocks");
        assert!(e.to_string().contains("--engine nvme"), "{e}");
        let e = MaxBlocks::Mdts
            .resolve("--max-blocks", 8192, Some(4096))
            .unwrap_err();
        assert!(e.to_string().contains("smaller --bs"), "{e}");
    }
}
