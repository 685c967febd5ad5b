//! Set-associative cache state: flat arrays, no timing, no statistics.
//!
//! A slot is `set * ways + way`. Lines are addresses shifted right by the
//! line size. In a cache built with fill words ([`Cache::new`]) each slot
//! also carries a `fill` word: when the line's data arrives (ps), or, with
//! [`PENDING`] set, the DRAM ticket of a fill still in flight (prefetches).
//! A cache whose lines always arrive before they are used (the LLC) is built
//! without them ([`Cache::without_fills`]): its fill words all read 0, and
//! it spends no host memory or stores on them.

use crate::config::Replacement;

const INVALID: u64 = u64::MAX;
/// Marks a `fill` word that holds a DRAM read ticket rather than a time.
pub const PENDING: u64 = 1 << 63;

/// A line pushed out of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    /// Line number.
    pub line: u64,
    /// Modified: must be written back.
    pub dirty: bool,
    /// True if it was brought in by a prefetch and never used (DMA
    /// cache); in the LLC, if it held device data no core had read yet
    /// ([`UNREAD`]).
    pub unused_prefetch: bool,
    /// LLC: it held device data no core had overwritten ([`DEVICE`]).
    pub device: bool,
    /// LLC: the code of the device whose data it held (meaningful with
    /// `device` or `unused_prefetch`; [`io_flags`]).
    pub source: usize,
}

/// One way of one set: the tag and every piece of metadata the replacement
/// decision needs in one 16-byte word pair, so a lookup and a victim choice
/// touch one host cache line for a 4-way set.
///
/// `meta` packs, from the most significant bit: dirty (bit 63), in the LLC
/// [`DEVICE`] (bit 62), the LRU stamp (bits 3..62), in the LLC the code of
/// the device that wrote the line (bits 1..3, [`io_flags`]) and bit 0:
/// "prefetched, not used yet" in the DMA cache, [`UNREAD`] in the LLC.
/// Stamps are
/// unique within a cache (a counter), so comparing `meta` with the dirty bit
/// kept orders clean lines before dirty ones and then by age (clean-first),
/// and with it masked off orders by age alone (LRU).
#[derive(Clone, Copy)]
struct Slot {
    tag: u64,
    meta: u64,
}

const DIRTY: u64 = 1 << 63;
const PREFETCHED: u64 = 1;
/// LLC: the line holds data a device wrote that no core has read yet (bit
/// 0, the DMA cache's [`PREFETCHED`]).
pub const UNREAD: u64 = PREFETCHED;
/// LLC: the line holds data a device wrote that no core has overwritten.
/// Not part of the replacement order (masked out of the key).
pub const DEVICE: u64 = 1 << 62;
/// LLC: the device code's bits (see [`io_flags`]).
const SOURCE_SHIFT: u32 = 1;
const SOURCE: u64 = 3 << SOURCE_SHIFT;
/// Every bit an LLC line's device data keeps.
const IO: u64 = DEVICE | UNREAD | SOURCE;

/// LLC: the flags of a line holding data device `source` (its trace code,
/// 0..4) wrote: [`DEVICE`], with `unread` [`UNREAD`], and the code, so
/// that what becomes of the line is counted for its device.
#[inline]
pub fn io_flags(source: usize, unread: bool) -> u64 {
    DEVICE | unread as u64 | ((source as u64 & 3) << SOURCE_SHIFT)
}

/// LLC: the device code in flags `io_flags` made (or [`Cache::io_bits`]
/// returned).
#[inline]
pub fn io_source(flags: u64) -> usize {
    ((flags & SOURCE) >> SOURCE_SHIFT) as usize
}

/// A fixed mixing function (splitmix64's finalizer) standing in for the
/// undocumented slice hash: lines spread over slices as if at random.
#[inline]
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One cache's state.
pub struct Cache {
    ways: usize,
    sets: u64,
    /// Sets per slice (all of them with one slice).
    slice_sets: u64,
    /// Slices (1: plain modulo indexing).
    slices: u64,
    mask: u64,
    pow2: bool,
    /// `meta` bits that order victims (see [`Slot`]).
    key_mask: u64,
    slots: Vec<Slot>,
    /// One per slot, or empty for a cache without fill words.
    fill: Vec<u64>,
    tick: u64,
}

impl Cache {
    /// A cache of `size_bytes` with `ways` ways of `line_bytes` lines
    /// (at least one set; sets need not be a power of two), with a fill
    /// word per slot.
    pub fn new(size_bytes: u64, ways: u32, line_bytes: u32, policy: Replacement) -> Self {
        let mut c = Self::without_fills(size_bytes, ways, line_bytes, policy);
        c.fill = vec![0; c.slots.len()];
        c
    }

