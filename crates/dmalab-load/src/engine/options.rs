//! An engine's own settings. The flags only one engine takes (each
//! engine's argument group: `RdmaArgs`, `GpuArgs`, `UringArgs`,
//! `NvmeArgs`) are resolved here into [`EngineOptions`], one variant per
//! engine, which the plan carries without looking inside: only the
//! engine's own module (its `of(plan)`) and the binary's flag translation
//! name a variant. The shared modules (plan, run, worker, target, check)
//! never do.

use super::gpu::{GpuArgs, GpuPlan};
use super::nvme::{NvmeArgs, NvmeOptions};
use super::rdma::{RdmaArgs, RdmaPlan};
use super::refuse::refuse_format_before;
use super::uring::{UringArgs, UringPlan};
use super::EngineKind;
use crate::plan::Direction;
use dmalab_core::UsageError;
use serde::{Deserialize, Serialize};

/// The resolved settings of the engine of a plan (`Plan::engine_options`),
/// under the engine's own key in the result's configuration (`gpu`,
/// `rdma`, `uring`, `nvme`). None in the plan when the engine takes no
/// flags of its own or none was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineOptions {
    /// `--engine gpu`: `--gpus`, `--gpu-wait`, `--gpu-copy`.
    Gpu(GpuPlan),
    /// `--engine rdma`: its operation, queue pairs, device, peer's secret.
    Rdma(RdmaPlan),
    /// `--engine io_uring`: its submission path (always given, defaults
    /// filled in).
    Uring(UringPlan),
    /// `--engine nvme`: `--format-before`.
    Nvme(NvmeOptions),
}

impl EngineOptions {
    /// The direction of a plan from memory's point of view, for the
    /// `--direction` asked: an engine whose operation fixes it (an RDMA
    /// WRITE makes the NIC read memory) says so; the others keep it.
    pub fn memory_direction(options: Option<&Self>, asked: Direction) -> Direction {
        match options {
            Some(EngineOptions::Rdma(r)) => r.memory_direction(asked),
            _ => asked,
        }
    }
}

/// The engines' own flags as the command line gave them: each engine's
/// argument group, borrowed from the binary's flags.
#[derive(Clone, Copy, Debug)]
pub struct EngineFlags<'a> {
    /// `--rdma-op`, `--qps`, `--rdma-remote-buffer`, ...
    pub rdma: &'a RdmaArgs,
    /// `--gpus`, `--gpu-wait`, `--gpu-copy`.
    pub gpu: &'a GpuArgs,
    /// `--sqpoll-cpu`, `--iopoll`, `--register-files`, `--submit-batch`.
    pub uring: &'a UringArgs,
    /// `--format-before`.
    pub nvme: &'a NvmeArgs,
}

impl<'a> EngineFlags<'a> {
    /// The flag that sizes `engine`'s target and its text (`size`, the
    /// text of `--size`): the rdma engine's target is its remote region
    /// (`--rdma-remote-buffer`), every other engine's is `--size`. The
    /// rdma flags are checked here, before the target is inspected.
    pub fn target_size(
        &self,
        engine: EngineKind,
        size: Option<&'a str>,
    ) -> Result<(&'static str, Option<&'a str>), UsageError> {
        self.rdma.plan(engine)?;
        self.rdma.size_option(engine, size)
    }

    /// The refusals of engine flags that come before the target is
    /// inspected: `--format-before` for an engine that cannot format.
    pub fn refuse_before_inspect(&self, engine: EngineKind) -> Result<(), UsageError> {
        refuse_format_before(engine, self.nvme.format_before)
    }

    /// `engine`'s own options; the flags of every other engine are
    /// refused (gpu's, then rdma's, then io_uring's).
    pub fn options(&self, engine: EngineKind) -> Result<Option<EngineOptions>, UsageError> {
        let gpu = self.gpu.plan(engine)?.map(EngineOptions::Gpu);
        let rdma = self.rdma.plan(engine)?.map(EngineOptions::Rdma);
        let uring = self.uring.plan(engine)?.map(EngineOptions::Uring);
        refuse_format_before(engine, self.nvme.format_before)?;
        let nvme = self.nvme.plan(engine).map(EngineOptions::Nvme);
        // Each group refuses itself for the other engines: one at most.
        Ok(gpu.or(rdma).or(uring).or(nvme))
    }
}

/// The gpu engine's part of a plan's options (None: another engine, or
/// none of its flags).
pub(crate) fn gpu(options: Option<&EngineOptions>) -> Option<&GpuPlan> {
    match options {
        Some(EngineOptions::Gpu(g)) => Some(g),
        _ => None,
    }
}

