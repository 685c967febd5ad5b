//! The four ways of handling DMA data, as named on the command line.

use crate::config::parse_size;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How DMA data meets the caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Scheme {
    /// DMA goes to memory; DMA writes invalidate cached copies, DMA reads
    /// take dirty data from the cache (snooping).
    Snoop,
    /// DMA writes are injected into the LLC (DCA / DDIO), limited to
    /// `llc.ddio_ways` ways; DMA reads hit in the LLC when the line is there.
    Shared,
    /// A dedicated DMA cache beside the LLC; a line is never in both.
    DmaCache {
        /// Capacity, bytes.
        size_bytes: u64,
        /// Sequential prefetch for DMA reads.
        prefetch: bool,
        /// Write-through (the paper's proposed variant): a DMA write goes
        /// to memory and the DMA cache keeps a clean copy, so evicting it
        /// writes nothing back.
        #[serde(default)]
        write_through: bool,
    },
}

impl Scheme {
    /// Parses `snoop`, `shared`, `dma-cache-256K`, `dma-cache-256K-pf`,
    /// `dma-cache-256K-wt`, `dma-cache-256K-pf-wt`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "snoop" => return Ok(Scheme::Snoop),
            "shared" => return Ok(Scheme::Shared),
            _ => {}
        }
        let bad = || {
            format!(
                "unknown scheme '{s}'; use snoop, shared, dma-cache-SIZE, dma-cache-SIZE-pf, dma-cache-SIZE-wt or dma-cache-SIZE-pf-wt (e.g. dma-cache-256K-pf)"
            )
        };
        let rest = s.strip_prefix("dma-cache-").ok_or_else(bad)?;
        let (rest, write_through) = match rest.strip_suffix("-wt") {
            Some(x) => (x, true),
            None => (rest, false),
        };
        let (size, prefetch) = match rest.strip_suffix("-pf") {
            Some(x) => (x, true),
            None => (rest, false),
        };
        let size_bytes = parse_size(size).filter(|&b| b >= 64).ok_or_else(bad)?;
        if size_bytes > crate::config::MAX_CACHE_BYTES {
            return Err(format!(
                "scheme '{s}': a DMA cache of {size_bytes} bytes is more than the limit of 256M; use at most dma-cache-256M"
            ));
        }
        Ok(Scheme::DmaCache {
            size_bytes,
            prefetch,
            write_through,
        })
    }

    /// Cache bytes this scheme simulates on top of the LLC.
    pub fn extra_cache_bytes(&self) -> u64 {
        match self {
            Scheme::DmaCache { size_bytes, .. } => *size_bytes,
            _ => 0,
        }
    }

    /// Refuses a set of schemes whose machines together would simulate
    /// more than [`crate::config::MAX_MODEL_BYTES`] of cache (each scheme
    /// has its own LLC, and all run at once).
    pub fn check_total(schemes: &[Scheme], llc_bytes: u64) -> Result<(), String> {
        let total = schemes.iter().fold(0u64, |t, s| {
            t.saturating_add(llc_bytes.saturating_add(s.extra_cache_bytes()))
        });
        if total > crate::config::MAX_MODEL_BYTES {
            return Err(format!(
                "{} schemes with a {llc_bytes}-byte LLC simulate {total} bytes of cache together, more than the limit of 2G; run fewer schemes or smaller caches",
                schemes.len()
            ));
        }
        Ok(())
    }

    /// The paper's set: snooping, shared cache, DMA caches of 32 to 256 KiB,
    /// and the 256 KiB DMA cache with prefetch.
    pub fn paper_set() -> Vec<Scheme> {
        let mut v = vec![Scheme::Snoop, Scheme::Shared];
        for k in [32u64, 64, 128, 256] {
            v.push(Scheme::DmaCache {
                size_bytes: k << 10,
                prefetch: false,
                write_through: false,
            });
        }
        v.push(Scheme::DmaCache {
            size_bytes: 256 << 10,
            prefetch: true,
            write_through: false,
        });
        v
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scheme::Snoop => write!(f, "snoop"),
            Scheme::Shared => write!(f, "shared"),
            Scheme::DmaCache {
                size_bytes,
                prefetch,
                write_through,
            } => {
                let sz = if size_bytes % (1 << 20) == 0 {
                    format!("{}M", size_bytes >> 20)
                } else if size_bytes % 1024 == 0 {
                    format!("{}K", size_bytes >> 10)
                } else {
                    format!("{size_bytes}")
                };
                write!(
                    f,
                    "dma-cache-{sz}{}{}",
                    if *prefetch { "-pf" } else { "" },
                    if *write_through { "-wt" } else { "" }
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for s in Scheme::paper_set() {
            assert_eq!(Scheme::parse(&s.to_string()).unwrap(), s);
        }
        assert_eq!(
            Scheme::parse("dma-cache-1M-pf").unwrap().to_string(),
            "dma-cache-1M-pf"
        );
        assert!(Scheme::parse("dma-cache-").is_err());
        let wt = Scheme::parse("dma-cache-64K-pf-wt").unwrap();
        assert_eq!(
            wt,
            Scheme::DmaCache {
                size_bytes: 64 << 10,
                prefetch: true,
                write_through: true
            }
        );
        assert_eq!(wt.to_string(), "dma-cache-64K-pf-wt");
        assert!(Scheme::parse("dma-cache-64K-wt-pf").is_err());
        assert!(Scheme::parse("ddio").is_err());
    }

    /// Issue 14 item 7: `dma-cache-SIZE` had no upper bound.
    #[test]
    fn huge_dma_cache_scheme_is_refused() {
        assert!(Scheme::parse("dma-cache-256M").is_ok());
        for s in [
            "dma-cache-1G",
            "dma-cache-16777215T",
            "dma-cache-18446744073709551615-pf",
        ] {
            let e = Scheme::parse(s).unwrap_err();
            assert!(
                e.contains("limit") || e.contains("unknown scheme"),
                "{s}: {e}"
            );
        }
        let big = vec![Scheme::parse("dma-cache-256M").unwrap(); 20];
        assert!(Scheme::check_total(&big, 256 << 20).is_err());
        assert!(Scheme::check_total(&Scheme::paper_set(), 256 << 20).is_ok());
    }
}
