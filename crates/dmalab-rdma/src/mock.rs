//! A fake verbs library, in process: `DMALAB_IBVERBS_LIB=mock` (a test
//! hook, like the GPU engine's `DMALAB_GPU_DRIVER=mock`) makes
//! [`crate::sys::verbs`] return these functions instead of libibverbs'.
//!
//! One RoCE device, `mock0`, port 1 ACTIVE, MTU 4096, GID index 0 =
//! `::ffff:127.0.0.1`. Objects are plain heap allocations; QPs accept every
//! transition; a posted work request completes at once, successfully, on
//! its QP's send CQ, moving no data (the peer may be another process). So
//! the handshake, the server and the client run above it unchanged on a
//! host with no RDMA device, and the tests can drive `dmalab rdma serve`
//! through the binary.
//!
//! `DMALAB_IBVERBS_LIB=mock:log=PATH` also appends one line per memory
//! registration and per QP INIT transition to PATH (`reg_mr LEN access
//! FLAGS`, `qp_init QPN access FLAGS`), so a test can see what a process
//! exposed to remote peers, and the path MTU code of each RTR transition
//! (`qp_rtr QPN path_mtu CODE`), and the READ depths set at RTR and RTS
//! (`qp_depth QPN max_dest_rd_atomic N`, `qp_depth QPN max_rd_atomic N`),
//! and each `ibv_post_send` with the length of its list (`post_send QPN N`).
//!
//! The device reports [`RD_ATOM`] outstanding READs per QP each way
//! (`max_qp_rd_atom`, `max_qp_init_rd_atom`); `mock:rd_atom=N` and
//! `mock:init_rd_atom=N` change them, so a test can give the two sides of
//! a connection different limits. Its queues hold [`MAX_QP_WR`] work
//! requests (`max_qp_wr`); `mock:max_qp_wr=N` changes that, and
//! `ibv_create_qp` refuses a larger send queue, as a device does. Options
//! are separated by commas; `log=` comes last (its path may hold a comma).

use crate::sys::{self, ibv_context, ibv_cq, ibv_mr, ibv_qp, ibv_send_wr, ibv_wc, Gid, Verbs};
use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::io::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The device's name.
const NAME: &[u8] = b"mock0\0";

/// A stand-in `struct ibv_device` (its address is all callers use).
static DEVICE: u8 = 0;
static NEXT_QPN: AtomicU32 = AtomicU32::new(0x11);
static NEXT_KEY: AtomicU32 = AtomicU32::new(0x100);
static SPEC: OnceLock<Spec> = OnceLock::new();

/// The mock device's outstanding READ limits when the spec names none (the
/// depth dmalab used on every device before it asked).
pub const RD_ATOM: u32 = 16;

/// The mock device's `max_qp_wr` when the spec names none.
pub const MAX_QP_WR: u32 = 1 << 14;

/// The mock device's `max_cqe` when the spec names none.
pub const MAX_CQE: u32 = 1 << 22;

/// What `DMALAB_IBVERBS_LIB=mock[:OPTIONS]` asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    /// `log=PATH`: where to record registrations and QP transitions.
    pub log: Option<String>,
    /// `rd_atom=N`: the device's `max_qp_rd_atom` (default [`RD_ATOM`]).
    pub rd_atom: Option<u32>,
    /// `init_rd_atom=N`: its `max_qp_init_rd_atom` (default [`RD_ATOM`]).
    pub init_rd_atom: Option<u32>,
    /// `max_qp_wr=N`: work requests one queue holds (default [`MAX_QP_WR`]).
    pub max_qp_wr: Option<u32>,
    /// `max_cqe=N`: entries one completion queue holds (default [`MAX_CQE`]).
    pub max_cqe: Option<u32>,
}

