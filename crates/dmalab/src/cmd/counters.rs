//! `--counters` on `load` and `probe`: the request is checked with the
//! other flags (bad input exits 2), the session is opened and started at
//! the run's milestones, and its report travels in the result beside the
//! command's own figures. Everything about counting lives in
//! `dmalab-counters`; this file only connects it to the commands.

use dmalab_core::UsageError;
use dmalab_counters::check::{self, CheckRow, LoadAccounting};
use dmalab_counters::session::{CounterReport, Request, Scope, Session};
use dmalab_counters::Roots;
use dmalab_load::result::Sample;
use serde::Serialize;
use std::path::Path;
use std::sync::Mutex;

/// Where ledgers of host changes live (the one `dmalab page` uses).
pub fn state_dir() -> &'static Path {
    Path::new(dmalab_core::ledger::STATE_DIR)
}

/// Parses `--counters` against this host (exit 2 on a malformed request).
pub fn request(option: &str, text: Option<&str>) -> Result<Option<Request>, UsageError> {
    text.map(|t| Request::parse(option, t, &Roots::from_env()))
        .transpose()
}

/// Applies `--counters-mode` to a request counted in one run: exact mode
/// is refused, naming the runs it needs, when the request has more than
/// one event group, unless `--counters-run N` says which run of a
/// rotation kept by the caller this is (then it counts group N mod the
/// number of groups).
pub fn with_mode(
    req: Option<Request>,
    mode: Option<&str>,
    run: Option<usize>,
) -> Result<Option<Request>, UsageError> {
    let Some(mut r) = req else {
        return Ok(None);
    };
    if let Some(m) = mode {
        r.mode = dmalab_counters::session::CountersMode::parse("--counters-mode", m)?;
    }
    r.check_rotation("--counters-mode", "--counters-run", run, 1)?;
    Ok(Some(match (r.mode, run) {
        (dmalab_counters::session::CountersMode::Exact, Some(n)) => r.for_run(n),
        _ => r,
    }))
}

/// A command's result with the counters counted over it.
#[derive(Serialize)]
pub struct WithCounters<R> {
    /// The command's own result.
    #[serde(flatten)]
    pub result: R,
    /// The counters (only with `--counters`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<CountersOut>,
}

/// The counter report, and for storage loads the thesis' check.
#[derive(Serialize)]
pub struct CountersOut {
    /// What was counted.
    #[serde(flatten)]
    pub report: CounterReport,
    /// Expected (from the load's accounting) against counted uncore events.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expected_vs_counted: Vec<CheckRow>,
}

impl CountersOut {
    /// The text printed after the command's own summary.
    pub fn text(&self) -> String {
        format!(
            "{}{}",
            self.report.render_text(),
            check::render(&self.expected_vs_counted)
        )
    }
}

/// The load's observer: counts from the workers' start to the last
/// completion, one interval per load sample.
pub struct LoadCounting<'a> {
    req: Option<Request>,
    session: Option<Session>,
    on_sample: &'a mut dyn FnMut(&Sample),
}

impl<'a> LoadCounting<'a> {
    /// Counting `req` (if any), printing samples through `on_sample`.
    pub fn new(req: Option<Request>, on_sample: &'a mut dyn FnMut(&Sample)) -> Self {
        Self {
            req,
            session: None,
            on_sample,
        }
    }

    /// The report with the thesis' check for `acc` (storage and NVMe
    /// engines only).
    pub fn finish(self, acc: Option<LoadAccounting>) -> Option<CountersOut> {
        let s = self.session?;
        let report = s.report();
        let mut rows = acc.map_or_else(Vec::new, |a| check::expected_vs_counted(&a, &s.totals()));
        check::mark_exact(&mut rows, |id| {
            report.events.iter().any(|e| e.id == id && e.exact)
        });
        Some(CountersOut {
            report,
            expected_vs_counted: rows,
        })
    }
}

impl dmalab_load::run::Observer for LoadCounting<'_> {
    fn started(&mut self) {
        if let Some(r) = &self.req {
            // The workers exist now: count this process's threads.
            let mut s = Session::open(
                r,
                &Scope::this_process_threads(),
                &Roots::from_env(),
                state_dir(),
            );
            s.start();
            self.session = Some(s);
        }
    }

    fn sample(&mut self, smp: &Sample, shown: bool) {
        if let Some(s) = &mut self.session {
            s.sample(smp.t_s);
        }
        if shown {
            (self.on_sample)(smp);
        }
    }

    fn finished(&mut self) {
        if let Some(s) = &mut self.session {
            s.stop();
        }
    }
}

/// The session of a running `dmalab probe --counters` (one per process).
static PROBE: Mutex<Option<Session>> = Mutex::new(None);

/// Starts counting this thread and the threads it creates from now on.
pub fn begin_probe(text: Option<&str>) -> Result<(), UsageError> {
    if let Some(r) = request("--counters", text)? {
        let mut s = Session::open(&r, &Scope::Task(0), &Roots::from_env(), state_dir());
        s.start();
        if let Ok(mut g) = PROBE.lock() {
            *g = Some(s);
        }
    }
    Ok(())
}

/// Stops the probe's counting (if any), prints it, and attaches it.
pub fn attach_probe<R>(result: R) -> WithCounters<R> {
    let session = PROBE.lock().ok().and_then(|mut g| g.take());
    let counters = session.map(|mut s| {
        s.stop();
        let out = CountersOut {
            report: s.report(),
            expected_vs_counted: Vec::new(),
        };
        out!("{}", out.text());
        out
    });
    WithCounters { result, counters }
}

/// The load's own accounting for the thesis' expected-vs-counted check
/// (engines that move data through a device; the null engine moves
/// nothing).
pub fn load_accounting(
    plan: &dmalab_load::plan::Plan,
    r: &dmalab_load::result::LoadResult,
) -> Option<LoadAccounting> {
    use dmalab_load::pattern::Pattern;
    use dmalab_load::plan::Direction;
    if !plan.engine.moves_data() {
        return None;
    }
    let blocks = if plan.stream.pattern.moves_data() {
        r.totals.blocks
    } else {
        0
    };
    // noop commands never reach the device: the thesis' baseline, whose
    // expected counts are zero.
    let commands = if plan.stream.pattern == Pattern::Noop {
        0
    } else {
        r.totals.commands
    };
    Some(LoadAccounting {
        bs_bytes: plan.stream.bs_bytes,
        commands,
        completions: commands,
        blocks_read_from_memory: match plan.direction {
            Direction::Read => blocks,
            // Every command moves whole blocks: its bytes say how many.
            Direction::Both => r.storage_write_bytes / plan.stream.bs_bytes.max(1),
            Direction::Write => 0,
        },
        blocks_written_to_memory: match plan.direction {
            Direction::Write => blocks,
            Direction::Both => r.storage_read_bytes / plan.stream.bs_bytes.max(1),
            Direction::Read => 0,
        },
    })
}
