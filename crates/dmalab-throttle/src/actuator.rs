//! Where the controller's rate goes, and where the delivered rate comes
//! from.
//!
//! * [`LoadActuator`]: a `dmalab load` started with `--rate-control` and
//!   `--live-stats`: the limit is written into its rate-control page (it
//!   applies it with the next command), the delivered bytes are read from
//!   its live-stats page.
//! * [`IoMax`]: cgroup v2 `io.max` of a named cgroup for one device, for
//!   I/O that dmalab does not generate: `MAJ:MIN rbps=N` (or `wbps`,
//!   `riops`, `wiops`); delivered from the cgroup's `io.stat`. The old line
//!   is recorded in the host-change ledger before the first write, so an
//!   exit, a signal or (through the next start or `dmalab cleanup`) a
//!   `kill -9` restores it.

use dmalab_core::ledger::{Changes, Step};
use dmalab_core::ratecontrol::{Limits, RateControl};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors of an actuator.
#[derive(Debug, thiserror::Error)]
pub enum ActuatorError {
    /// Bad input (names the option).
    #[error("{0}")]
    Usage(#[from] dmalab_core::UsageError),
    /// A file of the cgroup or the load could not be read or written.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        cause: std::io::Error,
    },
    /// The load's rate-control page could not be written.
    #[error("{0}")]
    RateControl(#[from] dmalab_core::ratecontrol::RateControlError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ActuatorError + '_ {
    move |cause| ActuatorError::Io {
        path: path.display().to_string(),
        cause,
    }
}

/// Something whose I/O rate can be set and measured.
pub trait Actuator {
    /// Sets the limit, in the actuator's unit per second.
    fn set(&mut self, rate: f64) -> Result<(), ActuatorError>;
    /// Delivered rate since the last call (or since start), unit per second.
    fn delivered(&mut self) -> Option<f64>;
    /// The unit (`bytes`, `commands`).
    fn unit(&self) -> &'static str;
}

/// A `dmalab load` child, through its rate-control and live-stats pages.
pub struct LoadActuator {
    ctl: RateControl,
    live: dmalab_core::livestats::Reader,
    last: Option<(u64, u64)>,
}

impl LoadActuator {
    /// Maps both pages (the load has created them).
    pub fn new(ctl: RateControl, live: dmalab_core::livestats::Reader) -> Self {
        Self {
            ctl,
            live,
            last: None,
        }
    }
}

impl Actuator for LoadActuator {
    fn set(&mut self, rate: f64) -> Result<(), ActuatorError> {
        self.ctl
            .set(Limits {
                rate_bytes_per_s: Some(rate.round().max(1.0) as u64),
                rate_iops: None,
            })
            .map_err(ActuatorError::from)
    }

    fn delivered(&mut self) -> Option<f64> {
        let s = self.live.snapshot().ok()?;
        let now = (s.data_bytes, s.taken_ns);
        let prev = self.last.replace(now)?;
        let dt = now.1.saturating_sub(prev.1) as f64 / 1e9;
        (dt > 0.0).then(|| now.0.saturating_sub(prev.0) as f64 / dt)
    }

    fn unit(&self) -> &'static str {
        "bytes"
    }
}

/// Which `io.max` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoMaxKey {
    /// Read bytes per second.
    Rbps,
    /// Write bytes per second.
    Wbps,
    /// Read operations per second.
    Riops,
    /// Write operations per second.
    Wiops,
}

