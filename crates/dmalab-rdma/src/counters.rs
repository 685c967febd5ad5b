//! The NIC's own counters, read before and after a run and printed beside
//! dmalab's count: an oracle outside dmalab.
//!
//! Hardware HCAs have `/sys/class/infiniband/DEV/ports/N/counters/`
//! (`port_xmit_data` and `port_rcv_data` count 4-byte words, by the
//! InfiniBand spec; `port_xmit_packets`, `port_rcv_packets`). Soft-RoCE
//! (rxe) has no `counters/` directory, only `hw_counters/` (`sent_pkts`,
//! `rcvd_pkts`, ...): those are read when `counters/` is missing.

use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the counters came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterSource {
    /// `ports/N/counters/` (the InfiniBand port counters).
    Counters,
    /// `ports/N/hw_counters/` (the driver's own, e.g. rxe).
    HwCounters,
}

/// One reading of a port's counters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Which directory the values came from.
    pub source: CounterSource,
    /// Counter name -> value (as the kernel prints it; `*_data` in 4-byte words).
    pub values: BTreeMap<String, u64>,
}

/// The counters of `device` port `port` under `sysfs_root` (normally
/// `/sys/class/infiniband`). None when the port has neither directory.
pub fn read(sysfs_root: &Path, device: &str, port: u8) -> Option<Snapshot> {
    let port_dir: PathBuf = sysfs_root.join(device).join("ports").join(port.to_string());
    for (sub, source) in [
        ("counters", CounterSource::Counters),
        ("hw_counters", CounterSource::HwCounters),
    ] {
        let dir = port_dir.join(sub);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut values = BTreeMap::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // Some counters are write-only or fail to read on some drivers:
            // those are left out rather than failing the run.
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                if let Ok(v) = text.trim().parse::<u64>() {
                    values.insert(name, v);
                }
            }
        }
        if !values.is_empty() {
            return Some(Snapshot { source, values });
        }
    }
    None
}

/// The NIC's counters over a run: the difference of two snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Delta {
    /// Which directory the values came from.
    pub source: CounterSource,
    /// Counter name -> increase over the run (counters that wrapped or were
    /// reset are left out).
    pub delta: BTreeMap<String, u64>,
    /// Bytes sent, when the port counts data (`port_xmit_data` x 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xmit_bytes: Option<u64>,
    /// Bytes received, when the port counts data (`port_rcv_data` x 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rcv_bytes: Option<u64>,
}

/// `after - before`, counter by counter (None when the sources differ).
pub fn delta(before: &Snapshot, after: &Snapshot) -> Option<Delta> {
    if before.source != after.source {
        return None;
    }
    let mut d = BTreeMap::new();
    for (k, a) in &after.values {
        if let Some(b) = before.values.get(k) {
            if let Some(v) = a.checked_sub(*b) {
                d.insert(k.clone(), v);
            }
        }
    }
    let words = |k: &str| d.get(k).and_then(|w| w.checked_mul(4));
    Some(Delta {
        source: after.source,
        xmit_bytes: words("port_xmit_data"),
        rcv_bytes: words("port_rcv_data"),
        delta: d,
    })
}

impl Delta {
    /// One line for the terminal: the data counters, or the packet counters.
    pub fn summary(&self) -> String {
        let pick = |k: &str| self.delta.get(k).map(|v| format!("{k} +{v}"));
        let parts: Vec<String> = match self.source {
            CounterSource::Counters => [
                "port_xmit_data",
                "port_rcv_data",
                "port_xmit_packets",
                "port_rcv_packets",
            ]
            .iter()
            .filter_map(|k| pick(k))
            .collect(),
            CounterSource::HwCounters => [
                "sent_pkts",
                "rcvd_pkts",
                "rdma_sends",
                "rdma_recvs",
                "duplicate_request",
                "retry_exceeded_err",
                "send_err",
                "rcvd_seq_err",
            ]
            .iter()
            .filter_map(|k| pick(k))
            .collect(),
        };
        let mut s = match self.source {
            CounterSource::Counters => "NIC port counters: ".to_string(),
            CounterSource::HwCounters => "NIC hw_counters: ".to_string(),
        };
        s.push_str(&parts.join(", "));
        if let (Some(x), Some(r)) = (self.xmit_bytes, self.rcv_bytes) {
            s.push_str(&format!(" ({x} bytes sent, {r} bytes received)"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(dir: &Path, sub: &str, vals: &[(&str, &str)]) {
        let d = dir.join("rxe0/ports/1").join(sub);
        std::fs::create_dir_all(&d).unwrap();
        for (k, v) in vals {
            std::fs::write(d.join(k), v).unwrap();
        }
    }

    #[test]
    fn rxe_hw_counters_are_read_when_counters_is_missing() {
        let t = tempfile::tempdir().unwrap();
        fixture(
            t.path(),
            "hw_counters",
            &[
                ("sent_pkts", "16\n"),
                ("rcvd_pkts", "1\n"),
                ("lifespan", "10\n"),
            ],
        );
        let b = read(t.path(), "rxe0", 1).unwrap();
        assert_eq!(b.source, CounterSource::HwCounters);
        fixture(
            t.path(),
            "hw_counters",
            &[("sent_pkts", "48\n"), ("rcvd_pkts", "4\n")],
        );
        let a = read(t.path(), "rxe0", 1).unwrap();
        let d = delta(&b, &a).unwrap();
        assert_eq!(d.delta["sent_pkts"], 32);
        assert_eq!(d.delta["rcvd_pkts"], 3);
        assert_eq!(d.xmit_bytes, None);
        assert_eq!(d.summary(), "NIC hw_counters: sent_pkts +32, rcvd_pkts +3");
    }

    #[test]
    fn port_data_counters_count_four_byte_words() {
        let t = tempfile::tempdir().unwrap();
        fixture(
            t.path(),
            "counters",
            &[
                ("port_xmit_data", "100"),
                ("port_rcv_data", "7"),
                ("symbol_error", "oops"),
            ],
        );
        fixture(t.path(), "hw_counters", &[("sent_pkts", "1")]);
        let b = read(t.path(), "rxe0", 1).unwrap();
        assert_eq!(b.source, CounterSource::Counters);
        assert!(!b.values.contains_key("symbol_error"));
        fixture(
            t.path(),
            "counters",
            &[("port_xmit_data", "16484"), ("port_rcv_data", "8")],
        );
        let d = delta(&b, &read(t.path(), "rxe0", 1).unwrap()).unwrap();
        assert_eq!(d.xmit_bytes, Some(65536));
        assert_eq!(d.rcv_bytes, Some(4));
    }

    #[test]
    fn a_port_without_counters_reads_as_none() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(read(t.path(), "mlx5_0", 1), None);
    }

    #[test]
    fn a_counter_that_went_backwards_is_left_out() {
        let mk = |v: u64| Snapshot {
            source: CounterSource::HwCounters,
            values: [("sent_pkts".to_string(), v)].into(),
        };
        assert!(delta(&mk(10), &mk(3)).unwrap().delta.is_empty());
    }
}
