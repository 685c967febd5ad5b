//! The one DMA buffer: mapped (optionally on huge pages), locked in memory,
//! filled, split into registration pieces, and read by the CPU for the
//! cache modes.

use crate::engine::BufferPiece;
use dmalab_core::placement::{
    AnonymousOptions, Mapping, PlacementError, PlacementRecord, PlacementSpec,
};
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::PathBuf;

/// Largest registration piece io_uring accepts: 1 GiB.
pub const PIECE_LIMIT: u64 = 1 << 30;

/// `--hugepages`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum HugePages {
    /// Ordinary 4 KiB pages.
    None,
    /// Transparent huge pages (madvise(MADV_HUGEPAGE) on a 2 MiB aligned range).
    Thp,
    /// 2 MiB hugetlb pages (reserved for the run, given back afterwards).
    #[cfg_attr(feature = "clap", value(name = "2m"))]
    #[serde(rename = "2m")]
    H2m,
    /// 1 GiB hugetlb pages (reserved for the run, given back afterwards).
    #[cfg_attr(feature = "clap", value(name = "1g"))]
    #[serde(rename = "1g")]
    H1g,
}

impl HugePages {
    /// Page size of the mapping, bytes.
    pub fn page_bytes(self) -> u64 {
        match self {
            HugePages::None => 4096,
            HugePages::Thp | HugePages::H2m => 2 << 20,
            HugePages::H1g => 1 << 30,
        }
    }
}

/// `--fill`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Fill {
    /// All zero bytes.
    Zero,
    /// Pseudo-random bytes from a seeded generator.
    Random {
        /// The seed.
        seed: u64,
    },
}

impl Fill {
    /// Parses `zero`, `random` or `random:SEED`; `option` names the flag in
    /// errors.
    pub fn parse(option: &str, text: &str) -> Result<Fill, dmalab_core::UsageError> {
        use dmalab_core::UsageError;
        match text.split_once(':') {
            None if text == "zero" => Ok(Fill::Zero),
            None if text == "random" => Ok(Fill::Random { seed: 0 }),
            Some(("random", seed)) => {
                seed.parse().map(|seed| Fill::Random { seed }).map_err(|_| {
                    UsageError::new(option, format!("'{seed}' is not a seed; use random:NUMBER"))
                })
            }
            _ => Err(UsageError::new(
                option,
                format!("'{text}' is not a fill; use zero, random or random:SEED"),
            )),
        }
    }
}

/// Errors setting the buffer up.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// mmap failed.
    #[error("cannot map a {bytes}-byte buffer{what}: {cause}")]
    Map {
        /// Size asked for.
        bytes: u64,
        /// Extra context (huge pages).
        what: String,
        /// OS error.
        cause: std::io::Error,
    },
    /// Huge pages could not be reserved.
    #[error("{0}")]
    HugeTlb(String),
    /// The buffer could not be placed where `--membind`/`--buffer-file`
    /// said.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// mlock failed.
    #[error("cannot lock the {bytes}-byte DMA buffer in memory ({cause}); {advice}")]
    Lock {
        /// Size.
        bytes: u64,
        /// What to raise or change, with the limit in force.
        advice: String,
        /// OS error of mlock.
        cause: std::io::Error,
    },
}

/// Pages added to a hugetlb pool for this run, taken off again on drop
/// (and in the process ledger meanwhile: [`dmalab_core::hugetlb`]).
type HugeTlbReservation = dmalab_core::hugetlb::PoolGrowth;

