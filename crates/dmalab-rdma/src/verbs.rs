//! Safe owners of the verbs objects dmalab uses: an opened device port
//! ([`Context`]), a protection domain, memory regions, completion queues
//! and RC queue pairs. Each frees its object when dropped.

use crate::error::RdmaError;
use crate::handshake::Endpoint;
use crate::sys::{self, Gid, Verbs};
use dmalab_core::UsageError;
use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;

/// Which device, port and GID to use, and the flag names to blame.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Device name (`mlx5_0`, `rxe0`); None: the only device, or the first.
    pub device: Option<String>,
    /// Port number (1-based).
    pub port: u8,
    /// GID index; None: 0 on InfiniBand, the first IPv4-mapped GID on RoCE.
    pub gid_index: Option<u8>,
    /// The flag that names the device (`--rdma-device`, `--device`).
    pub device_flag: &'static str,
}

/// An opened device with its chosen port and GID.
pub struct Context {
    v: &'static Verbs,
    ctx: *mut sys::ibv_context,
    pd: *mut c_void,
    /// The device's name.
    pub name: String,
    /// The port used.
    pub port: u8,
    /// The port's attributes.
    pub port_attr: sys::ibv_port_attr,
    /// The GID index used.
    pub gid_index: u8,
    /// The GID at that index.
    pub gid: Gid,
    /// What `ibv_query_device` says the device allows.
    pub limits: DeviceLimits,
}

/// The device's limits dmalab sizes its queue pairs by (`ibv_query_device`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceLimits {
    /// `max_qp_rd_atom`: RDMA READs (and atomics) one QP may have
    /// outstanding as the responder: the most its `max_dest_rd_atomic` may be.
    pub max_qp_rd_atom: u32,
    /// `max_qp_init_rd_atom`: RDMA READs one QP may have outstanding as the
    /// initiator: the most its `max_rd_atomic` may be.
    pub max_qp_init_rd_atom: u32,
    /// `max_qp_wr`: work requests one queue holds at most.
    pub max_qp_wr: u32,
    /// `max_cqe`: entries one completion queue holds at most.
    pub max_cqe: u32,
}

impl DeviceLimits {
    /// `max_qp_rd_atom` as a QP attribute (a u8; at least 1).
    pub fn responder_depth(&self) -> u8 {
        rd_depth(self.max_qp_rd_atom)
    }

    /// `max_qp_init_rd_atom` as a QP attribute (a u8; at least 1).
    pub fn initiator_depth(&self) -> u8 {
        rd_depth(self.max_qp_init_rd_atom)
    }
}

/// A device's outstanding READ limit as the u8 a QP attribute holds: at
/// most 255, and at least 1 (a device that says 0 refuses the READs
/// itself, with its own error).
fn rd_depth(limit: u32) -> u8 {
    u8::try_from(limit.clamp(1, 255)).unwrap_or(u8::MAX)
}

// SAFETY: libibverbs contexts and protection domains may be used from any
// thread (the library locks internally); the raw pointers are owned here
// and freed once, in Drop.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

