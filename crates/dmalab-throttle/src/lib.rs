//! `dmalab throttle`: a closed loop between a victim's per-interval metric
//! and an I/O aggressor's rate limit, holding a service-level objective
//! (SLO) such as "p99 latency at most 1.2 x its unloaded baseline", and the
//! open-loop frontier (victim slowdown against fixed aggressor rates) that
//! shows what the held SLO costs in I/O throughput.
//!
//! * [`slo`]: the objective (`p99 <= 1.2 x baseline`, `mean <= 150ns`).
//! * [`controller`]: AIMD and PI, each a pure function of the observed
//!   slack, tested against a simulated plant.
//! * [`actuator`]: where the rate goes: a `dmalab load` through its
//!   rate-control page, or a cgroup v2 `io.max` line.
//! * [`victim`]: the metric stream (a `dmalab probe latency --interval`
//!   victim, or any command whose output lines a regex reads).
//! * [`session`]: baseline, closed loops, sweep; the result.
//! * [`plan`]: the options, checked and resolved.
//! * [`report`]: the text summary and the HTML/SVG report.

pub mod actuator;
pub mod controller;
pub mod plan;
pub mod report;
pub mod session;
pub mod slo;
pub mod victim;