impl IoMaxKey {
    /// Parses `rbps`, `wbps`, `riops`, `wiops`.
    pub fn parse(option: &str, s: &str) -> Result<Self, dmalab_core::UsageError> {
        Ok(match s {
            "rbps" => Self::Rbps,
            "wbps" => Self::Wbps,
            "riops" => Self::Riops,
            "wiops" => Self::Wiops,
            _ => {
                return Err(dmalab_core::UsageError::new(
                    option,
                    format!("'{s}' is not an io.max key; use rbps, wbps, riops or wiops"),
                ))
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Rbps => "rbps",
            Self::Wbps => "wbps",
            Self::Riops => "riops",
            Self::Wiops => "wiops",
        }
    }

    /// The `io.stat` counter that measures what this key limits.
    fn stat(self) -> &'static str {
        match self {
            Self::Rbps => "rbytes",
            Self::Wbps => "wbytes",
            Self::Riops => "rios",
            Self::Wiops => "wios",
        }
    }
}

/// A cgroup v2 `io.max` limit on one device.
pub struct IoMax {
    cgroup: PathBuf,
    dev: (u32, u32),
    key: IoMaxKey,
    last: Option<(u64, Instant)>,
}

/// `MAJ:MIN` of a block device path, or parsed from `MAJ:MIN` text.
pub fn device_number(option: &str, dev: &str) -> Result<(u32, u32), dmalab_core::UsageError> {
    if let Some((a, b)) = dev.split_once(':') {
        if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
            return Ok((a, b));
        }
    }
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = std::fs::metadata(dev).map_err(|e| {
        dmalab_core::UsageError::new(
            option,
            format!("cannot stat {dev}: {e}; name a block device or MAJ:MIN"),
        )
    })?;
    if !md.file_type().is_block_device() {
        return Err(dmalab_core::UsageError::new(
            option,
            format!("{dev} is not a block device; name one (e.g. /dev/vdb) or MAJ:MIN"),
        ));
    }
    let rdev = md.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

impl IoMax {
    /// An `io.max` limit of `key` on device `dev` in `cgroup` (a cgroup v2
    /// directory whose parent enables the io controller).
    pub fn new(cgroup: &Path, dev: (u32, u32), key: IoMaxKey) -> Result<Self, ActuatorError> {
        let max = cgroup.join("io.max");
        if !max.is_file() {
            return Err(dmalab_core::UsageError::new(
                "--io-max-cgroup",
                format!(
                    "{} has no io.max: name a cgroup v2 directory whose parent's cgroup.subtree_control has +io (this host may mount cgroup v1 only)",
                    cgroup.display()
                ),
            )
            .into());
        }
        Ok(Self {
            cgroup: cgroup.to_path_buf(),
            dev,
            key,
            last: None,
        })
    }

    fn line(&self, value: &str) -> String {
        format!("{}:{} {}={value}", self.dev.0, self.dev.1, self.key.name())
    }

    /// Records in `ledger` how to restore the device's current limit of our
    /// key (call once, before the first `set`). The path is recorded
    /// absolute: a relative `--io-max-cgroup` is undone by a cleanup run
    /// from anywhere.
    pub fn record_restore(&self, ledger: &mut Changes) -> Result<(), ActuatorError> {
        let path = self.cgroup.join("io.max");
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let prefix = format!("{}:{} ", self.dev.0, self.dev.1);
        let old = text
            .lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{}=", self.key.name())))
            })
            .unwrap_or("max")
            .to_string();
        let mut step = Step::restore_setting(&path, None).map_err(io(&path))?;
        if let Step::RestoreSetting { old: o, .. } = &mut step {
            // Written back as the kernel takes it: one device, one key.
            *o = self.line(&old);
        }
        ledger.record(step).map_err(io(&path))?;
        Ok(())
    }

    /// The device's counter in io.stat; 0 while the device has no line
    /// (no I/O yet), None when the file cannot be read.
    fn counter(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.cgroup.join("io.stat")).ok()?;
        let prefix = format!("{}:{} ", self.dev.0, self.dev.1);
        let Some(line) = text.lines().find(|l| l.starts_with(&prefix)) else {
            return Some(0);
        };
        let key = format!("{}=", self.key.stat());
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key.as_str()))?
            .parse()
            .ok()
    }
}

impl Actuator for IoMax {
    fn set(&mut self, rate: f64) -> Result<(), ActuatorError> {
        let path = self.cgroup.join("io.max");
        let v = rate.round().max(1.0) as u64;
        std::fs::write(&path, self.line(&v.to_string())).map_err(io(&path))
    }

    fn delivered(&mut self) -> Option<f64> {
        let now = (self.counter()?, Instant::now());
        let prev = self.last.replace(now)?;
        let dt = now.1.duration_since(prev.1).as_secs_f64();
        (dt > 0.0).then(|| now.0.saturating_sub(prev.0) as f64 / dt)
    }

