//! The `ddio` key of a configuration: DDIO set before that configuration's
//! runs and restored after, through `dmalab_host::ddio` (journaled, restored
//! on exit, error, signal and panic, and by `dmalab cleanup` after a kill).
//! A host that cannot do it (not an Intel Xeon, no root port, no MSR device,
//! no privilege) is recorded in every run record and the runs go on.

use dmalab_host::ddio::{self, regs::Registers, Session, Setting};
use dmalab_host::HostRoot;
use serde::{Deserialize, Serialize};

/// What a run record says about DDIO.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DdioRecord {
    /// The configuration's `ddio` value (`on`, `off`, `ways:N`).
    pub requested: String,
    /// True when the setting was made (and read back) for this run.
    pub applied: bool,
    /// The registers written, or why the host could not do it.
    pub detail: String,
}

/// The DDIO state an experiment holds, one configuration at a time.
pub struct DdioAxis {
    root: HostRoot,
    session: Option<Session>,
    current: Option<Setting>,
    record: Option<DdioRecord>,
}

impl Default for DdioAxis {
    fn default() -> Self {
        Self::new(HostRoot::system())
    }
}

impl DdioAxis {
    /// Nothing set yet, on the host under `root`.
    pub fn new(root: HostRoot) -> Self {
        Self {
            root,
            session: None,
            current: None,
            record: None,
        }
    }

    /// Makes `want` the host's DDIO state (restoring the previous
    /// configuration's first) and returns what to record; `None` when the
    /// configuration has no `ddio` key.
    pub fn ensure(&mut self, want: Option<Setting>) -> Option<DdioRecord> {
        if want == self.current {
            return self.record.clone();
        }
        if let Err(e) = self.restore() {
            eprintln!("dmalab run: warning: ddio: {e}");
        }
        self.current = want;
        self.record = want.map(|w| self.apply(w));
        if let Some(r) = &self.record {
            eprintln!(
                "dmalab run: ddio {}: {}{}",
                r.requested,
                if r.applied { "" } else { "not set: " },
                r.detail
            );
        }
        self.record.clone()
    }

    fn apply(&mut self, want: Setting) -> DdioRecord {
        let mut rec = DdioRecord {
            requested: want.to_string(),
            applied: false,
            detail: String::new(),
        };
        let plan = match ddio::plan(&self.root, &Registers::files(&self.root), want, None) {
            Ok(p) => p,
            Err(e) => {
                rec.detail = format!("DDIO is not controllable here: {}", e.message);
                return rec;
            }
        };
        if self.session.is_none() {
            match Session::begin(&self.root, Registers::files(&self.root)) {
                Ok(s) => {
                    for d in &s.leftovers.done {
                        eprintln!("dmalab run: ddio: first undid a killed run's change: {d}");
                    }
                    self.session = Some(s)
                }
                Err(e) => {
                    rec.detail = e.to_string();
                    return rec;
                }
            }
        }
        let Some(s) = self.session.as_mut() else {
            return rec;
        };
        match s.apply(&plan) {
            Ok(lines) => {
                rec.applied = true;
                rec.detail = lines.join("; ");
            }
            Err(e) => rec.detail = e.to_string(),
        }
        rec
    }

    /// Restores what the axis changed (read back) and forgets the setting.
    pub fn restore(&mut self) -> Result<Vec<String>, ddio::DdioError> {
        self.current = None;
        self.record = None;
        match self.session.as_mut() {
            Some(s) => s.restore(),
            None => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_host::ddio::fixture;

    #[test]
    fn configurations_switch_and_restore_on_a_fixture_host() {
        let dir = tempfile::tempdir().unwrap();
        let root = fixture::intel_host(dir.path(), 1, 2).unwrap();
        let mut axis = DdioAxis::new(root.clone());
        let r = axis.ensure(Some(Setting::Off)).unwrap();
        assert!(r.applied, "{r:?}");
        assert_eq!(
            fixture::perfctrl(&root, fixture::NVME_ROOT_PORT).unwrap(),
            0x19
        );
        let r = axis.ensure(Some(Setting::Ways(3))).unwrap();
        assert!(r.applied, "{r:?}");
        // The previous configuration's change was undone first.
        assert_eq!(
            fixture::perfctrl(&root, fixture::NVME_ROOT_PORT).unwrap(),
            0x91
        );
        assert_eq!(fixture::ways_msr(&root, 0).unwrap(), 0x700);
        assert_eq!(axis.ensure(None), None);
        assert_eq!(fixture::ways_msr(&root, 0).unwrap(), fixture::WAYS_START);
        axis.ensure(Some(Setting::On)).unwrap();
        drop(axis);
        assert_eq!(
            fixture::perfctrl(&root, fixture::NVME_ROOT_PORT).unwrap(),
            0x91
        );
    }

    #[test]
    fn a_host_without_ddio_is_recorded_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let root = fixture::intel_host(dir.path(), 1, 1).unwrap();
        std::fs::write(
            root.path("/proc/cpuinfo"),
            "vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n",
        )
        .unwrap();
        let mut axis = DdioAxis::new(root);
        let r = axis.ensure(Some(Setting::Off)).unwrap();
        assert!(!r.applied);
        assert!(
            r.detail
                .starts_with("DDIO is not controllable here: not on this CPU"),
            "{}",
            r.detail
        );
    }
}
