//! The `null` engine: moves no data, every command completes at once with its
//! full length. Like fio's null ioengine it lets the tool itself (patterns,
//! pacing, accounting) run, and be measured, without a device.

use super::{Command, Completion, Engine, EngineError, EngineSpec};
use std::time::Duration;

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
