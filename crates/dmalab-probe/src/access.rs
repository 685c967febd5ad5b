//! What a probe thread accesses: the pointer chain for `chase`, or a
//! precomputed list of line indices for the other patterns.
//!
//! ## The chain
//! The buffer is cut into groups of `group_pages` pages (the last group may
//! be short). The chain makes four passes; pass `c` visits the lines whose
//! index is `c` modulo 4 (one line of every 256-byte block). In each pass the
//! groups are visited in a random order; inside a group each of the pass's
//! lines is visited exactly once, in a random order across all pages of the
//! group; then the chain moves on to the next group. The last line of the
//! last pass points back to the first. A line's neighbours within its
//! 256-byte block come a quarter of the buffer later, so a prefetcher that
//! fetches the adjacent line (Intel's spatial prefetcher, AMD's L2 up/down
//! prefetcher) only fetches lines that are evicted before their turn. Word 0 of each line holds the
//! address of the next line, so every load depends on the one before it and
//! no prefetcher can guess the next address (the order within a group has no
//! stride). The group size sets TLB pressure: a group whose pages fit in the
//! L1 DTLB (e.g. 16 pages of 4 KiB) measures cache and DRAM latency with
//! almost no page walks; one group over the whole buffer (`group_pages = 0`)
//! is the TLB-hostile extreme, where nearly every access also walks the page
//! table.
//!
//! Word 1 of each line is the write flag: when set, the chase step also
//! stores into word 2 of the line (a read-modify-write that leaves the line
//! dirty, so its eviction costs a write-back).
//!
//! ## The other patterns
//! `uniform`, `sequential` (with a stride), `normal`, `pareto` and `zipf`
//! are drawn up front with a fixed seed into a list of line indices (bit 31:
//! write) that the probe walks cyclically. Each access is still made
//! dependent on the previous one (its address has the previous loaded value
//! AND an opaque zero added), so the clock mode measures latency, not
//! throughput. The distributions are over line indices, hot lines at the
//! start of the buffer (as pmbench places its hot pages):
//! - `normal`: round(N(lines/2, shape x lines)) wrapped into the buffer
//!   (default shape 0.1).
//! - `pareto`: floor(X - xm) wrapped, X ~ Pareto(xm = lines/1000, shape)
//!   (default shape 1.16, the "80/20" exponent: 55% of accesses fall in the
//!   first 0.1% of the buffer).
//! - `zipf`: rank - 1, rank ~ Zipf(lines, shape) (default shape 1.0).

use crate::mem::{Buffer, LINE};
use dmalab_core::UsageError;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Pareto, Uniform, Zipf};
use serde::{Deserialize, Serialize};

/// Write flag in an index list entry.
pub const WRITE_BIT: u32 = 1 << 31;
/// Largest list of precomputed indices.
pub const MAX_LIST: usize = 1 << 24;

/// An access pattern over the buffer's lines.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "name")]
pub enum Pattern {
    /// Dependent pointer chase through a random permutation of lines.
    Chase,
    /// Uniformly random lines.
    Uniform,
    /// Every `stride_bytes`-th byte, wrapping.
    Sequential {
        /// Distance between accesses, bytes (a multiple of 64).
        stride_bytes: usize,
    },
    /// Normally distributed around the middle of the buffer.
    Normal {
        /// Standard deviation as a fraction of the buffer.
        shape: f64,
    },
    /// Pareto-distributed distance from the start of the buffer.
    Pareto {
        /// Pareto exponent (alpha).
        shape: f64,
    },
    /// Zipf-distributed line rank.
    Zipf {
        /// Zipf exponent (s).
        shape: f64,
    },
}

