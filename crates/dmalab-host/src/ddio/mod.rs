//! Intel DDIO (Data Direct I/O) per PCIe root port, and the number of LLC
//! ways DDIO may allocate into.
//!
//! # The registers, and where their meaning comes from
//!
//! * **`perfctrlsts_0`**, byte 0x180 of a root port's configuration space
//!   (Intel Xeon Scalable datasheet, volume 2, "IIO PCIe root port" registers;
//!   the same offset in ddio-bench's `change-ddio.c` by Farshin et al.,
//!   ATC'20, and in pmem/rpma's `tools/ddio.sh`):
//!   * bit 7 `Use_Allocating_Flow_Wr`: 1 = the port's ordinary DMA writes
//!     allocate in the LLC (DDIO on, the reset default), 0 = they go to
//!     memory (non-allocating flows).
//!   * bit 3 `NoSnoopOpWrEn`: lets writes with the PCIe No-Snoop attribute use
//!     the non-snooped (non-allocating) path.
//!
//!   The sources disagree on bit 3. ddio-bench turns DDIO off by clearing
//!   bit 7 *and setting* bit 3, and on by the reverse. rpma's `ddio.sh` quotes
//!   the datasheet's criterion — writes allocate when
//!   `(TPH=0 or TPHDIS=1 or …) and (NS=0 or NoSnoopOpWrEn=0) and non-DCA` —
//!   and concludes DDIO is off only with bit 7 clear, bit 3 clear and
//!   `perfctrlsts_1` TPHDIS set. dmalab follows ddio-bench (the tool the
//!   DDIO article and Farshin et al. measured with), changes no other byte,
//!   and reports bit 3 beside bit 7 so a user can see both.
//! * **MSR 0xC8B** (`IIO_LLC_WAYS`, package scope; not in the SDM's MSR
//!   tables — documented by Farshin et al., "Reexamining Direct Cache Access
//!   to Optimize I/O Intensive Applications for Multi-hundred-gigabit
//!   Networks", ATC'20, and their ddio-bench README): a bit mask of the LLC
//!   ways DDIO may allocate into, taken from the high end (0x600 = 2 ways on
//!   an 11-way Skylake-SP LLC, the default; `wrmsr 0xc8b 0x7f0` = 7 ways).
//!   dmalab writes `N` contiguous high ways, `1 <= N <= LLC ways`, and keeps
//!   the bits above the LLC's ways as they were.
//!
//! Every write is journaled first ([`journal`]) and undone by [`Session`]
//! on drop (so on error and panic), which the binary calls on exit, SIGINT
//! and SIGTERM.

pub mod fixture;
pub mod journal;
pub mod regs;
pub mod topology;

use crate::HostRoot;
use dmalab_core::UsageError;
use journal::Leftovers;
use regs::Registers;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::str::FromStr;
use topology::{cpu_id, CpuId, DdioCpu};

/// Config-space offset of a root port's `perfctrlsts_0`.
pub const PERFCTRLSTS_0: u64 = 0x180;
/// `perfctrlsts_0` bit 7: `Use_Allocating_Flow_Wr` (DDIO for normal writes).
pub const USE_ALLOCATING_FLOW_WR: u8 = 1 << 7;
/// `perfctrlsts_0` bit 3: `NoSnoopOpWrEn`.
pub const NO_SNOOP_OP_WR_EN: u8 = 1 << 3;
/// MSR with the mask of LLC ways DDIO may allocate into.
pub const MSR_IIO_LLC_WAYS: u32 = 0xc8b;

/// What to set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// Allocating writes on every chosen root port.
    On,
    /// Non-allocating writes on every chosen root port.
    Off,
    /// DDIO may use this many LLC ways (every package).
    Ways(u32),
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::On => f.write_str("on"),
            Setting::Off => f.write_str("off"),
            Setting::Ways(n) => write!(f, "ways:{n}"),
        }
    }
}

