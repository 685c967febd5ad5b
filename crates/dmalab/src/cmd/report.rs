//! `dmalab report RESULTS...`: the HTML report (and CSV) of an experiment,
//! a throttle result, or one or several result documents of one command.

use anyhow::Context;
use dmalab_core::output::{Accept, OutputGuard};
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Turn a result into one self-contained HTML file (inline SVG, no
/// network): a `dmalab run` results file (bars with each run as a dot,
/// latency histograms and CDFs plain against loaded, sweep curves, the
/// statistics table), a `throttle` result, or the `--output` documents of
/// `load`, `probe`, `page`, `stat` or `sim compare` (several of one command
/// are overlaid: the figures side by side, latency distributions as CDFs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The results file `dmalab run` wrote (JSON lines), or result
    /// documents of one command (`--output` of load, probe, page, stat,
    /// sim compare, throttle) to draw together.
    #[arg(value_name = "RESULTS", required = true, num_args = 1..)]
    pub results: Vec<PathBuf>,
    /// HTML file to write [default: RESULTS with the extension .html].
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write the statistics table (one row per cell) as CSV; for
    /// result documents, one row per file and figure.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write each figure on its own as a scalable file into DIR
    /// (created if missing), for a paper: `DIR/NN-name.svg` (or `.pdf`,
    /// see --figure-format).
    #[arg(long, value_name = "DIR")]
    pub figures: Option<PathBuf>,
    /// Format of the --figures files: svg, or pdf (each SVG converted by
    /// rsvg-convert, Debian package librsvg2-bin, which must be installed).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = FigureFormat::Svg)]
    pub figure_format: FigureFormat,
    /// Also write one CSV row per run.
    #[arg(long, value_name = "FILE")]
    pub runs_csv: Option<PathBuf>,
    /// Noisy-cell threshold: coefficient of variation in percent
    /// [default: the experiment's, 5].
    #[arg(long, value_name = "PCT")]
    pub noisy_cv: Option<f64>,
    /// The aggressor's bandwidth on the sweep plots and under each
    /// victim's figure: `data` (data bytes per second) or `combined` (the
    /// thesis' (blocks * bs + commands * (64 + 16) B) / time, which counts
    /// a flush load's commands) [default: data, or combined when the
    /// aggressor moved no data].
    #[arg(long, value_name = "FIGURE", value_enum)]
    pub aggressor_figure: Option<AggressorFigure>,
}

/// `--aggressor-figure`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum AggressorFigure {
    /// Data bytes per second.
    Data,
    /// Data plus NVMe command and completion bytes per second.
    Combined,
}

/// The format of the `--figures` files.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FigureFormat {
    /// Scalable SVG, as drawn.
    Svg,
    /// PDF, converted from the SVG by rsvg-convert (librsvg: the renderer
    /// GNOME and ImageMagick use, packaged by every distribution, so a
    /// figure looks in a PDF as it does in the browser; no Rust crate
    /// renders SVG text to PDF as faithfully without a font stack of its
    /// own).
    Pdf,
}

/// The converter `--figure-format pdf` runs.
const RSVG_CONVERT: &str = "rsvg-convert";

