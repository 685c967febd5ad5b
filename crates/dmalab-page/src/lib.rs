//! dmalab page: paging latency by fault class (pmbench done right), with a self-cleaning cgroup/swap set-up.
