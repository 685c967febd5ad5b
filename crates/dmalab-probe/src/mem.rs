//! Probe buffers: anonymous memory on 4 KiB pages, transparent huge pages or
//! hugetlbfs pages, optionally bound to a NUMA node, first-touched whole.
//!
//! hugetlbfs pages come from the kernel's pool. When the pool has too few
//! free pages, [`HugeReservation`] raises `nr_hugepages` (per node when the
//! buffer is bound to one) by what is missing and puts the old value back
//! when the buffer is dropped, also after SIGINT/SIGTERM, since every loop
//! returns normally on the stop flag.

use crate::ProbeError;
use dmalab_core::cpus::parse_kernel_list;
use dmalab_core::UsageError;
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The cache-line size every probe works in.
pub const LINE: usize = 64;

/// What backs a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PageKind {
    /// 4 KiB pages; THP is switched off for the range (`MADV_NOHUGEPAGE`).
    #[serde(rename = "4k")]
    #[cfg_attr(feature = "clap", value(name = "4k", alias = "small"))]
    Small,
    /// Transparent huge pages asked for with `MADV_HUGEPAGE` on a 2 MiB
    /// aligned range (works with THP `always` or `madvise`).
    Thp,
    /// hugetlbfs 2 MiB pages (`MAP_HUGETLB | MAP_HUGE_2MB`).
    #[serde(rename = "2m")]
    #[cfg_attr(feature = "clap", value(name = "2m", alias = "huge2m"))]
    Huge2M,
    /// hugetlbfs 1 GiB pages (`MAP_HUGETLB | MAP_HUGE_1GB`).
    #[serde(rename = "1g")]
    #[cfg_attr(feature = "clap", value(name = "1g", alias = "huge1g"))]
    Huge1G,
}

impl PageKind {
    /// The size of one page, bytes (what TLB reach is counted in).
    pub fn page_size(self) -> usize {
        match self {
            Self::Small => 4096,
            Self::Thp | Self::Huge2M => 2 << 20,
            Self::Huge1G => 1 << 30,
        }
    }

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Self::Small => "4k",
            Self::Thp => "thp",
            Self::Huge2M => "2m",
            Self::Huge1G => "1g",
        }
    }

    fn hugetlb_dir(self) -> Option<&'static str> {
        match self {
            Self::Huge2M => Some("hugepages-2048kB"),
            Self::Huge1G => Some("hugepages-1048576kB"),
            _ => None,
        }
    }
}

