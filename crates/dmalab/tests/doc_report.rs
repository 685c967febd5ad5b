//! `dmalab report` and `dmalab compare` on the result documents of single
//! commands (issue 33): `report load.json` used to fail with "not a results
//! record: EOF", and `compare` listed every JSON pointer. The load and
//! probe documents are made here by the binary (null engine, a short
//! probe); the page and throttle documents are real outputs kept as
//! fixtures (page changes the host's memory settings, throttle takes
//! seconds), with their HDR blobs removed.

use crate::common;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/report/{name}"))
}

/// A null-engine load of 2 s, paced at `rate` commands per second if given.
fn load(dir: &Path, name: &str, rate: Option<&str>) -> PathBuf {
    let out = dir.join(format!("{name}.json"));
    let mut c = common::dmalab();
    c.args(["load", "--engine", "null", "--pattern", "single"])
        .args(["--runtime", "2s", "-q", "--output"])
        .arg(&out);
    if let Some(r) = rate {
        c.args(["--rate-iops", r]);
    }
    c.assert().success();
    out
}

/// Runs `dmalab report ARGS`; returns stdout.
fn report(args: &[&Path], extra: &[&str]) -> String {
    let o = common::dmalab()
        .arg("report")
        .args(args)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The SVG elements of a page whose aria-label contains `label`.
fn plots_labelled<'a>(html: &'a str, label: &str) -> Vec<&'a str> {
    html.split("<svg class=\"plot\"")
        .skip(1)
        .filter(|s| s.contains(&format!("aria-label=\"{label}")))
        .map(|s| &s[..s.find("</svg>").unwrap_or(s.len())])
        .collect()
}

/// The y tick labels of a plot (text anchored at the end, left of the
/// frame), as numbers.
fn y_ticks(svg: &str) -> Vec<f64> {
    svg.split("class=\"tick\" text-anchor=\"end\">")
        .skip(1)
        .filter_map(|s| s.split('<').next()?.parse().ok())
        .collect()
}

#[test]
fn report_of_a_load_draws_series_latency_and_rate_windows_in_binary_units() {
    let dir = tempfile::tempdir().unwrap();
    let l = load(dir.path(), "paced", Some("20000"));
    let printed = report(&[&l], &[]);
    // Histogram and CDF of command latency, bandwidth and commands per
    // second over time.
    assert!(printed.contains("(4 plots, 1 load)"), "{printed}");
    let html = std::fs::read_to_string(dir.path().join("paced.html")).unwrap();
    assert!(!html.contains("bw_bytes ["), "axis titled with a JSON key");
    assert!(!html.contains("GB/s"), "decimal units");
    // The bandwidth axis: its title names the unit, and its ticks are in
    // that unit (20000 x 4 KiB = 78.1 MiB/s, so the top tick is between
    // the value and twice it).
    let bw = plots_labelled(&html, "bandwidth per second");
    assert_eq!(bw.len(), 1, "{html}");
    assert!(bw[0].contains("data bandwidth (MiB/s)"), "{}", bw[0]);
    let top = y_ticks(bw[0]).into_iter().fold(0.0, f64::max);
    let mib = 20000.0 * 4096.0 / 1048576.0;
    assert!(
        top >= mib && top <= 2.0 * mib,
        "top tick {top} for {mib} MiB/s"
    );
    // The rate target is drawn (dashed) beside the windows.
    let rate = plots_labelled(&html, "commands per second");
    assert!(rate[0].contains("stroke-dasharray"), "{}", rate[0]);
    assert!(rate[0].contains("thousand commands/s"), "{}", rate[0]);
}

