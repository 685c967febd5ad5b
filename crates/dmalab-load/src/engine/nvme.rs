//! The NVMe passthrough engine: raw NVMe Read, Write and Flush commands on
//! a namespace, so one command is exactly one DMA transfer of a known size
//! (the block layer can split, merge or cache; this path cannot).
//!
//! Built on `dmalab-nvme`: io_uring `IORING_OP_URING_CMD` on the generic
//! character device `/dev/ngXnY` (128-byte SQEs, 32-byte CQEs, the shared
//! buffer's pieces registered as fixed buffers on Linux 6.1+), or the
//! synchronous `NVME_IOCTL_IO_CMD` when the kernel lacks io_uring
//! passthrough. [`Engine::name`] says which (`nvme-uring-cmd`,
//! `nvme-ioctl`); `DMALAB_NVME_PATH=ioctl|uring_cmd` forces one.
//!
//! A command maps to LBA = `dev_offset / lba_size` and NLB = `len /
//! lba_size - 1` (NLB is zero-based; nvme-memload's `single` moved two
//! blocks per command by forgetting that). A command longer than the
//! device's maximum transfer (MDTS, the kernel's limit) is refused, never
//! split: one command must stay one transfer.
//!
//! The caller has applied the safety guard to the namespace's block device
//! (`dmalab_core::safety`) before opening a writing engine.

use super::{
    format_before_refusal, not_inspected, options, refuse_direction_both, BufferPiece, Command,
    Completion, Driver, Engine, EngineError, EngineKind, EngineSpec, Op, TargetInfo, TargetRequest,
};
use crate::plan::Plan;
use crate::target::{check_size_of_existing, check_storage_write, TargetError};
use dmalab_core::host::DeviceInfo;
use dmalab_core::UsageError;
use dmalab_nvme::{
    IdNamespace, NvmeDevice, NvmeInfo, NvmeQueue, PassthruCmd, PathChoice, UringCompletion,
};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The flags only `--engine nvme` takes (the others refuse them before
/// their target is inspected).
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct NvmeArgs {
    /// Before a storage-write run, send Format NVM (no secure erase, same LBA
    /// format) to the namespace, as the thesis advises between write tests
    /// (--engine nvme; needs --allow-destroy for that device).
    #[cfg_attr(feature = "clap", arg(long))]
    pub format_before: bool,
}

impl NvmeArgs {
    /// The engine's part of the plan: Some only for `--engine nvme` with
    /// `--format-before` (other engines refuse the flag).
    pub fn plan(&self, engine: EngineKind) -> Option<NvmeOptions> {
        (engine == EngineKind::Nvme && self.format_before).then_some(NvmeOptions {
            format_before: true,
        })
    }
}

/// `--engine nvme`'s own settings (the plan's options, key `nvme`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvmeOptions {
    /// Format the namespace (Format NVM, no secure erase) before a
    /// storage-write run.
    pub format_before: bool,
}

/// The refusal of a run without `--target`.
const NEEDS_TARGET: &str = "--engine nvme needs --target /dev/ngXnY";

/// The NVMe engine's lifecycle: the target is a namespace's generic
/// character device; preflight identifies it and checks one command
/// against its maximum transfer, so a run is refused up front rather than
/// failing on its first command.
#[derive(Default)]
pub struct NvmeDriver {
    info: Option<NvmeInfo>,
    target: Option<TargetInfo>,
    allow_destroy: Option<PathBuf>,
    format_before: bool,
    /// The passthrough path's seam (`DMALAB_NVME_PATH`, read by the binary).
    path: Option<String>,
}

impl NvmeDriver {
    /// A driver whose queues take the passthrough path `path` names
    /// (`uring_cmd`, `ioctl`, `auto`; None: auto).
    pub fn new(path: Option<String>) -> Self {
        Self {
            path,
            ..Default::default()
        }
    }
}

impl Driver for NvmeDriver {
    fn kind(&self) -> EngineKind {
        EngineKind::Nvme
    }