/// A DDIO setting that is not `on`, `off` or `ways:N`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{value}' is not a DDIO setting; use \"on\", \"off\" or \"ways:N\" (N >= 1)")]
pub struct BadSetting {
    /// The value, as given.
    pub value: String,
}

impl FromStr for Setting {
    type Err = BadSetting;

    /// `on`, `off` or `ways:N`.
    fn from_str(s: &str) -> Result<Self, BadSetting> {
        match s {
            "on" => Ok(Setting::On),
            "off" => Ok(Setting::Off),
            _ => s
                .strip_prefix("ways:")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n > 0)
                .map(Setting::Ways)
                .ok_or_else(|| BadSetting {
                    value: s.to_string(),
                }),
        }
    }
}

impl Serialize for Setting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Setting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a DDIO change failed.
#[derive(Debug, thiserror::Error)]
pub enum DdioError {
    /// Bad input or a host that cannot do it (exit 2).
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// A register or journal access failed.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        cause: io::Error,
    },
    /// A register did not hold the value written.
    #[error("{0}")]
    Readback(String),
    /// Restoring failed; the journal is kept for `dmalab ddio restore`.
    #[error("restore incomplete (journal kept for `dmalab ddio restore`): {0}")]
    Restore(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> DdioError {
    let what = what.into();
    move |cause| DdioError::Io { what, cause }
}

/// DDIO state of one root port.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortState {
    /// The root port, `0000:16:00.0`.
    pub bdf: String,
    /// PCI functions below it.
    pub devices_below: Vec<String>,
    /// `perfctrlsts_0` byte 0x180, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perfctrlsts_0: Option<u8>,
    /// `on` (bit 7 set) or `off`, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddio: Option<String>,
    /// Bit 3, `NoSnoopOpWrEn`, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_snoop_op_wr_en: Option<bool>,
    /// Why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// IIO LLC ways of one package.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PackageWays {
    /// Package (socket) id.
    pub package: u32,
    /// The CPU its MSR was read through.
    pub cpu: usize,
    /// MSR 0xC8B, when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msr_c8b: Option<u64>,
    /// Ways set in it (bits below the LLC's way count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ways: Option<u32>,
    /// Why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `dmalab ddio status` (and `dmalab info`) reports. Read-only.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Status {
    /// The CPU.
    pub cpu: CpuId,
    /// The Xeon generation when dmalab can control DDIO on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
    /// True when on/off/ways could act on this host (CPU known, a root port
    /// or MSR reachable).
    pub controllable: bool,
    /// Each reason it cannot act, one line each.
    pub reasons: Vec<String>,
    /// Ways of the LLC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llc_ways: Option<u32>,
    /// Intel root ports with devices below them (or the one above `--device`).
    pub root_ports: Vec<PortState>,
    /// IIO LLC ways per package.
    pub packages: Vec<PackageWays>,
    /// Journals of dmalab runs that changed DDIO and have not restored it.
    pub journals: Vec<String>,
}

fn read_error(what: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => format!("cannot read {what}: unprivileged reads of PCI config space stop at byte 64; run as root"),
        io::ErrorKind::PermissionDenied => format!("cannot read {what}: permission denied; run as root"),
        io::ErrorKind::NotFound => format!("cannot read {what}: no such file"),
        _ => format!("cannot read {what}: {e}"),
    }
}

fn msr_error(regs: &Registers, cpu: usize, e: &io::Error) -> String {
    let file = regs.msr.describe(cpu);
    match e.kind() {
        io::ErrorKind::NotFound => {
            format!("no {file}: load the msr driver (modprobe msr); it needs root")
        }
        io::ErrorKind::PermissionDenied => {
            format!("cannot open {file}: needs root (CAP_SYS_RAWIO)")
        }
        _ => format!("cannot read MSR {MSR_IIO_LLC_WAYS:#x} through {file}: {e}"),
    }
}

/// Ways in an IIO LLC ways mask, counting the low `llc_ways` bits.
pub fn ways_in(mask: u64, llc_ways: u32) -> u32 {
    (mask & low_bits(llc_ways)).count_ones()
}