/// The names of the RDMA devices on this host (empty when none).
pub fn device_names() -> Result<Vec<String>, RdmaError> {
    let v = sys::verbs()?;
    let mut n: c_int = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a
    // NULL-terminated array we free below.
    let list = unsafe { (v.get_device_list)(&mut n) };
    if list.is_null() {
        return Err(no_device_list(None));
    }
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: i < n, the array's length.
        let dev = unsafe { *list.add(i) };
        // SAFETY: dev is a device of the list; the name is NUL-terminated and
        // lives as long as the list.
        let name = unsafe { CStr::from_ptr((v.get_device_name)(dev)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: the list came from ibv_get_device_list and is freed once.
    unsafe { (v.free_device_list)(list) };
    Ok(names)
}

/// The error of a failed `ibv_get_device_list`: ENOSYS means the kernel
/// has no RDMA support loaded (no ib_uverbs), which is the host's lack, not
/// a failure.
fn no_device_list(flag: Option<&str>) -> RdmaError {
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENOSYS) {
        return UsageError::new(
            flag.unwrap_or("--rdma-device"),
            "this host has no RDMA device (the kernel offers no RDMA: ib_uverbs is not loaded): load \
             the NIC's driver, or for soft-RoCE `modprobe rdma_rxe` and `rdma link add rxe0 type rxe \
             netdev IFACE`",
        )
        .into();
    }
    RdmaError::Verbs {
        what: "ibv_get_device_list".into(),
        cause: err,
    }
}

/// The IB MTU code of `bytes` (256 -> 1 ... 4096 -> 5); None for any
/// other size.
pub fn mtu_code(bytes: u32) -> Option<u32> {
    (1..=5).find(|&c| mtu_bytes(c) == bytes)
}

fn mtu_bytes(code: u32) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

fn port_state(code: u32) -> &'static str {
    match code {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

/// True for an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), the GID RoCE v2
/// gives an IPv4 address.
pub fn is_ipv4_mapped(g: &Gid) -> bool {
    g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff
}

/// A GID as an IPv6 address text.
pub fn gid_text(g: &Gid) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

impl Context {
    /// Opens the device `cfg` names, checks the port is ACTIVE and picks the
    /// GID; every failure says what is wrong in one line.
    pub fn open(cfg: &DeviceConfig) -> Result<Arc<Context>, RdmaError> {
        let v = sys::verbs()?;
        let flag = cfg.device_flag;
        let mut n: c_int = 0;
        // SAFETY: as in device_names.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(no_device_list(Some(flag)));
        }
        let mut chosen = None;
        let mut names = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: i < n.
            let dev = unsafe { *list.add(i) };
            // SAFETY: as in device_names.
            let name = unsafe { CStr::from_ptr((v.get_device_name)(dev)) }
                .to_string_lossy()
                .into_owned();
            let wanted = match cfg.device.as_deref() {
                None => true,
                Some(want) => want == name,
            };
            if chosen.is_none() && wanted {
                chosen = Some((dev, name.clone()));
            }
            names.push(name);
        }
        let opened = chosen.map(|(dev, name)| {
            // SAFETY: dev is a live entry of the list (freed only below).
            (unsafe { (v.open_device)(dev) }, name)
        });
        let open_err = std::io::Error::last_os_error();
        // SAFETY: freed once; an opened context keeps its own device reference.
        unsafe { (v.free_device_list)(list) };
        let (ctx, name) = match opened {
            None if names.is_empty() => return Err(UsageError::new(
                flag,
                "this host has no RDMA device (/sys/class/infiniband is empty): load the NIC's \
                     driver, or for soft-RoCE `rdma link add rxe0 type rxe netdev IFACE`",
            )
            .into()),
            None => {
                return Err(UsageError::new(
                    flag,
                    format!(
                        "no RDMA device {:?}; this host has: {}",
                        cfg.device.as_deref().unwrap_or(""),
                        names.join(", ")
                    ),
                )
                .into())
            }
            Some((p, name)) if p.is_null() => {
                return Err(RdmaError::Verbs {
                    what: format!("ibv_open_device {name}"),
                    cause: open_err,
                })
            }
            Some(x) => x,
        };
        let mut c = Context {
            v,
            ctx,
            pd: std::ptr::null_mut(),
            name,
            port: cfg.port,
            port_attr: sys::ibv_port_attr::default(),
            gid_index: 0,
            gid: [0; 16],
            limits: DeviceLimits {
                max_qp_rd_atom: 0,
                max_qp_init_rd_atom: 0,
                max_qp_wr: 0,
                max_cqe: 0,
            },
        };
        let mut dev = sys::ibv_device_attr::default();
        // SAFETY: ctx is open; dev is a zeroed ibv_device_attr of the size
        // verbs.h gives (pinned by sys's layout test).
        let rc = unsafe { (v.query_device)(ctx, &mut dev) };
        if rc != 0 {
            return Err(RdmaError::verbs_rc(
                format!("ibv_query_device on {}", c.name),
                rc,
            ));
        }
        let nonneg = |n: c_int| u32::try_from(n).unwrap_or(0);
        c.limits = DeviceLimits {
            max_qp_rd_atom: nonneg(dev.max_qp_rd_atom),
            max_qp_init_rd_atom: nonneg(dev.max_qp_init_rd_atom),
            max_qp_wr: nonneg(dev.max_qp_wr),
            max_cqe: nonneg(dev.max_cqe),
        };
        // SAFETY: ctx is open; port_attr is a zeroed ibv_port_attr (the
        // exported symbol fills its compat prefix, as verbs.h's fallback does).
        let rc = unsafe { (v.query_port)(ctx, cfg.port, &mut c.port_attr) };
        if rc != 0 {
            return Err(UsageError::new(
                "--rdma-port",
                format!(
                    "{} has no port {} (ibv_query_port: {})",
                    c.name,
                    cfg.port,
                    std::io::Error::from_raw_os_error(rc)
                ),
            )
            .into());
        }
        if c.port_attr.state != sys::IBV_PORT_ACTIVE {
            return Err(UsageError::new(
                flag,
                format!(
                    "port {} of {} is {}, not ACTIVE: bring its link up (cable, subnet manager, \
                     or `ip link set IFACE up` for RoCE)",
                    cfg.port,
                    c.name,
                    port_state(c.port_attr.state)
                ),
            )
            .into());
        }
        c.pick_gid(cfg.gid_index)?;
        // SAFETY: ctx is open.
        c.pd = unsafe { (v.alloc_pd)(ctx) };
        if c.pd.is_null() {
            return Err(RdmaError::verbs(format!("ibv_alloc_pd on {}", c.name)));
        }
        Ok(Arc::new(c))
    }

    fn query_gid(&self, index: u8) -> Option<Gid> {
        let mut g: Gid = [0; 16];
        // SAFETY: ctx is open; g has room for one GID.
        let rc = unsafe { (self.v.query_gid)(self.ctx, self.port, c_int::from(index), &mut g) };
        (rc == 0).then_some(g)
    }

    fn pick_gid(&mut self, want: Option<u8>) -> Result<(), RdmaError> {
        let len = u8::try_from(self.port_attr.gid_tbl_len.clamp(0, 255)).unwrap_or(0);
        let roce = self.port_attr.link_layer == sys::IBV_LINK_LAYER_ETHERNET;
        let pick = match want {
            Some(i) => {
                let g = (i < len).then(|| self.query_gid(i)).flatten();
                match g {
                    Some(g) if g != [0; 16] || !roce => (i, g),
                    _ => {
                        return Err(UsageError::new(
                            "--gid-index",
                            format!(
                            "{} port {} has no GID at index {i} (valid: {}): see `show_gids` or \
                                 /sys/class/infiniband/{}/ports/{}/gids/",
                            self.name,
                            self.port,
                            self.valid_gids(len),
                            self.name,
                            self.port
                        ),
                        )
                        .into())
                    }
                }
            }
            None if !roce => (0, self.query_gid(0).unwrap_or([0; 16])),
            None => {
                let all: Vec<(u8, Gid)> = (0..len)
                    .filter_map(|i| self.query_gid(i).map(|g| (i, g)))
                    .collect();
                match all
                    .iter()
                    .find(|(_, g)| is_ipv4_mapped(g))
                    .or_else(|| all.iter().find(|(_, g)| *g != [0; 16]))
                {
                    Some(x) => *x,
                    None => {
                        return Err(UsageError::new(
                            "--gid-index",
                            format!(
                                "{} port {} has no GID: give its network interface an IP address",
                                self.name, self.port
                            ),
                        )
                        .into())
                    }
                }
            }
        };
        self.gid_index = pick.0;
        self.gid = pick.1;
        Ok(())
    }

    fn valid_gids(&self, len: u8) -> String {
        let v: Vec<String> = (0..len)
            .filter(|i| self.query_gid(*i).is_some_and(|g| g != [0; 16]))
            .map(|i| i.to_string())
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(", ")
        }
    }

    /// RoCE (Ethernet) or InfiniBand.
    pub fn link_layer_name(&self) -> &'static str {
        if self.port_attr.link_layer == sys::IBV_LINK_LAYER_ETHERNET {
            "RoCE"
        } else {
            "InfiniBand"
        }
    }

    /// The port's active MTU, bytes.
    pub fn mtu_bytes(&self) -> u32 {
        mtu_bytes(self.port_attr.active_mtu)
    }

    /// The link layer code the handshake carries (1 IB, 2 Ethernet).
    pub fn link_layer(&self) -> u8 {
        if self.port_attr.link_layer == sys::IBV_LINK_LAYER_ETHERNET {
            sys::IBV_LINK_LAYER_ETHERNET
        } else {
            sys::IBV_LINK_LAYER_INFINIBAND
        }
    }

    /// The ibv_wc_status_str text of a completion status.
    pub fn status_text(&self, status: u32) -> String {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let p = unsafe { (self.v.wc_status_str)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: pd and ctx were created here and are freed once; every MR,
        // CQ and QP holds an Arc<Context>, so they are gone already.
        unsafe {
            if !self.pd.is_null() {
                (self.v.dealloc_pd)(self.pd);
            }
            (self.v.close_device)(self.ctx);
        }
    }
}

