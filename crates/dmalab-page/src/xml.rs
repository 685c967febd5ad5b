//! pmbench's XML report format: `--xml FILE` writes it, `dmalab page import`
//! reads it into our schema.
//!
//! The element list follows pmbench's `xmlgen.c` (xmloutput version "0.1"),
//! as published in the pmbench source mirror github.com/blakecaldwell/pmbench
//! at commit 46a3d394ca7bfc19136b580747dbd26076150ee2 (original:
//! bitbucket.org/jisooy/pmbench):
//!
//! ```text
//! pmbenchmark/report/
//!   signature/{pmbench_info/{version_number,version_options,version_xmloutput},
//!              os_info/{hostname,version_info/{os_name,arch,release}},
//!              uuid, params/{duration,mapsize,setsize,initialize,shape,delay,
//!              quiet,cold,jobs,offset,ratio,pattern,access,tsops}, interrupted?}
//!   machine_info/{modelname,freq_khz,tlb_info,cache_info}
//!   result/result_thread[@thread_num]/{result_netavg/{netavg_us,netavg_clk},
//!     result_details/{details_latency/{latency_us,latency_clk},details_samples,
//!     details_overhead/{overhead_us,overhead_clk},details_total},
//!     warmup_details?}
//!   statistics/histogram[@type=read|write]/histo_bucket[@index]/
//!     {bucket_interval/{interval_lo,interval_hi},sum_count,bucket_hexes/hex[@index]}
//!   sys_mem_info/sys_mem_item[@name]/{mem_item_info/{...,pswpin,pswpout,pgmajfault},
//!     mem_item_delta?}
//! ```
//!
//! pmbench's histogram (access.c): latencies in ns; bucket 0 counts < 2^8;
//! buckets 1..15 cover [2^(i+7), 2^(i+8)) split into 16 linear "hex" bins;
//! then one bucket per power of two for 2^23..2^30 and one for 2^30..2^32.
//! Values past 2^32 ns land in that last bucket.

use crate::config::{ClassifyMethod, Offset, PageConfig, Pattern, SwapSpec, TimerKind};
use crate::report::{ClassHists, FaultAccounting, PageResult, Table2, ThreadSummary, VmstatReport};
use crate::sysinfo::Vmstat;
use dmalab_core::hist::{LatHist, LatencySummary};
use dmalab_core::host::HostInfo;
use quick_xml::events::Event;
use std::fmt::Write as _;

/// pmbench's xmloutput version this module writes and reads.
pub const XMLOUTPUT_VERSION: &str = "0.1";

/// pmbench bins of one histogram: `low` (< 256 ns), `hex[1..16][0..16]`,
/// `high[0..8]` (2^23.. 2^30 one per power, then 2^30..2^32).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PmHist {
    /// Samples under 256 ns.
    pub low: u64,
    /// `hex[i][j]` for bucket i in 1..=15 (index 0 unused).
    pub hex: [[u64; 16]; 16],
    /// [2^23,2^24) .. [2^29,2^30), then [2^30, 2^32).
    pub high: [u64; 8],
}