fn low_bits(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The MSR 0xC8B value giving DDIO the `n` highest of `llc_ways` ways,
/// keeping `old`'s bits above the LLC's ways.
pub fn ways_value(old: u64, n: u32, llc_ways: u32) -> u64 {
    let all = low_bits(llc_ways);
    let want = low_bits(n) << (llc_ways - n);
    (old & !all) | want
}

/// The port's `perfctrlsts_0` byte with DDIO on or off (ddio-bench's bits).
pub fn perfctrl_value(old: u8, on: bool) -> u8 {
    if on {
        (old | USE_ALLOCATING_FLOW_WR) & !NO_SNOOP_OP_WR_EN
    } else {
        (old & !USE_ALLOCATING_FLOW_WR) | NO_SNOOP_OP_WR_EN
    }
}

/// Reads the DDIO state of the host (or of the root port above `device`).
/// Reads only; a `--device` that names nothing is bad input.
pub fn status(
    root: &HostRoot,
    regs: &Registers,
    device: Option<&str>,
) -> Result<Status, UsageError> {
    let cpu = cpu_id(root);
    let mut st = Status {
        generation: cpu.ddio_generation().map(str::to_string),
        llc_ways: topology::llc_ways(root),
        journals: journal::journal_files(root)
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        cpu,
        ..Status::default()
    };
    if st.generation.is_none() {
        st.reasons.push(st.cpu.refusal());
    }
    let ports: Vec<(String, Vec<String>)> = match device {
        Some(spec) => {
            let dev = topology::resolve_device(root, spec)?;
            match topology::root_port_of(spec, &dev) {
                Ok(p) => {
                    let below = topology::intel_root_ports(root)
                        .into_iter()
                        .find(|(b, _)| *b == p)
                        .map(|(_, v)| v)
                        .unwrap_or_default();
                    vec![(p, below)]
                }
                Err(e) => {
                    st.reasons.push(e.message);
                    Vec::new()
                }
            }
        }
        None => topology::intel_root_ports(root),
    };
    if ports.is_empty() && device.is_none() {
        st.reasons.push("no Intel PCIe root port (vendor 0x8086, class 0x0604) with devices below it in /sys/bus/pci/devices".into());
    }
    let known = st.generation.is_some();
    for (bdf, below) in ports {
        let mut p = PortState {
            bdf: bdf.clone(),
            devices_below: below,
            ..PortState::default()
        };
        if known {
            match regs.config.read_u8(&bdf, PERFCTRLSTS_0) {
                Ok(v) => {
                    p.perfctrlsts_0 = Some(v);
                    p.ddio = Some(
                        if v & USE_ALLOCATING_FLOW_WR != 0 {
                            "on"
                        } else {
                            "off"
                        }
                        .into(),
                    );
                    p.no_snoop_op_wr_en = Some(v & NO_SNOOP_OP_WR_EN != 0);
                }
                Err(e) => p.error = Some(read_error(&format!("perfctrlsts_0 of {bdf}"), &e)),
            }
        }
        st.root_ports.push(p);
    }
    let mut msr_ok = false;
    for (package, cpu) in topology::one_cpu_per_package(root) {
        let mut w = PackageWays {
            package,
            cpu,
            ..PackageWays::default()
        };
        let file = root.path(&format!("/dev/cpu/{cpu}/msr"));
        match regs.msr.read(cpu, MSR_IIO_LLC_WAYS) {
            // On a CPU without the register only say whether the device is
            // there at all: reading an MSR the CPU lacks is not a status.
            _ if !known => {
                if !file.exists() {
                    w.error = Some(format!(
                        "no /dev/cpu/{cpu}/msr: load the msr driver (modprobe msr); it needs root"
                    ));
                }
            }
            Ok(v) => {
                w.msr_c8b = Some(v);
                w.ways = st.llc_ways.map(|l| ways_in(v, l));
                msr_ok = true;
            }
            Err(e) => w.error = Some(msr_error(regs, cpu, &e)),
        }
        if let Some(e) = &w.error {
            if !st.reasons.contains(e) {
                st.reasons.push(e.clone());
            }
        }
        st.packages.push(w);
    }
    let port_ok = st.root_ports.iter().any(|p| p.perfctrlsts_0.is_some());
    for p in &st.root_ports {
        if let Some(e) = &p.error {
            st.reasons.push(e.clone());
        }
    }
    st.controllable = known && (port_ok || msr_ok);
    Ok(st)
}

impl Status {
    /// The text `dmalab ddio status` prints.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let c = &self.cpu;
        s.push_str(&format!(
            "cpu: {} family {} model {:#x} ({}){}\n",
            c.vendor,
            c.family,
            c.model,
            c.model_name,
            self.generation
                .as_ref()
                .map(|g| format!(": {g}"))
                .unwrap_or_default()
        ));
        s.push_str(&format!(
            "controllable: {}\n",
            if self.controllable { "yes" } else { "no" }
        ));
        for p in &self.root_ports {
            match (p.perfctrlsts_0, &p.error) {
                (Some(v), _) => s.push_str(&format!(
                    "root port {}: DDIO {} (perfctrlsts_0 {v:#04x}: Use_Allocating_Flow_Wr={}, NoSnoopOpWrEn={}); below: {}\n",
                    p.bdf,
                    p.ddio.as_deref().unwrap_or("?"),
                    u8::from(v & USE_ALLOCATING_FLOW_WR != 0),
                    u8::from(v & NO_SNOOP_OP_WR_EN != 0),
                    p.devices_below.join(" ")
                )),
                (None, Some(e)) => s.push_str(&format!("root port {}: {e}\n", p.bdf)),
                (None, None) => s.push_str(&format!(
                    "root port {}: not read; below: {}\n",
                    p.bdf,
                    p.devices_below.join(" ")
                )),
            }
        }
        for w in &self.packages {
            if let Some(v) = w.msr_c8b {
                s.push_str(&format!(
                    "package {} (cpu {}): IIO LLC ways MSR {MSR_IIO_LLC_WAYS:#x} = {v:#x}: {} of {} ways\n",
                    w.package,
                    w.cpu,
                    w.ways.map_or("?".into(), |n| n.to_string()),
                    self.llc_ways.map_or("?".into(), |n| n.to_string())
                ));
            }
        }
        for r in &self.reasons {
            s.push_str(&format!("cannot act: {r}\n"));
        }
        for j in &self.journals {
            s.push_str(&format!(
                "unrestored journal: {j} (run `dmalab ddio restore`)\n"
            ));
        }
        s
    }
}