/// A registered memory region.
pub struct MemoryRegion {
    ctx: Arc<Context>,
    mr: *mut sys::ibv_mr,
}

// SAFETY: an MR is immutable after registration; its keys may be read from
// any thread; it is deregistered once, in Drop.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

/// The memory-lock limit (RLIMIT_MEMLOCK soft), None when unlimited.
fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0
        || r.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(r.rlim_cur)
}

/// What a peer may do to a memory region or through a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Nothing: only this host's NIC, for this host's own work requests
    /// (local write, so an RDMA READ may land in it). What an initiator
    /// needs: a one-sided WRITE or READ it issues needs no remote access on
    /// its own side.
    Local,
    /// Remote write and read: what a responder serves.
    Remote,
}

impl Access {
    /// The `ibv_access_flags` of a memory region.
    fn mr_flags(self) -> c_int {
        match self {
            Access::Local => sys::IBV_ACCESS_LOCAL_WRITE,
            Access::Remote => {
                sys::IBV_ACCESS_LOCAL_WRITE
                    | sys::IBV_ACCESS_REMOTE_WRITE
                    | sys::IBV_ACCESS_REMOTE_READ
            }
        }
    }

    /// The `qp_access_flags` of a queue pair: which incoming RDMA
    /// operations it lets through.
    fn qp_flags(self) -> u32 {
        match self {
            Access::Local => 0,
            Access::Remote => (sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ) as u32,
        }
    }
}

