//! dmalab probe: per-access memory latency histograms, MLC-style bandwidth and loaded latency.
