//! The refusals engines share, in one place: a flag or a direction that an
//! engine does not take is refused with the same words whichever engine
//! meets it. An engine calls these from its argument group, `inspect` or
//! `preflight`; the binary's flag translation calls them through
//! [`EngineFlags`](super::options::EngineFlags).

use super::{EngineKind, TargetRequest};
use crate::plan::{Direction, Plan};
use dmalab_core::UsageError;

/// Why `--format-before` is refused: it only formats a namespace before a
/// storage-write run of the nvme engine.
pub(crate) fn format_before_refusal() -> UsageError {
    UsageError::new(
        "--format-before",
        "only formats before a storage-write run of the nvme engine; use it with --engine nvme --direction read",
    )
}

/// The refusal of `--format-before` (`asked`) by an engine that cannot
/// format (every engine but `nvme`), before its target is inspected.
pub(crate) fn refuse_format_before(engine: EngineKind, asked: bool) -> Result<(), UsageError> {
    if asked && engine != EngineKind::Nvme {
        return Err(format_before_refusal());
    }
    Ok(())
}

/// The refusal of `--allow-destroy` by an engine that writes no storage;
/// `why` says what it does instead.
pub(crate) fn refuse_allow_destroy(req: &TargetRequest, why: &str) -> Result<(), UsageError> {
    if req.allow_destroy.is_some() {
        return Err(UsageError::new("--allow-destroy", why));
    }
    Ok(())
}

/// The refusal of `--direction both` by an engine whose commands go one
/// way at a time (every engine but `gpu`).
pub(crate) fn refuse_direction_both(plan: &Plan) -> Result<(), UsageError> {
    if plan.direction == Direction::Both {
        return Err(UsageError::new(
            "--direction",
            format!(
                "both is only for --engine gpu (copies each way at once); use write or read with --engine {}",
                plan.engine.as_str()
            ),
        ));
    }
    Ok(())
}

/// The refusal of an engine's own flags by every other engine: the first
/// flag of `given` that was given (`(flag, given)`, in the order the
/// engine lists them) is refused with the engine's words for it (`why`).
pub(crate) fn refuse_foreign_flags(
    given: &[(&'static str, bool)],
    why: impl FnOnce(&'static str) -> UsageError,
) -> Result<(), UsageError> {
    match given.iter().find(|(_, g)| *g) {
        Some(&(flag, _)) => Err(why(flag)),
        None => Ok(()),
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

    #[test]
    fn format_before_is_refused_by_every_engine_but_nvme() {
        for kind in ENGINES {
            refuse_format_before(kind, false).unwrap();
            let r = refuse_format_before(kind, true);
            if kind == EngineKind::Nvme {
                r.unwrap();
            } else {
                let e = r.unwrap_err();
                assert_eq!(e.option, "--format-before", "{kind:?}");
                assert!(e.to_string().contains("--engine nvme"), "{e}");
            }
        }
    }

    #[test]
    fn a_foreign_flag_is_refused_by_the_first_one_given() {
        let why = |flag| UsageError::new(flag, "only with --engine x");
        refuse_foreign_flags(&[("--a", false), ("--b", false)], why).unwrap();
        let e =
            refuse_foreign_flags(&[("--a", false), ("--b", true), ("--c", true)], why).unwrap_err();
        assert_eq!(e.option, "--b");
        assert_eq!(e.to_string(), "--b: only with --engine x");
    }
}