impl PmHist {
    /// Adds `count` samples of `ns` exactly as pmbench's record_histogram.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        if ns < 256 {
            self.low += count;
            return;
        }
        let ilog2 = 63 - ns.leading_zeros() as u64;
        let index = ilog2 - 7;
        if index < 16 {
            let sub = (ns & !(1u64 << (index + 7))) >> (index + 7 - 4);
            self.hex[index as usize][(sub & 15) as usize] += count;
        } else if index >= 16 + 7 {
            self.high[7] += count;
        } else {
            self.high[(index - 16) as usize] += count;
        }
    }

    /// From one of our histograms (each hdrhistogram bin at its median).
    pub fn from_lat(h: &LatHist) -> Self {
        let mut p = Self::default();
        for v in h.inner().iter_recorded() {
            p.record_n(
                h.inner().median_equivalent(v.value_iterated_to()),
                v.count_at_value(),
            );
        }
        p
    }

    /// Into one of our histograms: every bin's samples at its midpoint (so
    /// an import keeps pmbench's resolution: 1/32 of a power of two).
    pub fn to_lat(&self) -> LatHist {
        let mut h = LatHist::new();
        if self.low > 0 {
            h.record_n(128, self.low);
        }
        for i in 1..16u64 {
            let base = 1u64 << (i + 7);
            let step = 1u64 << (i + 3);
            for j in 0..16u64 {
                let c = self.hex[i as usize][j as usize];
                if c > 0 {
                    h.record_n(base + j * step + step / 2, c);
                }
            }
        }
        for k in 0..7u32 {
            if self.high[k as usize] > 0 {
                h.record_n(3u64 << (22 + k), self.high[k as usize]);
            }
        }
        if self.high[7] > 0 {
            h.record_n(1u64 << 31, self.high[7]);
        }
        h
    }

    /// Samples counted.
    pub fn total(&self) -> u64 {
        self.low + self.hex.iter().flatten().sum::<u64>() + self.high.iter().sum::<u64>()
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct W {
    s: String,
    depth: usize,
}

impl W {
    fn open(&mut self, name: &str, attrs: &[(&str, String)]) {
        let _ = write!(self.s, "{}<{name}", "  ".repeat(self.depth));
        for (k, v) in attrs {
            let _ = write!(self.s, " {k}=\"{}\"", esc(v));
        }
        self.s.push_str(">\n");
        self.depth += 1;
    }
    fn close(&mut self, name: &str) {
        self.depth -= 1;
        let _ = writeln!(self.s, "{}</{name}>", "  ".repeat(self.depth));
    }
    fn leaf(&mut self, name: &str, attrs: &[(&str, String)], text: impl std::fmt::Display) {
        let _ = write!(self.s, "{}<{name}", "  ".repeat(self.depth));
        for (k, v) in attrs {
            let _ = write!(self.s, " {k}=\"{}\"", esc(v));
        }
        let _ = writeln!(self.s, ">{}</{name}>", esc(&text.to_string()));
    }
}

fn bucket(w: &mut W, index: u64, lo: u64, hi: u64, sum: u64, hexes: Option<&[u64; 16]>) {
    w.open("histo_bucket", &[("index", index.to_string())]);
    w.open("bucket_interval", &[]);
    w.leaf("interval_lo", &[], lo);
    w.leaf("interval_hi", &[], hi);
    w.close("bucket_interval");
    w.leaf("sum_count", &[], sum);
    if let Some(h) = hexes {
        w.open("bucket_hexes", &[]);
        for (j, c) in h.iter().enumerate() {
            w.leaf("hex", &[("index", j.to_string())], c);
        }
        w.close("bucket_hexes");
    }
    w.close("histo_bucket");
}

fn histogram(w: &mut W, kind: &str, p: &PmHist) {
    w.open("histogram", &[("type", kind.to_string())]);
    bucket(w, 0, 0, 8, p.low, None);
    for i in 1..16u64 {
        let row = &p.hex[i as usize];
        bucket(w, i, i + 7, i + 8, row.iter().sum(), Some(row));
    }
    for k in 0..7u64 {
        bucket(w, 0, k + 23, k + 24, p.high[k as usize], None);
    }
    bucket(w, 0, 30, 32, p.high[7], None);
    w.close("histogram");
}

fn mem_item(w: &mut W, name: &str, v: &Vmstat, delta: Option<Vmstat>) {
    w.open("sys_mem_item", &[("name", name.to_string())]);
    w.open("mem_item_info", &[]);
    w.leaf("pswpin", &[], v.pswpin);
    w.leaf("pswpout", &[], v.pswpout);
    w.leaf("pgmajfault", &[], v.pgmajfault);
    w.close("mem_item_info");
    if let Some(d) = delta {
        w.open("mem_item_delta", &[]);
        w.leaf("pswpin", &[], d.pswpin);
        w.leaf("pswpout", &[], d.pswpout);
        w.leaf("pgmajfault", &[], d.pgmajfault);
        w.close("mem_item_delta");
    }
    w.close("sys_mem_item");
}

/// Writes a run as a pmbench XML report. Elements pmbench fills from
/// sources we do not measure (TLB/cache CPUID tables, /proc/meminfo sizes)
/// are left out rather than invented.
pub fn export(cfg: &PageConfig, host: &HostInfo, r: &PageResult, interrupted: bool) -> String {
    let mut w = W {
        s: String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"),
        depth: 0,
    };
    let freq_khz = (r.timer_hz / 1000.0).round() as u64;
    let us_to_clk = |us: f64| (us * freq_khz as f64 / 1000.0).round() as i64;
    w.open("pmbenchmark", &[]);
    w.open("report", &[]);
    w.open("signature", &[]);
    w.open("pmbench_info", &[]);
    w.leaf(
        "version_number",
        &[],
        format!("dmalab {}", env!("CARGO_PKG_VERSION")),
    );
    w.leaf("version_options", &[], "dmalab-page");
    w.leaf("version_xmloutput", &[], XMLOUTPUT_VERSION);
    w.close("pmbench_info");
    w.open("os_info", &[]);
    w.leaf("hostname", &[], &host.hostname);
    w.open("version_info", &[]);
    w.leaf("os_name", &[], "Linux");
    w.leaf("arch", &[], std::env::consts::ARCH);
    w.leaf("release", &[], &host.kernel);
    w.close("version_info");
    w.close("os_info");
    w.open("params", &[]);
    w.leaf("duration", &[], cfg.runtime_ns / 1_000_000_000);
    w.leaf("mapsize", &[], cfg.map_bytes >> 20);
    w.leaf("setsize", &[], cfg.set_bytes >> 20);
    w.leaf("initialize", &[], i32::from(cfg.init_random));
    w.leaf("shape", &[], format!("{:.4}", cfg.shape));
    w.leaf(
        "delay",
        &[],
        (cfg.delay_ns as f64 * freq_khz as f64 / 1e6).round() as u64,
    );
    w.leaf("quiet", &[], 0);
    w.leaf("cold", &[], i32::from(cfg.cold));
    w.leaf("jobs", &[], cfg.threads);
    w.leaf(
        "offset",
        &[],
        match cfg.offset {
            Offset::Random => -1,
            Offset::Fixed(o) => (o / 4) as i64,
        },
    );
    w.leaf("ratio", &[], cfg.read_pct);
    w.leaf("pattern", &[], cfg.pattern.name());
    w.leaf("access", &[], "histo");
    w.leaf(
        "tsops",
        &[],
        match cfg.timer {
            TimerKind::Clock => "perfc",
            t => t.name(),
        },
    );
    w.close("params");
    if interrupted {
        w.leaf("interrupted", &[], 1);
    }
    w.close("signature");
    w.open("machine_info", &[]);
    w.leaf("modelname", &[], &host.cpu_model);
    w.leaf("freq_khz", &[], freq_khz);
    w.close("machine_info");
    w.open("result", &[]);
    for (i, t) in r.threads.iter().enumerate() {
        let us = t.mean_ns / 1000.0;
        w.open("result_thread", &[("thread_num", (i + 1).to_string())]);
        w.open("result_netavg", &[]);
        w.leaf("netavg_us", &[], format!("{us:.4}"));
        w.leaf("netavg_clk", &[], us_to_clk(us));
        w.close("result_netavg");
        w.open("result_details", &[]);
        w.open("details_latency", &[]);
        w.leaf("latency_us", &[], format!("{us:.4}"));
        w.leaf("latency_clk", &[], us_to_clk(us));
        w.close("details_latency");
        w.leaf("details_samples", &[], t.accesses);
        w.open("details_overhead", &[]);
        w.leaf("overhead_us", &[], "0.0000");
        w.leaf("overhead_clk", &[], 0);
        w.close("details_overhead");
        w.leaf("details_total", &[], t.accesses);
        w.close("result_details");
        w.close("result_thread");
    }
    w.close("result");
    w.open("statistics", &[]);
    let hist = |s: &LatencySummary| LatHist::decode(&s.hdr_v2_base64).unwrap_or_default();
    if cfg.read_pct > 0 {
        histogram(&mut w, "read", &PmHist::from_lat(&hist(&r.read.all.lat)));
    }
    if cfg.read_pct < 100 {
        histogram(&mut w, "write", &PmHist::from_lat(&hist(&r.write.all.lat)));
    }
    w.close("statistics");
    w.open("sys_mem_info", &[]);
    let v = &r.vmstat;
    if cfg.cold {
        mem_item(
            &mut w,
            "pre-run",
            &v.pre_warmup,
            Some(v.post_run.since(&v.pre_warmup)),
        );
    } else {
        mem_item(&mut w, "pre-warmup", &v.pre_warmup, Some(v.warmup_delta));
        mem_item(&mut w, "pre-run", &v.pre_run, Some(v.run_delta));
    }
    mem_item(&mut w, "post-run", &v.post_run, Some(v.after_delta));
    mem_item(&mut w, "post-unmap", &v.post_unmap, None);
    w.close("sys_mem_info");
    w.close("report");
    w.close("pmbenchmark");
    w.s
}

/// A parsed XML element.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Element name.
    pub name: String,
    /// Attributes.
    pub attrs: Vec<(String, String)>,
    /// Text content (trimmed).
    pub text: String,
    /// Child elements.
    pub children: Vec<Node>,
}

