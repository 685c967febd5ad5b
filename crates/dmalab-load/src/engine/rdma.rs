//! The `rdma` engine: one-sided RDMA WRITE and READ over reliable-connected
//! queue pairs (libibverbs, loaded at run time by `dmalab_rdma`), to a
//! `dmalab rdma serve` peer or, with `--target loopback`, between two QPs
//! of the local device.
//!
//! The shared DMA buffer is registered once per run (one memory region per
//! registration piece); each worker opens its own completion queue and
//! `--qps` queue pairs. The pattern stream decides the local offset of each
//! command as for every engine; `--device-offsets` decides the remote
//! offset; `--rdma-op` decides the operation.
//!
//! Memory's point of view: an RDMA WRITE makes this NIC read this host's
//! memory (and the peer's NIC write the peer's); an RDMA READ makes this
//! NIC write this host's memory (and the peer's NIC read the peer's).

use super::{BufferPiece, Command, Completion, Engine, EngineError, Op};
use dmalab_rdma::client::{Finished, Worker};
use std::time::Duration;

/// One worker's queue pairs behind the engine interface.
pub struct RdmaEngine {
    worker: Worker,
    pieces: Vec<BufferPiece>,
    /// Flush and Noop commands: no RDMA operation, completed at once.
    immediate: Vec<Completion>,
    finished: Vec<Finished>,
    /// A lost peer or failed completion, reported on the call after the one
    /// that handed back the completions before it (so none is lost).
    deferred: Option<String>,
}

impl RdmaEngine {
    /// Wraps a connected worker over the shared buffer's `pieces`.
    pub fn new(worker: Worker, pieces: Vec<BufferPiece>) -> Self {
        Self {
            worker,
            pieces,
            immediate: Vec::new(),
            finished: Vec::new(),
            deferred: None,
        }
    }
}

fn peer_error(message: String) -> EngineError {
    EngineError::io("rdma", std::io::Error::other(message))
}

impl Engine for RdmaEngine {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        if matches!(cmd.op, Op::Flush | Op::Noop) || cmd.len == 0 {
            self.immediate.push(Completion { slot, result: 0 });
            return Ok(());
        }
        let piece = self.pieces.get(usize::from(cmd.piece)).ok_or_else(|| {
            peer_error(format!(
                "command names buffer piece {} of {}",
                cmd.piece,
                self.pieces.len()
            ))
        })?;
        let inside = cmd.buf_offset >= piece.buf_offset
            && cmd.buf_offset + u64::from(cmd.len) <= piece.buf_offset + piece.len as u64;
        if !inside {
            return Err(peer_error(format!(
                "command at buffer offset {} ({} bytes) is outside its piece",
                cmd.buf_offset, cmd.len
            )));
        }
        // SAFETY: offset and length lie inside the piece (checked above),
        // which the run's buffer keeps mapped and the client registered.
        let addr = unsafe { piece.addr.add((cmd.buf_offset - piece.buf_offset) as usize) };
        // SAFETY: addr..addr+len lies inside registered piece `cmd.piece`.
        unsafe {
            self.worker
                .post(slot, usize::from(cmd.piece), addr, cmd.len, cmd.dev_offset)
        }
        .map_err(|e| peer_error(e.to_string()))
    }

    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        if let Some(e) = self.deferred.take() {
            return Err(peer_error(e));
        }
        let had = self.immediate.len();
        out.append(&mut self.immediate);
        let min = if had > 0 {
            0
        } else {
            min_complete.saturating_sub(had)
        };
        self.finished.clear();
        let r = self.worker.reap(min, timeout, &mut self.finished);
        out.extend(self.finished.iter().map(|f| Completion {
            slot: f.slot,
            result: f.result,
        }));
        if let Err(e) = r {
            self.deferred = Some(e.to_string());
        }
        Ok(())
    }
}
