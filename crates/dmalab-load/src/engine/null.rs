//! The `null` engine: moves no data, every command completes at once with its
//! full length. Like fio's null ioengine it lets the tool itself (patterns,
//! pacing, accounting) run, and be measured, without a device.

use super::{
    refuse_direction_both, refuse_format_before, Command, Completion, Driver, Engine, EngineError,
    EngineKind, EngineSpec, TargetInfo, TargetRequest,
};
use crate::plan::Plan;
use crate::target::{inspect_file_or_block, TargetError};
use dmalab_core::UsageError;
use std::time::Duration;

/// The null engine's lifecycle: a target is only described (its size
/// bounds the device offsets), never created, opened or written.
#[derive(Default)]
pub struct NullDriver;

impl Driver for NullDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::Null
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        refuse_format_before(req)?;
        inspect_file_or_block(req, EngineKind::Null)
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        refuse_direction_both(plan)
    }

    fn prepare(&mut self, _plan: &mut Plan) -> Result<(), TargetError> {
        Ok(())
    }

    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(NullEngine::new(spec)))
    }
}

/// Completes everything queued on the next `submit_and_reap`.
pub struct NullEngine {
    queued: Vec<Completion>,
}

impl NullEngine {
    /// A null engine with room for `spec.iodepth` slots.
    pub fn new(spec: &EngineSpec) -> Self {
        Self {
            queued: Vec::with_capacity(spec.iodepth as usize),
        }
    }
}

impl Engine for NullEngine {
    fn name(&self) -> &'static str {
        "null"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        self.queued.push(Completion {
            slot,
            result: cmd.len as i32,
        });
        Ok(())
    }

    fn submit_and_reap(
        &mut self,
        _min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        if self.queued.is_empty() {
            // Nothing can ever complete: honour the timeout like a ring would.
            if let Some(t) = timeout {
                std::thread::sleep(t);
            }
            return Ok(());
        }
        out.append(&mut self.queued);
        Ok(())
    }
}