/// Parses the mock's spec (`mock`, or `mock:` and comma-separated
/// `rd_atom=N`, `init_rd_atom=N`, `max_qp_wr=N`, `max_cqe=N`, `log=PATH`); None: not
/// the mock.
pub fn parse(spec: &str) -> Option<Result<Spec, String>> {
    let rest = spec.strip_prefix("mock")?;
    if rest.is_empty() {
        return Some(Ok(Spec::default()));
    }
    let bad = || {
        format!(
            "mock option {rest:?} is not :OPTION[,OPTION] with rd_atom=N, init_rd_atom=N, \
             max_qp_wr=N, max_cqe=N or log=PATH (DMALAB_IBVERBS_LIB=mock or mock:log=PATH)"
        )
    };
    let Some(mut opts) = rest.strip_prefix(':') else {
        return Some(Err(bad()));
    };
    let mut s = Spec::default();
    loop {
        if let Some(p) = opts.strip_prefix("log=") {
            if p.is_empty() {
                return Some(Err(bad()));
            }
            s.log = Some(p.to_string());
            break;
        }
        let (opt, more) = match opts.split_once(',') {
            Some((o, m)) => (o, Some(m)),
            None => (opts, None),
        };
        let n = |v: &str| v.parse::<u32>().ok().filter(|n| (1..=255).contains(n));
        match opt.split_once('=') {
            Some(("rd_atom", v)) if n(v).is_some() => s.rd_atom = n(v),
            Some(("init_rd_atom", v)) if n(v).is_some() => s.init_rd_atom = n(v),
            Some(("max_qp_wr", v))
                if v.parse::<u32>().is_ok_and(|n| (1..=MAX_QP_WR).contains(&n)) =>
            {
                s.max_qp_wr = v.parse().ok();
            }
            Some(("max_cqe", v)) if v.parse::<u32>().is_ok_and(|n| (1..=MAX_CQE).contains(&n)) => {
                s.max_cqe = v.parse().ok();
            }
            _ => return Some(Err(bad())),
        }
        match more {
            Some(m) => opts = m,
            None => break,
        }
    }
    Some(Ok(s))
}

fn log(line: &str) {
    if let Some(path) = SPEC.get().and_then(|s| s.log.as_ref()) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// The mock's entry points, as `spec` asked.
pub fn verbs(spec: Spec) -> Verbs {
    let _ = SPEC.set(spec);
    Verbs {
        get_device_list,
        free_device_list,
        get_device_name,
        open_device,
        close_device,
        query_port,
        query_device,
        query_gid,
        alloc_pd,
        dealloc_pd,
        reg_mr,
        dereg_mr,
        create_cq,
        destroy_cq,
        create_qp,
        modify_qp,
        destroy_qp,
        wc_status_str,
    }
}

/// A CQ: the verbs header, then the completions waiting to be polled.
#[repr(C)]
struct Cq {
    cq: ibv_cq,
    done: Mutex<VecDeque<ibv_wc>>,
}

/// A QP: the verbs header, then the CQ its sends complete on.
#[repr(C)]
struct Qp {
    qp: ibv_qp,
    send_cq: *mut Cq,
}

unsafe extern "C" fn get_device_list(n: *mut c_int) -> *mut *mut c_void {
    if !n.is_null() {
        // SAFETY: the caller passes a valid int pointer (checked non-null).
        unsafe { *n = 1 };
    }
    let list: Box<[*mut c_void; 2]> = Box::new([
        (&DEVICE as *const u8).cast_mut().cast(),
        std::ptr::null_mut(),
    ]);
    Box::into_raw(list).cast()
}

unsafe extern "C" fn free_device_list(list: *mut *mut c_void) {
    if !list.is_null() {
        // SAFETY: made by get_device_list from a Box of two pointers.
        drop(unsafe { Box::from_raw(list.cast::<[*mut c_void; 2]>()) });
    }
}

unsafe extern "C" fn get_device_name(_dev: *mut c_void) -> *const c_char {
    NAME.as_ptr().cast()
}

unsafe extern "C" fn open_device(_dev: *mut c_void) -> *mut ibv_context {
    // SAFETY: ibv_context is pointers and optional function pointers, for
    // which all-zero is valid (null, None).
    let mut ctx: Box<ibv_context> = Box::new(unsafe { std::mem::zeroed() });
    ctx.device = (&DEVICE as *const u8).cast_mut().cast();
    ctx.ops.poll_cq = Some(poll_cq);
    ctx.ops.post_send = Some(post_send);
    Box::into_raw(ctx)
}

unsafe extern "C" fn close_device(ctx: *mut ibv_context) -> c_int {
    if !ctx.is_null() {
        // SAFETY: made by open_device, closed once by its owner.
        drop(unsafe { Box::from_raw(ctx) });
    }
    0
}

unsafe extern "C" fn query_port(
    _ctx: *mut ibv_context,
    port: u8,
    attr: *mut sys::ibv_port_attr,
) -> c_int {
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let a = sys::ibv_port_attr {
        state: sys::IBV_PORT_ACTIVE,
        max_mtu: 5,
        active_mtu: 5,
        gid_tbl_len: 2,
        link_layer: sys::IBV_LINK_LAYER_ETHERNET,
        ..Default::default()
    };
    // SAFETY: attr points at a caller's ibv_port_attr (checked non-null).
    unsafe { *attr = a };
    0
}

unsafe extern "C" fn query_device(
    _ctx: *mut ibv_context,
    attr: *mut sys::ibv_device_attr,
) -> c_int {
    if attr.is_null() {
        return libc::EINVAL;
    }
    let spec = SPEC.get();
    let limit = |v: Option<u32>| c_int::try_from(v.unwrap_or(RD_ATOM)).unwrap_or(c_int::MAX);
    let mut a = sys::ibv_device_attr::default();
    a.max_qp = 1 << 16;
    a.max_qp_wr = c_int::try_from(max_qp_wr()).unwrap_or(c_int::MAX);
    a.max_cqe = c_int::try_from(max_cqe()).unwrap_or(c_int::MAX);
    a.max_qp_rd_atom = limit(spec.and_then(|s| s.rd_atom));
    a.max_qp_init_rd_atom = limit(spec.and_then(|s| s.init_rd_atom));
    // SAFETY: attr points at a caller's ibv_device_attr (checked non-null).
    unsafe { *attr = a };
    0
}

unsafe extern "C" fn query_gid(
    _ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut Gid,
) -> c_int {
    if port != 1 || gid.is_null() || !(0..2).contains(&index) {
        return libc::EINVAL;
    }
    let mut g: Gid = [0; 16];
    if index == 0 {
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[127, 0, 0, 1]);
    }
    // SAFETY: gid points at the caller's 16 bytes (checked non-null).
    unsafe { *gid = g };
    0
}

