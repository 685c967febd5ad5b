//! `dmalab report RESULTS`: the HTML report (and CSV) of an experiment.

use anyhow::Context;
use dmalab_core::output::{Accept, OutputGuard};
use std::path::PathBuf;
use std::process::ExitCode;

/// Turn a `dmalab run` results file into one self-contained HTML file
/// (inline SVG, no network): bars with each run as a dot, latency
/// histograms plain against loaded, sweep curves, latency against
/// bandwidth, and the statistics table.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The results file `dmalab run` wrote (JSON lines).
    #[arg(value_name = "RESULTS")]
    pub results: PathBuf,
    /// HTML file to write [default: RESULTS with the extension .html].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the statistics table (one row per cell) as CSV.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write one CSV row per run.
    #[arg(long, value_name = "FILE")]
    pub runs_csv: Option<PathBuf>,
    /// Noisy-cell threshold: coefficient of variation in percent
    /// [default: the experiment's, 5].
    #[arg(long, value_name = "PCT")]
    pub noisy_cv: Option<f64>,
}

/// Runs `dmalab report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(n) = args.noisy_cv {
        if n.is_nan() || n <= 0.0 {
            return Err(dmalab_core::UsageError::new(
                "--noisy-cv",
                format!("{n} must be above zero (percent, e.g. 5)"),
            )
            .into());
        }
    }
    let throttle = throttle_doc(&args.results);
    let out = args.output.clone().unwrap_or_else(|| {
        if throttle.is_some() {
            return args.results.with_extension("html");
        }
        let mut p = args.results.clone();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.strip_suffix(".jsonl").unwrap_or(&name).to_string();
        p.set_file_name(format!("{stem}.html"));
        p
    });
    // Every output is checked before anything is read or rendered, so a bad
    // --csv does not leave the HTML written, and no output replaces RESULTS.
    let mut guard = OutputGuard::new();
    guard.protect("RESULTS", &args.results);
    guard.check("--output", &out, Accept::FileOrStream)?;
    if let Some(p) = &args.csv {
        guard.check("--csv", p, Accept::FileOrStream)?;
    }
    if let Some(p) = &args.runs_csv {
        guard.check("--runs-csv", p, Accept::FileOrStream)?;
    }
    if let Some(doc) = throttle {
        return throttle_report(&args, &doc, &out);
    }
    // A merged file (`dmalab fleet merge`) compares its hosts side by side.
    let mut res = dmalab_run::record::read_for_report(&args.results)?;
    // A run recorded twice (files concatenated, a merge merged again) is
    // one run: counted twice it would shrink every interval and p-value.
    let dropped = res.drop_duplicate_runs();
    if dropped > 0 {
        eprintln!(
            "dmalab: warning: {}: {dropped} run record(s) repeat a run already in the file (same host, plan position, configuration, repetition, victim, load and start); each run is counted once",
            args.results.display()
        );
    }
    let res = res.grouped_by_host();
    let noisy = args.noisy_cv.unwrap_or(res.header.noisy_cv_pct);
    let rep = dmalab_run::report::render(&res, noisy);
    dmalab_core::output::write_atomic(&out, rep.html.as_bytes())
        .with_context(|| format!("--output: cannot write {}", out.display()))?;
    outln!(
        "{} ({} plots, {} runs)",
        out.display(),
        rep.plots,
        res.runs.len()
    );
    if let Some(p) = &args.csv {
        let cells = dmalab_run::analysis::cells(&res, noisy);
        dmalab_core::output::write_atomic(p, dmalab_run::report::csv::cells(&cells).as_bytes())
            .with_context(|| format!("--csv: cannot write {}", p.display()))?;
        outln!("{}", p.display());
    }
    if let Some(p) = &args.runs_csv {
        dmalab_core::output::write_atomic(p, dmalab_run::report::csv::runs(&res).as_bytes())
            .with_context(|| format!("--runs-csv: cannot write {}", p.display()))?;
        outln!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// A `dmalab throttle --output` document (one JSON object whose command is
/// `throttle`), or None for anything else. A results file is JSON lines
/// whose first line is a whole object, so only a file whose first line is
/// not is read in full: a large results file is never read twice.
fn throttle_doc(path: &std::path::Path) -> Option<serde_json::Value> {
    use std::io::BufRead;
    let mut first = String::new();
    let f = std::fs::File::open(path).ok()?;
    std::io::BufReader::new(f).read_line(&mut first).ok()?;
    if serde_json::from_str::<serde_json::Value>(&first).is_ok() {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    (doc["command"] == "throttle").then_some(doc)
}

/// Writes the throttle report of `doc` to `out` (already checked).
fn throttle_report(
    args: &Args,
    doc: &serde_json::Value,
    out: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let (html, plots) = dmalab_throttle::report::html(doc).map_err(|e| {
        dmalab_core::UsageError::new("RESULTS", format!("{}: {e}", args.results.display()))
    })?;
    dmalab_core::output::write_atomic(out, html.as_bytes())
        .with_context(|| format!("--output: cannot write {}", out.display()))?;
    outln!("{} ({plots} plots, throttle)", out.display());
    Ok(ExitCode::SUCCESS)
}