impl Node {
    /// First child named `name`.
    pub fn child(&self, name: &str) -> Option<&Node> {
        self.children.iter().find(|c| c.name == name)
    }
    /// All children named `name`.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
    /// Follows a `a/b/c` path of first children.
    pub fn path(&self, p: &str) -> Option<&Node> {
        p.split('/').try_fold(self, |n, seg| n.child(seg))
    }
    /// Attribute value.
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(a, _)| a == k)
            .map(|(_, v)| v.as_str())
    }
    fn num<T: std::str::FromStr>(&self, p: &str) -> Option<T> {
        self.path(p)?.text.trim().parse().ok()
    }
}

/// Errors reading a pmbench XML file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not well-formed XML.
    #[error("not well-formed XML: {0}")]
    Xml(String),
    /// Well-formed but not a pmbench report.
    #[error("not a pmbench report: {0}")]
    Shape(String),
}

/// Parses XML text into a tree.
pub fn parse(text: &str) -> Result<Node, ImportError> {
    let mut reader = quick_xml::Reader::from_str(text);
    reader.config_mut().trim_text(true);
    let mut stack: Vec<Node> = vec![Node::default()];
    let xml_err = |r: &quick_xml::Reader<&[u8]>, e: &dyn std::fmt::Display| {
        ImportError::Xml(format!("at byte {}: {e}", r.buffer_position()))
    };
    let element = |e: &quick_xml::events::BytesStart| -> Result<Node, String> {
        let mut n = Node {
            name: String::from_utf8_lossy(e.name().as_ref()).into_owned(),
            ..Node::default()
        };
        for a in e.attributes() {
            let a = a.map_err(|e| e.to_string())?;
            let v = a.unescape_value().map_err(|e| e.to_string())?;
            n.attrs.push((
                String::from_utf8_lossy(a.key.as_ref()).into_owned(),
                v.into_owned(),
            ));
        }
        Ok(n)
    };
    loop {
        let ev = reader.read_event().map_err(|e| xml_err(&reader, &e))?;
        match ev {
            Event::Start(e) => {
                let n = element(&e).map_err(|m| xml_err(&reader, &m))?;
                stack.push(n);
            }
            Event::Empty(e) => {
                let n = element(&e).map_err(|m| xml_err(&reader, &m))?;
                if let Some(top) = stack.last_mut() {
                    top.children.push(n);
                }
            }
            Event::End(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if stack.len() < 2 {
                    return Err(xml_err(&reader, &format!("unexpected </{name}>")));
                }
                let n = stack.pop().unwrap_or_default();
                if n.name != name {
                    return Err(xml_err(&reader, &format!("</{name}> closes <{}>", n.name)));
                }
                if let Some(top) = stack.last_mut() {
                    top.children.push(n);
                }
            }
            Event::Text(t) => {
                let v = t.unescape().map_err(|e| xml_err(&reader, &e))?;
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&v);
                }
            }
            Event::CData(t) => {
                if let Some(top) = stack.last_mut() {
                    top.text.push_str(&String::from_utf8_lossy(&t));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if stack.len() != 1 {
        return Err(ImportError::Xml(
            "unexpected end of file inside an element".into(),
        ));
    }
    let mut root = stack.pop().unwrap_or_default();
    match root.children.len() {
        1 => Ok(root.children.remove(0)),
        0 => Err(ImportError::Xml("no root element".into())),
        _ => Err(ImportError::Xml("more than one root element".into())),
    }
}

/// The most samples one imported histogram may hold: 2^48 (at 10 ns an
/// access, a month of one thread), so sums over histograms stay far from
/// u64's range.
pub const MAX_IMPORT_SAMPLES: u64 = 1 << 48;

/// Adds `v` to a bucket, keeping the histogram's total under
/// [`MAX_IMPORT_SAMPLES`].
fn add_count(slot: &mut u64, v: u64, total: &mut u64) -> Result<(), ImportError> {
    *total = total
        .checked_add(v)
        .filter(|&t| t <= MAX_IMPORT_SAMPLES)
        .ok_or_else(|| {
            ImportError::Shape(format!(
                "the histogram holds more than 2^48 samples (a count of {v}); is this a pmbench report?"
            ))
        })?;
    *slot += v;
    Ok(())
}

fn read_hist(h: &Node) -> Result<PmHist, ImportError> {
    let mut p = PmHist::default();
    let mut total = 0u64;
    for b in h.all("histo_bucket") {
        let lo: u64 = b.num("bucket_interval/interval_lo").ok_or_else(|| {
            ImportError::Shape("histo_bucket without bucket_interval/interval_lo".into())
        })?;
        let hi: u64 = b.num("bucket_interval/interval_hi").ok_or_else(|| {
            ImportError::Shape("histo_bucket without bucket_interval/interval_hi".into())
        })?;
        let sum: u64 = b.num("sum_count").unwrap_or(0);
        match (lo, hi) {
            (0, 8) => add_count(&mut p.low, sum, &mut total)?,
            (30, 32) => add_count(&mut p.high[7], sum, &mut total)?,
            (23..=29, _) => add_count(&mut p.high[(lo - 23) as usize], sum, &mut total)?,
            (8..=22, _) => {
                let i = (lo - 7) as usize;
                match b.child("bucket_hexes") {
                    Some(hexes) => {
                        for x in hexes.all("hex") {
                            let j: usize = x
                                .attr("index")
                                .and_then(|v| v.parse().ok())
                                .filter(|j: &usize| *j < 16)
                                .ok_or_else(|| {
                                    ImportError::Shape(format!(
                                        "hex without a valid index in bucket {lo}..{hi}"
                                    ))
                                })?;
                            let c = x.text.trim().parse::<u64>().map_err(|_| {
                                ImportError::Shape(format!("hex '{}' is not a count", x.text))
                            })?;
                            add_count(&mut p.hex[i][j], c, &mut total)?;
                        }
                    }
                    // No sub-bins: put the sum in the middle of the bucket.
                    None => add_count(&mut p.hex[i][8], sum, &mut total)?,
                }
            }
            _ => {
                return Err(ImportError::Shape(format!(
                    "histo_bucket interval {lo}..{hi} is not one of pmbench's"
                )))
            }
        }
    }
    Ok(p)
}

fn read_vm(item: &Node) -> Vmstat {
    let info = item.child("mem_item_info");
    let g = |k: &str| info.and_then(|i| i.num::<i64>(k)).unwrap_or(0).max(0) as u64;
    Vmstat {
        pswpin: g("pswpin"),
        pswpout: g("pswpout"),
        pgmajfault: g("pgmajfault"),
        pgfault: 0,
    }
}

/// A pmbench report read into our schema.
#[derive(Clone, Debug)]
pub struct Imported {
    /// pmbench's version string.
    pub version: String,
    /// The host as the report describes it.
    pub host: HostInfo,
    /// pmbench's parameters as our configuration.
    pub config: PageConfig,
    /// The figures (no fault classes: pmbench has only latencies).
    pub result: PageResult,
    /// The run was interrupted.
    pub interrupted: bool,
}

/// Reads a pmbench XML report.
pub fn import(text: &str) -> Result<Imported, ImportError> {
    let root = parse(text)?;
    if root.name != "pmbenchmark" {
        return Err(ImportError::Shape(format!(
            "root element is <{}>, not <pmbenchmark>",
            root.name
        )));
    }
    let report = root
        .child("report")
        .ok_or_else(|| ImportError::Shape("no <report>".into()))?;
    let sig = report
        .child("signature")
        .ok_or_else(|| ImportError::Shape("no <signature>".into()))?;
    let params = sig
        .child("params")
        .ok_or_else(|| ImportError::Shape("no <signature><params>".into()))?;
    let freq_khz: u64 = report.num("machine_info/freq_khz").unwrap_or(0);
    let config = read_config(params, freq_khz)?;
    let (read, write) = read_histograms(report)?;
    let mut total = read.clone();
    total.merge(&write);
    let mut threads = Vec::new();
    if let Some(res) = report.child("result") {
        for t in res.all("result_thread") {
            let us: f64 = t
                .num("result_details/details_latency/latency_us")
                .unwrap_or(0.0);
            threads.push(ThreadSummary {
                accesses: t.num("result_details/details_samples").unwrap_or(0),
                measured_ns: config.runtime_ns,
                mean_ns: us * 1000.0,
            });
        }
    }
    let all = total.all();
    let busy = config
        .runtime_ns
        .saturating_mul(threads.len().max(1) as u64);
    let summarise = |c: &ClassHists| {
        let mut s = c.summarise(false);
        s.all.share_pct = 100.0;
        s
    };
    let result = PageResult {
        runtime_ns: config.runtime_ns,
        warmup_ns: 0,
        total: summarise(&total),
        read: summarise(&read),
        write: summarise(&write),
        table2: Table2::compute(&all, None, busy, None),
        faults: FaultAccounting {
            method: "latency-only (pmbench)".into(),
            ..FaultAccounting::default()
        },
        vmstat: read_vmstat(report, config.cold),
        swap: Vec::new(),
        setup: Default::default(),
        threads,
        timer: match config.timer {
            TimerKind::Clock => "perfc".into(),
            t => t.name().into(),
        },
        timer_hz: freq_khz as f64 * 1000.0,
        timer_overhead_ns: 0,
    };
    let text_at = |n: &Node, p: &str| n.path(p).map(|n| n.text.clone()).unwrap_or_default();
    let host = HostInfo {
        hostname: text_at(sig, "os_info/hostname"),
        kernel: text_at(sig, "os_info/version_info/release"),
        cpu_model: text_at(report, "machine_info/modelname"),
        ..HostInfo::default()
    };
    Ok(Imported {
        version: text_at(sig, "pmbench_info/version_number"),
        host,
        config,
        result,
        interrupted: sig.child("interrupted").is_some(),
    })
}

/// pmbench's `<params>` as our configuration; `freq_khz` turns its delay
/// in cycles into nanoseconds.
fn read_config(params: &Node, freq_khz: u64) -> Result<PageConfig, ImportError> {
    let need = |k: &str| -> Result<u64, ImportError> {
        params
            .num::<u64>(k)
            .ok_or_else(|| ImportError::Shape(format!("params/{k} missing or not a number")))
    };
    let pattern = match params.path("pattern").map(|n| n.text.trim()) {
        Some("linear") => Pattern::Linear,
        Some("normal") => Pattern::Normal,
        Some("pareto") => Pattern::Pareto,
        Some("zipf") => Pattern::Zipf,
        _ => Pattern::Uniform,
    };
    let timer = match params.path("tsops").map(|n| n.text.trim()) {
        Some("rdtsc") => TimerKind::Rdtsc,
        Some("perfc") => TimerKind::Clock,
        _ => TimerKind::Rdtscp,
    };
    let offset: i64 = params.num("offset").unwrap_or(-1);
    let delay_clk: u64 = params.num("delay").unwrap_or(0);
    Ok(PageConfig {
        map_bytes: need("mapsize")? << 20,
        set_bytes: need("setsize")? << 20,
        threads: params.num("jobs").unwrap_or(1),
        read_pct: params.num("ratio").unwrap_or(50),
        pattern,
        shape: params.num("shape").unwrap_or(pattern.default_shape()),
        offset: if offset < 0 {
            Offset::Random
        } else {
            Offset::Fixed(offset as u64 * 4)
        },
        timer,
        classify: ClassifyMethod::None,
        cold: params.num::<u64>("cold").unwrap_or(0) != 0,
        init_random: params.num::<i64>("initialize").unwrap_or(0) != 0,
        delay_ns: delay_clk
            .checked_mul(1_000_000)
            .ok_or_else(|| ImportError::Shape(format!("delay {delay_clk} cycles is out of range")))?
            .checked_div(freq_khz)
            .unwrap_or(0),
        runtime_ns: {
            // At most the longest duration dmalab takes anywhere.
            let s: u64 = need("duration")?;
            if s > dmalab_core::units::MAX_DURATION.as_secs() {
                return Err(ImportError::Shape(format!(
                    "duration {s} s is longer than 366 days"
                )));
            }
            s * 1_000_000_000
        },
        write_after_read: false,
        seed: 0,
        memory_limit_bytes: None,
        swap: SwapSpec::Existing,
        page_cluster: None,
        swappiness: None,
        media_latency_ns: None,
        allow_destroy: None,
    })
}

/// The read and the write latency histograms of `<statistics>`.
fn read_histograms(report: &Node) -> Result<(ClassHists, ClassHists), ImportError> {
    let mut read = ClassHists::default();
    let mut write = ClassHists::default();
    if let Some(stats) = report.child("statistics") {
        for h in stats.all("histogram") {
            let p = read_hist(h)?;
            match h.attr("type") {
                Some("read") => read.class[0].merge(&p.to_lat()),
                Some("write") => write.class[0].merge(&p.to_lat()),
                other => {
                    return Err(ImportError::Shape(format!(
                        "histogram type {other:?} is neither read nor write"
                    )))
                }
            }
        }
    }
    Ok((read, write))
}

/// The vmstat snapshots of `<sys_mem_info>` and the deltas between them
/// (a cold run has no warm-up: its pre-warmup is its pre-run).
fn read_vmstat(report: &Node, cold: bool) -> VmstatReport {
    let mut vm = VmstatReport::default();
    if let Some(smi) = report.child("sys_mem_info") {
        for item in smi.all("sys_mem_item") {
            let v = read_vm(item);
            match item.attr("name") {
                Some("pre-warmup") => vm.pre_warmup = v,
                Some("pre-run") => {
                    vm.pre_run = v;
                    if cold {
                        vm.pre_warmup = v;
                    }
                }
                Some("post-run") => vm.post_run = v,
                Some("post-unmap") => vm.post_unmap = v,
                _ => {}
            }
        }
        vm.warmup_delta = vm.pre_run.since(&vm.pre_warmup);
        vm.run_delta = vm.post_run.since(&vm.pre_run);
        vm.after_delta = vm.post_unmap.since(&vm.post_run);
    }
    vm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_match_pmbench_record_histogram() {
        let mut p = PmHist::default();
        // The paper's footnote: 9,231 ns lands in the 3rd counter (index 2)
        // of the 8,192-16,384 ns bucket.
        p.record_n(9231, 1);
        assert_eq!(p.hex[6][2], 1);
        p.record_n(100, 1);
        assert_eq!(p.low, 1);
        p.record_n(1 << 23, 1);
        assert_eq!(p.high[0], 1);
        p.record_n(5_000_000_000, 1);
        assert_eq!(p.high[7], 1);
        assert_eq!(p.total(), 4);
    }

    #[test]
    fn parse_rejects_broken_xml() {
        assert!(matches!(parse("<a><b></a>"), Err(ImportError::Xml(_))));
        assert!(matches!(parse("<a>"), Err(ImportError::Xml(_))));
        assert!(import("<other/>").is_err());
    }
}