    fn traffic(&self) -> crate::result::Traffic {
        crate::result::Traffic {
            moves_data: true,
            nvme_commands: true,
        }
    }

    fn inspect(&mut self, req: &TargetRequest) -> Result<TargetInfo, UsageError> {
        let Some(path) = &req.target else {
            return Err(UsageError::new("--target", NEEDS_TARGET));
        };
        if !path.exists() {
            return Err(UsageError::new(
                "--target",
                format!("{} does not exist", path.display()),
            ));
        }
        let is_char = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device());
        if !is_char {
            return Err(UsageError::new(
                "--target",
                format!(
                    "--engine nvme needs an NVMe generic character device (/dev/ngXnY), not {}",
                    path.display()
                ),
            ));
        }
        let Some(block) = dmalab_core::safety::block_device_for_nvme_generic(path)
            .and_then(|b| DeviceInfo::describe(&b))
        else {
            return Err(UsageError::new(
                "--target",
                format!(
                    "{} is not an NVMe generic namespace device (/dev/ngXnY with a matching /dev/nvmeXnY)",
                    path.display()
                ),
            ));
        };
        let info = TargetInfo {
            path: Some(path.clone()),
            exists: true,
            kind: "char".into(),
            size_bytes: block.size_bytes,
            logical_block_size: block.logical_block_size.max(512),
            creates: false,
        };
        check_size_of_existing(req, &info)?;
        self.allow_destroy = req.allow_destroy.clone();
        self.target = Some(info.clone());
        Ok(info)
    }

    fn max_transfer_bytes(&mut self) -> Result<Option<u64>, UsageError> {
        let Some(target) = self.target.as_ref().and_then(|t| t.path.clone()) else {
            return Err(UsageError::new("--target", NEEDS_TARGET));
        };
        let info = identify(&target)?;
        Ok(Some(info.max_transfer_bytes))
    }

    fn preflight(&mut self, plan: &Plan) -> Result<(), UsageError> {
        refuse_direction_both(plan)?;
        let Some(target) = &plan.target else {
            return Err(UsageError::new("--target", NEEDS_TARGET));
        };
        let info = preflight(target, plan.stream.bs_bytes, plan.stream.command_blocks())?;
        self.info = Some(info);
        check_storage_write(plan, true, self.allow_destroy.as_deref())?;
        self.format_before =
            options::nvme(plan.engine_options.as_ref()).is_some_and(|n| n.format_before);
        if self.format_before && !plan.writes_storage() {
            return Err(format_before_refusal());
        }
        Ok(())
    }

    fn prepare(&mut self, plan: &mut Plan) -> Result<(), TargetError> {
        let (Some(path), Some(_)) = (&plan.target, &self.target) else {
            return Err(not_inspected());
        };
        if self.format_before {
            // preflight passed the safety guard and --allow-destroy named
            // the device.
            let idx = format_before(path).map_err(|e| match e {
                EngineError::Io { what, cause } => EngineError::Io {
                    what: format!("--format-before: Format NVM of {}: {what}", path.display()),
                    cause,
                },
                EngineError::Unsupported { feature, detail } => EngineError::Unsupported {
                    feature: format!("--format-before ({feature})"),
                    detail,
                },
            })?;
            eprintln!(
                "dmalab: formatted {} (Format NVM, LBA format {idx}, no secure erase)",
                path.display()
            );
        }
        Ok(())
    }

    fn open(&self, spec: &EngineSpec) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(NvmeEngine::open(spec, self.path.as_deref())?))
    }

    fn header(&self) -> String {
        self.info
            .as_ref()
            .map(NvmeInfo::summary_line)
            .unwrap_or_default()
    }

    fn device(&self, plan: &Plan) -> Option<DeviceInfo> {
        let mut t = plan.target.as_deref().and_then(DeviceInfo::describe)?;
        if let Some(n) = &self.info {
            t.model = n.controller.model.clone();
            t.size_bytes = n.capacity_bytes;
            t.logical_block_size = n.lba_size_bytes;
            if t.physical_block_size == 0 {
                t.physical_block_size = n.lba_size_bytes;
            }
            if t.block_device.is_none() {
                t.block_device = n
                    .block_device
                    .as_ref()
                    .map(|b| b.trim_start_matches("/dev/").to_string());
            }
        }
        Some(t)
    }

    fn facts(&self) -> Option<(&'static str, serde_json::Value)> {
        let v = serde_json::to_value(self.info.as_ref()?).ok()?;
        Some(("nvme", v))
    }
}