impl MemoryRegion {
    /// Registers `len` bytes at `addr` with `access`.
    ///
    /// # Safety
    /// `addr..addr+len` is mapped memory that outlives the region.
    pub unsafe fn register(
        ctx: &Arc<Context>,
        addr: *mut u8,
        len: usize,
        size_flag: &str,
        access: Access,
    ) -> Result<MemoryRegion, RdmaError> {
        let access = access.mr_flags();
        // SAFETY: pd is live; the caller guarantees the range.
        let mr = unsafe { (ctx.v.reg_mr)(ctx.pd, addr.cast(), len, access) };
        if mr.is_null() {
            let err = std::io::Error::last_os_error();
            if let Some(limit) = memlock_limit() {
                if len as u64 > limit
                    || matches!(err.raw_os_error(), Some(libc::ENOMEM) | Some(libc::EPERM))
                {
                    return Err(UsageError::new(
                        size_flag,
                        format!(
                            "registering {len} bytes with {} needs that much locked memory, and the \
                             limit is {limit} bytes: run `ulimit -l unlimited` (or set memlock in \
                             /etc/security/limits.conf) first",
                            ctx.name
                        ),
                    )
                    .into());
                }
            }
            return Err(RdmaError::Verbs {
                what: format!("ibv_reg_mr of {len} bytes on {}", ctx.name),
                cause: err,
            });
        }
        Ok(MemoryRegion {
            ctx: ctx.clone(),
            mr,
        })
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: mr is live until Drop.
        unsafe { (*self.mr).lkey }
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    /// First byte registered.
    pub fn addr(&self) -> u64 {
        // SAFETY: as above.
        unsafe { (*self.mr).addr as u64 }
    }

    /// Bytes registered.
    pub fn len(&self) -> u64 {
        // SAFETY: as above.
        unsafe { (*self.mr).length as u64 }
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: registered in `register`, deregistered once.
        unsafe { (self.ctx.v.dereg_mr)(self.mr) };
    }
}

/// A completion queue.
pub struct CompletionQueue {
    ctx: Arc<Context>,
    cq: *mut sys::ibv_cq,
}

// SAFETY: a CQ is polled by one owner at a time (&mut self in `poll`); it
// may move between threads.
unsafe impl Send for CompletionQueue {}
// SAFETY: shared references only read the pointer (QP creation).
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// A CQ with room for `entries` completions.
    pub fn new(ctx: &Arc<Context>, entries: u32) -> Result<CompletionQueue, RdmaError> {
        let n = c_int::try_from(entries.max(1)).unwrap_or(c_int::MAX);
        // SAFETY: ctx is open; no channel, no comp vector.
        let cq =
            unsafe { (ctx.v.create_cq)(ctx.ctx, n, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(RdmaError::verbs(format!(
                "ibv_create_cq of {entries} entries on {}",
                ctx.name
            )));
        }
        Ok(CompletionQueue {
            ctx: ctx.clone(),
            cq,
        })
    }

    /// Polls up to `out.len()` completions; returns how many.
    pub fn poll(&mut self, out: &mut [sys::ibv_wc]) -> Result<usize, RdmaError> {
        let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: cq is live; out has room for n entries.
        let got = unsafe { sys::poll_cq(self.cq, n, out.as_mut_ptr()) };
        usize::try_from(got).map_err(|_| RdmaError::verbs_rc("ibv_poll_cq", got))
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once (its QPs are gone: they
        // are dropped before the CQ by their owners).
        unsafe { (self.ctx.v.destroy_cq)(self.cq) };
    }
}

/// Timings and limits of an RC connection.
#[derive(Clone, Copy, Debug)]
pub struct QpParams {
    /// Work requests outstanding at most.
    pub max_send_wr: u32,
    /// Inline data wanted, bytes (0: none). Creation retries without.
    pub max_inline: u32,
    /// RDMA READs this QP may have outstanding as the initiator
    /// (`max_rd_atomic`; at most the device's `max_qp_init_rd_atom`).
    pub rd_atomic: u8,
    /// RDMA READs of the peer this QP serves at once as the responder
    /// (`max_dest_rd_atomic`; at most the device's `max_qp_rd_atom`).
    pub dest_rd_atomic: u8,
}

/// An RC queue pair.
pub struct QueuePair {
    ctx: Arc<Context>,
    qp: *mut sys::ibv_qp,
    /// Our first packet sequence number.
    pub psn: u32,
    /// Inline data the QP accepts, bytes.
    pub max_inline: u32,
    rd_atomic: u8,
    dest_rd_atomic: u8,
    /// The largest path MTU this QP agrees to (IB code 1..=5), below the
    /// port's active MTU when `--mtu` asks for less.
    mtu_cap: u32,
}

// SAFETY: one owner posts to a QP (&mut self in `post`); it may move
// between threads.
unsafe impl Send for QueuePair {}
// SAFETY: shared references only read immutable fields.
unsafe impl Sync for QueuePair {}

impl QueuePair {
    /// Creates an RC QP whose send and receive completions go to `cq`.
    pub fn new(
        ctx: &Arc<Context>,
        cq: &CompletionQueue,
        p: QpParams,
    ) -> Result<QueuePair, RdmaError> {
        let mut inline = p.max_inline;
        loop {
            let mut attr = sys::ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: cq.cq,
                recv_cq: cq.cq,
                srq: std::ptr::null_mut(),
                cap: sys::ibv_qp_cap {
                    max_send_wr: p.max_send_wr.max(1),
                    max_recv_wr: 1,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: inline,
                },
                qp_type: sys::IBV_QPT_RC,
                sq_sig_all: 0,
            };
            // SAFETY: pd and cq are live; attr is a filled init_attr.
            let qp = unsafe { (ctx.v.create_qp)(ctx.pd, &mut attr) };
            if qp.is_null() {
                if inline > 0 {
                    // The device offers no (or less) inline data: go without.
                    inline = 0;
                    continue;
                }
                return Err(RdmaError::verbs(format!(
                    "ibv_create_qp (RC, {} work requests) on {}",
                    p.max_send_wr, ctx.name
                )));
            }
            // A PSN unique enough per QP; any 24-bit value is valid.
            // SAFETY: qp is live.
            let qpn = unsafe { (*qp).qp_num };
            let psn = (qpn.wrapping_mul(2_654_435_761) ^ std::process::id()) & 0xFF_FFFF;
            return Ok(QueuePair {
                ctx: ctx.clone(),
                qp,
                psn,
                max_inline: attr.cap.max_inline_data.min(inline),
                rd_atomic: p.rd_atomic.max(1),
                dest_rd_atomic: p.dest_rd_atomic.max(1),
                mtu_cap: ctx.port_attr.active_mtu,
            });
        }
    }

    /// Caps the path MTU this QP offers and connects with at `mtu_bytes`
    /// (256..=4096, a power of two, at most the port's active MTU: see
    /// [`mtu_code`]); must come before [`endpoint`](Self::endpoint).
    pub fn limit_mtu(&mut self, mtu_bytes: u32) {
        if let Some(code) = mtu_code(mtu_bytes) {
            self.mtu_cap = code.min(self.ctx.port_attr.active_mtu);
        }
    }

    /// Lowers the RDMA READs this QP issues at once to `n` (what the
    /// peer's responder agreed to serve); must come before
    /// [`connect`](Self::connect).
    pub fn limit_rd_atomic(&mut self, n: u8) {
        self.rd_atomic = self.rd_atomic.min(n.max(1));
    }

    /// RDMA READs this QP issues at once (its `max_rd_atomic`).
    pub fn rd_atomic(&self) -> u8 {
        self.rd_atomic
    }

    /// The path MTU this QP offers, bytes.
    pub fn mtu_bytes(&self) -> u32 {
        mtu_bytes(self.mtu_cap)
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: qp is live until Drop.
        unsafe { (*self.qp).qp_num }
    }

    /// This QP's side of the handshake, over the buffer `mr` (msg_bytes: the
    /// largest message it will issue; 0 on a server). `mr`: None for an
    /// initiator, which offers the peer no buffer (address, length and rkey
    /// 0). Its READ depth is the initiator's `max_rd_atomic` from an
    /// initiator (what it asks the responder to serve) and the responder's
    /// `max_dest_rd_atomic` from a responder (what it agreed to).
    pub fn endpoint(&self, mr: Option<&MemoryRegion>, msg_bytes: u32) -> Endpoint {
        let (addr, len, rkey) = mr.map_or((0, 0, 0), |m| (m.addr(), m.len(), m.rkey()));
        Endpoint {
            link_layer: self.ctx.link_layer(),
            qp_num: self.qp_num(),
            psn: self.psn,
            lid: self.ctx.port_attr.lid,
            mtu: u8::try_from(self.mtu_cap).unwrap_or(1),
            gid: self.ctx.gid,
            addr,
            len,
            rkey,
            msg_bytes,
            rd_atomic: if mr.is_some() {
                self.dest_rd_atomic
            } else {
                self.rd_atomic
            },
        }
    }

    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: c_int,
        what: &str,
    ) -> Result<(), RdmaError> {
        // SAFETY: qp is live; attr is filled for the bits of mask.
        let rc = unsafe { (self.ctx.v.modify_qp)(self.qp, attr, mask) };
        if rc != 0 {
            return Err(RdmaError::verbs_rc(
                format!("ibv_modify_qp to {what} on {}", self.ctx.name),
                rc,
            ));
        }
        Ok(())
    }