/// What a change will touch, every refusal already made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The setting.
    pub setting: Setting,
    /// Root ports to set (on/off).
    pub ports: Vec<String>,
    /// One CPU per package (ways).
    pub cpus: Vec<usize>,
    /// Ways of the LLC (ways).
    pub llc_ways: u32,
}

/// Checks that `setting` can be made on this host and says where. Every
/// refusal is a [`UsageError`]: not this CPU, no root port, no MSR device,
/// a way count the LLC does not have, no privilege.
pub fn plan(
    root: &HostRoot,
    regs: &Registers,
    setting: Setting,
    device: Option<&str>,
) -> Result<Plan, UsageError> {
    let cpu = cpu_id(root);
    if cpu.ddio_generation().is_none() {
        return Err(UsageError::new("ddio", cpu.refusal()));
    }
    let mut p = Plan {
        setting,
        ports: Vec::new(),
        cpus: Vec::new(),
        llc_ways: 0,
    };
    match setting {
        Setting::On | Setting::Off => {
            p.ports = match device {
                Some(spec) => {
                    let dev = topology::resolve_device(root, spec)?;
                    vec![topology::root_port_of(spec, &dev)?]
                }
                None => topology::intel_root_ports(root)
                    .into_iter()
                    .map(|(b, _)| b)
                    .collect(),
            };
            if p.ports.is_empty() {
                return Err(UsageError::new("ddio", "no Intel PCIe root port (vendor 0x8086, class 0x0604) with devices below it in /sys/bus/pci/devices: there is no DDIO to set"));
            }
            for b in &p.ports {
                regs.config.read_u8(b, PERFCTRLSTS_0).map_err(|e| {
                    UsageError::new("ddio", read_error(&format!("perfctrlsts_0 of {b}"), &e))
                })?;
            }
        }
        Setting::Ways(n) => {
            if device.is_some() {
                return Err(UsageError::new("--device", "the IIO LLC ways are one setting per package, not per device; leave --device out with ways"));
            }
            let llc = topology::llc_ways(root).ok_or_else(|| {
                UsageError::new("ways", "the LLC's number of ways is unknown (no /sys/devices/system/cpu/cpu0/cache), so N cannot be checked")
            })?;
            if n == 0 || n > llc || llc > 63 {
                return Err(UsageError::new(
                    "ways",
                    format!("{n}: this CPU's LLC has {llc} ways; give 1 to {llc}"),
                ));
            }
            p.llc_ways = llc;
            for (_, c) in topology::one_cpu_per_package(root) {
                regs.msr
                    .read(c, MSR_IIO_LLC_WAYS)
                    .map_err(|e| UsageError::new("ways", msr_error(regs, c, &e)))?;
                p.cpus.push(c);
            }
        }
    }
    Ok(p)
}

