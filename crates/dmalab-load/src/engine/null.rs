//! The `null` engine: moves no data, every command completes with its full
//! length. Like fio's null ioengine it lets the tool itself (patterns,
//! pacing, accounting) run, and be measured, without a device.
//!
//! Each command still goes through the kernel as an io_uring `NOP`, on a
//! ring built and driven exactly as the `io_uring` engine's (same setup
//! flags, same unplugged batches of two, the same `io_uring_enter` to
//! submit and reap): so a `null` twin of an `io_uring` aggressor, paced at
//! the same command rate, spends the same CPU time in the submission and
//! completion path and differs only in what a data command adds beyond it
//! (the file system or block layer, the device, its interrupt, and the DMA
//! itself). `dmalab run` uses it as the control of `io_uring` aggressors
//! (docs/run.md). Where io_uring is unavailable, commands complete in the
//! engine at once (the result's `null.completions` says which).

use super::uring::{build_ring, ring_submit_and_reap, MAX_UNPLUGGED};
use super::{
    refuse_direction_both, Command, Completion, Driver, Engine, EngineError, EngineKind,
    EngineSpec, TargetInfo, TargetRequest,
};
use crate::plan::Plan;
use crate::target::{inspect_file_or_block, TargetError};
use dmalab_core::UsageError;
use io_uring::{opcode, IoUring};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// How the workers' commands completed (0: no worker opened yet): through
/// a NOP ring, or at once in the engine.
const RING: u8 = 1;
const IMMEDIATE: u8 = 2;

/// The null engine's lifecycle: a target is only described (its size
/// bounds the device offsets), never created, opened or written.
#[derive(Default)]
pub struct NullDriver {
    /// How the workers' commands completed (the last worker to open says).
    completions: AtomicU8,
}

impl Driver for NullDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::Null
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        inspect_file_or_block(req, EngineKind::Null)
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        refuse_direction_both(plan)
    }

    fn prepare(&mut self, _plan: &mut Plan) -> Result<(), TargetError> {
        Ok(())
    }

    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
        let e = NullEngine::new(spec);
        let how = if e.ring.is_some() { RING } else { IMMEDIATE };
        self.completions.store(how, Ordering::Relaxed);
        Ok(Box::new(e))
    }

    fn facts(&self) -> Option<(&'static str, serde_json::Value)> {
        let how = match self.completions.load(Ordering::Relaxed) {
            RING => "io_uring nop",
            IMMEDIATE => "immediate",
            _ => return None,
        };
        Some(("null", serde_json::json!({ "completions": how })))
    }
}

/// One worker's queue: NOPs on a ring, or completions handed back at once.
pub struct NullEngine {
    /// The NOP ring and whether its kernel takes a wait timeout.
    ring: Option<(IoUring, bool)>,
    /// Each slot's command length, reported as its result.
    lens: Vec<i32>,
    /// NOPs submitted and not yet reaped.
    in_flight: usize,
    /// Without a ring: completions waiting for the next reap.
    queued: Vec<Completion>,
}

impl NullEngine {
    /// A null engine with room for `spec.iodepth` slots: a NOP ring when
    /// the kernel gives one, immediate completions otherwise.
    pub fn new(spec: &EngineSpec) -> Self {
        let ring = build_ring(spec.iodepth).ok().map(|r| {
            let ext = r.params().is_feature_ext_arg();
            (r, ext)
        });
        Self {
            ring,
            lens: vec![0; spec.iodepth.max(1) as usize],
            in_flight: 0,
            queued: Vec::with_capacity(spec.iodepth as usize),
        }
    }

    /// True when commands go through the kernel as io_uring NOPs.
    pub fn uses_ring(&self) -> bool {
        self.ring.is_some()
    }
}

impl Engine for NullEngine {
    fn name(&self) -> &'static str {
        "null"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        let len = cmd.len as i32;
        let Some((ring, _)) = &mut self.ring else {
            self.queued.push(Completion { slot, result: len });
            return Ok(());
        };
        if let Some(l) = self.lens.get_mut(slot as usize) {
            *l = len;
        } else {
            self.lens.resize(slot as usize + 1, 0);
            self.lens[slot as usize] = len;
        }
        let entry = opcode::Nop::new().build().user_data(u64::from(slot));
        // SAFETY: a NOP references no memory; the slot is free, so no other
        // entry uses this user_data.
        unsafe { ring.submission().push(&entry) }.map_err(|_| {
            EngineError::io(
                "queue",
                std::io::Error::other("submission queue full (more commands than --iodepth)"),
            )
        })?;
        self.in_flight += 1;
        if ring.submission().len() >= MAX_UNPLUGGED {
            super::uring::entered(ring.submitter().submit())?;
        }
        Ok(())
    }

    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let nothing = match &self.ring {
            Some(_) => self.in_flight == 0,
            None => self.queued.is_empty(),
        };
        if nothing {
            // Nothing can ever complete: honour the timeout like a ring would.
            if let Some(t) = timeout {
                std::thread::sleep(t);
            }
            return Ok(());
        }
        let Some((ring, ext)) = &mut self.ring else {
            out.append(&mut self.queued);
            return Ok(());
        };
        let lens = &self.lens;
        let mut reaped = 0;
        ring_submit_and_reap(
            ring,
            *ext,
            min_complete.min(self.in_flight),
            timeout,
            |user_data, result| {
                reaped += 1;
                let slot = user_data as u32;
                // A NOP completes with 0; the command "moved" its length.
                let result = if result < 0 {
                    result
                } else {
                    lens.get(slot as usize).copied().unwrap_or(0)
                };
                out.push(Completion { slot, result });
            },
        )?;
        self.in_flight = self.in_flight.saturating_sub(reaped);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Op;
    use std::path::PathBuf;

    fn spec(iodepth: u32) -> EngineSpec {
        EngineSpec {
            target: PathBuf::from("/nonexistent"),
            pieces: vec![],
            iodepth,
            bs: 4096,
            writes: false,
            worker: 0,
            cpus: vec![],
            buffer_locked: true,
        }
    }

    fn cmd(len: u32) -> Command {
        Command {
            op: Op::Read,
            buf_offset: 0,
            piece: 0,
            dev_offset: 0,
            len,
            blocks: len / 4096,
        }
    }

    #[test]
    fn every_command_completes_with_its_length_in_its_slot() {
        let mut e = NullEngine::new(&spec(4));
        for (slot, len) in [(0u32, 4096u32), (1, 8192), (2, 4096), (3, 12288)] {
            e.queue(&cmd(len), slot).unwrap();
        }
        let mut out = Vec::new();
        while out.len() < 4 {
            e.submit_and_reap(4 - out.len(), Some(Duration::from_secs(5)), &mut out)
                .unwrap();
        }
        out.sort_by_key(|c| c.slot);
        let got: Vec<(u32, i32)> = out.iter().map(|c| (c.slot, c.result)).collect();
        assert_eq!(got, [(0, 4096), (1, 8192), (2, 4096), (3, 12288)]);
        // Nothing in flight: a reap with a timeout returns empty-handed.
        let mut more = Vec::new();
        e.submit_and_reap(1, Some(Duration::from_millis(1)), &mut more)
            .unwrap();
        assert!(more.is_empty());
    }

    #[test]
    fn commands_go_through_the_kernel_where_io_uring_is_available() {
        // Where this kernel gives an io_uring, the null engine must use it
        // (a control that skipped the kernel would understate the CPU cost
        // of the io_uring path it stands in for).
        let kernel_has_ring = build_ring(2).is_ok();
        assert_eq!(NullEngine::new(&spec(2)).uses_ring(), kernel_has_ring);
    }
}