/// Runs `dmalab report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Refused before anything is read or written.
    if args.figure_format == FigureFormat::Pdf {
        if args.figures.is_none() {
            return Err(dmalab_core::UsageError::new(
                "--figure-format",
                "pdf is the format of the --figures files; add --figures DIR",
            )
            .into());
        }
        if dmalab_core::sys::find_program(RSVG_CONVERT).is_none() {
            return Err(dmalab_core::UsageError::new(
                "--figure-format",
                "pdf needs rsvg-convert, which is not on PATH; install it (Debian: apt-get install librsvg2-bin) or use --figure-format svg",
            )
            .into());
        }
    }
    if let Some(n) = args.noisy_cv {
        if n.is_nan() || n <= 0.0 {
            return Err(dmalab_core::UsageError::new(
                "--noisy-cv",
                format!("{n} must be above zero (percent, e.g. 5)"),
            )
            .into());
        }
    }
    let first = args.results[0].clone();
    let doc = single_doc(&first);
    if doc.is_none() && args.results.len() > 1 {
        return Err(dmalab_core::UsageError::new(
            "RESULTS",
            format!("{} is not a result document: several files are drawn together only as result documents of one command (--output of load, probe, page, stat, sim compare); report a `dmalab run` results file on its own", first.display()),
        )
        .into());
    }
    let out = args.output.clone().unwrap_or_else(|| {
        if doc.is_some() {
            return first.with_extension("html");
        }
        let mut p = first.clone();
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
    for r in &args.results {
        guard.protect("RESULTS", r);
    }
    guard.check("--output", &out, Accept::FileOrStream)?;
    if let Some(p) = &args.csv {
        guard.check("--csv", p, Accept::FileOrStream)?;
    }
    if let Some(p) = &args.runs_csv {
        guard.check("--runs-csv", p, Accept::FileOrStream)?;
    }
    if let Some(doc) = doc {
        if args.aggressor_figure.is_some() {
            return Err(dmalab_core::UsageError::new(
                "--aggressor-figure",
                format!("{} is a result document, which has no aggressor; use it with a `dmalab run` results file", first.display()),
            )
            .into());
        }
        if doc["command"] == "throttle" && args.results.len() == 1 {
            return throttle_report(&args, &doc, &out);
        }
        return documents_report(&args, doc, &out);
    }
    // A merged file (`dmalab fleet merge`) compares its hosts side by side.
    let mut res = dmalab_run::record::read_for_report(&first).map_err(|e| {
        // A file that is neither kind gets one line that says what to give.
        if !first_line_is_a_record(&first) {
            anyhow::Error::from(dmalab_core::UsageError::new(
                "RESULTS",
                format!("{}: not a dmalab result (neither a `dmalab run` results file nor a result document written by --output)", first.display()),
            ))
        } else {
            anyhow::Error::from(e)
        }
    })?;
    // A run recorded twice (files concatenated, a merge merged again) is
    // one run: counted twice it would shrink every interval and p-value.
    let dropped = res.drop_duplicate_runs();
    if dropped > 0 {
        eprintln!(
            "dmalab: warning: {}: {dropped} run record(s) repeat a run already in the file (same host, plan position, configuration, repetition, victim, load and start); each run is counted once",
            first.display()
        );
    }
    let res = res.grouped_by_host();
    let noisy = args.noisy_cv.unwrap_or(res.header.noisy_cv_pct);
    let rep = dmalab_run::report::render_with(
        &res,
        &dmalab_run::report::Options {
            noisy_cv_pct: noisy,
            aggressor_figure: args.aggressor_figure.map(|f| match f {
                AggressorFigure::Data => dmalab_run::report::AggressorFigure::Data,
                AggressorFigure::Combined => dmalab_run::report::AggressorFigure::Combined,
            }),
        },
    );
    dmalab_core::output::write_atomic(&out, rep.html.as_bytes())
        .with_context(|| format!("--output: cannot write {}", out.display()))?;
    outln!(
        "{} ({} plots, {} runs)",
        out.display(),
        rep.plots,
        res.runs.len()
    );
    write_figures(&args, &rep.html)?;
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

/// A single result document (one JSON object with a `command`, such as
/// `dmalab load --output` writes), or None for anything else. A results
/// file is JSON lines whose first line is a whole object, so only a file
/// whose first line is not is read in full: a large results file is never
/// read twice.
fn single_doc(path: &std::path::Path) -> Option<serde_json::Value> {
    use std::io::BufRead;
    let mut first = String::new();
    let f = std::fs::File::open(path).ok()?;
    std::io::BufReader::new(f).read_line(&mut first).ok()?;
    if serde_json::from_str::<serde_json::Value>(&first).is_ok() {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    doc["command"].is_string().then_some(doc)
}

/// Whether the file's first line is a JSON object with a `record` field, as
/// every line of a `dmalab run` results file is (an unreadable file counts
/// as one, so that its read error is the one shown).
fn first_line_is_a_record(path: &std::path::Path) -> bool {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open(path) else {
        return true;
    };
    let mut first = Vec::new();
    if std::io::BufReader::new(f)
        .take(1 << 20)
        .read_until(b'\n', &mut first)
        .is_err()
    {
        return true;
    }
    serde_json::from_slice::<serde_json::Value>(&first).is_ok_and(|v| v.get("record").is_some())
}

/// Writes the report of result documents of one command (the first one
/// already read) to `out`.
fn documents_report(
    args: &Args,
    first: serde_json::Value,
    out: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    use dmalab_run::document;
    let usage = |e: document::DocError| dmalab_core::UsageError::new("RESULTS", e.to_string());
    let mut docs = vec![(
        args.results[0].display().to_string(),
        document::from_value(&args.results[0], first).map_err(usage)?,
    )];
    for p in &args.results[1..] {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("RESULTS: cannot read {}", p.display()))?;
        docs.push((
            p.display().to_string(),
            document::parse(p, &text).map_err(usage)?,
        ));
    }
    document::same_command(&docs).map_err(usage)?;
    let docs: Vec<document::Doc> = docs.into_iter().map(|(_, d)| d).collect();
    let rep = dmalab_run::report::document::render(&docs);
    dmalab_core::output::write_atomic(out, rep.html.as_bytes())
        .with_context(|| format!("--output: cannot write {}", out.display()))?;
    outln!(
        "{} ({} plots, {} {})",
        out.display(),
        rep.plots,
        docs.len(),
        docs[0].command
    );
    write_figures(args, &rep.html)?;
    if let Some(p) = &args.csv {
        dmalab_core::output::write_atomic(p, dmalab_run::report::document::csv(&docs).as_bytes())
            .with_context(|| format!("--csv: cannot write {}", p.display()))?;
        outln!("{}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `--figures DIR`: each plot of the page on its own, as an SVG (or PDF)
/// file.
fn write_figures(args: &Args, html: &str) -> anyhow::Result<()> {
    let Some(dir) = &args.figures else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--figures: cannot create {}", dir.display()))?;
    let figs = dmalab_run::draw::split_figures(html);
    for (name, svg) in &figs {
        let (p, bytes) = match args.figure_format {
            FigureFormat::Svg => (dir.join(format!("{name}.svg")), svg.as_bytes().to_vec()),
            FigureFormat::Pdf => (dir.join(format!("{name}.pdf")), svg_to_pdf(svg, name)?),
        };
        dmalab_core::output::write_atomic(&p, &bytes)
            .with_context(|| format!("--figures: cannot write {}", p.display()))?;
    }
    outln!("{} ({} figures)", dir.display(), figs.len());
    Ok(())
}

/// One figure as PDF: the SVG through `rsvg-convert -f pdf` (stdin to
/// stdout, so the file is written whole by `write_atomic` or not at all).
fn svg_to_pdf(svg: &str, name: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(RSVG_CONVERT)
        .args(["-f", "pdf"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("--figure-format pdf: cannot run {RSVG_CONVERT}"))?;
    // Fed from a thread: the converter may write before it has read all.
    let mut stdin = child.stdin.take().context("rsvg-convert has no stdin")?;
    let input = svg.as_bytes().to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child
        .wait_with_output()
        .with_context(|| format!("--figure-format pdf: {RSVG_CONVERT} failed"))?;
    let fed = feeder
        .join()
        .map_err(|_| anyhow::anyhow!("writing to {RSVG_CONVERT} panicked"))?;
    if !out.status.success() || !out.stdout.starts_with(b"%PDF") {
        anyhow::bail!(
            "--figure-format pdf: {RSVG_CONVERT} could not convert figure {name} ({}): {}",
            out.status,
            dmalab_core::text::shown(String::from_utf8_lossy(&out.stderr).trim())
        );
    }
    fed.with_context(|| format!("--figure-format pdf: cannot feed {RSVG_CONVERT}"))?;
    Ok(out.stdout)
}

/// Writes the throttle report of `doc` to `out` (already checked).
fn throttle_report(
    args: &Args,
    doc: &serde_json::Value,
    out: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let (html, plots) = dmalab_throttle::report::html(doc).map_err(|e| {
        dmalab_core::UsageError::new("RESULTS", format!("{}: {e}", args.results[0].display()))
    })?;
    dmalab_core::output::write_atomic(out, html.as_bytes())
        .with_context(|| format!("--output: cannot write {}", out.display()))?;
    outln!("{} ({plots} plots, throttle)", out.display());
    write_figures(args, &html)?;
    Ok(ExitCode::SUCCESS)
}