/// Identifies `target` and checks that a command of `cmd_blocks` blocks of
/// `bs` bytes fits the namespace: whole logical blocks, at most the
/// maximum transfer (MDTS and the kernel's limit).
pub fn preflight(target: &Path, bs: u64, cmd_blocks: u64) -> Result<NvmeInfo, UsageError> {
    let info = identify(target)?;
    let lba = info.lba_size_bytes;
    let max = info.max_transfer_bytes;
    if !bs.is_multiple_of(lba) {
        return Err(UsageError::new(
            "--bs",
            format!(
                "{bs} is not a multiple of {}'s {lba}-byte logical blocks",
                target.display()
            ),
        ));
    }
    if bs > max {
        return Err(UsageError::new(
            "--bs",
            format!(
                "{bs} bytes exceeds {}'s maximum transfer of {max} bytes per command (MDTS); use a smaller --bs",
                target.display()
            ),
        ));
    }
    if bs * cmd_blocks > max {
        return Err(UsageError::new(
            "--max-blocks",
            format!(
                "{cmd_blocks} blocks of {bs} bytes exceed {}'s maximum transfer of {max} bytes per command (MDTS); use --max-blocks {} or less",
                target.display(),
                max / bs
            ),
        ));
    }
    Ok(info)
}

/// Identify Controller and Namespace of `target`.
fn identify(target: &Path) -> Result<NvmeInfo, UsageError> {
    NvmeDevice::open(target, false)
        .and_then(|d| d.info())
        .map_err(|e| {
            UsageError::new(
                "--target",
                format!("cannot identify the NVMe namespace: {e} (the nvme engine needs root for admin passthrough)"),
            )
        })
}

/// `--format-before`: Format NVM of the namespace at `target` with the LBA
/// format it already uses and no secure erase (SES = 0), returning that
/// format's index. Destroys every block of the namespace: the caller has
/// applied the safety guard and the user named the device with
/// --allow-destroy.
fn format_before(target: &Path) -> Result<u8, EngineError> {
    let dev = NvmeDevice::open(target, true).map_err(nvme_err)?;
    let ns = dev.identify_namespace().map_err(nvme_err)?;
    let index = IdNamespace::format_index(ns.nlbaf, ns.flbas);
    dev.format_nvm(index).map_err(nvme_err)?;
    Ok(index)
}

fn nvme_err(e: dmalab_nvme::Error) -> EngineError {
    match e {
        dmalab_nvme::Error::Io { what, cause } => EngineError::Io { what, cause },
        dmalab_nvme::Error::Unsupported { what, detail } => EngineError::Unsupported {
            feature: what,
            detail,
        },
        other => EngineError::Unsupported {
            feature: "--engine nvme".into(),
            detail: other.to_string(),
        },
    }
}

/// One worker's NVMe queue.
pub struct NvmeEngine {
    queue: NvmeQueue,
    nsid: u32,
    lba_size: u64,
    max_transfer_bytes: u64,
    pieces: Vec<BufferPiece>,
    fixed: bool,
    /// Bytes of the command in each slot (its completion's result).
    slot_len: Vec<u32>,
    /// The command in each slot, to resend it without a fixed buffer.
    slot_cmd: Vec<PassthruCmd>,
    /// Whether each slot's command named a fixed buffer.
    slot_fixed: Vec<bool>,
    /// Noop completions (they touch no device).
    ready: Vec<Completion>,
    reaped: Vec<UringCompletion>,
}