unsafe extern "C" fn alloc_pd(_ctx: *mut ibv_context) -> *mut c_void {
    Box::into_raw(Box::new(0u64)).cast()
}

unsafe extern "C" fn dealloc_pd(pd: *mut c_void) -> c_int {
    if !pd.is_null() {
        // SAFETY: made by alloc_pd from a Box<u64>, freed once.
        drop(unsafe { Box::from_raw(pd.cast::<u64>()) });
    }
    0
}

unsafe extern "C" fn reg_mr(
    _pd: *mut c_void,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    log(&format!("reg_mr {len} access {access:#x}"));
    // SAFETY: ibv_mr is pointers and integers: all-zero is valid.
    let mut mr: Box<ibv_mr> = Box::new(unsafe { std::mem::zeroed() });
    mr.addr = addr;
    mr.length = len;
    let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
    mr.lkey = key;
    // A region without remote access has no key a peer could use.
    mr.rkey = if access & (sys::IBV_ACCESS_REMOTE_READ | sys::IBV_ACCESS_REMOTE_WRITE) != 0 {
        key
    } else {
        0
    };
    Box::into_raw(mr)
}

unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    if !mr.is_null() {
        // SAFETY: made by reg_mr, deregistered once.
        drop(unsafe { Box::from_raw(mr) });
    }
    0
}

unsafe extern "C" fn create_cq(
    ctx: *mut ibv_context,
    n: c_int,
    _cq_context: *mut c_void,
    _channel: *mut c_void,
    _vector: c_int,
) -> *mut ibv_cq {
    if u32::try_from(n).map_or(true, |n| n > max_cqe()) {
        // As a device does: a completion queue beyond max_cqe is refused.
        // SAFETY: errno is this thread's own variable.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    let cq = Box::new(Cq {
        cq: ibv_cq { context: ctx },
        done: Mutex::new(VecDeque::new()),
    });
    Box::into_raw(cq).cast()
}

unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    if !cq.is_null() {
        // SAFETY: made by create_cq as a Cq whose first field is the ibv_cq.
        drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
    }
    0
}

/// Entries one of the mock's completion queues holds.
fn max_cqe() -> u32 {
    SPEC.get().and_then(|s| s.max_cqe).unwrap_or(MAX_CQE)
}

/// Work requests one of the mock's queues holds.
fn max_qp_wr() -> u32 {
    SPEC.get().and_then(|s| s.max_qp_wr).unwrap_or(MAX_QP_WR)
}

unsafe extern "C" fn create_qp(_pd: *mut c_void, attr: *mut sys::ibv_qp_init_attr) -> *mut ibv_qp {
    if attr.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: attr points at the caller's init attributes (checked non-null).
    if unsafe { (*attr).cap.max_send_wr } > max_qp_wr() {
        // As a device does: a send queue beyond max_qp_wr is refused.
        // SAFETY: errno is this thread's own variable.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    // SAFETY: attr points at the caller's init attributes (checked non-null).
    let send_cq = unsafe { (*attr).send_cq };
    if send_cq.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: send_cq is a live CQ of this mock; its context is the device.
    let context = unsafe { (*send_cq).context };
    // SAFETY: ibv_qp is pointers and integers: all-zero is valid.
    let mut qp: ibv_qp = unsafe { std::mem::zeroed() };
    qp.context = context;
    qp.qp_num = NEXT_QPN.fetch_add(1, Ordering::Relaxed) & 0xFF_FFFF;
    let qp = Box::new(Qp {
        qp,
        send_cq: send_cq.cast(),
    });
    Box::into_raw(qp).cast()
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut sys::ibv_qp_attr, mask: c_int) -> c_int {
    if qp.is_null() || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: both point at live objects (checked non-null; qp is ours).
    let (a, n) = unsafe { (&*attr, (*qp).qp_num) };
    if mask & sys::IBV_QP_ACCESS_FLAGS != 0 {
        log(&format!("qp_init {n} access {:#x}", a.qp_access_flags));
    }
    if mask & sys::IBV_QP_PATH_MTU != 0 {
        log(&format!("qp_rtr {n} path_mtu {}", a.path_mtu));
    }
    if mask & sys::IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        log(&format!(
            "qp_depth {n} max_dest_rd_atomic {}",
            a.max_dest_rd_atomic
        ));
    }
    if mask & sys::IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        log(&format!("qp_depth {n} max_rd_atomic {}", a.max_rd_atomic));
    }
    0
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    if !qp.is_null() {
        // SAFETY: made by create_qp as a Qp whose first field is the ibv_qp.
        drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
    }
    0
}

