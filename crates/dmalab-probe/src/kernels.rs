//! The hot loops. Each is `#[inline(never)]` so it is compiled once, with the
//! crate's optimisation level (the workspace builds dmalab-probe at
//! opt-level 3 even in the dev profile), and so a profiler can find it.
//! Loads and stores go through `read_volatile`/`write_volatile`, so the
//! compiler can neither drop nor merge them.

use crate::access::WRITE_BIT;
use crate::mem::LINE;
use dmalab_core::sys::tsc::rdtscp_fenced;
use std::ptr::{read_volatile, write_volatile};

/// Follows the chain `n` steps from `p`; returns where it stopped.
///
/// # Safety
/// `p` must start a chain built by `access::build_chain` in a live buffer.
#[inline(never)]
pub unsafe fn chase(mut p: usize, n: usize) -> usize {
    for _ in 0..n {
        p = read_volatile(p as *const usize);
    }
    p
}

/// Like [`chase`], honouring the write flags (word 1) by storing into word 2.
///
/// # Safety
/// As for [`chase`].
#[inline(never)]
pub unsafe fn chase_rw(mut p: usize, n: usize) -> usize {
    for _ in 0..n {
        let q = p as *mut usize;
        let next = read_volatile(q);
        if read_volatile(q.add(1)) != 0 {
            write_volatile(q.add(2), read_volatile(q.add(2)).wrapping_add(1));
        }
        p = next;
    }
    p
}

/// Chases with every step timed: `out[i]` gets the cycles of step `i`
/// (timer cost included; the caller subtracts it).
///
/// # Safety
/// As for [`chase`].
#[inline(never)]
pub unsafe fn chase_timed(mut p: usize, out: &mut [u32], rw: bool) -> usize {
    for s in out.iter_mut() {
        let q = p as *mut usize;
        let t0 = rdtscp_fenced();
        let next = read_volatile(q);
        if rw && read_volatile(q.add(1)) != 0 {
            write_volatile(q.add(2), read_volatile(q.add(2)).wrapping_add(1));
        }
        let t1 = rdtscp_fenced();
        p = next;
        *s = t1.wrapping_sub(t0).min(u64::from(u32::MAX)) as u32;
    }
    p
}

/// Walks `n` entries of the index list from position `*pos` (wrapping),
/// each access dependent on the previous one through `zero` (an opaque 0).
///
/// # Safety
/// Every index in `list` (bit 31 aside) must be a line of the buffer at
/// `base`.
#[inline(never)]
pub unsafe fn walk(base: usize, list: &[u32], pos: &mut usize, n: usize, zero: usize) -> usize {
    let mut v = 0usize;
    let mut i = *pos;
    for _ in 0..n {
        let e = *list.get_unchecked(i);
        let a = (base + (e & !WRITE_BIT) as usize * LINE + (v & zero)) as *mut usize;
        v = read_volatile(a);
        if e & WRITE_BIT != 0 {
            write_volatile(a.add(2), v.wrapping_add(1));
        }
        i += 1;
        if i == list.len() {
            i = 0;
        }
    }
    *pos = i;
    v
}

/// Like [`walk`] with every access timed into `out`.
///
/// # Safety
/// As for [`walk`].
#[inline(never)]
pub unsafe fn walk_timed(
    base: usize,
    list: &[u32],
    pos: &mut usize,
    out: &mut [u32],
    zero: usize,
) -> usize {
    let mut v = 0usize;
    let mut i = *pos;
    for s in out.iter_mut() {
        let e = *list.get_unchecked(i);
        let a = (base + (e & !WRITE_BIT) as usize * LINE + (v & zero)) as *mut usize;
        let t0 = rdtscp_fenced();
        v = read_volatile(a);
        if e & WRITE_BIT != 0 {
            write_volatile(a.add(2), v.wrapping_add(1));
        }
        let t1 = rdtscp_fenced();
        *s = t1.wrapping_sub(t0).min(u64::from(u32::MAX)) as u32;
        i += 1;
        if i == list.len() {
            i = 0;
        }
    }
    *pos = i;
    v
}

