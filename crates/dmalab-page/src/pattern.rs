//! Page index generators for the access patterns (pmbench's `pattern.c`
//! idea, with fixed seeds so runs repeat).

use crate::config::Pattern;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal, Zipf};

/// Draws page indices in `0..pages`.
pub struct PageGen {
    rng: ChaCha8Rng,
    pages: u64,
    kind: Kind,
}

enum Kind {
    Linear { next: u64, stride: u64 },
    Uniform,
    Normal(Normal<f64>),
    Pareto { alpha: f64, low_pow: f64 },
    Zipf(Zipf<f64>),
}

impl PageGen {
    /// A generator for `pattern` over `pages` pages; `shape` as in
    /// [`crate::config::PageConfig::shape`]; `stream` separates threads.
    pub fn new(pattern: Pattern, shape: f64, pages: u64, seed: u64, stream: u64) -> Self {
        let pages = pages.max(1);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        let kind = match pattern {
            Pattern::Linear => Kind::Linear {
                // Threads start spread over the set.
                next: (stream.wrapping_mul(pages / 8 + 1)) % pages,
                stride: (shape as u64).max(1),
            },
            Pattern::Uniform => Kind::Uniform,
            Pattern::Normal => {
                let sd = (shape * pages as f64).max(1.0);
                // Mean and sd are finite and sd > 0, validated by the config.
                match Normal::new(pages as f64 / 2.0, sd) {
                    Ok(n) => Kind::Normal(n),
                    Err(_) => Kind::Uniform,
                }
            }
            Pattern::Pareto => Kind::Pareto {
                alpha: shape,
                // (1/pages)^alpha, the bounded Pareto's lower tail mass.
                low_pow: (1.0 / pages as f64).powf(shape),
            },
            Pattern::Zipf => match Zipf::new(pages, shape) {
                Ok(z) => Kind::Zipf(z),
                Err(_) => Kind::Uniform,
            },
        };
        Self { rng, pages, kind }
    }

    /// The next page index.
    #[inline]
    pub fn next_page(&mut self) -> u64 {
        let n = self.pages;
        match &mut self.kind {
            Kind::Linear { next, stride } => {
                let p = *next;
                *next = (*next + *stride) % n;
                p
            }
            Kind::Uniform => self.rng.gen_range(0..n),
            Kind::Normal(d) => {
                let x = d.sample(&mut self.rng).round();
                // Fold the tails back into the set.
                (x.rem_euclid(n as f64) as u64).min(n - 1)
            }
            Kind::Pareto { alpha, low_pow } => {
                // Inverse CDF of the Pareto bounded to [1, n].
                let u: f64 = self.rng.gen();
                let x = (1.0 - u * (1.0 - *low_pow)).powf(-1.0 / *alpha);
                ((x.floor() as u64).saturating_sub(1)).min(n - 1)
            }
            Kind::Zipf(z) => ((z.sample(&mut self.rng) as u64).saturating_sub(1)).min(n - 1),
        }
    }

    /// A uniformly random number below `bound` from the same stream (used
    /// for read/write choice and random offsets).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        self.rng.gen_range(0..bound.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(p: Pattern, shape: f64, n: u64) -> Vec<u64> {
        let mut g = PageGen::new(p, shape, n, 7, 0);
        let mut h = vec![0u64; n as usize];
        for _ in 0..100_000 {
            let i = g.next_page();
            assert!(i < n);
            h[i as usize] += 1;
        }
        h
    }

    #[test]
    fn linear_strides_and_wraps() {
        let mut g = PageGen::new(Pattern::Linear, 3.0, 10, 1, 0);
        let v: Vec<u64> = (0..5).map(|_| g.next_page()).collect();
        assert_eq!(v, vec![0, 3, 6, 9, 2]);
    }

    #[test]
    fn uniform_covers_evenly() {
        let h = hist(Pattern::Uniform, 0.0, 10);
        assert!(h.iter().all(|&c| (9_000..11_000).contains(&c)), "{h:?}");
    }

    #[test]
    fn skewed_patterns_are_skewed() {
        for p in [Pattern::Pareto, Pattern::Zipf] {
            let h = hist(p, p.default_shape(), 100);
            assert!(h[0] > h[50] * 5, "{p:?}: {h:?}");
        }
        let h = hist(Pattern::Normal, 0.1, 100);
        assert!(h[50] > h[5] * 5, "{h:?}");
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut a = PageGen::new(Pattern::Uniform, 0.0, 1000, 42, 1);
        let mut b = PageGen::new(Pattern::Uniform, 0.0, 1000, 42, 1);
        for _ in 0..100 {
            assert_eq!(a.next_page(), b.next_page());
        }
    }
}