/// NUMA nodes that are online (at least node 0).
pub fn numa_nodes() -> Vec<usize> {
    fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|s| parse_kernel_list(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// CPUs of a NUMA node (from sysfs); on a host without the node directory
/// and node 0 asked for, every allowed CPU.
pub fn node_cpus(node: usize) -> Option<Vec<usize>> {
    match fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")) {
        Ok(s) => parse_kernel_list(&s),
        Err(_) if node == 0 => Some(dmalab_core::cpus::allowed_cpus()),
        Err(_) => None,
    }
}

/// Sets the calling thread's memory policy to bind to `node` (later
/// allocations by this thread come from that node).
pub fn set_mempolicy_bind(node: usize) -> std::io::Result<()> {
    let mask = nodemask(node);
    // SAFETY: set_mempolicy reads `maxnode` bits from the mask we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            libc::MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * 64 + 1) as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn nodemask(node: usize) -> Vec<u64> {
    let mut mask = vec![0u64; node / 64 + 1];
    mask[node / 64] |= 1 << (node % 64);
    mask
}

/// Binds `len` bytes at `addr` (page aligned) to `node` with `mbind`.
fn mbind(addr: *mut u8, len: usize, node: usize) -> std::io::Result<()> {
    let mask = nodemask(node);
    // SAFETY: mbind only changes the policy of a range we mapped; the mask
    // is ours and `maxnode` bits long.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            libc::MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * 64 + 1) as libc::c_ulong,
            0u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Serialises "check free pages, raise the pool, map" across threads.
static HUGE_MAP: Mutex<()> = Mutex::new(());

/// Pages added to a hugetlb pool for one buffer; dropping it takes them
/// off again (in the process ledger meanwhile: [`dmalab_core::hugetlb`],
/// so buffers and processes growing one pool compose).
#[derive(Debug)]
pub struct HugeReservation {
    _growth: dmalab_core::hugetlb::PoolGrowth,
    /// Pages added to the pool for this buffer.
    pub added: u64,
}

fn read_u64(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

impl HugeReservation {
    /// Makes sure `pages` free, unreserved pages of `kind` exist (on `node`
    /// when given), raising the pool if needed. `None` when enough were free
    /// already. Call with [`HUGE_MAP`] held.
    fn ensure(kind: PageKind, pages: u64, node: Option<usize>) -> Result<Option<Self>, ProbeError> {
        let Some(dir) = kind.hugetlb_dir() else {
            return Ok(None);
        };
        let global = PathBuf::from(format!("/sys/kernel/mm/hugepages/{dir}"));
        let base = match node {
            Some(n) => PathBuf::from(format!("/sys/devices/system/node/node{n}/hugepages/{dir}")),
            None => global.clone(),
        };
        let nr_path = base.join("nr_hugepages");
        let (Some(nr), Some(free)) = (read_u64(&nr_path), read_u64(&base.join("free_hugepages")))
        else {
            return Err(ProbeError::Pages(format!(
                "this kernel offers no {} hugetlbfs pages ({} is missing); use --pages thp or 4k",
                kind.name(),
                base.display()
            )));
        };
        // Free pages already promised to other mappings are not ours.
        let resv = read_u64(&global.join("resv_hugepages")).unwrap_or(0);
        let free = free.saturating_sub(resv);
        if free >= pages {
            return Ok(None);
        }
        let want = nr + (pages - free);
        let growth = match dmalab_core::hugetlb::grow(&nr_path, pages - free) {
            Ok(g) => g,
            Err(e) => {
                return Err(ProbeError::Pages(format!(
                    "need {pages} free {} pages, {free} are free, and raising {} to {want} failed: {e} (run as root, or reserve them yourself)",
                    kind.name(),
                    nr_path.display()
                )))
            }
        };
        let res = HugeReservation {
            added: growth.added,
            _growth: growth,
        };
        let now_free = read_u64(&base.join("free_hugepages"))
            .unwrap_or(0)
            .saturating_sub(resv);
        if now_free < pages {
            // Dropping `res` puts the old pool size back.
            return Err(ProbeError::Pages(format!(
                "the host could provide only {now_free} of the {pages} {} pages needed (memory too fragmented or too small); use a smaller --size or --pages thp",
                kind.name()
            )));
        }
        Ok(Some(res))
    }
}

/// An anonymous mapping used as a probe buffer.
#[derive(Debug)]
pub struct Buffer {
    map: *mut u8,
    map_len: usize,
    ptr: *mut u8,
    len: usize,
    kind: PageKind,
    _reservation: Option<HugeReservation>,
}

// SAFETY: the buffer is plain memory owned by this value; threads that share
// it only do so through raw pointers whose use the callers order.
unsafe impl Send for Buffer {}
// SAFETY: as above; &Buffer only hands out the pointer.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Maps `len` bytes of `kind`, binds it to `membind` when given, and
    /// first-touches every page (writing zeros) from the calling thread.
    pub fn new(len: usize, kind: PageKind, membind: Option<usize>) -> Result<Self, ProbeError> {
        let page = kind.page_size();
        let len = len.div_ceil(LINE) * LINE;
        let mut reservation = None;
        let mut huge_guard = None;
        let (map_len, flags) = match kind {
            PageKind::Small => (len.div_ceil(4096) * 4096, 0),
            // Over-allocate by one huge page to align the start.
            PageKind::Thp => (len.div_ceil(4096) * 4096 + page, 0),
            PageKind::Huge2M | PageKind::Huge1G => {
                huge_guard = Some(HUGE_MAP.lock().unwrap_or_else(|p| p.into_inner()));
                let pages = len.div_ceil(page) as u64;
                reservation = HugeReservation::ensure(kind, pages, membind)?;
                let shift = if kind == PageKind::Huge2M { 21 } else { 30 };
                (
                    pages as usize * page,
                    libc::MAP_HUGETLB | (shift << libc::MAP_HUGE_SHIFT),
                )
            }
        };
        // SAFETY: an anonymous private mapping; no existing memory is touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                // No MAP_NORESERVE: a hugetlb mapping must take its pages
                // from the pool now (or fail here) rather than SIGBUS on
                // first touch.
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(ProbeError::Pages(format!(
                "cannot map {len} bytes on {} pages: {e}",
                kind.name()
            )));
        }
        drop(huge_guard);
        let map = map.cast::<u8>();
        let ptr = if kind == PageKind::Thp {
            let a = map as usize;
            (a.div_ceil(page) * page) as *mut u8
        } else {
            map
        };
        let buf = Buffer {
            map,
            map_len,
            ptr,
            len,
            kind,
            _reservation: reservation,
        };
        let advice = match kind {
            PageKind::Small => Some(libc::MADV_NOHUGEPAGE),
            PageKind::Thp => Some(libc::MADV_HUGEPAGE),
            _ => None,
        };
        if let Some(advice) = advice {
            // SAFETY: advice on a range inside our own mapping.
            let r = unsafe { libc::madvise(buf.map.cast(), buf.map_len, advice) };
            if r != 0 && kind == PageKind::Thp {
                return Err(ProbeError::Pages(format!(
                    "madvise(MADV_HUGEPAGE) failed: {}; this kernel has no transparent huge pages, use --pages 4k or 2m",
                    std::io::Error::last_os_error()
                )));
            }
        }
        if let Some(node) = membind {
            mbind(buf.map, buf.map_len, node).map_err(|e| {
                ProbeError::Usage(UsageError::new(
                    "--membind",
                    format!(
                        "cannot bind memory to node {node}: {e}; choose an online node with memory"
                    ),
                ))
            })?;
        }
        buf.first_touch();
        Ok(buf)
    }

    /// Writes every line once (in a VM this also makes the host fault the
    /// pages in, so no later access pays for that).
    fn first_touch(&self) {
        // SAFETY: ptr..ptr+len lies inside our writable mapping.
        unsafe { std::ptr::write_bytes(self.ptr, 0, self.len) };
    }

    /// Start of the usable range (aligned to the page size).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Usable length, bytes (a whole number of lines).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer (never built: sizes are checked).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 64-byte lines.
    pub fn lines(&self) -> usize {
        self.len / LINE
    }

    /// What backs it.
    pub fn kind(&self) -> PageKind {
        self.kind
    }

    /// The buffer as bytes.
    pub fn as_slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: our mapping, initialised by first_touch, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Huge pages this buffer added to the hugetlb pool (given back when it
    /// is dropped).
    pub fn hugetlb_pages_added(&self) -> u64 {
        self._reservation.as_ref().map_or(0, |r| r.added)
    }

    /// Bytes of the mapping backed by transparent huge pages right now
    /// (`AnonHugePages` in /proc/self/smaps), when it can be read.
    pub fn thp_backed_bytes(&self) -> Option<u64> {
        let smaps = fs::read_to_string("/proc/self/smaps").ok()?;
        let start = self.map as usize;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        inside = a <= start && start < b;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("AnonHugePages:") {
                    let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().ok()?;
                    return Some(kb * 1024);
                }
            }
        }
        None
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping we created; nothing uses it
        // after drop. The reservation (a field) is restored after this.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_buffer_is_zeroed_and_aligned() {
        let mut b = Buffer::new(10_000, PageKind::Small, None).unwrap();
        assert_eq!(b.len(), 10_048);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.as_slice_mut().iter().all(|&x| x == 0));
    }

    #[test]
    fn thp_buffer_is_2m_aligned() {
        let b = Buffer::new(4 << 20, PageKind::Thp, None).unwrap();
        assert_eq!(b.as_ptr() as usize % (2 << 20), 0);
        // Whether THP backs it depends on the host; reading it must work.
        let _ = b.thp_backed_bytes();
    }

    #[test]
    fn lists_parse() {
        assert!(numa_nodes().contains(&0));
    }
}