fn read_u64(p: &std::path::Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The DMA buffer.
#[derive(Debug)]
pub struct DmaBuffer {
    mapping: Mapping,
    len: usize,
    piece_bytes: u64,
    // Dropped after the mapping (field order): pages go back after munmap.
    _reservation: Option<HugeTlbReservation>,
    /// Huge pages reserved for this run (0 with none).
    pub reserved_huge_pages: u64,
    /// Bytes of the buffer locked in memory: all of it, or 0 when the
    /// locked-memory limit was too low (see [`DmaBuffer::new`]).
    pub locked_bytes: u64,
    /// Where its pages are, as the kernel says (after they were faulted
    /// in).
    pub placement: PlacementRecord,
}

impl DmaBuffer {
    /// Maps `len` bytes (a multiple of `bs`) as `place` says (a node, a
    /// buffer file), locks and fills them, then asks the kernel where
    /// every page landed (refused with `--membind` when one is elsewhere).
    /// `piece_bytes` is the registration piece size. When the locked-memory
    /// limit (`ulimit -l`, 8 MiB on many systems) is below the buffer and
    /// cannot be raised (not root), the buffer stays unlocked instead of
    /// failing: one line on stderr says so, and
    /// [`locked_bytes`](Self::locked_bytes) is 0 (the result records it).
    pub fn new(
        len: u64,
        piece_bytes: u64,
        huge: HugePages,
        fill: Fill,
        place: &PlacementSpec,
    ) -> Result<Self, BufferError> {
        let page = huge.page_bytes();
        let mut reservation = None;
        let mut reserved = 0;
        let mut anon = AnonymousOptions::default();
        match huge {
            HugePages::H2m | HugePages::H1g => {
                let pages = len.div_ceil(page);
                let (r, n) = reserve_hugetlb(page, pages)?;
                reservation = r;
                reserved = n;
                anon.granule = page as usize;
                anon.flags = libc::MAP_HUGETLB
                    | if huge == HugePages::H2m {
                        21 << libc::MAP_HUGE_SHIFT
                    } else {
                        30 << libc::MAP_HUGE_SHIFT
                    };
            }
            // Over-mapped by one huge page so a 2 MiB aligned start exists.
            HugePages::Thp => {
                anon.align = page as usize;
                anon.granule = page as usize;
            }
            HugePages::None => {}
        }
        let mapping = Mapping::new(len, place, anon).map_err(|e| match e {
            PlacementError::Io { source, .. } if place.buffer_file.is_none() => BufferError::Map {
                bytes: len,
                what: match huge {
                    HugePages::H2m | HugePages::H1g => format!(
                        " on {} huge pages",
                        if huge == HugePages::H2m {
                            "2 MiB"
                        } else {
                            "1 GiB"
                        }
                    ),
                    _ => String::new(),
                },
                cause: source,
            },
            e => BufferError::Placement(e),
        })?;
        if huge == HugePages::Thp {
            // SAFETY: advice on our own mapping; failure only loses THP.
            unsafe {
                libc::madvise(
                    mapping.as_ptr().cast(),
                    len.div_ceil(page) as usize * page as usize,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
        let locked_bytes = lock(&mapping, len as usize)?;
        fill_with(&mapping, len as usize, fill);
        // Every page is faulted in now (locked, and written by the fill).
        let verify_page = match huge {
            HugePages::H2m | HugePages::H1g => page,
            _ => 4096,
        };
        let placement = mapping.verify(verify_page)?;
        if !placement.io_uring_registrable() {
            eprintln!(
                "dmalab: note: io_uring registers only anonymous, tmpfs and hugetlbfs memory (not page-cache, filesystem-DAX or device-DAX pages): the buffer is not registered, and each command's pages are pinned while it is in flight"
            );
        }
        let buf = DmaBuffer {
            mapping,
            len: len as usize,
            piece_bytes,
            _reservation: reservation,
            reserved_huge_pages: reserved,
            locked_bytes,
            placement,
        };
        Ok(buf)
    }
}

/// Locks the first `len` bytes of the mapping; returns the bytes locked
/// (all, or 0 when the limit is below the buffer: [`DmaBuffer::new`]).
fn lock(m: &Mapping, len: usize) -> Result<u64, BufferError> {
    // SAFETY: the range is inside our mapping.
    let mut r = unsafe { libc::mlock(m.as_ptr().cast(), len) };
    let mut err = std::io::Error::last_os_error();
    if r != 0 {
        // Root may raise its own limit; others get the error below.
        let lim = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: plain struct passed by pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } == 0 {
            // SAFETY: as above.
            r = unsafe { libc::mlock(m.as_ptr().cast(), len) };
            err = std::io::Error::last_os_error();
        }
    }
    if r == 0 {
        return Ok(len as u64);
    }
    let limit = memlock_limit();
    if let Some(l) = limit.filter(|&l| l < len as u64) {
        // The README's first command runs without root: an unlocked
        // buffer still takes DMA (the kernel pins each command's pages
        // while it is in flight); what is lost is that the pages stay
        // put between commands. Said once, recorded in the result.
        let (kib, need_kib) = (len as u64 / 1024, need_kib(len as u64));
        eprintln!(
                "dmalab: warning: the {kib} KiB buffer is above the locked-memory limit (ulimit -l {} KiB): it runs unlocked and not registered with io_uring (its pages may move between commands); to lock it, raise ulimit -l to {need_kib}, use --buffer {}K or less, or run as root",
                l / 1024,
                max_buffer_kib(l)
            );
        return Ok(0);
    }
    Err(BufferError::Lock {
        bytes: len as u64,
        advice: lock_advice(len as u64, limit),
        cause: err,
    })
}

/// Writes `fill` into the first `len` bytes of the mapping.
fn fill_with(m: &Mapping, len: usize, fill: Fill) {
    // SAFETY: the range is ours, mapped and writable; no reference to it
    // exists elsewhere yet.
    let bytes = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), len) };
    match fill {
        Fill::Zero => bytes.fill(0),
        Fill::Random { seed } => rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(bytes),
    }
}