    /// The same cache without fill words: every fill word reads 0, and
    /// inserting a line takes fill 0.
    pub fn without_fills(size_bytes: u64, ways: u32, line_bytes: u32, policy: Replacement) -> Self {
        // A cache smaller than one set of `ways` lines gets fewer ways.
        let lines = (size_bytes / line_bytes as u64).max(1);
        let ways = (ways.max(1) as u64).min(lines) as usize;
        let sets = (size_bytes / (ways as u64 * line_bytes as u64)).max(1);
        let n = sets as usize * ways;
        Cache {
            ways,
            sets,
            slice_sets: sets,
            slices: 1,
            mask: sets.wrapping_sub(1),
            pow2: sets.is_power_of_two(),
            key_mask: match policy {
                Replacement::CleanFirst => !(PREFETCHED | DEVICE | SOURCE),
                Replacement::Lru => !(PREFETCHED | DIRTY | DEVICE | SOURCE),
            },
            slots: vec![
                Slot {
                    tag: INVALID,
                    meta: 0
                };
                n
            ],
            fill: Vec::new(),
            tick: 0,
        }
    }

    /// The same cache cut into `slices` slices of equal sets (as many as
    /// divide the sets evenly, at least 1): a line's slice is a fixed
    /// pseudo-random function of its address, its set within the slice the
    /// line number modulo the slice's sets. A contiguous buffer then fills
    /// the sets of a slice unevenly (binomially), as physical pages
    /// scattered over a real LLC's hashed slices do, instead of each set
    /// getting exactly the same share.
    pub fn with_slices(mut self, slices: u32) -> Self {
        let mut k = u64::from(slices.max(1)).min(self.sets);
        while !self.sets.is_multiple_of(k) {
            k -= 1;
        }
        self.slices = k;
        self.slice_sets = self.sets / k;
        self.mask = self.slice_sets.wrapping_sub(1);
        self.pow2 = self.slice_sets.is_power_of_two();
        self
    }

    /// Number of sets.
    pub fn sets(&self) -> u64 {
        self.sets
    }

    /// Associativity.
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// The set of `line`.
    #[inline]
    pub fn set_of(&self, line: u64) -> u64 {
        let set = if self.pow2 {
            line & self.mask
        } else {
            line % self.slice_sets
        };
        if self.slices == 1 {
            return set;
        }
        // Multiply-shift range reduction: no division on the hot path.
        let slice = ((mix(line) as u128 * self.slices as u128) >> 64) as u64;
        slice * self.slice_sets + set
    }

    #[inline]
    fn base(&self, line: u64) -> usize {
        self.set_of(line) as usize * self.ways
    }

    /// The way a slot is in.
    #[inline]
    pub fn way_of(&self, slot: usize) -> usize {
        slot % self.ways
    }

    /// LLC: the [`DEVICE`] and [`UNREAD`] bits and the device code of a
    /// slot.
    #[inline]
    pub fn io_bits(&self, slot: usize) -> u64 {
        self.slots[slot].meta & IO
    }

    /// LLC: sets a slot's [`DEVICE`] and [`UNREAD`] bits and device code
    /// to `bits` ([`io_flags`]).
    #[inline]
    pub fn set_io_bits(&mut self, slot: usize, bits: u64) {
        let m = &mut self.slots[slot].meta;
        *m = (*m & !IO) | (bits & IO);
    }

    /// LLC: a core's access to a slot: most recently used, dirty with
    /// `write`; the line is no longer [`UNREAD`], and no longer [`DEVICE`]
    /// data once written. Returns the bits it had (with the device code).
    #[inline]
    pub fn touch_by_core(&mut self, slot: usize, write: bool) -> u64 {
        let st = self.stamp();
        let s = &mut self.slots[slot];
        let old = s.meta;
        let keep = if write { 0 } else { old & (DEVICE | SOURCE) };
        s.meta = (old & DIRTY) | ((write as u64) << 63) | keep | st;
        old & IO
    }

    /// The slot holding `line`, if any.
    #[inline]
    pub fn lookup(&self, line: u64) -> Option<usize> {
        let b = self.base(line);
        self.slots[b..b + self.ways]
            .iter()
            .position(|s| s.tag == line)
            .map(|w| b + w)
    }

    #[inline]
    fn stamp(&mut self) -> u64 {
        // Bits 3..62: 2^59 stamps before one reaches the DEVICE bit.
        self.tick += 1;
        (self.tick << 3) & !DEVICE
    }

    /// Marks a slot most recently used (and, with `write`, dirty). Returns
    /// true if this was the first use of a prefetched line.
    #[inline]
    pub fn touch(&mut self, slot: usize, write: bool) -> bool {
        let st = self.stamp();
        let s = &mut self.slots[slot];
        let old = s.meta;
        s.meta = (old & DIRTY) | ((write as u64) << 63) | st;
        old & PREFETCHED != 0
    }