impl Pattern {
    /// Parses a pattern name with its optional shape/stride.
    pub fn parse(text: &str, shape: Option<f64>, stride: usize) -> Result<Self, UsageError> {
        let bad_shape = |s: f64| {
            UsageError::new(
                "--shape",
                format!("{s} is not a valid shape for --pattern {text}; use a positive number"),
            )
        };
        let sh = |default: f64| -> Result<f64, UsageError> {
            let s = shape.unwrap_or(default);
            if s.is_finite() && s > 0.0 {
                Ok(s)
            } else {
                Err(bad_shape(s))
            }
        };
        Ok(match text.to_ascii_lowercase().as_str() {
            "chase" => Self::Chase,
            "uniform" => Self::Uniform,
            "sequential" | "seq" | "stride" => {
                if stride == 0 || !stride.is_multiple_of(LINE) {
                    return Err(UsageError::new(
                        "--stride",
                        format!("{stride} is not a positive multiple of 64 bytes"),
                    ));
                }
                Self::Sequential {
                    stride_bytes: stride,
                }
            }
            "normal" => Self::Normal { shape: sh(0.1)? },
            "pareto" => Self::Pareto { shape: sh(1.16)? },
            "zipf" => Self::Zipf { shape: sh(1.0)? },
            _ => {
                return Err(UsageError::new(
                    "--pattern",
                    format!("'{text}' is not a pattern; use chase, uniform, sequential, normal, pareto or zipf"),
                ))
            }
        })
    }

    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Chase => "chase",
            Self::Uniform => "uniform",
            Self::Sequential { .. } => "sequential",
            Self::Normal { .. } => "normal",
            Self::Pareto { .. } => "pareto",
            Self::Zipf { .. } => "zipf",
        }
    }
}

/// Lines of a 256-byte block go to different passes of the chain.
pub const CLASSES: usize = 4;

/// The visiting order of the chain: line indices, grouped as described in
/// the module docs. `group_lines == 0` means one group.
pub fn chain_order(lines: usize, group_lines: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    let group = if group_lines == 0 || group_lines > lines {
        lines
    } else {
        group_lines
    };
    let groups = lines.div_ceil(group);
    let mut order = Vec::with_capacity(lines);
    for class in 0..CLASSES {
        let mut group_order: Vec<usize> = (0..groups).collect();
        group_order.shuffle(rng);
        for g in group_order {
            let lo = g * group;
            let hi = (lo + group).min(lines);
            // First line of this class at or after lo.
            let first = lo + (class + CLASSES - lo % CLASSES) % CLASSES;
            let start = order.len();
            order.extend((first..hi).step_by(CLASSES).map(|i| i as u32));
            order[start..].shuffle(rng);
        }
    }
    order
}

/// Lines in a chain group of `group_pages` pages of `page_size` bytes (0
/// stays 0: one group over the whole buffer).
pub fn group_lines(group_pages: usize, page_size: usize) -> usize {
    group_pages * (page_size / LINE)
}

/// Writes the chain into `buf` (word 0: next address; word 1: write flag)
/// and returns the address of its first line.
pub fn build_chain(buf: &mut Buffer, group_pages: usize, write_pct: u32, seed: u64) -> usize {
    let lines = buf.lines();
    let group_lines = group_lines(group_pages, buf.kind().page_size());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let order = chain_order(lines, group_lines, &mut rng);
    let base = buf.as_ptr() as usize;
    let words = buf.len() / 8;
    // SAFETY: the buffer is `len` bytes, 64-byte aligned, initialised.
    let w: &mut [usize] =
        unsafe { std::slice::from_raw_parts_mut(buf.as_ptr().cast::<usize>(), words) };
    for (i, &line) in order.iter().enumerate() {
        let next = order[(i + 1) % order.len()] as usize;
        let at = line as usize * (LINE / 8);
        w[at] = base + next * LINE;
        w[at + 1] = usize::from(write_pct > 0 && rng.gen_range(0..100) < write_pct);
    }
    base + order[0] as usize * LINE
}