/// A run's DDIO changes: in the ledger before each write, undone by
/// [`Session::restore`] or on drop.
pub struct Session {
    root: HostRoot,
    regs: Registers,
    changes: dmalab_core::ledger::Changes,
    /// Registers already recorded (their first original is the one kept).
    recorded: Vec<(String, u64)>,
    /// What dmalab restored of dead runs when the session began.
    pub leftovers: Leftovers,
}

impl Session {
    /// Starts a session; first restores what killed runs left (so the
    /// journal records the true originals). Fails when that restore fails
    /// or another live dmalab holds DDIO changes.
    pub fn begin(root: &HostRoot, regs: Registers) -> Result<Self, DdioError> {
        let leftovers = journal::restore_leftovers(root, &regs);
        if !leftovers.errors.is_empty() {
            return Err(DdioError::Restore(format!(
                "a killed run's DDIO changes could not be undone first: {}",
                leftovers.errors.join("; ")
            )));
        }
        // Two owners at once would each journal the other's value as the
        // original: the second is refused.
        if let Some(pid) = leftovers.live.iter().find(|p| **p != std::process::id()) {
            return Err(DdioError::Usage(UsageError::new(
                "ddio",
                format!(
                    "dmalab (pid {pid}) is already changing DDIO on this host (journal in {}); wait for it to end or stop it (it restores on SIGINT/SIGTERM)",
                    journal::state_dir(root).display()
                ),
            )));
        }
        Ok(Self {
            root: root.clone(),
            regs,
            changes: dmalab_core::ledger::Changes::new(journal::ledger_dir(root), journal::BY),
            recorded: Vec::new(),
            leftovers,
        })
    }

    /// The ledger file (written on the first change).
    pub fn journal_path(&self) -> PathBuf {
        journal::state_dir(&self.root).join(format!(
            "{}{}.json",
            dmalab_core::ledger::PREFIX,
            std::process::id()
        ))
    }

    /// Records the step `make` builds for register `key`, once per session
    /// (a second setting keeps the first original).
    fn record(
        &mut self,
        key: (String, u64),
        make: impl FnOnce(&HostRoot) -> io::Result<dmalab_core::ledger::Step>,
    ) -> Result<(), DdioError> {
        if self.recorded.contains(&key) {
            return Ok(());
        }
        let what = format!(
            "cannot write the DDIO changes to the ledger {}",
            self.journal_path().display()
        );
        let step = make(&self.root).map_err(io_err(what.clone()))?;
        self.changes.record(step).map_err(io_err(what))?;
        self.recorded.push(key);
        Ok(())
    }