    /// The `fill` word of a slot.
    #[inline]
    pub fn fill(&self, slot: usize) -> u64 {
        self.fill.get(slot).copied().unwrap_or(0)
    }

    /// Replaces the `fill` word of a slot (a resolved ticket); a cache
    /// without fill words takes only 0.
    #[inline]
    pub fn set_fill(&mut self, slot: usize, fill: u64) {
        debug_assert!(fill == 0 || !self.fill.is_empty());
        if let Some(f) = self.fill.get_mut(slot) {
            *f = fill;
        }
    }

    /// Inserts `line` (not present), choosing a victim among the first
    /// `way_limit` ways of its set. Returns the victim if a valid line left.
    #[inline]
    pub fn insert(
        &mut self,
        line: u64,
        dirty: bool,
        fill: u64,
        prefetched: bool,
        way_limit: usize,
    ) -> Option<Victim> {
        let (slot, victim) = self.place(line, dirty, prefetched as u64, way_limit);
        self.set_fill(slot, fill);
        victim
    }

    /// LLC: inserts `line` (not present) with its [`DEVICE`] and [`UNREAD`]
    /// bits and device code `io` ([`io_flags`]; 0: not device data),
    /// choosing a victim among the first `way_limit` ways.
    #[inline]
    pub fn insert_io(
        &mut self,
        line: u64,
        dirty: bool,
        io: u64,
        way_limit: usize,
    ) -> Option<Victim> {
        self.place(line, dirty, io & IO, way_limit).1
    }

    // Always inlined: out of line, its victim comes back through memory
    // on every insertion (callgrind on file copy: 17 M instructions in
    // `place` where the inlined copy cost about 10 M).
    #[inline(always)]
    fn place(
        &mut self,
        line: u64,
        dirty: bool,
        flags: u64,
        way_limit: usize,
    ) -> (usize, Option<Victim>) {
        let b = self.base(line);
        let lim = way_limit.clamp(1, self.ways);
        let slot = b + self.choose(b, lim);
        let old = self.slots[slot];
        let victim = (old.tag != INVALID).then_some(Victim {
            line: old.tag,
            dirty: old.meta & DIRTY != 0,
            unused_prefetch: old.meta & PREFETCHED != 0,
            device: old.meta & DEVICE != 0,
            source: io_source(old.meta),
        });
        let st = self.stamp();
        self.slots[slot] = Slot {
            tag: line,
            meta: ((dirty as u64) << 63) | st | flags,
        };
        (slot, victim)
    }

    #[inline]
    fn choose(&self, b: usize, lim: usize) -> usize {
        let set = &self.slots[b..b + lim];
        // One pass: an invalid way wins; else the smallest key: the least
        // recently used (clean first under the paper's policy).
        let mut best = 0;
        let mut best_key = u64::MAX;
        for (w, s) in set.iter().enumerate() {
            if s.tag == INVALID {
                return w;
            }
            let key = s.meta & self.key_mask;
            if key < best_key {
                best_key = key;
                best = w;
            }
        }
        best
    }

    /// Removes a slot's line; returns (dirty, fill).
    #[inline]
    pub fn remove(&mut self, slot: usize) -> (bool, u64) {
        let s = &mut self.slots[slot];
        s.tag = INVALID;
        let dirty = s.meta & DIRTY != 0;
        s.meta &= !(DIRTY | IO);
        (dirty, self.fill(slot))
    }

