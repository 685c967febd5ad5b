//! Typed views of the result documents the runner reads back from its
//! dmalab children: only the fields it needs, each named once here, read
//! with serde instead of by JSON pointer. The tests write real documents
//! from the producing libraries' types (`dmalab_probe`, `dmalab_page`) and
//! read them through these views, so a field renamed on the writing side
//! fails a test here instead of a run's figure at run time.

use crate::experiment::VictimKind;
use serde::Deserialize;

/// The part of a `ResultDoc` the views read: its `result`.
#[derive(Deserialize)]
struct Doc<R> {
    result: R,
}

/// A figure with a mean, nanoseconds.
#[derive(Deserialize)]
struct Mean {
    mean_ns: f64,
}

/// `dmalab probe latency`'s result (`dmalab_probe::latency::LatencyResult`).
#[derive(Deserialize)]
struct LatencyView {
    /// Present in per-access and both modes.
    per_access: Option<Mean>,
    /// Present in clock and both modes.
    clock: Option<Mean>,
}

/// `dmalab probe bandwidth`'s result (`dmalab_probe::bandwidth::BandwidthResult`).
#[derive(Deserialize)]
struct BandwidthView {
    bw_bytes: f64,
}

/// `dmalab page`'s result (`dmalab_page::report::PageResult`).
#[derive(Deserialize)]
struct PageView {
    total: PageTotal,
}

#[derive(Deserialize)]
struct PageTotal {
    all: Mean,
}

/// The figure a dmalab victim of `kind` reports by default (what
/// [`VictimKind::default_metric`] names): the latency probe's per-access
/// mean (its clock-mode mean when it ran in clock mode only), the bandwidth
/// probe's bytes per second, page's mean over all accesses. `None` for
/// kinds that write no result document.
pub fn default_figure(kind: &VictimKind, doc: &[u8]) -> Option<Result<f64, String>> {
    let (pointer, ..) = kind.default_metric();
    let read = |r: Result<f64, serde_json::Error>| {
        r.map_err(|e| format!("metric {pointer} is not in the result document: {e}"))
            .and_then(|x| {
                if x.is_finite() {
                    Ok(x)
                } else {
                    Err(format!("{pointer} is not a finite number"))
                }
            })
    };
    Some(match kind {
        VictimKind::ProbeLatency => read(serde_json::from_slice::<Doc<LatencyView>>(doc).map(
            |d| match (d.result.per_access, d.result.clock) {
                (Some(p), _) => p.mean_ns,
                (None, Some(c)) => c.mean_ns,
                (None, None) => f64::NAN,
            },
        ))
        .map_err(|e| {
            if e.ends_with("not a finite number") {
                format!("metric {pointer} is not in the result document (neither per_access nor clock figures)")
            } else {
                e
            }
        }),
        VictimKind::ProbeBandwidth => {
            read(serde_json::from_slice::<Doc<BandwidthView>>(doc).map(|d| d.result.bw_bytes))
        }
        VictimKind::Page => {
            read(serde_json::from_slice::<Doc<PageView>>(doc).map(|d| d.result.total.all.mean_ns))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmalab_core::hist::LatencySummary;
    use dmalab_core::host::HostInfo;
    use dmalab_core::schema::ResultDoc;
    use std::time::SystemTime;

    /// A result document as the child writes it: the producer's own types.
    fn written<R: serde::Serialize>(command: &str, result: R) -> Vec<u8> {
        let doc = ResultDoc::new(command, HostInfo::default(), (), result, SystemTime::now());
        serde_json::to_vec(&doc).unwrap()
    }

    #[test]
    fn latency_figure_is_read_from_the_probes_own_result() {
        use dmalab_probe::latency::{ClockFigures, LatencyResult};
        let mut r = LatencyResult {
            per_access: Some(LatencySummary {
                mean_ns: 81.5,
                ..Default::default()
            }),
            clock: Some(ClockFigures {
                mean_ns: 70.0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let k = VictimKind::ProbeLatency;
        assert_eq!(
            default_figure(&k, &written("probe latency", &r)),
            Some(Ok(81.5))
        );
        // Clock mode only: its mean stands in.
        r.per_access = None;
        assert_eq!(
            default_figure(&k, &written("probe latency", &r)),
            Some(Ok(70.0))
        );
        r.clock = None;
        let e = default_figure(&k, &written("probe latency", &r))
            .unwrap()
            .unwrap_err();
        assert!(
            e.contains("/result/per_access/mean_ns is not in the result document"),
            "{e}"
        );
    }

    #[test]
    fn bandwidth_and_page_figures_are_read_from_their_own_results() {
        let r = dmalab_probe::bandwidth::BandwidthResult {
            bw_bytes: 1.5e9,
            ..Default::default()
        };
        assert_eq!(
            default_figure(&VictimKind::ProbeBandwidth, &written("probe bandwidth", &r)),
            Some(Ok(1.5e9))
        );
        let mut r = dmalab_page::report::PageResult::default();
        r.total.all.mean_ns = 412.0;
        assert_eq!(
            default_figure(&VictimKind::Page, &written("page", &r)),
            Some(Ok(412.0))
        );
    }

    #[test]
    fn a_document_without_the_field_names_the_metric() {
        let e = default_figure(&VictimKind::ProbeBandwidth, br#"{"result": {"bw": 3}}"#)
            .unwrap()
            .unwrap_err();
        assert!(
            e.starts_with(
                "metric /result/bw_bytes is not in the result document: missing field `bw_bytes`"
            ),
            "{e}"
        );
        assert_eq!(
            default_figure(
                &VictimKind::Idle {
                    duration: std::time::Duration::ZERO
                },
                b"{}"
            ),
            None
        );
    }
}
