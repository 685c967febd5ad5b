//! `dmalab report RESULTS`: the HTML report (and CSV) of an experiment.

use super::run::lift;
use anyhow::Context;
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
    let res = dmalab_run::record::read_for_report(&args.results).map_err(lift)?;
    let noisy = args.noisy_cv.unwrap_or(res.header.noisy_cv_pct);
    let rep = dmalab_run::report::render(&res, noisy);
    let out = args.output.clone().unwrap_or_else(|| {
        let mut p = args.results.clone();
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name.strip_suffix(".jsonl").unwrap_or(&name).to_string();
        p.set_file_name(format!("{stem}.html"));
        p
    });
    dmalab_core::output::write_atomic(&out, rep.html.as_bytes())
        .with_context(|| format!("--output: cannot write {}", out.display()))?;
    println!(
        "{} ({} plots, {} runs)",
        out.display(),
        rep.plots,
        res.runs.len()
    );
    if let Some(p) = &args.csv {
        let cells = dmalab_run::analysis::cells(&res, noisy);
        dmalab_core::output::write_atomic(p, dmalab_run::report::csv::cells(&cells).as_bytes())
            .with_context(|| format!("--csv: cannot write {}", p.display()))?;
        println!("{}", p.display());
    }
    if let Some(p) = &args.runs_csv {
        dmalab_core::output::write_atomic(p, dmalab_run::report::csv::runs(&res).as_bytes())
            .with_context(|| format!("--runs-csv: cannot write {}", p.display()))?;
        println!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}