    /// Is the slot's line dirty?
    #[inline]
    pub fn is_dirty(&self, slot: usize) -> bool {
        self.slots[slot].meta & DIRTY != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_least_recent() {
        // 2 sets x 2 ways of 64-byte lines.
        let mut c = Cache::new(256, 2, 64, Replacement::Lru);
        assert_eq!(c.sets(), 2);
        assert!(c.insert(0, false, 0, false, 2).is_none());
        assert!(c.insert(2, true, 0, false, 2).is_none());
        let s0 = c.lookup(0).unwrap();
        c.touch(s0, false);
        let v = c.insert(4, false, 0, false, 2).unwrap();
        assert_eq!((v.line, v.dirty), (2, true));
        assert!(c.lookup(2).is_none() && c.lookup(0).is_some() && c.lookup(4).is_some());
    }

    #[test]
    fn clean_first_spares_dirty_lines() {
        let mut c = Cache::new(256, 4, 64, Replacement::CleanFirst);
        assert_eq!(c.sets(), 1);
        c.insert(1, true, 0, false, 4);
        c.insert(2, false, 0, false, 4);
        c.insert(3, true, 0, false, 4);
        c.insert(4, false, 0, false, 4);
        // 2 is the least recently used clean line, though 1 is older.
        assert_eq!(c.insert(5, false, 0, false, 4).unwrap().line, 2);
        assert_eq!(c.insert(6, false, 0, false, 4).unwrap().line, 4);
        assert_eq!(c.insert(7, false, 0, false, 4).unwrap().line, 5);
        // Make every line dirty: then the least recently used dirty one goes.
        for l in [1, 3, 6, 7] {
            let s = c.lookup(l).unwrap();
            c.touch(s, true);
        }
        assert_eq!(c.insert(8, false, 0, false, 4).unwrap().line, 1);
    }

    #[test]
    fn way_limit_confines_allocation() {
        let mut c = Cache::new(64 * 4, 4, 64, Replacement::Lru);
        for l in 0..4 {
            c.insert(l, false, 0, false, 4);
        }
        // Limited to 1 way: always replaces way 0's line.
        assert_eq!(c.insert(10, true, 0, false, 1).unwrap().line, 0);
        assert_eq!(c.insert(11, true, 0, false, 1).unwrap().line, 10);
        assert!(c.lookup(1).is_some() && c.lookup(2).is_some() && c.lookup(3).is_some());
    }

    #[test]
    fn fill_words_only_where_built() {
        let mut c = Cache::new(256, 2, 64, Replacement::Lru);
        c.insert(0, false, PENDING | 7, true, 2);
        let s = c.lookup(0).unwrap();
        assert_eq!(c.fill(s), PENDING | 7);
        c.insert(2, false, 0, false, 2);
        let v = c.insert(4, false, 0, false, 2).unwrap();
        assert_eq!((v.line, v.unused_prefetch), (0, true));
        let mut n = Cache::without_fills(256, 2, 64, Replacement::Lru);
        n.insert(0, true, 0, false, 2);
        let s = n.lookup(0).unwrap();
        assert_eq!(n.fill(s), 0);
        assert_eq!(n.remove(s), (true, 0));
    }

    /// Slices: a line keeps its set within the slice (line modulo the
    /// slice's sets), its slice is a fixed function of its address, and a
    /// contiguous range fills the sets unevenly instead of one line each.
    #[test]
    fn slices_spread_a_contiguous_range_unevenly() {
        let c = Cache::new(2 * 64 * 4 * 64, 4, 64, Replacement::Lru).with_slices(2);
        assert_eq!(c.sets(), 128);
        let mut per_set = vec![0u32; 128];
        for line in 1000..1128u64 {
            let s = c.set_of(line);
            assert_eq!(s % 64, line % 64);
            assert_eq!(s, c.set_of(line), "fixed");
            per_set[s as usize] += 1;
        }
        assert!(per_set.contains(&0) && per_set.iter().any(|&n| n >= 2));
        let plain = Cache::new(2 * 64 * 4 * 64, 4, 64, Replacement::Lru);
        assert!((1000..1128u64).all(|l| plain.set_of(l) == l % 128));
        // A slice count that does not divide the sets: the largest that does.
        let odd = Cache::new(3 * 4 * 64, 4, 64, Replacement::Lru).with_slices(2);
        assert!((0..30u64).all(|l| odd.set_of(l) < 3));
    }

    /// An LLC line keeps the code of the device that wrote it until a core
    /// overwrites it, and gives it back when it leaves; the code does not
    /// change which line LRU picks.
    #[test]
    fn device_code_rides_with_the_line() {
        let mut c = Cache::without_fills(256, 4, 64, Replacement::Lru);
        c.insert_io(1, true, io_flags(2, true), 4);
        c.insert_io(2, true, io_flags(1, true), 4);
        c.insert_io(3, false, 0, 4);
        c.insert_io(4, true, io_flags(3, false), 4);
        let s = c.lookup(2).unwrap();
        assert_eq!(c.touch_by_core(s, false), io_flags(1, true));
        assert_eq!(c.io_bits(s), io_flags(1, false));
        let v = c.insert_io(5, false, 0, 4).unwrap();
        assert_eq!(
            (v.line, v.source, v.device, v.unused_prefetch),
            (1, 2, true, true)
        );
        let s = c.lookup(4).unwrap();
        c.touch_by_core(s, true);
        assert_eq!(c.io_bits(s), 0);
        assert_eq!(c.insert_io(6, false, 0, 4).unwrap().line, 3);
        let v = c.insert_io(7, false, 0, 4).unwrap();
        assert_eq!((v.line, v.source, v.device), (2, 1, true));
    }

    #[test]
    fn odd_set_count() {
        let mut c = Cache::new(3 * 2 * 64, 2, 64, Replacement::Lru);
        assert_eq!(c.sets(), 3);
        for l in 0..6 {
            assert!(c.insert(l, false, 0, false, 2).is_none());
        }
        assert!(c.insert(6, false, 0, false, 2).is_some());
    }
}