/// Draws the index list of a non-chase pattern: line indices, bit 31 set
/// for a write.
pub fn index_list(pattern: &Pattern, lines: usize, write_pct: u32, seed: u64) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = lines.clamp(1 << 16, MAX_LIST);
    let lines_f = lines as f64;
    let wrap = |x: f64| -> u32 { (x.floor().rem_euclid(lines_f) as usize).min(lines - 1) as u32 };
    let mut out: Vec<u32> = match *pattern {
        Pattern::Chase | Pattern::Uniform => {
            let d = Uniform::new(0, lines as u32);
            (0..n).map(|_| d.sample(&mut rng)).collect()
        }
        Pattern::Sequential { stride_bytes } => {
            let step = stride_bytes / LINE;
            let n = lines.min(MAX_LIST);
            (0..n).map(|i| ((i * step) % lines) as u32).collect()
        }
        Pattern::Normal { shape } => match Normal::new(lines_f / 2.0, shape * lines_f) {
            Ok(d) => (0..n).map(|_| wrap(d.sample(&mut rng).round())).collect(),
            Err(_) => vec![0; n],
        },
        Pattern::Pareto { shape } => {
            let xm = (lines_f / 1000.0).max(1.0);
            match Pareto::new(xm, shape) {
                Ok(d) => (0..n).map(|_| wrap(d.sample(&mut rng) - xm)).collect(),
                Err(_) => vec![0; n],
            }
        }
        Pattern::Zipf { shape } => match Zipf::new(lines as u64, shape) {
            Ok(d) => (0..n)
                .map(|_| wrap(<Zipf<f64> as Distribution<f64>>::sample(&d, &mut rng) - 1.0))
                .collect(),
            Err(_) => vec![0; n],
        },
    };
    if write_pct > 0 {
        for x in out.iter_mut() {
            if rng.gen_range(0..100) < write_pct {
                *x |= WRITE_BIT;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::PageKind;

    fn stats(v: &[u32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x & !WRITE_BIT)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x & !WRITE_BIT) - mean).powi(2))
            .sum::<f64>()
            / n;
        (mean, var.sqrt())
    }

    #[test]
    fn chain_order_is_a_grouped_permutation() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (lines, group) = (1000, 64);
        let order = chain_order(lines, group, &mut rng);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..lines as u32).collect::<Vec<_>>());
        // Passes by class, in order; inside a pass every group is one
        // contiguous run.
        let classes: Vec<usize> = order.iter().map(|&x| x as usize % CLASSES).collect();
        assert!(classes.windows(2).all(|w| w[0] <= w[1]));
        for c in 0..CLASSES {
            let pass: Vec<usize> = order
                .iter()
                .filter(|&&x| x as usize % CLASSES == c)
                .map(|&x| x as usize / group)
                .collect();
            let runs = 1 + pass.windows(2).filter(|w| w[0] != w[1]).count();
            assert_eq!(runs, lines.div_ceil(group), "class {c}");
        }
        // No stride dominates, and adjacent lines are far apart in the chain.
        let mut strides = std::collections::HashMap::<i64, usize>::new();
        for w in order.windows(2) {
            *strides
                .entry(i64::from(w[1]) - i64::from(w[0]))
                .or_default() += 1;
        }
        let most = strides.values().copied().max().unwrap_or(0);
        assert!(most < order.len() / 10, "one stride {most} times");
        let mut pos = vec![0usize; lines];
        for (i, &x) in order.iter().enumerate() {
            pos[x as usize] = i;
        }
        let mut gaps: Vec<usize> = (0..lines - 1)
            .map(|i| pos[i].abs_diff(pos[i + 1]))
            .collect();
        gaps.sort_unstable();
        assert!(
            gaps[gaps.len() / 2] >= lines / 8,
            "median gap {}",
            gaps[gaps.len() / 2]
        );
    }

    /// Where each line sits in the chain order.
    fn positions(order: &[u32]) -> Vec<usize> {
        let mut pos = vec![usize::MAX; order.len()];
        for (i, &x) in order.iter().enumerate() {
            pos[x as usize] = i;
        }
        pos
    }

    #[test]
    fn chain_order_is_a_single_cycle_through_every_line() {
        // The chain links each line to the next in the order and the last
        // to the first: following the links from the start must visit every
        // line once and come back, for any group size and buffer size.
        for (lines, group) in [(1, 0), (4, 0), (7, 64), (1000, 64), (4096, 1024), (5000, 0)] {
            let mut rng = ChaCha8Rng::seed_from_u64(lines as u64);
            let order = chain_order(lines, group, &mut rng);
            assert_eq!(order.len(), lines);
            let pos = positions(&order);
            assert!(pos.iter().all(|&p| p != usize::MAX), "a line is missing");
            let next = |line: u32| order[(pos[line as usize] + 1) % lines];
            let mut at = order[0];
            let mut steps = 0;
            loop {
                at = next(at);
                steps += 1;
                if at == order[0] {
                    break;
                }
                assert!(steps < lines, "the chain does not close");
            }
            assert_eq!(steps, lines, "{lines} lines, group {group}");
        }
    }

    #[test]
    fn lines_of_a_256_byte_block_are_in_different_passes() {
        // Stride rule: pass c holds exactly the lines i with i % 4 == c, so
        // the adjacent-line prefetcher's neighbour of a line comes in
        // another pass, far away in the chain.
        let (lines, group) = (4096, 64);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let order = chain_order(lines, group, &mut rng);
        let per_pass = lines / CLASSES;
        for (c, pass) in order.chunks(per_pass).enumerate() {
            assert!(pass.iter().all(|&x| x as usize % CLASSES == c), "pass {c}");
        }
        let pos = positions(&order);
        for block in 0..lines / CLASSES {
            let passes: Vec<usize> = (0..CLASSES)
                .map(|k| pos[block * CLASSES + k] / per_pass)
                .collect();
            assert_eq!(passes, [0, 1, 2, 3], "block {block}");
        }
    }

    #[test]
    fn each_group_is_visited_whole_once_per_pass_and_the_last_may_be_short() {
        // Page rule: inside a pass, the lines of one group (group_lines
        // consecutive lines, the last group short) form one contiguous run,
        // holding exactly that group's lines of the pass's class.
        let (lines, group) = (1000, 64);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let order = chain_order(lines, group, &mut rng);
        let mut at = 0;
        for c in 0..CLASSES {
            let mut seen_groups = std::collections::BTreeSet::new();
            while at < order.len() && order[at] as usize % CLASSES == c {
                let g = order[at] as usize / group;
                assert!(seen_groups.insert(g), "group {g} visited twice in pass {c}");
                let mut run: Vec<usize> = Vec::new();
                while at < order.len()
                    && order[at] as usize % CLASSES == c
                    && order[at] as usize / group == g
                {
                    run.push(order[at] as usize);
                    at += 1;
                }
                run.sort_unstable();
                let want: Vec<usize> = (g * group..((g + 1) * group).min(lines))
                    .filter(|i| i % CLASSES == c)
                    .collect();
                assert_eq!(run, want, "group {g} pass {c}");
            }
            assert_eq!(seen_groups.len(), lines.div_ceil(group), "pass {c}");
        }
        assert_eq!(at, order.len());
    }

    #[test]
    fn no_group_and_an_oversized_group_are_one_group() {
        let a = chain_order(512, 0, &mut ChaCha8Rng::seed_from_u64(3));
        let b = chain_order(512, 10_000, &mut ChaCha8Rng::seed_from_u64(3));
        let c = chain_order(512, 512, &mut ChaCha8Rng::seed_from_u64(3));
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn group_size_follows_the_page_size() {
        assert_eq!(group_lines(16, PageKind::Small.page_size()), 1024);
        assert_eq!(group_lines(1, PageKind::Thp.page_size()), 32_768);
        assert_eq!(group_lines(1, PageKind::Huge1G.page_size()), 1 << 24);
        assert_eq!(group_lines(0, PageKind::Small.page_size()), 0);
    }

    #[test]
    fn the_chain_depends_on_the_seed_only() {
        let one = |seed| chain_order(2048, 64, &mut ChaCha8Rng::seed_from_u64(seed));
        assert_eq!(one(1), one(1));
        assert_ne!(one(1), one(2));
        assert_eq!(
            index_list(&Pattern::Uniform, 1 << 16, 20, 4),
            index_list(&Pattern::Uniform, 1 << 16, 20, 4)
        );
    }

    #[test]
    fn chain_in_a_buffer_closes_with_short_last_group_and_writes() {
        // 100 pages in groups of 16: the last group has 4 pages.
        let mut buf = Buffer::new(100 * 4096, PageKind::Small, None).unwrap();
        let start = build_chain(&mut buf, 16, 50, 8);
        let base = buf.as_ptr() as usize;
        let lines = buf.lines();
        let mut p = start;
        let mut seen = vec![false; lines];
        for _ in 0..lines {
            assert!(p >= base && p < base + buf.len() && (p - base).is_multiple_of(LINE));
            let i = (p - base) / LINE;
            assert!(!seen[i], "line {i} visited twice");
            seen[i] = true;
            // SAFETY: p points at a line inside buf (checked above).
            let (next, flag) = unsafe { (*(p as *const usize), *((p + 8) as *const usize)) };
            assert!(flag <= 1);
            p = next;
        }
        assert_eq!(p, start, "chain does not close");
    }

    #[test]
    fn index_lists_stay_inside_the_buffer() {
        for (p, lines) in [
            (Pattern::Uniform, 1000),
            (Pattern::parse("normal", Some(2.0), 64).unwrap(), 1000),
            (Pattern::parse("pareto", Some(0.5), 64).unwrap(), 3),
            (Pattern::parse("zipf", Some(1.5), 64).unwrap(), 1),
            (Pattern::parse("sequential", None, 4096).unwrap(), 100),
        ] {
            let v = index_list(&p, lines, 10, 6);
            assert!(!v.is_empty());
            assert!(
                v.iter().all(|&x| ((x & !WRITE_BIT) as usize) < lines),
                "{p:?} over {lines} lines"
            );
        }
    }

    #[test]
    fn chain_visits_every_line_once() {
        let mut buf = Buffer::new(256 << 10, PageKind::Small, None).unwrap();
        let start = build_chain(&mut buf, 4, 0, 1);
        let lines = buf.lines();
        let mut p = start;
        let mut seen = vec![false; lines];
        for _ in 0..lines {
            let i = (p - buf.as_ptr() as usize) / LINE;
            assert!(!seen[i], "line {i} visited twice");
            seen[i] = true;
            // SAFETY: p points at a line inside buf.
            p = unsafe { *(p as *const usize) };
        }
        assert_eq!(p, start, "chain does not close");
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn write_flags_follow_ratio() {
        let mut buf = Buffer::new(1 << 20, PageKind::Small, None).unwrap();
        build_chain(&mut buf, 0, 30, 3);
        let words = buf.len() / 8;
        // SAFETY: reading our initialised buffer.
        let w = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<usize>(), words) };
        let writes = (0..buf.lines()).filter(|&l| w[l * 8 + 1] == 1).count() as f64;
        let frac = writes / buf.lines() as f64;
        assert!((frac - 0.30).abs() < 0.02, "{frac}");
        let list = index_list(&Pattern::Uniform, 1 << 16, 70, 1);
        let frac = list.iter().filter(|&&x| x & WRITE_BIT != 0).count() as f64 / list.len() as f64;
        assert!((frac - 0.70).abs() < 0.02, "{frac}");
    }

    #[test]
    fn uniform_statistics() {
        let lines = 1 << 20;
        let v = index_list(&Pattern::Uniform, lines, 0, 11);
        let (mean, sd) = stats(&v);
        let l = lines as f64;
        assert!((mean - l / 2.0).abs() / l < 0.01, "{mean}");
        // sd of U(0, L) is L/sqrt(12).
        assert!((sd - l / 12f64.sqrt()).abs() / l < 0.01, "{sd}");
        assert!(v.iter().all(|&x| (x as usize) < lines));
    }

    #[test]
    fn normal_statistics() {
        let lines = 1 << 20;
        let p = Pattern::parse("normal", Some(0.05), 64).unwrap();
        let v = index_list(&p, lines, 0, 12);
        let (mean, sd) = stats(&v);
        let l = lines as f64;
        assert!((mean - l / 2.0).abs() / l < 0.005, "{mean}");
        assert!((sd - 0.05 * l).abs() / (0.05 * l) < 0.02, "{sd}");
    }

    #[test]
    fn sequential_stride_is_exact() {
        let p = Pattern::parse("sequential", None, 256).unwrap();
        let v = index_list(&p, 10, 0, 0);
        assert_eq!(v, vec![0, 4, 8, 2, 6, 0, 4, 8, 2, 6]);
        assert!(Pattern::parse("sequential", None, 100).is_err());
    }

    #[test]
    fn pareto_statistics() {
        let lines = 1 << 20;
        let p = Pattern::parse("pareto", None, 64).unwrap();
        let v = index_list(&p, lines, 0, 13);
        let xm = lines as f64 / 1000.0;
        // P(X - xm < xm) = 1 - 2^-alpha.
        let frac = v.iter().filter(|&&x| f64::from(x) < xm).count() as f64 / v.len() as f64;
        let want = 1.0 - 2f64.powf(-1.16);
        assert!((frac - want).abs() < 0.01, "{frac} vs {want}");
    }

    #[test]
    fn zipf_statistics() {
        let lines = 1000;
        let p = Pattern::parse("zipf", Some(1.0), 64).unwrap();
        let v = index_list(&p, lines, 0, 14);
        // P(rank 1) = 1 / H(n, s); H(1000, 1) = 7.4855.
        let h: f64 = (1..=lines).map(|k| 1.0 / k as f64).sum();
        let frac = v.iter().filter(|&&x| x == 0).count() as f64 / v.len() as f64;
        assert!((frac - 1.0 / h).abs() < 0.005, "{frac} vs {}", 1.0 / h);
        let frac2 = v.iter().filter(|&&x| x == 1).count() as f64 / v.len() as f64;
        assert!((frac2 - 0.5 / h).abs() < 0.005, "{frac2}");
    }

    #[test]
    fn unknown_pattern_names_the_option() {
        let e = Pattern::parse("spiral", None, 64).unwrap_err();
        assert_eq!(e.option, "--pattern");
        assert_eq!(
            Pattern::parse("zipf", Some(-1.0), 64).unwrap_err().option,
            "--shape"
        );
    }
}