    /// Makes the planned change; returns one line per register written.
    pub fn apply(&mut self, plan: &Plan) -> Result<Vec<String>, DdioError> {
        let mut lines = Vec::new();
        match plan.setting {
            Setting::On | Setting::Off => {
                let on = plan.setting == Setting::On;
                for b in &plan.ports {
                    let old = self
                        .regs
                        .config
                        .read_u8(b, PERFCTRLSTS_0)
                        .map_err(io_err(format!("read perfctrlsts_0 of {b}")))?;
                    let new = perfctrl_value(old, on);
                    self.record((b.clone(), PERFCTRLSTS_0), |r| {
                        journal::config_step(r, b, PERFCTRLSTS_0)
                    })?;
                    self.regs
                        .config
                        .write_u8(b, PERFCTRLSTS_0, new)
                        .map_err(io_err(format!("write perfctrlsts_0 of {b}")))?;
                    let back = self
                        .regs
                        .config
                        .read_u8(b, PERFCTRLSTS_0)
                        .map_err(io_err(format!("read back perfctrlsts_0 of {b}")))?;
                    if back != new {
                        return Err(DdioError::Readback(format!("perfctrlsts_0 of {b} reads {back:#04x} after writing {new:#04x}: the port did not take it")));
                    }
                    lines.push(format!(
                        "root port {b}: DDIO {} (perfctrlsts_0 {old:#04x} -> {new:#04x})",
                        plan.setting
                    ));
                }
            }
            Setting::Ways(n) => {
                for &c in &plan.cpus {
                    let old = self
                        .regs
                        .msr
                        .read(c, MSR_IIO_LLC_WAYS)
                        .map_err(io_err(format!("read MSR {MSR_IIO_LLC_WAYS:#x} on CPU {c}")))?;
                    let new = ways_value(old, n, plan.llc_ways);
                    self.record((format!("cpu{c}"), u64::from(MSR_IIO_LLC_WAYS)), |r| {
                        journal::msr_step(r, c, MSR_IIO_LLC_WAYS)
                    })?;
                    self.regs
                        .msr
                        .write(c, MSR_IIO_LLC_WAYS, new)
                        .map_err(io_err(format!(
                            "write MSR {MSR_IIO_LLC_WAYS:#x} on CPU {c}"
                        )))?;
                    let back = self
                        .regs
                        .msr
                        .read(c, MSR_IIO_LLC_WAYS)
                        .map_err(io_err(format!(
                            "read back MSR {MSR_IIO_LLC_WAYS:#x} on CPU {c}"
                        )))?;
                    if back != new {
                        return Err(DdioError::Readback(format!("MSR {MSR_IIO_LLC_WAYS:#x} on CPU {c} reads {back:#x} after writing {new:#x}: the CPU did not take it")));
                    }
                    lines.push(format!(
                        "CPU {c}: IIO LLC ways {} of {} (MSR {MSR_IIO_LLC_WAYS:#x} {old:#x} -> {new:#x})",
                        n, plan.llc_ways
                    ));
                }
            }
        }
        Ok(lines)
    }

    /// Writes every original back, newest first, reads each back, and takes
    /// the steps off the ledger. On failure the failed steps stay for
    /// `dmalab ddio restore`.
    pub fn restore(&mut self) -> Result<Vec<String>, DdioError> {
        let r = self.changes.undo_all();
        self.recorded.clear();
        let errors: Vec<String> = r
            .errors
            .into_iter()
            .chain(r.left_alone.into_iter().map(|a| format!("left alone: {a}")))
            .collect();
        if !errors.is_empty() {
            return Err(DdioError::Restore(errors.join("; ")));
        }
        Ok(r.done)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("dmalab: warning: ddio: {e}");
        }
    }
}

/// `dmalab ddio restore`: undoes what dead runs left under `root`.
pub fn restore_leftovers(root: &HostRoot, regs: &Registers) -> Leftovers {
    journal::restore_leftovers(root, regs)
}

#[cfg(test)]
mod tests;
