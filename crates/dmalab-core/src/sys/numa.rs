//! NUMA facts and the two memory-policy calls every buffer uses: which
//! nodes are online and which have memory (sysfs), `mbind(MPOL_BIND)` on a
//! range, and `move_pages` in query mode (the node each page sits on, the
//! kernel's own answer).

use crate::cpus::parse_kernel_list;
use std::fs;

/// Parses a sysfs node list (`0-1`, `0,2`); None when it is not one.
pub fn parse_nodes(text: &str) -> Option<Vec<usize>> {
    parse_kernel_list(text)
}

fn read_nodes(file: &str) -> Option<Vec<usize>> {
    fs::read_to_string(format!("/sys/devices/system/node/{file}"))
        .ok()
        .and_then(|s| parse_nodes(&s))
}

/// Online NUMA nodes (node 0 alone on a kernel without NUMA).
pub fn online_nodes() -> Vec<usize> {
    read_nodes("online")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// Nodes with memory (`has_memory`: normal or movable; a CPU-only node is
/// online but has none). Falls back to the online nodes.
pub fn memory_nodes() -> Vec<usize> {
    read_nodes("has_memory")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(online_nodes)
}

fn nodemask(node: usize) -> Vec<libc::c_ulong> {
    let bits = libc::c_ulong::BITS as usize;
    let mut mask = vec![0; node / bits + 1];
    mask[node / bits] |= 1 << (node % bits);
    mask
}

/// Binds the pages of `[addr, addr + len)` (a page-aligned address inside
/// one of our mappings; an address, not a pointer: nothing is read or
/// written through it) to `node` with `mbind(MPOL_BIND)`; pages faulted in
/// afterwards come from that node or the fault fails. Pages already present
/// are not moved (no `MPOL_MF_MOVE`): bind before the first touch.
pub fn mbind_bind(addr: usize, len: usize, node: usize) -> std::io::Result<()> {
    let mask = nodemask(node);
    // SAFETY: mbind only changes the memory policy of the given range of
    // this process (it reads `maxnode` bits from a mask we own); it touches
    // no memory, and a range that is not mapped is refused with EFAULT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            libc::MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * libc::c_ulong::BITS as usize) as libc::c_ulong,
            0u32,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The node of every `page`-byte page of `[addr, addr + len)`, from
/// `move_pages` in query mode (nothing moves). A negative entry is the
/// kernel's errno for that page (`-ENOENT`: not present, `-EFAULT`: no
/// page the kernel can name, as for some device mappings).
pub fn page_nodes(addr: *const u8, len: usize, page: usize) -> std::io::Result<Vec<i32>> {
    let page = page.max(4096);
    let pages: Vec<*const libc::c_void> = (0..len.div_ceil(page))
        .map(|i| addr.wrapping_add(i * page).cast())
        .collect();
    let mut status = vec![0i32; pages.len()];
    // Large buffers in chunks: the kernel walks the array in batches anyway.
    for (p, s) in pages.chunks(1 << 16).zip(status.chunks_mut(1 << 16)) {
        // SAFETY: pid 0 is this process; `p` and `s` have the same length
        // (the count passed); nodes is NULL, which asks only for the
        // status of each page and moves nothing.
        let r = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0,
                p.len() as libc::c_ulong,
                p.as_ptr(),
                std::ptr::null::<i32>(),
                s.as_mut_ptr(),
                0,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists() {
        assert_eq!(parse_nodes("0-1\n"), Some(vec![0, 1]));
        assert!(online_nodes().contains(&0));
        assert!(!memory_nodes().is_empty());
        assert_eq!(nodemask(0), vec![1]);
        assert_eq!(nodemask(65).len(), 2);
    }

    #[test]
    fn bound_pages_land_on_the_node() {
        let node = memory_nodes()[0];
        let len = 16 * 4096;
        // SAFETY: an anonymous private mapping, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let p = p.cast::<u8>();
        // Not touched yet: the kernel reports each page absent.
        let before = page_nodes(p, len, 4096).unwrap();
        assert!(before.iter().all(|&s| s == -libc::ENOENT), "{before:?}");
        mbind_bind(p as usize, len, node).unwrap();
        // SAFETY: the mapping is ours and `len` bytes long.
        unsafe { std::ptr::write_bytes(p, 1, len) };
        let after = page_nodes(p, len, 4096).unwrap();
        assert_eq!(after, vec![node as i32; 16]);
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(p.cast(), len) };
    }
}