    fn unit(&self) -> &'static str {
        match self.key {
            IoMaxKey::Rbps | IoMaxKey::Wbps => "bytes",
            IoMaxKey::Riops | IoMaxKey::Wiops => "commands",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger_in(state: &Path) -> Changes {
        std::fs::create_dir_all(state).unwrap();
        Changes::new(dmalab_core::ledger::LedgerDir::at(state), "throttle")
    }

    /// A fake cgroup v2 directory: io.max and io.stat as plain files (the
    /// kernel's files hold one line per device; a write sets one line).
    fn fake_cgroup(dir: &Path) -> PathBuf {
        let cg = dir.join("victim.slice");
        std::fs::create_dir(&cg).unwrap();
        std::fs::write(
            cg.join("io.max"),
            "8:0 rbps=max wbps=1000 riops=max wiops=max\n254:16 rbps=5000 wbps=max riops=max wiops=max\n",
        )
        .unwrap();
        std::fs::write(
            cg.join("io.stat"),
            "254:16 rbytes=1000 wbytes=0 rios=10 wios=0 dbytes=0 dios=0\n",
        )
        .unwrap();
        cg
    }

    #[test]
    fn io_max_writes_the_kernels_line_and_reads_io_stat() {
        let dir = tempfile::tempdir().unwrap();
        let cg = fake_cgroup(dir.path());
        let mut a = IoMax::new(&cg, (254, 16), IoMaxKey::Rbps).unwrap();
        assert_eq!(a.unit(), "bytes");
        a.set(1_048_576.4).unwrap();
        assert_eq!(
            std::fs::read_to_string(cg.join("io.max")).unwrap(),
            "254:16 rbps=1048576"
        );
        assert_eq!(a.delivered(), None);
        std::fs::write(
            cg.join("io.stat"),
            "254:16 rbytes=1000001000 wbytes=0 rios=10 wios=0 dbytes=0 dios=0\n",
        )
        .unwrap();
        let d = a.delivered().unwrap();
        assert!(d > 0.0, "{d}");
        let mut w = IoMax::new(&cg, (254, 16), IoMaxKey::Wiops).unwrap();
        w.set(250.0).unwrap();
        assert_eq!(
            std::fs::read_to_string(cg.join("io.max")).unwrap(),
            "254:16 wiops=250"
        );
    }

    #[test]
    fn io_max_restores_the_old_limit_through_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let cg = fake_cgroup(dir.path());
        let state = dir.path().join("state");
        let mut ledger = ledger_in(&state);
        let mut a = IoMax::new(&cg, (254, 16), IoMaxKey::Rbps).unwrap();
        a.record_restore(&mut ledger).unwrap();
        // The ledger is on disk before the first write.
        let on_disk = std::fs::read_dir(&state).unwrap().count();
        assert_eq!(on_disk, 1);
        a.set(100.0).unwrap();
        assert!(ledger.undo_all().errors.is_empty());
        assert_eq!(
            std::fs::read_to_string(cg.join("io.max")).unwrap(),
            "254:16 rbps=5000"
        );
        // A device with no line yet is restored to "max".
        std::fs::write(cg.join("io.max"), "").unwrap();
        let mut ledger = ledger_in(&state);
        let mut a = IoMax::new(&cg, (8, 16), IoMaxKey::Riops).unwrap();
        a.record_restore(&mut ledger).unwrap();
        a.set(7.0).unwrap();
        drop(ledger);
        assert_eq!(
            std::fs::read_to_string(cg.join("io.max")).unwrap(),
            "8:16 riops=max"
        );
    }

    #[test]
    fn io_max_refuses_a_directory_without_io_max() {
        let dir = tempfile::tempdir().unwrap();
        let e = IoMax::new(dir.path(), (8, 0), IoMaxKey::Rbps)
            .err()
            .unwrap();
        assert!(e.to_string().contains("cgroup v2"), "{e}");
        assert!(device_number("--io-max-device", "8:16").is_ok());
        assert!(device_number("--io-max-device", dir.path().to_str().unwrap()).is_err());
    }
}
