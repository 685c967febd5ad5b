//! The part of libibverbs' ABI dmalab uses, and the library itself loaded at
//! run time (`dlopen("libibverbs.so.1")`), so building dmalab never needs
//! rdma-core and a host without it gets one clear line saying what to
//! install.
//!
//! Layouts follow `<infiniband/verbs.h>` (rdma-core, ABI `IBVERBS_1.1`, the
//! default symbol versions `dlsym` returns); the unit tests pin every size
//! and offset dmalab relies on to the values the header gives on x86-64.
//! `ibv_post_send` and `ibv_poll_cq` are inline functions in verbs.h that
//! call through the context's ops table; [`post_send`] and [`poll_cq`] do
//! the same.

#![allow(non_camel_case_types)]

use crate::error::RdmaError;
use dmalab_core::UsageError;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// `union ibv_gid`: 16 bytes, network order.
pub type Gid = [u8; 16];

/// `struct ibv_context` up to the ops table's entries dmalab calls.
#[repr(C)]
pub struct ibv_context {
    /// `struct ibv_device *`.
    pub device: *mut c_void,
    /// `struct ibv_context_ops`.
    pub ops: ibv_context_ops,
}

/// `struct ibv_context_ops` (all 36 entries; dmalab calls `poll_cq` and
/// `post_send`, the two verbs.h inlines).
#[repr(C)]
pub struct ibv_context_ops {
    _before_poll_cq: [*mut c_void; 11],
    /// `int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *)`.
    pub poll_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int>,
    _before_post_send: [*mut c_void; 13],
    /// `int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **)`.
    pub post_send:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int>,
    _after: [*mut c_void; 7],
}

/// `struct ibv_cq`, the leading field (the rest is the library's).
#[repr(C)]
pub struct ibv_cq {
    /// The context the CQ belongs to.
    pub context: *mut ibv_context,
}