impl DmaBuffer {
    /// Length, bytes.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// True for an empty buffer (never: the plan forbids it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    /// The registration pieces (index = buffer index).
    pub fn pieces(&self) -> Vec<BufferPiece> {
        let mut v = Vec::new();
        let mut off = 0u64;
        while off < self.len as u64 {
            let l = self.piece_bytes.min(self.len as u64 - off);
            v.push(BufferPiece {
                // SAFETY: off < len: inside the buffer.
                addr: unsafe { self.mapping.as_ptr().add(off as usize) },
                len: l as usize,
                buf_offset: off,
            });
            off += l;
        }
        v
    }

    /// Reads every cache line of `[offset, offset + len)` (the cache modes).
    pub fn touch(&self, offset: u64, len: u64) -> u64 {
        let end = (offset + len).min(self.len as u64);
        let mut acc = 0u64;
        let mut o = offset;
        while o < end {
            // SAFETY: o < len: inside the mapping; a volatile read so the
            // compiler keeps it.
            acc = acc.wrapping_add(u64::from(unsafe {
                std::ptr::read_volatile(self.mapping.as_ptr().add(o as usize))
            }));
            o += 64;
        }
        std::hint::black_box(acc)
    }
}

/// The soft RLIMIT_MEMLOCK in bytes (None: unlimited or unknown).
fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills a struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(lim.rlim_cur)
}

/// The locked memory, KiB, a `bytes`-byte buffer needs: the io_uring rings
/// take a little of their own, so 1 MiB of headroom (a 8000K buffer
/// registers under an 8 MiB limit, 8M does not).
fn need_kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024) + 1024
}

/// The largest `--buffer`, KiB, that locks and registers under `limit` bytes.
fn max_buffer_kib(limit: u64) -> u64 {
    (limit / 1024).saturating_sub(1024).max(4) / 4 * 4
}

/// What to do when a `bytes`-byte buffer cannot be locked under `limit`.
///
/// The buffer is never shrunk: its size is the experiment's variable (does
/// it fit the LLC?). Under a limit it cannot raise, it runs unlocked and
/// unregistered (io_uring pins and charges registered buffers against the
/// same limit, as fio's fixedbufs do), saying so with this advice.
fn lock_advice(bytes: u64, limit: Option<u64>) -> String {
    let need_kib = need_kib(bytes);
    match limit {
        Some(l) => format!(
            "the locked-memory limit (ulimit -l) is {} KiB and the buffer needs about {need_kib} KiB: raise it (ulimit -l {need_kib}, or memlock in /etc/security/limits.conf), use a --buffer of at most {}K, or run as root",
            l / 1024,
            max_buffer_kib(l)
        ),
        None => "raise the locked-memory limit (ulimit -l) or run as root".into(),
    }
}

