//! `dmalab probe loaded`: MLC's `--loaded_latency`. One latency thread
//! chases (per-access timing) while N bandwidth threads generate traffic
//! with a delay; the delay is swept from large (light load) to 0 (full
//! load), and each point records the bandwidth the load threads achieved
//! and the latency the chase saw. A first point with no load threads at all
//! gives the idle latency. The table traces latency against bandwidth.

use crate::access::Pattern;
use crate::bandwidth::{prepare_workers, run_workers, Traffic};
use crate::latency::{halted, measure_timing, Worker};
use crate::mem::PageKind;
use crate::ProbeError;
use dmalab_core::hist::LatencySummary;
use dmalab_core::sys::tsc::{TimerCost, TscInfo};
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicBool;

/// A resolved loaded-latency sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoadedPlan {
    /// Latency buffer size, bytes.
    pub size_bytes: usize,
    /// Size of each bandwidth array of each load thread, bytes.
    pub bw_size_bytes: usize,
    /// Page kind of every buffer.
    pub pages: PageKind,
    /// Pages per chain group (0: whole buffer).
    pub group_pages: usize,
    /// Traffic of the load threads.
    pub traffic: Traffic,
    /// CPU of the latency thread.
    pub latency_cpu: usize,
    /// CPUs of the load threads.
    pub load_cpus: Vec<usize>,
    /// NUMA node of every buffer.
    pub membind: Option<usize>,
    /// Delays swept, spin cycles per line, in order.
    pub delays_cycles: Vec<u32>,
    /// Measuring time per point, nanoseconds.
    pub point_runtime_ns: u64,
    /// Seed of the chain.
    pub seed: u64,
}

/// One point of the curve.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadedPoint {
    /// Delay of the load threads, cycles per line; `None` for the idle
    /// point (no load threads).
    pub delay_cycles: Option<u32>,
    /// Bandwidth of the load threads together, bytes per second.
    pub bw_bytes: f64,
    /// Latency the chase saw at this load.
    pub latency: LatencySummary,
}

/// Result of `dmalab probe loaded`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadedResult {
    /// TSC calibration.
    pub tsc: TscInfo,
    /// Timer cost.
    pub timer: TimerCost,
    /// Measured cost of one delay iteration, TSC cycles.
    pub delay_iteration_cycles: f64,
    /// The curve: idle first, then light to heavy load.
    pub points: Vec<LoadedPoint>,
}

/// Runs the sweep; `on_point` sees each point as it is measured.
pub fn run(
    plan: &LoadedPlan,
    on_point: &mut dyn FnMut(&LoadedPoint),
) -> Result<(LoadedResult, Vec<String>), ProbeError> {
    let (tsc, timer, warnings) = measure_timing();
    let mut load = prepare_workers(
        plan.traffic,
        plan.bw_size_bytes,
        plan.pages,
        plan.membind,
        &plan.load_cpus,
    )?;
    let stop = AtomicBool::new(false);
    let mut points = Vec::new();
    std::thread::scope(|s| -> Result<(), ProbeError> {
        // The latency thread lives for the whole sweep and measures a point
        // each time the main side tells it to, on the same chain.
        let (go_tx, go_rx) = std::sync::mpsc::channel::<u64>();
        let (res_tx, res_rx) = std::sync::mpsc::channel::<Result<LatencySummary, ProbeError>>();
        let (tsc, timer, stop) = (&tsc, &timer, &stop);
        let cpu = plan.latency_cpu;
        s.spawn(move || {
            let prep = dmalab_core::cpus::pin_current_thread(&[cpu])
                .map_err(|e| ProbeError::System(format!("cannot pin to CPU {cpu}: {e}")))
                .and_then(|_| {
                    Worker::prepare(
                        plan.size_bytes,
                        plan.pages,
                        plan.group_pages,
                        &Pattern::Chase,
                        0,
                        plan.membind,
                        plan.seed,
                    )
                });
            let mut w = match prep {
                Ok(w) => {
                    let _ = res_tx.send(Ok(LatencySummary::default()));
                    w
                }
                Err(e) => {
                    let _ = res_tx.send(Err(e));
                    return;
                }
            };
            for dur in go_rx.iter() {
                let h = w.run_per_access(dur, stop, None, tsc, timer).hist;
                if res_tx.send(Ok(h.summary())).is_err() {
                    return;
                }
            }
        });
        let recv = |rx: &std::sync::mpsc::Receiver<Result<LatencySummary, ProbeError>>| {
            rx.recv()
                .map_err(|_| ProbeError::System("the latency thread stopped".into()))?
        };
        recv(&res_rx)?;
        let mut sweep: Vec<Option<u32>> = vec![None];
        sweep.extend(plan.delays_cycles.iter().map(|&d| Some(d)));
        for d in sweep {
            if halted(stop) {
                break;
            }
            let bw = match d {
                // The latency thread starts once the load threads run, and
                // they run a little longer than it, so it never measures
                // while they start or stop.
                Some(delay) => {
                    let r = run_workers(
                        &mut load,
                        &plan.load_cpus,
                        delay,
                        plan.point_runtime_ns + plan.point_runtime_ns / 10,
                        stop,
                        &mut || {
                            let _ = go_tx.send(plan.point_runtime_ns);
                        },
                    );
                    r.bw_bytes
                }
                None => {
                    let _ = go_tx.send(plan.point_runtime_ns);
                    0.0
                }
            };
            let latency = recv(&res_rx)?;
            let p = LoadedPoint {
                delay_cycles: d,
                bw_bytes: bw,
                latency,
            };
            on_point(&p);
            points.push(p);
        }
        Ok(())
    })?;
    let delay_iteration_cycles = crate::kernels::spin_cycles_per_iteration();
    Ok((
        LoadedResult {
            tsc,
            timer,
            delay_iteration_cycles,
            points,
        },
        warnings,
    ))
}