unsafe extern "C" fn wc_status_str(status: u32) -> *const c_char {
    if status == sys::IBV_WC_SUCCESS {
        c"success".as_ptr()
    } else {
        c"mock error".as_ptr()
    }
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    if cq.is_null() || wc.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: cq is a live Cq of this mock (its first field is the ibv_cq).
    let cq = unsafe { &*cq.cast::<Cq>() };
    let Ok(mut q) = cq.done.lock() else {
        return -libc::EIO;
    };
    let mut got = 0;
    while got < n {
        let Some(c) = q.pop_front() else { break };
        // SAFETY: the caller gives room for n completions; got < n.
        unsafe { *wc.add(got as usize) = c };
        got += 1;
    }
    got
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: qp is a live Qp of this mock.
    let q = unsafe { &*qp.cast::<Qp>() };
    // SAFETY: the QP's CQ outlives it (its owner destroys QPs first).
    let cq = unsafe { &*q.send_cq };
    let Ok(mut done) = cq.done.lock() else {
        return libc::EIO;
    };
    let mut listed = 0;
    while !wr.is_null() {
        // SAFETY: wr is the caller's valid chain.
        let w = unsafe { &*wr };
        let mut len = 0u32;
        if !w.sg_list.is_null() && w.num_sge > 0 {
            // SAFETY: sg_list holds num_sge entries; the first is read.
            len = unsafe { (*w.sg_list).length };
        }
        if w.send_flags & sys::IBV_SEND_SIGNALED != 0 {
            done.push_back(ibv_wc {
                wr_id: w.wr_id,
                status: sys::IBV_WC_SUCCESS,
                opcode: if w.opcode == sys::IBV_WR_RDMA_READ {
                    2
                } else {
                    1
                },
                byte_len: len,
                qp_num: q.qp.qp_num,
                ..Default::default()
            });
        }
        wr = w.next;
        listed += 1;
    }
    if SPEC.get().is_some_and(|s| s.log.is_some()) {
        log(&format!("post_send {} {listed}", q.qp.qp_num));
    }
    if !bad.is_null() {
        // SAFETY: the caller's out pointer (checked non-null).
        unsafe { *bad = std::ptr::null_mut() };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_is_mock_or_mock_with_options() {
        assert_eq!(parse("libibverbs.so.1"), None);
        assert_eq!(parse("mock"), Some(Ok(Spec::default())));
        let log = |p: &str| Spec {
            log: Some(p.into()),
            ..Spec::default()
        };
        assert_eq!(parse("mock:log=/tmp/x"), Some(Ok(log("/tmp/x"))));
        assert_eq!(parse("mock:log=/tmp/a,b"), Some(Ok(log("/tmp/a,b"))));
        assert_eq!(
            parse("mock:rd_atom=4,init_rd_atom=128,log=/l"),
            Some(Ok(Spec {
                log: Some("/l".into()),
                rd_atom: Some(4),
                init_rd_atom: Some(128),
                max_qp_wr: None,
                max_cqe: None,
            }))
        );
        assert_eq!(
            parse("mock:max_qp_wr=8"),
            Some(Ok(Spec {
                max_qp_wr: Some(8),
                ..Spec::default()
            }))
        );
        assert_eq!(
            parse("mock:max_cqe=20,max_qp_wr=8"),
            Some(Ok(Spec {
                max_qp_wr: Some(8),
                max_cqe: Some(20),
                ..Spec::default()
            }))
        );
        for bad in [
            "mock:fast",
            "mockery",
            "mock:",
            "mock:log=",
            "mock:rd_atom=0",
            "mock:rd_atom=256",
            "mock:rd_atom=4,",
            "mock:max_qp_wr=0",
            "mock:max_qp_wr=16385",
        ] {
            assert!(matches!(parse(bad), Some(Err(_))), "{bad}");
        }
    }
}