/// The rdma engine's part of a plan's options.
pub(crate) fn rdma(options: Option<&EngineOptions>) -> Option<&RdmaPlan> {
    match options {
        Some(EngineOptions::Rdma(r)) => Some(r),
        _ => None,
    }
}

/// The io_uring engine's part of a plan's options.
pub(crate) fn uring(options: Option<&EngineOptions>) -> Option<&UringPlan> {
    match options {
        Some(EngineOptions::Uring(u)) => Some(u),
        _ => None,
    }
}

/// The nvme engine's part of a plan's options.
pub(crate) fn nvme(options: Option<&EngineOptions>) -> Option<&NvmeOptions> {
    match options {
        Some(EngineOptions::Nvme(n)) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENGINES: [EngineKind; 5] = [
        EngineKind::IoUring,
        EngineKind::Nvme,
        EngineKind::Null,
        EngineKind::Gpu,
        EngineKind::Rdma,
    ];

    fn resolve(
        engine: EngineKind,
        rdma: RdmaArgs,
        gpu: GpuArgs,
        uring: UringArgs,
        nvme: NvmeArgs,
    ) -> Result<Option<EngineOptions>, UsageError> {
        EngineFlags {
            rdma: &rdma,
            gpu: &gpu,
            uring: &uring,
            nvme: &nvme,
        }
        .options(engine)
    }

    #[test]
    fn each_engine_gets_its_own_variant_and_refuses_the_others_flags() {
        let gpus = || GpuArgs {
            gpus: Some("0".into()),
            ..Default::default()
        };
        let qps = || RdmaArgs {
            qps: Some(2),
            ..Default::default()
        };
        let iopoll = || UringArgs {
            iopoll: true,
            ..Default::default()
        };
        let format = || NvmeArgs {
            format_before: true,
        };
        for engine in ENGINES {
            let got = resolve(
                engine,
                Default::default(),
                gpus(),
                Default::default(),
                Default::default(),
            );
            match engine {
                EngineKind::Gpu => assert!(matches!(got, Ok(Some(EngineOptions::Gpu(_))))),
                _ => assert_eq!(got.unwrap_err().option, "--gpus", "{engine:?}"),
            }
            let got = resolve(
                engine,
                qps(),
                Default::default(),
                Default::default(),
                Default::default(),
            );
            match engine {
                EngineKind::Rdma => assert!(matches!(got, Ok(Some(EngineOptions::Rdma(_))))),
                _ => assert_eq!(got.unwrap_err().option, "--qps", "{engine:?}"),
            }
            let got = resolve(
                engine,
                Default::default(),
                Default::default(),
                iopoll(),
                Default::default(),
            );
            match engine {
                EngineKind::IoUring => {
                    assert!(matches!(got, Ok(Some(EngineOptions::Uring(u))) if u.iopoll))
                }
                _ => assert_eq!(got.unwrap_err().option, "--iopoll", "{engine:?}"),
            }
            let got = resolve(
                engine,
                Default::default(),
                Default::default(),
                Default::default(),
                format(),
            );
            match engine {
                EngineKind::Nvme => assert_eq!(
                    got.unwrap(),
                    Some(EngineOptions::Nvme(NvmeOptions {
                        format_before: true
                    }))
                ),
                _ => assert_eq!(got.unwrap_err().option, "--format-before", "{engine:?}"),
            }
        }
    }

    #[test]
    fn without_flags_only_io_uring_and_rdma_carry_options() {
        for engine in ENGINES {
            let got = resolve(
                engine,
                Default::default(),
                Default::default(),
                Default::default(),
                Default::default(),
            )
            .unwrap();
            match engine {
                // Their defaults are filled in, so the result says what
                // was used.
                EngineKind::IoUring => assert!(uring(got.as_ref()).is_some()),
                EngineKind::Rdma => assert!(rdma(got.as_ref()).is_some()),
                _ => assert_eq!(got, None, "{engine:?}"),
            }
        }
    }

    #[test]
    fn only_rdma_turns_the_direction() {
        let rdma_write = resolve(
            EngineKind::Rdma,
            Default::default(),
            Default::default(),
            Default::default(),
            Default::default(),
        )
        .unwrap();
        assert_eq!(
            EngineOptions::memory_direction(rdma_write.as_ref(), Direction::Write),
            Direction::Read
        );
        let uring = resolve(
            EngineKind::IoUring,
            Default::default(),
            Default::default(),
            Default::default(),
            Default::default(),
        )
        .unwrap();
        for asked in [Direction::Write, Direction::Read, Direction::Both] {
            assert_eq!(
                EngineOptions::memory_direction(uring.as_ref(), asked),
                asked
            );
            assert_eq!(EngineOptions::memory_direction(None, asked), asked);
        }
    }
}