/// Spins about `n` cycles: a `dec; jnz` loop of `n` iterations (one taken
/// branch per iteration, about one cycle on current cores).
#[inline(always)]
pub fn spin(n: u32) {
    if n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a register-only countdown loop; touches no memory or flags
    // anyone relies on.
    unsafe {
        core::arch::asm!(
            "2:",
            "dec {0:e}",
            "jnz 2b",
            inout(reg) n => _,
            options(nomem, nostack)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..n {
        std::hint::black_box(i);
    }
}

/// Measured cost of one [`spin`] iteration, TSC cycles (best of three
/// runs of a million iterations).
pub fn spin_cycles_per_iteration() -> f64 {
    (0..3)
        .map(|_| {
            let t0 = rdtscp_fenced();
            spin(1_000_000);
            let t1 = rdtscp_fenced();
            t1.saturating_sub(t0) as f64 / 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

/// Bandwidth kernels over 64-byte lines (SSE2, which every x86_64 has).
#[cfg(target_arch = "x86_64")]
pub mod bw {
    use super::spin;
    use core::arch::x86_64::*;

    #[inline(always)]
    unsafe fn ld(p: *const u8) -> [__m128i; 4] {
        let q = p.cast::<__m128i>();
        [
            _mm_load_si128(q),
            _mm_load_si128(q.add(1)),
            _mm_load_si128(q.add(2)),
            _mm_load_si128(q.add(3)),
        ]
    }

    #[inline(always)]
    unsafe fn st(p: *mut u8, v: [__m128i; 4]) {
        let q = p.cast::<__m128i>();
        _mm_store_si128(q, v[0]);
        _mm_store_si128(q.add(1), v[1]);
        _mm_store_si128(q.add(2), v[2]);
        _mm_store_si128(q.add(3), v[3]);
    }

    #[inline(always)]
    fn x(a: [__m128i; 4], b: [__m128i; 4]) -> [__m128i; 4] {
        // SAFETY: SSE2 is part of x86_64.
        unsafe {
            [
                _mm_xor_si128(a[0], b[0]),
                _mm_xor_si128(a[1], b[1]),
                _mm_xor_si128(a[2], b[2]),
                _mm_xor_si128(a[3], b[3]),
            ]
        }
    }

    fn fold(a: [__m128i; 4]) -> u64 {
        // SAFETY: SSE2 is part of x86_64.
        unsafe {
            let v = _mm_xor_si128(_mm_xor_si128(a[0], a[1]), _mm_xor_si128(a[2], a[3]));
            _mm_cvtsi128_si64(v) as u64 ^ _mm_extract_epi16(v, 7) as u64
        }
    }

    /// Where each step of a kernel goes: the byte offset of its line from
    /// the arrays' base. Computed from the walk's own state only, never
    /// from loaded data, so the loads carry no dependency chain and the
    /// core may overlap them (MLC's random mode, not a pointer chase).
    pub trait Walk {
        /// The offset of the next line, bytes (a multiple of 64).
        fn next(&mut self) -> usize;
    }

    /// Line after line from offset 0.
    pub struct Sequential(pub usize);

    impl Walk for Sequential {
        #[inline(always)]
        fn next(&mut self) -> usize {
            let o = self.0;
            self.0 += 64;
            o
        }
    }

    /// Blocks of `block_lines` lines at random block-aligned offsets among
    /// `blocks`, each block walked line by line (granularity 64 B: one
    /// random line per step). xorshift64* picks the block: a shift, xor
    /// and multiply per block, no table in memory.
    pub struct Random {
        /// Generator state (never 0).
        pub state: u64,
        /// Blocks in an array.
        pub blocks: u64,
        /// Lines per block.
        pub block_lines: usize,
        /// Lines left in the current block.
        pub left: usize,
        /// Offset of the next line, bytes.
        pub at: usize,
    }

    impl Random {
        /// A walk over `lines` lines in blocks of `block_lines`, seeded.
        pub fn new(lines: usize, block_lines: usize, seed: u64) -> Self {
            let block_lines = block_lines.clamp(1, lines.max(1));
            Random {
                state: seed | 1,
                blocks: (lines / block_lines).max(1) as u64,
                block_lines,
                left: 0,
                at: 0,
            }
        }
    }

    impl Walk for Random {
        #[inline(always)]
        fn next(&mut self) -> usize {
            if self.left == 0 {
                let mut x = self.state;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                self.state = x;
                let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
                // r * blocks / 2^64: a block index without a division.
                let block = ((u128::from(r) * u128::from(self.blocks)) >> 64) as usize;
                self.at = block * self.block_lines * 64;
                self.left = self.block_lines;
            }
            let o = self.at;
            self.at += 64;
            self.left -= 1;
            o
        }
    }

    /// R: reads `lines` lines at `a`, where `w` says.
    ///
    /// # Safety
    /// `a` is 64-byte aligned and every offset `w` gives in `lines` steps
    /// lies inside it, 64 bytes readable.
    #[inline(never)]
    pub unsafe fn read<W: Walk>(a: *const u8, lines: usize, delay: u32, w: &mut W) -> u64 {
        let mut acc = [_mm_setzero_si128(); 4];
        for _ in 0..lines {
            acc = x(acc, ld(a.add(w.next())));
            spin(delay);
        }
        fold(acc)
    }

    /// W2: reads a and b, writes c (2 reads : 1 write), at the same offset
    /// of each.
    ///
    /// # Safety
    /// As for [`read`], for all three; c writable.
    #[inline(never)]
    pub unsafe fn w2<W: Walk>(
        a: *const u8,
        b: *const u8,
        c: *mut u8,
        lines: usize,
        delay: u32,
        w: &mut W,
    ) {
        for _ in 0..lines {
            let o = w.next();
            st(c.add(o), x(ld(a.add(o)), ld(b.add(o))));
            spin(delay);
        }
    }

    /// W3: reads a, b and c, writes d (3 reads : 1 write).
    ///
    /// # Safety
    /// As for [`w2`], with d writable.
    #[inline(never)]
    pub unsafe fn w3<W: Walk>(
        a: *const u8,
        b: *const u8,
        c: *const u8,
        d: *mut u8,
        lines: usize,
        delay: u32,
        w: &mut W,
    ) {
        for _ in 0..lines {
            let o = w.next();
            st(d.add(o), x(x(ld(a.add(o)), ld(b.add(o))), ld(c.add(o))));
            spin(delay);
        }
    }

    /// W5: reads a line and writes it back in place (1 read : 1 write).
    ///
    /// # Safety
    /// As for [`read`], `a` read-write.
    #[inline(never)]
    pub unsafe fn w5<W: Walk>(a: *mut u8, lines: usize, delay: u32, w: &mut W) {
        let one = _mm_set1_epi64x(1);
        for _ in 0..lines {
            let o = w.next();
            let v = ld(a.add(o));
            st(
                a.add(o),
                [
                    _mm_add_epi64(v[0], one),
                    v[1],
                    v[2],
                    _mm_add_epi64(v[3], one),
                ],
            );
            spin(delay);
        }
    }

    /// W6: non-temporal writes only (`movntdq`), then `sfence`.
    ///
    /// # Safety
    /// As for [`read`], `a` writable.
    #[inline(never)]
    pub unsafe fn w6<W: Walk>(a: *mut u8, lines: usize, delay: u32, seed: u64, w: &mut W) {
        let v = _mm_set1_epi64x(seed as i64);
        for _ in 0..lines {
            let q = a.add(w.next()).cast::<__m128i>();
            _mm_stream_si128(q, v);
            _mm_stream_si128(q.add(1), v);
            _mm_stream_si128(q.add(2), v);
            _mm_stream_si128(q.add(3), v);
            spin(delay);
        }
        _mm_sfence();
    }

    /// copy: b = a.
    ///
    /// # Safety
    /// As for [`w2`].
    #[inline(never)]
    pub unsafe fn copy(a: *const u8, b: *mut u8, lines: usize, delay: u32) {
        for i in 0..lines {
            let o = i * 64;
            st(b.add(o), ld(a.add(o)));
            spin(delay);
        }
    }

    /// triad: a = b + s * c over f64.
    ///
    /// # Safety
    /// As for [`w2`]; the buffers hold f64 values (zeros are fine).
    #[inline(never)]
    pub unsafe fn triad(a: *mut u8, b: *const u8, c: *const u8, lines: usize, delay: u32) {
        let s = _mm_set1_pd(3.0);
        for i in 0..lines {
            let o = i * 64;
            for k in 0..4 {
                let bv = _mm_load_pd(b.add(o + k * 16).cast::<f64>());
                let cv = _mm_load_pd(c.add(o + k * 16).cast::<f64>());
                _mm_store_pd(
                    a.add(o + k * 16).cast::<f64>(),
                    _mm_add_pd(bv, _mm_mul_pd(s, cv)),
                );
            }
            spin(delay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{build_chain, index_list, Pattern};
    use crate::mem::{Buffer, PageKind};

    #[test]
    fn chase_returns_to_start_after_a_lap() {
        let mut b = Buffer::new(64 << 10, PageKind::Small, None).unwrap();
        let start = build_chain(&mut b, 0, 50, 9);
        // SAFETY: start begins a chain in b.
        unsafe {
            assert_eq!(chase(start, b.lines()), start);
            assert_eq!(chase_rw(start, b.lines()), start);
            let mut out = vec![0u32; b.lines()];
            assert_eq!(chase_timed(start, &mut out, true), start);
            assert!(out.iter().all(|&c| c > 0));
        }
    }

    #[test]
    fn walk_wraps_the_list() {
        let b = Buffer::new(64 << 10, PageKind::Small, None).unwrap();
        let list = index_list(&Pattern::Uniform, b.lines(), 20, 1);
        let mut pos = 0;
        // SAFETY: list indices are lines of b.
        unsafe {
            walk(b.as_ptr() as usize, &list, &mut pos, list.len() + 5, 0);
            assert_eq!(pos, 5);
            let mut out = vec![0u32; 10];
            walk_timed(b.as_ptr() as usize, &list, &mut pos, &mut out, 0);
            assert_eq!(pos, 15);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn bandwidth_kernels_move_data() {
        let lines = 64;
        let mut a = Buffer::new(lines * 64, PageKind::Small, None).unwrap();
        let b = Buffer::new(lines * 64, PageKind::Small, None).unwrap();
        let c = Buffer::new(lines * 64, PageKind::Small, None).unwrap();
        // SAFETY: three live, aligned buffers of `lines` lines.
        unsafe {
            let seq = || bw::Sequential(0);
            bw::w6(a.as_ptr(), lines, 0, 0x0101_0101_0101_0101, &mut seq());
            assert!(a.as_slice_mut().iter().all(|&x| x == 1));
            bw::copy(a.as_ptr(), b.as_ptr(), lines, 3);
            assert_eq!(*b.as_ptr().add(100), 1);
            bw::w2(a.as_ptr(), b.as_ptr(), c.as_ptr(), lines, 0, &mut seq());
            assert_eq!(*c.as_ptr().add(100), 0);
            bw::w5(a.as_ptr(), lines, 0, &mut seq());
            assert_eq!(*a.as_ptr(), 2);
            let _ = bw::read(a.as_ptr(), lines, 0, &mut seq());
            bw::w3(
                a.as_ptr(),
                b.as_ptr(),
                c.as_ptr(),
                c.as_ptr(),
                lines,
                0,
                &mut seq(),
            );
            bw::triad(a.as_ptr(), b.as_ptr(), c.as_ptr(), lines, 0);
            // A random walk of single lines: W5 on 64 * 64 random steps
            // adds 1 to lines all over the array (in bounds: no fault).
            let mut r = bw::Random::new(lines, 1, 7);
            bw::w5(a.as_ptr(), lines * 64, 0, &mut r);
            let bumped = (0..lines).filter(|&l| *a.as_ptr().add(l * 64) > 2).count();
            assert!(bumped > lines / 2, "{bumped} of {lines} lines reached");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn random_walk_stays_in_bounds_and_keeps_blocks_whole() {
        use bw::Walk;
        // 1000 lines in blocks of 4 (256 B): 250 blocks, each visited as
        // 4 consecutive lines from a block boundary.
        let mut w = bw::Random::new(1000, 4, 42);
        let mut seen = vec![0u32; 250];
        for _ in 0..100_000 / 4 {
            let first = w.next();
            assert_eq!(first % 256, 0);
            for k in 1..4 {
                assert_eq!(w.next(), first + k * 64);
            }
            seen[first / 256] += 1;
        }
        // 25 000 blocks over 250: every block hit, none far off 100.
        assert!(seen.iter().all(|&n| (50..200).contains(&n)), "{seen:?}");
        // Lines not a multiple of the block: the tail is never reached.
        let mut w = bw::Random::new(10, 4, 1);
        assert!((0..1000).all(|_| w.next() < 8 * 64));
    }
}
