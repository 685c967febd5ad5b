//! Progress of `dmalab run`: a bar with an ETA on a terminal, one plain line
//! per run otherwise, nothing with `--quiet`.

use crate::analysis::fmt_value;
use crate::record::RunRecord;
use dmalab_core::schema::RunStatus;
use std::io::Write;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A redrawn bar on stderr (a terminal).
    Bar,
    /// One line per run on stderr.
    Lines,
    /// Nothing.
    Quiet,
}

/// Progress state.
pub struct Progress {
    mode: Mode,
    total: usize,
    done: usize,
    session_done: usize,
    session_start: Instant,
    drawn: bool,
}

/// `1h02m`, `3m20s`, `12s`.
pub fn fmt_eta(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Progress {
    /// Progress in `mode`.
    pub fn new(mode: Mode) -> Self {
        Self {
            mode,
            total: 0,
            done: 0,
            session_done: 0,
            session_start: Instant::now(),
            drawn: false,
        }
    }

    /// Bar on a terminal, lines otherwise (or quiet).
    pub fn auto(quiet: bool) -> Self {
        use std::io::IsTerminal;
        Self::new(if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        })
    }

    /// The session starts; `done` runs are already recorded.
    pub fn start(&mut self, total: usize, done: usize) {
        self.total = total;
        self.done = done;
        self.session_start = Instant::now();
        if self.mode != Mode::Quiet && done > 0 {
            eprintln!("dmalab run: resuming after {done} of {total} recorded runs");
        }
    }

    fn eta(&self) -> String {
        if self.session_done == 0 {
            return "ETA --".into();
        }
        let per = self.session_start.elapsed() / self.session_done as u32;
        let left = (self.total - self.done) as u32;
        format!("ETA {}", fmt_eta(per * left))
    }

    /// A run begins.
    pub fn begin(&mut self, _index: usize, label: &str) {
        if self.mode != Mode::Bar {
            return;
        }
        // Names come from the experiment file: no raw escape on the terminal.
        let label = dmalab_core::text::shown(label);
        let width = 30;
        let filled = (width * self.done).checked_div(self.total).unwrap_or(0);
        let bar: String = "#".repeat(filled) + &"-".repeat(width - filled);
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[2K[{bar}] {}/{} {}  {label}",
            self.done + 1,
            self.total,
            self.eta()
        );
        let _ = e.flush();
        self.drawn = true;
    }

    /// A run ended and was recorded.
    pub fn finish(&mut self, label: &str, rec: &RunRecord, took: Duration) {
        let label = dmalab_core::text::shown(label);
        self.done += 1;
        self.session_done += 1;
        let what = match (&rec.status, rec.value) {
            (RunStatus::Completed, Some(v)) => fmt_value(v, &rec.unit),
            _ => format!(
                "FAILED: {}",
                dmalab_core::text::escaped(rec.failure.as_ref().map_or("", |f| f.reason.as_str()))
            ),
        };
        let bw = rec
            .aggressor
            .as_ref()
            .and_then(|a| a.evidence.as_ref())
            .map(|e| {
                format!(
                    ", aggressor {}/s",
                    dmalab_core::units::fmt_bytes(e.bw_bytes)
                )
            })
            .unwrap_or_default();
        match self.mode {
            Mode::Quiet => {}
            Mode::Lines => eprintln!(
                "[{}/{}] {label}: {what}{bw} ({:.1} s, {})",
                self.done,
                self.total,
                took.as_secs_f64(),
                self.eta()
            ),
            Mode::Bar => {
                if rec.status != RunStatus::Completed {
                    eprintln!("\r\x1b[2K[{}/{}] {label}: {what}", self.done, self.total);
                }
            }
        }
    }

    /// The session ends.
    pub fn end(&mut self) {
        if self.mode == Mode::Bar && self.drawn {
            eprint!("\r\x1b[2K");
        }
    }
}