#[test]
fn two_loads_overlay_as_cdfs_and_compare_prints_the_figures_that_matter() {
    let dir = tempfile::tempdir().unwrap();
    let a = load(dir.path(), "free", None);
    let b = load(dir.path(), "paced", Some("20000"));
    let html = dir.path().join("both.html");
    let printed = report(&[&a, &b], &["-o", html.to_str().unwrap()]);
    // Overlaid: no histogram, a CDF, and the two series over time.
    assert!(printed.contains("(3 plots, 2 load)"), "{printed}");
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(plots_labelled(&text, "histogram").is_empty());
    let cdf = plots_labelled(&text, "cdf");
    assert_eq!(cdf.len(), 1);
    assert!(cdf[0].contains(">free<") && cdf[0].contains(">paced<"));
    assert!(text.contains("<th>change against free</th>"), "{text}");

    let o = common::dmalab()
        .arg("compare")
        .args([&a, &b])
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    // The paced load moves less: its bandwidth fell, and that is worse.
    let bw = out
        .lines()
        .find(|l| l.trim_start().starts_with("data bandwidth"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(bw.contains('\u{2212}') && bw.ends_with("(worse)"), "{bw}");
    assert!(!out.contains("/result/"), "no JSON pointers: {out}");
    assert!(out.lines().count() < 20, "{out}");
    // --all is the full difference, pointers and all.
    let o = common::dmalab()
        .arg("compare")
        .arg("--all")
        .args([&a, &b])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("/config/rate/rate_iops: null -> 20000"),
        "{out}"
    );
}

#[test]
fn report_of_a_probe_page_and_throttle_result() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("probe.json");
    common::dmalab()
        .args(["probe", "latency", "--size", "32K", "--runtime", "100ms"])
        .arg("--output")
        .arg(&p)
        .assert()
        .success();
    let printed = report(&[&p], &[]);
    assert!(printed.contains("(2 plots, 1 probe latency)"), "{printed}");
    let html = std::fs::read_to_string(dir.path().join("probe.html")).unwrap();
    assert!(html.contains("<td class=\"l\">p99 access latency</td>"));

    let page = fixture("page.json");
    let out = dir.path().join("page.html");
    let csv = dir.path().join("page.csv");
    let printed = report(
        &[&page],
        &["-o", out.to_str().unwrap(), "--csv", csv.to_str().unwrap()],
    );
    // By fault class (histogram, CDF), then all/reads/writes (each both).
    assert!(printed.contains("(8 plots, 1 page)"), "{printed}");
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("Table 2 (1): mean latency of all accesses"));
    assert_eq!(plots_labelled(&html, "histogram by fault class").len(), 1);
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.starts_with("page,page,Table 2 (1): mean latency of all accesses,ns,352.")),
        "{csv}"
    );

    let th = fixture("throttle.json");
    let out = dir.path().join("throttle.html");
    let printed = report(&[&th], &["-o", out.to_str().unwrap()]);
    assert!(printed.contains("(3 plots, throttle)"), "{printed}");
}

#[test]
fn a_file_that_is_no_dmalab_result_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("other.json");
    std::fs::write(&json, "{\"a\": 1}\n").unwrap();
    let pretty = dir.path().join("pretty.json");
    std::fs::write(&pretty, "{\n  \"a\": 1\n}\n").unwrap();
    let bin = dir.path().join("blob.bin");
    std::fs::write(&bin, [0u8, 159, 146, 150, 10, 1, 2]).unwrap();
    for f in [&json, &pretty, &bin] {
        let o = common::dmalab().arg("report").arg(f).output().unwrap();
        let err = common::assert_usage_output(&o, "RESULTS");
        assert!(err.contains("not a dmalab result"), "{err}");
        assert!(!dir.path().join("other.html").exists());
    }
    // Two documents of different commands are not overlaid.
    let o = common::dmalab()
        .arg("report")
        .args([fixture("page.json"), fixture("throttle.json")])
        .arg("-o")
        .arg(dir.path().join("x.html"))
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "RESULTS");
    assert!(err.contains("cannot be overlaid"), "{err}");
}