    /// Connects to `remote`: INIT, RTR, RTS (path MTU: the smaller of both
    /// ports'; the GRH always carries the GIDs, as RoCE needs). `incoming`:
    /// which RDMA operations of the peer this QP lets through.
    pub fn connect(&self, remote: &Endpoint, incoming: Access) -> Result<(), RdmaError> {
        let c = &self.ctx;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: c.port,
            qp_access_flags: incoming.qp_flags(),
            ..Default::default()
        };
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
            "INIT",
        )?;
        let global = remote.gid != [0; 16];
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTR,
            path_mtu: self.mtu_cap.min(u32::from(remote.mtu)),
            dest_qp_num: remote.qp_num,
            rq_psn: remote.psn,
            max_dest_rd_atomic: self.dest_rd_atomic,
            min_rnr_timer: 12,
            ah_attr: sys::ibv_ah_attr {
                grh: sys::ibv_global_route {
                    dgid: remote.gid,
                    flow_label: 0,
                    sgid_index: c.gid_index,
                    hop_limit: 64,
                    traffic_class: 0,
                },
                dlid: remote.lid,
                sl: 0,
                src_path_bits: 0,
                static_rate: 0,
                is_global: u8::from(global),
                port_num: c.port,
            },
            ..Default::default()
        };
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        let mut a = sys::ibv_qp_attr {
            qp_state: sys::IBV_QPS_RTS,
            // 4.096 us x 2^14 = 67 ms per try, 7 tries: a dead peer is noticed
            // in about half a second.
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: self.psn,
            max_rd_atomic: self.rd_atomic,
            ..Default::default()
        };
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Posts one work request.
    ///
    /// # Safety
    /// `wr`'s scatter/gather entries lie in memory registered on this
    /// context that stays mapped until the request completes.
    pub unsafe fn post(&mut self, wr: &mut sys::ibv_send_wr) -> Result<(), RdmaError> {
        // SAFETY: qp is live; the caller guarantees the SGEs.
        let rc = unsafe { sys::post_send(self.qp, wr) };
        if rc != 0 {
            return Err(RdmaError::verbs_rc("ibv_post_send", rc));
        }
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { (self.ctx.v.destroy_qp)(self.qp) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_codes_are_bytes() {
        assert_eq!(mtu_bytes(1), 256);
        assert_eq!(mtu_bytes(3), 1024);
        assert_eq!(mtu_bytes(5), 4096);
        assert_eq!(mtu_bytes(9), 0);
        assert_eq!(mtu_code(256), Some(1));
        assert_eq!(mtu_code(4096), Some(5));
        assert_eq!(mtu_code(1500), None);
        assert_eq!(mtu_code(8192), None);
    }

    #[test]
    fn ipv4_mapped_gids_are_recognised() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert!(is_ipv4_mapped(&g));
        assert_eq!(gid_text(&g), "::ffff:127.0.0.1");
        g[0] = 0xfe;
        assert!(!is_ipv4_mapped(&g));
    }
}
