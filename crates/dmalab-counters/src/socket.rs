//! Per-socket sums, as `pcm-memory` shows DRAM traffic per socket beside
//! the total: every counter opened on a CPU (an uncore PMU's, on the CPUs
//! of its `cpumask`, one per package; or any event under `--cpus`) belongs
//! to that CPU's socket, the `physical id` of its `/proc/cpuinfo` entry.

use crate::recipes::{self, MetricDef, MetricValue};
use serde::Serialize;
use std::collections::BTreeMap;

/// CPU number -> socket (`physical id`), from `/proc/cpuinfo`'s text.
/// CPUs without a `physical id` line are left out.
pub fn from_cpuinfo(text: &str) -> BTreeMap<usize, u32> {
    let mut map = BTreeMap::new();
    for block in text.split("\n\n") {
        let mut cpu = None;
        let mut socket = None;
        for line in block.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            match k.trim() {
                "processor" => cpu = v.trim().parse::<usize>().ok(),
                "physical id" => socket = v.trim().parse::<u32>().ok(),
                _ => {}
            }
        }
        if let (Some(c), Some(s)) = (cpu, socket) {
            map.insert(c, s);
        }
    }
    map
}

/// One socket's share of an event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SocketValue {
    /// The socket (`physical id`).
    pub socket: u32,
    /// The sum of the event's counters on that socket's CPUs, in the
    /// event's unit.
    pub value: f64,
}

/// Sums `(cpu, value)` of one event's counters per socket. Counters not
/// on a CPU (per task, cpu < 0) and CPUs of no known socket are left out,
/// so the result is empty for a per-task event.
pub fn sum(per_counter: &[(i32, f64)], sockets: &BTreeMap<usize, u32>) -> Vec<SocketValue> {
    let mut by: BTreeMap<u32, f64> = BTreeMap::new();
    for &(cpu, v) in per_counter {
        let Ok(c) = usize::try_from(cpu) else {
            continue;
        };
        if let Some(&s) = sockets.get(&c) {
            *by.entry(s).or_default() += v;
        }
    }
    by.into_iter()
        .map(|(socket, value)| SocketValue { socket, value })
        .collect()
}

/// One socket's metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SocketMetrics {
    /// The socket.
    pub socket: u32,
    /// The metrics over that socket's counts alone.
    pub metrics: Vec<MetricValue>,
}

/// The metrics of `defs` per socket, from each event's per-socket values
/// in base units (`id -> socket values`) over `seconds`. A socket lacks
/// a metric's value when one of its events has no count there.
pub fn metrics(
    defs: &[MetricDef],
    per_socket: &BTreeMap<String, Vec<SocketValue>>,
    seconds: f64,
) -> Vec<SocketMetrics> {
    let mut sockets: Vec<u32> = per_socket
        .values()
        .flat_map(|v| v.iter().map(|s| s.socket))
        .collect();
    sockets.sort_unstable();
    sockets.dedup();
    sockets
        .into_iter()
        .map(|socket| {
            let totals: BTreeMap<String, Option<f64>> = per_socket
                .iter()
                .map(|(id, v)| {
                    let x = v.iter().find(|s| s.socket == socket).map(|s| s.value);
                    (id.clone(), x)
                })
                .collect();
            SocketMetrics {
                socket,
                metrics: recipes::compute(defs, &totals, seconds),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::recipes::CpuId;
    use crate::session::Request;

    /// A two-socket Skylake-SP: 36 CPUs, 0-17 on socket 0 and 18-35 on
    /// socket 1; each `uncore_imc_N` lists one CPU per socket in its
    /// cpumask (0,18), as the kernel does. The CAS counts of each socket's
    /// counters are summed apart, and the DRAM bandwidth follows per socket
    /// and in total.
    #[test]
    fn uncore_counts_sum_per_socket_on_a_two_socket_tree() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..2 {
            let p = dir.path().join(format!("uncore_imc_{n}"));
            std::fs::create_dir_all(p.join("format")).unwrap();
            std::fs::write(p.join("type"), format!("{}\n", 20 + n)).unwrap();
            std::fs::write(p.join("cpumask"), "0,18\n").unwrap();
            std::fs::write(p.join("format/event"), "config:0-7\n").unwrap();
            std::fs::write(p.join("format/umask"), "config:8-15\n").unwrap();
        }
        let cpuinfo: String = (0..36)
            .map(|c| {
                format!(
                    "processor\t: {c}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\nphysical id\t: {}\n\n",
                    c / 18
                )
            })
            .collect();
        let sockets = from_cpuinfo(&cpuinfo);
        assert_eq!((sockets[&17], sockets[&18], sockets.len()), (0, 1, 36));
        let cat = Catalog::read(dir.path());
        let req = Request::parse_with("--counters", "skx-imc-dram", &cat, CpuId::parse(&cpuinfo))
            .unwrap();
        // Each counter's CAS count: socket 0's channels read 1000 and
        // 3000 lines, socket 1's 500 and 500.
        let counts = |id: &str, s0: [f64; 2], s1: [f64; 2]| -> Vec<(i32, f64)> {
            let e = req.events.iter().find(|e| e.id == id).unwrap();
            let mut out = Vec::new();
            for (n, inst) in e.resolved.instances.iter().enumerate() {
                for &cpu in &inst.cpus {
                    let v = if cpu == 0 { s0[n] } else { s1[n] };
                    out.push((cpu as i32, v));
                }
            }
            out
        };
        let rd = sum(
            &counts("imc_cas_rd", [1000.0, 3000.0], [500.0, 500.0]),
            &sockets,
        );
        let wr = sum(&counts("imc_cas_wr", [10.0, 30.0], [0.0, 20.0]), &sockets);
        assert_eq!(
            rd,
            [
                SocketValue {
                    socket: 0,
                    value: 4000.0
                },
                SocketValue {
                    socket: 1,
                    value: 1000.0
                }
            ]
        );
        assert_eq!(sum(&[(-1, 5.0)], &sockets), []);
        let mut per = BTreeMap::new();
        per.insert("imc_cas_rd".to_string(), rd);
        per.insert("imc_cas_wr".to_string(), wr);
        let m = metrics(
            crate::recipes::find("skx-imc-dram").unwrap().metrics,
            &per,
            2.0,
        );
        let bw = |s: usize| {
            m[s].metrics
                .iter()
                .find(|x| x.name == "dram_bw_bytes")
                .unwrap()
                .value
        };
        // (4000 + 40) x 64 B / 2 s and (1000 + 20) x 64 B / 2 s.
        assert_eq!((m[0].socket, bw(0)), (0, Some(129_280.0)));
        assert_eq!((m[1].socket, bw(1)), (1, Some(32_640.0)));
    }
}