impl NvmeEngine {
    /// Opens `spec.target`, identifies it and sets up the queue on the
    /// passthrough path `path` names (see [`NvmeDriver::new`]).
    pub fn open(spec: &EngineSpec, path: Option<&str>) -> Result<Self, EngineError> {
        let dev = NvmeDevice::open(&spec.target, false).map_err(nvme_err)?;
        let info = dev.info().map_err(nvme_err)?;
        drop(dev);
        let lba = info.lba_size_bytes;
        if !u64::from(spec.bs).is_multiple_of(lba) {
            return Err(EngineError::Unsupported {
                feature: format!("--bs {}", spec.bs),
                detail: format!(
                    "{} has {lba}-byte logical blocks: use a --bs that is a multiple of {lba}",
                    spec.target.display()
                ),
            });
        }
        if u64::from(spec.bs) > info.max_transfer_bytes {
            return Err(EngineError::Unsupported {
                feature: format!("--bs {}", spec.bs),
                detail: format!(
                    "{} moves at most {} bytes per command (MDTS): use a smaller --bs",
                    spec.target.display(),
                    info.max_transfer_bytes
                ),
            });
        }
        let choice = PathChoice::parse(path).map_err(nvme_err)?;
        let mut queue = NvmeQueue::open(&spec.target, spec.writes, spec.iodepth.max(1), choice)
            .map_err(nvme_err)?;
        let iov = spec.iovecs();
        // An unlocked buffer (ulimit -l below it) is not registered either:
        // registration is charged against the same limit; plain addresses.
        // SAFETY: the pieces belong to the run's DMA buffer, which outlives
        // every engine (the engine contract in engine/mod.rs).
        let fixed = spec.buffer_locked
            && !iov.is_empty()
            && unsafe { queue.register_buffers(&iov) }.map_err(nvme_err)?;
        if let (Some(why), PathChoice::Auto) = (queue.fallback_reason(), choice) {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                eprintln!("dmalab: nvme engine: io_uring passthrough unavailable ({why}); using NVME_IOCTL_IO_CMD (one command per system call)");
            });
        }
        Ok(Self {
            nsid: queue.nsid(),
            queue,
            lba_size: lba,
            max_transfer_bytes: info.max_transfer_bytes,
            pieces: spec.pieces.clone(),
            fixed,
            slot_len: vec![0; spec.iodepth.max(1) as usize],
            slot_cmd: vec![PassthruCmd::default(); spec.iodepth.max(1) as usize],
            slot_fixed: vec![false; spec.iodepth.max(1) as usize],
            ready: Vec::new(),
            reaped: Vec::new(),
        })
    }

    fn build(&self, cmd: &Command) -> Result<(PassthruCmd, Option<u16>), EngineError> {
        let bad = |detail: String| EngineError::Unsupported {
            feature: "--engine nvme".into(),
            detail,
        };
        if cmd.op == Op::Flush {
            return Ok((PassthruCmd::flush(self.nsid), None));
        }
        let len = u64::from(cmd.len);
        if !cmd.dev_offset.is_multiple_of(self.lba_size)
            || !len.is_multiple_of(self.lba_size)
            || len == 0
        {
            return Err(bad(format!(
                "command at device offset {} of {len} bytes is not whole {}-byte blocks",
                cmd.dev_offset, self.lba_size
            )));
        }
        if len > self.max_transfer_bytes {
            return Err(bad(format!(
                "a command of {len} bytes exceeds the device's maximum transfer of {} bytes \
                 (MDTS); lower --max-blocks to at most {}",
                self.max_transfer_bytes,
                self.max_transfer_bytes / (len / u64::from(cmd.blocks.max(1)))
            )));
        }
        let piece = self
            .pieces
            .get(usize::from(cmd.piece))
            .ok_or_else(|| bad(format!("no buffer piece {}", cmd.piece)))?;
        let within = cmd.buf_offset.checked_sub(piece.buf_offset);
        let within = match within {
            Some(w) if w + len <= piece.len as u64 => w,
            _ => {
                return Err(bad(format!(
                    "buffer offset {} outside piece {}",
                    cmd.buf_offset, cmd.piece
                )))
            }
        };
        let addr = piece.addr as u64 + within;
        let slba = cmd.dev_offset / self.lba_size;
        let blocks = (len / self.lba_size) as u32;
        let c = match cmd.op {
            Op::Read => PassthruCmd::read(self.nsid, slba, blocks, self.lba_size as u32, addr),
            _ => PassthruCmd::write(self.nsid, slba, blocks, self.lba_size as u32, addr),
        }
        .map_err(nvme_err)?;
        Ok((c, self.queue.uses_fixed_buffers().then_some(cmd.piece)))
    }
}