/// `struct ibv_qp`, up to `qp_num`.
#[repr(C)]
pub struct ibv_qp {
    /// The context the QP belongs to.
    pub context: *mut ibv_context,
    _ptrs: [*mut c_void; 5],
    _handle: u32,
    /// The QP number the peer addresses.
    pub qp_num: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    _context: *mut c_void,
    _pd: *mut c_void,
    /// First byte registered.
    pub addr: *mut c_void,
    /// Bytes registered.
    pub length: usize,
    _handle: u32,
    /// Local key (for our own scatter/gather entries).
    pub lkey: u32,
    /// Remote key (what a peer puts in its RDMA work requests).
    pub rkey: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_device_attr` (what `ibv_query_device` fills; dmalab reads
/// the work request and outstanding READ/atomic limits).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr {
    _fw_ver: [u8; 64],
    _guids_and_sizes: [u64; 4],
    _vendor_and_hw: [u32; 3],
    pub max_qp: c_int,
    /// Work requests one queue holds at most.
    pub max_qp_wr: c_int,
    _cap_to_cq: [c_int; 4],
    /// Entries one completion queue holds at most.
    pub max_cqe: c_int,
    _mr_pd: [c_int; 2],
    /// RDMA READs and atomics a QP may have outstanding as the responder
    /// (the most `max_dest_rd_atomic` may be).
    pub max_qp_rd_atom: c_int,
    _ee_rd_atom: c_int,
    _res_rd_atom: c_int,
    /// RDMA READs and atomics a QP may have outstanding as the initiator
    /// (the most `max_rd_atomic` may be).
    pub max_qp_init_rd_atom: c_int,
    _rest: [c_int; 16],
    _pkeys_ack_ports: [u8; 4],
}

impl Default for ibv_device_attr {
    fn default() -> Self {
        Self {
            _fw_ver: [0; 64],
            _guids_and_sizes: [0; 4],
            _vendor_and_hw: [0; 3],
            max_qp: 0,
            max_qp_wr: 0,
            _cap_to_cq: [0; 4],
            max_cqe: 0,
            _mr_pd: [0; 2],
            max_qp_rd_atom: 0,
            _ee_rd_atom: 0,
            _res_rd_atom: 0,
            max_qp_init_rd_atom: 0,
            _rest: [0; 16],
            _pkeys_ack_ports: [0; 4],
        }
    }
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route` (8-aligned: `union ibv_gid` holds two u64s).
#[repr(C, align(8))]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_global_route {
    pub dgid: Gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_send_wr` with its `wr` union as the `rdma` member.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    /// `wr.rdma.remote_addr` (the union is 32 bytes: `atomic` is its largest member).
    pub remote_addr: u64,
    /// `wr.rdma.rkey`.
    pub rkey: u32,
    _wr_rest: [u32; 5],
    _qp_type_and_bind: [u64; 7],
}

impl Default for ibv_send_wr {
    fn default() -> Self {
        Self {
            wr_id: 0,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            _wr_rest: [0; 5],
            _qp_type_and_bind: [0; 7],
        }
    }
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Default, Clone, Copy, Debug)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

// Constants from verbs.h.
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QP_STATE: c_int = 1;
pub const IBV_QP_ACCESS_FLAGS: c_int = 8;
pub const IBV_QP_PKEY_INDEX: c_int = 16;
pub const IBV_QP_PORT: c_int = 32;
pub const IBV_QP_AV: c_int = 128;
pub const IBV_QP_PATH_MTU: c_int = 256;
pub const IBV_QP_TIMEOUT: c_int = 512;
pub const IBV_QP_RETRY_CNT: c_int = 1024;
pub const IBV_QP_RNR_RETRY: c_int = 2048;
pub const IBV_QP_RQ_PSN: c_int = 4096;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 8192;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 32768;
pub const IBV_QP_SQ_PSN: c_int = 65536;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
pub const IBV_QP_DEST_QPN: c_int = 1048576;
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
pub const IBV_ACCESS_REMOTE_READ: c_int = 4;
pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_SEND_SIGNALED: u32 = 2;
pub const IBV_SEND_INLINE: u32 = 8;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_WC_SUCCESS: u32 = 0;

/// The library's entry points dmalab calls (exported symbols).
pub struct Verbs {
    pub get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void,
    pub free_device_list: unsafe extern "C" fn(*mut *mut c_void),
    pub get_device_name: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    pub open_device: unsafe extern "C" fn(*mut c_void) -> *mut ibv_context,
    pub close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    pub query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    pub query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    pub query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut Gid) -> c_int,
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut c_void,
    pub dealloc_pd: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub reg_mr: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut ibv_mr,
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut c_void,
        c_int,
    ) -> *mut ibv_cq,
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    pub create_qp: unsafe extern "C" fn(*mut c_void, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    pub wc_status_str: unsafe extern "C" fn(u32) -> *const c_char,
}

/// The library's name as the loader finds it.
pub const LIBRARY: &str = "libibverbs.so.1";

/// What to install when the library is missing.
pub const INSTALL_HINT: &str = "apt-get install libibverbs1 ibverbs-providers";

static VERBS: OnceLock<Result<Verbs, String>> = OnceLock::new();

/// libibverbs, loaded on first use (and kept for the process's life).
///
/// A missing library is a [`UsageError`] naming the package to install.
pub fn verbs() -> Result<&'static Verbs, RdmaError> {
    let loaded = VERBS.get_or_init(load);
    loaded.as_ref().map_err(|why| {
        RdmaError::Usage(UsageError::new(
            "libibverbs",
            format!(
                "{} could not be loaded ({why}): install it with `{INSTALL_HINT}`",
                library()
            ),
        ))
    })
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by the
    // loader, valid until the next dl* call on this thread; copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".to_string()
    } else {
        // SAFETY: non-null and NUL-terminated (see above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The environment variable the binary reads for [`use_library`] (a test
/// seam: tests point it at a library that is not there, or at `mock`, the
/// fake verbs in [`crate::mock`]).
pub const LIBRARY_ENV: &str = "DMALAB_IBVERBS_LIB";

static CHOSEN: OnceLock<String> = OnceLock::new();

/// Chooses the library [`verbs`] loads instead of [`LIBRARY`] (`mock`,
/// `mock:log=PATH`, or a library's name or path; None: [`LIBRARY`]). The
/// library is loaded once per process, so only the first choice counts,
/// and only before the first [`verbs`].
pub fn use_library(name: Option<String>) {
    if let Some(n) = name {
        let _ = CHOSEN.set(n);
    }
}

/// The library to load: the one [`use_library`] chose, else [`LIBRARY`].
fn library() -> String {
    CHOSEN.get().cloned().unwrap_or_else(|| LIBRARY.to_string())
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `p` is the address of a function whose C prototype `F` spells; `F` is a
/// function pointer type (the size check below holds on every target Linux
/// runs on).
unsafe fn fn_from<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked); the caller guarantees the prototype.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

fn load() -> Result<Verbs, String> {
    if let Some(spec) = crate::mock::parse(&library()) {
        return spec.map(crate::mock::verbs);
    }
    let name = std::ffi::CString::new(library())
        .map_err(|_| "a library name with a NUL byte".to_string())?;
    // SAFETY: dlopen with a valid NUL-terminated name; the handle is never
    // closed, so every symbol taken from it stays valid for the process.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(dl_error());
    }
    macro_rules! sym {
        ($name:literal) => {{
            let cname = concat!($name, "\0");
            // SAFETY: handle is a live dlopen handle, cname is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, cname.as_ptr().cast()) };
            if p.is_null() {
                return Err(format!("symbol {} missing: {}", $name, dl_error()));
            }
            // SAFETY: the symbol is the libibverbs function of that name,
            // whose C prototype the field's type spells (verbs.h).
            unsafe { fn_from(p) }
        }};
    }
    Ok(Verbs {
        get_device_list: sym!("ibv_get_device_list"),
        free_device_list: sym!("ibv_free_device_list"),
        get_device_name: sym!("ibv_get_device_name"),
        open_device: sym!("ibv_open_device"),
        close_device: sym!("ibv_close_device"),
        query_port: sym!("ibv_query_port"),
        query_device: sym!("ibv_query_device"),
        query_gid: sym!("ibv_query_gid"),
        alloc_pd: sym!("ibv_alloc_pd"),
        dealloc_pd: sym!("ibv_dealloc_pd"),
        reg_mr: sym!("ibv_reg_mr"),
        dereg_mr: sym!("ibv_dereg_mr"),
        create_cq: sym!("ibv_create_cq"),
        destroy_cq: sym!("ibv_destroy_cq"),
        create_qp: sym!("ibv_create_qp"),
        modify_qp: sym!("ibv_modify_qp"),
        destroy_qp: sym!("ibv_destroy_qp"),
        wc_status_str: sym!("ibv_wc_status_str"),
    })
}

/// `ibv_post_send` as verbs.h defines it: through the context's ops table.
///
/// # Safety
/// `qp` is a live QP; `wr` a valid chain whose SGEs lie in registered memory.
pub unsafe fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr) -> c_int {
    let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
    // SAFETY: the caller guarantees qp is live, so its context pointer is.
    let ctx = unsafe { (*qp).context };
    // SAFETY: as above; a provider always fills post_send.
    match unsafe { (*ctx).ops.post_send } {
        // SAFETY: the provider's own post_send with the arguments verbs.h passes.
        Some(f) => unsafe { f(qp, wr, &mut bad) },
        None => libc::ENOSYS,
    }
}

/// `ibv_poll_cq` as verbs.h defines it: through the context's ops table.
///
/// # Safety
/// `cq` is a live CQ and `wc` has room for `n` entries.
pub unsafe fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees cq is live, so its context pointer is.
    let ctx = unsafe { (*cq).context };
    // SAFETY: as above; a provider always fills poll_cq.
    match unsafe { (*ctx).ops.poll_cq } {
        // SAFETY: the provider's own poll_cq with the arguments verbs.h passes.
        Some(f) => unsafe { f(cq, n, wc) },
        None => -libc::ENOSYS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// Sizes and offsets as `<infiniband/verbs.h>` (rdma-core 44) gives them
    /// on x86-64 (printed by a C program with sizeof/offsetof).
    #[test]
    fn layouts_match_verbs_h() {
        assert_eq!(size_of::<ibv_send_wr>(), 128);
        assert_eq!(offset_of!(ibv_send_wr, opcode), 28);
        assert_eq!(offset_of!(ibv_send_wr, send_flags), 32);
        assert_eq!(offset_of!(ibv_send_wr, remote_addr), 40);
        assert_eq!(offset_of!(ibv_send_wr, rkey), 48);
        assert_eq!(offset_of!(ibv_send_wr, _qp_type_and_bind), 72);
        assert_eq!(size_of::<ibv_sge>(), 16);
        assert_eq!(size_of::<ibv_wc>(), 48);
        assert_eq!(offset_of!(ibv_wc, status), 8);
        assert_eq!(offset_of!(ibv_wc, byte_len), 20);
        assert_eq!(offset_of!(ibv_wc, qp_num), 28);
        assert_eq!(size_of::<ibv_qp_init_attr>(), 64);
        assert_eq!(size_of::<ibv_qp_attr>(), 144);
        assert_eq!(offset_of!(ibv_qp_attr, ah_attr), 56);
        assert_eq!(offset_of!(ibv_qp_attr, pkey_index), 120);
        assert_eq!(offset_of!(ibv_qp_attr, rate_limit), 136);
        assert_eq!(size_of::<ibv_ah_attr>(), 32);
        assert_eq!(std::mem::align_of::<ibv_qp_attr>(), 8);
        assert_eq!(size_of::<ibv_port_attr>(), 52);
        assert_eq!(size_of::<ibv_device_attr>(), 232);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_wr), 112);
        assert_eq!(offset_of!(ibv_device_attr, max_cqe), 132);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_rd_atom), 144);
        assert_eq!(offset_of!(ibv_device_attr, max_qp_init_rd_atom), 156);
        assert_eq!(size_of::<ibv_mr>(), 48);
        assert_eq!(offset_of!(ibv_mr, lkey), 36);
        assert_eq!(offset_of!(ibv_qp, qp_num), 52);
        assert_eq!(offset_of!(ibv_context, ops), 8);
        assert_eq!(offset_of!(ibv_context_ops, poll_cq), 88);
        assert_eq!(offset_of!(ibv_context_ops, post_send), 200);
    }
}