#[test]
fn figures_dir_holds_one_scalable_svg_per_plot() {
    let dir = tempfile::tempdir().unwrap();
    let figs = dir.path().join("figs");
    let out = dir.path().join("page.html");
    let printed = report(
        &[&fixture("page.json")],
        &[
            "-o",
            out.to_str().unwrap(),
            "--figures",
            figs.to_str().unwrap(),
        ],
    );
    assert!(printed.contains("(8 figures)"), "{printed}");
    let mut names: Vec<String> = std::fs::read_dir(&figs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "01-histogram-by-fault-class.svg",
            "02-cdf-by-fault-class.svg",
            "03-histogram-access-latency-all-accesses.svg",
            "04-cdf-access-latency-all-accesses.svg",
            "05-histogram-access-latency-reads.svg",
            "06-cdf-access-latency-reads.svg",
            "07-histogram-access-latency-writes.svg",
            "08-cdf-access-latency-writes.svg",
        ]
    );
    for n in &names {
        let svg = std::fs::read_to_string(figs.join(n)).unwrap();
        assert!(svg.starts_with("<?xml"), "{n}");
        // Sized by its column, not in pixels, and styled on its own.
        assert!(svg.contains("width=\"100%\" viewBox=\"0 0 "), "{n}");
        assert!(svg.contains("<style>.title{font-size:15px"), "{n}");
    }
}

#[test]
fn document_reports_render_in_headless_chromium_without_errors() {
    if !common::need("chromium", Path::new("/usr/bin/chromium").exists()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let l = load(dir.path(), "load", Some("20000"));
    for (doc, plots) in [
        (l, 4),
        (fixture("page.json"), 8),
        (fixture("throttle.json"), 3),
    ] {
        let html = dir.path().join("r.html");
        report(&[&doc], &["-o", html.to_str().unwrap()]);
        let (errors, n, png) = crate::run_report::open_in_chromium(&html, 900);
        assert!(
            errors.is_empty(),
            "{}: console errors: {errors:?}",
            doc.display()
        );
        assert_eq!(n, plots, "{}", doc.display());
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    }
}

/// Issue 33 item 4: each figure exportable on its own, in PDF too:
/// `--figure-format pdf` writes one PDF per plot (rsvg-convert from the
/// SVG), under the SVG's name.
#[test]
fn figures_dir_holds_one_pdf_per_plot() {
    if !common::need(
        "rsvg-convert (librsvg2-bin)",
        common::have_program("rsvg-convert"),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let figs = dir.path().join("figs");
    let out = dir.path().join("page.html");
    let printed = report(
        &[&fixture("page.json")],
        &[
            "-o",
            out.to_str().unwrap(),
            "--figures",
            figs.to_str().unwrap(),
            "--figure-format",
            "pdf",
        ],
    );
    assert!(printed.contains("(8 figures)"), "{printed}");
    let mut names: Vec<String> = std::fs::read_dir(&figs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 8, "{names:?}");
    assert_eq!(names[0], "01-histogram-by-fault-class.pdf");
    for n in &names {
        assert!(n.ends_with(".pdf"), "{n}");
        let pdf = std::fs::read(figs.join(n)).unwrap();
        assert!(pdf.starts_with(b"%PDF-"), "{n} is no PDF");
    }
}

/// Without rsvg-convert on PATH (or without --figures) `--figure-format
/// pdf` is refused with one line before anything is written.
#[test]
fn pdf_figures_without_the_converter_are_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let figs = dir.path().join("figs");
    let out = dir.path().join("page.html");
    let o = common::dmalab()
        .env("PATH", empty.path())
        .arg("report")
        .arg(fixture("page.json"))
        .arg("-o")
        .arg(&out)
        .arg("--figures")
        .arg(&figs)
        .args(["--figure-format", "pdf"])
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "--figure-format");
    assert!(
        err.contains("rsvg-convert") && err.contains("librsvg2-bin"),
        "{err}"
    );
    assert!(!figs.exists() && !out.exists(), "something was written");
    let o = common::dmalab()
        .arg("report")
        .arg(fixture("page.json"))
        .arg("-o")
        .arg(&out)
        .args(["--figure-format", "pdf"])
        .output()
        .unwrap();
    let err = common::assert_usage_output(&o, "--figure-format");
    assert!(err.contains("--figures DIR"), "{err}");
    assert!(!out.exists(), "something was written");
}