impl NvmeEngine {
    /// Turns `self.reaped` into completions in `out`. A fixed-buffer command
    /// the kernel refused with EINVAL never reached the device (see
    /// `NvmeQueue::stop_using_fixed_buffers`): it is queued again with its
    /// plain address, and fixed buffers are dropped for good. Returns true
    /// when something was queued again.
    fn absorb(&mut self, out: &mut Vec<Completion>) -> Result<bool, EngineError> {
        let mut resent = false;
        for i in 0..self.reaped.len() {
            let c = self.reaped[i];
            let slot = c.user_data as u32;
            let s = slot as usize;
            if c.res == -libc::EINVAL && self.slot_fixed.get(s).copied().unwrap_or(false) {
                self.queue.stop_using_fixed_buffers();
                self.fixed = false;
                self.slot_fixed[s] = false;
                let cmd = self.slot_cmd[s];
                // SAFETY: as in queue(): the address lies inside the DMA
                // buffer, which outlives the engine.
                unsafe { self.queue.push(cmd, u64::from(slot), None) }.map_err(nvme_err)?;
                resent = true;
                continue;
            }
            let result = match c.res {
                0 => self.slot_len.get(s).copied().unwrap_or(0) as i32,
                // A positive NVMe status: the device failed the command.
                st if st > 0 => -libc::EIO,
                e => e,
            };
            out.push(Completion { slot, result });
        }
        self.reaped.clear();
        Ok(resent)
    }
}

impl Engine for NvmeEngine {
    fn name(&self) -> &'static str {
        self.queue.path().engine_name()
    }

    fn queue(&mut self, cmd: &Command, slot: u32) -> Result<(), EngineError> {
        if cmd.op == Op::Noop {
            self.ready.push(Completion { slot, result: 0 });
            return Ok(());
        }
        let (c, buf_index) = self.build(cmd)?;
        if let Some(l) = self.slot_len.get_mut(slot as usize) {
            *l = cmd.len;
        }
        if let Some(s) = self.slot_cmd.get_mut(slot as usize) {
            *s = c;
        }
        if let Some(f) = self.slot_fixed.get_mut(slot as usize) {
            *f = buf_index.is_some();
        }
        // SAFETY: the address lies inside a piece of the run's DMA buffer
        // (checked in build), which outlives the engine and its commands.
        unsafe { self.queue.push(c, u64::from(slot), buf_index) }.map_err(nvme_err)
    }

    fn submit_and_reap(
        &mut self,
        min_complete: usize,
        timeout: Option<Duration>,
        out: &mut Vec<Completion>,
    ) -> Result<(), EngineError> {
        let want = min_complete.saturating_sub(self.ready.len());
        out.append(&mut self.ready);
        self.reaped.clear();
        self.queue
            .submit_and_reap(want, timeout, &mut self.reaped)
            .map_err(nvme_err)?;
        while self.absorb(out)? {
            // Resent commands: hand them to the kernel without waiting.
            self.reaped.clear();
            self.queue
                .submit_and_reap(0, None, &mut self.reaped)
                .map_err(nvme_err)?;
        }
        Ok(())
    }
}