/// Makes sure `pages` hugetlb pages of `page` bytes are free; returns the
/// reservation to undo (None when enough were free already) and how many
/// pages were added.
fn reserve_hugetlb(
    page: u64,
    pages: u64,
) -> Result<(Option<HugeTlbReservation>, u64), BufferError> {
    let dir = PathBuf::from(format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB",
        page / 1024
    ));
    let nr_path = dir.join("nr_hugepages");
    let (Some(nr), Some(free)) = (read_u64(&nr_path), read_u64(&dir.join("free_hugepages"))) else {
        return Err(BufferError::HugeTlb(format!(
            "this kernel offers no {} KiB huge pages ({} missing); use --hugepages thp or none",
            page / 1024,
            dir.display()
        )));
    };
    if free >= pages {
        return Ok((None, 0));
    }
    let want = nr + (pages - free);
    let reservation = dmalab_core::hugetlb::grow(&nr_path, pages - free).map_err(|e| {
        BufferError::HugeTlb(format!(
            "cannot reserve {pages} huge pages of {} KiB by writing {want} to {}: {e}; run as root or reserve them yourself",
            page / 1024,
            nr_path.display()
        ))
    })?;
    let now_free = read_u64(&dir.join("free_hugepages")).unwrap_or(0);
    if now_free < pages {
        // Dropping the reservation gives back what we got.
        drop(reservation);
        return Err(BufferError::HugeTlb(format!(
            "asked the kernel for {pages} free huge pages of {} KiB but only {now_free} could be had (memory too fragmented or too small); use a smaller --buffer or --hugepages thp",
            page / 1024
        )));
    }
    Ok((Some(reservation), pages - free))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_spellings() {
        assert_eq!(Fill::parse("--fill", "zero").unwrap(), Fill::Zero);
        assert_eq!(
            Fill::parse("--fill", "random").unwrap(),
            Fill::Random { seed: 0 }
        );
        assert_eq!(
            Fill::parse("--fill", "random:7").unwrap(),
            Fill::Random { seed: 7 }
        );
        assert_eq!(
            Fill::parse("--fill", "random:x").unwrap_err().option,
            "--fill"
        );
        assert_eq!(Fill::parse("--fill", "ones").unwrap_err().option, "--fill");
    }

    #[test]
    fn pieces_cover_buffer() {
        let b = DmaBuffer::new(
            10 * 4096,
            4 * 4096,
            HugePages::None,
            Fill::Random { seed: 1 },
            &PlacementSpec::default(),
        )
        .unwrap();
        let p = b.pieces();
        assert_eq!(
            p.iter().map(|p| p.len).collect::<Vec<_>>(),
            vec![16384, 16384, 8192]
        );
        assert_eq!(p[2].buf_offset, 32768);
        // Random fill is not all zero and is reproducible.
        let c = DmaBuffer::new(
            10 * 4096,
            4 * 4096,
            HugePages::None,
            Fill::Random { seed: 1 },
            &PlacementSpec::default(),
        )
        .unwrap();
        // SAFETY: both buffers are live and 40960 bytes long.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(b.as_ptr(), 40960),
                std::slice::from_raw_parts(c.as_ptr(), 40960),
            )
        };
        assert_eq!(x, y);
        assert!(x.iter().any(|&v| v != 0));
        let _ = b.touch(0, 40960);
    }

    #[test]
    fn lock_advice_says_what_to_raise() {
        let a = lock_advice(64 << 20, Some(8 << 20));
        assert!(
            a.contains("ulimit -l 66560") && a.contains("is 8192 KiB"),
            "{a}"
        );
        assert!(a.contains("--buffer of at most 7168K"), "{a}");
    }

    #[test]
    fn thp_is_aligned() {
        let b = DmaBuffer::new(
            4 << 20,
            PIECE_LIMIT,
            HugePages::Thp,
            Fill::Zero,
            &PlacementSpec::default(),
        )
        .unwrap();
        assert_eq!(b.as_ptr() as usize % (2 << 20), 0);
    }
}
