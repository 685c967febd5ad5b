//! Progress of `dmalab run`: a bar with an ETA on a terminal (the shared
//! `indicatif` bar of `dmalab_core::progress`), one plain line per run
//! otherwise, nothing with `--quiet`.

use crate::analysis::fmt_value;
use crate::record::RunRecord;
use dmalab_core::progress::Bar;
use dmalab_core::schema::RunStatus;
use std::time::{Duration, Instant};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A bar on stderr (a terminal).
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
    bar: Option<Bar>,
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
            bar: None,
        }
    }

    /// A bar where bars are drawn (the binary enabled them and stderr is a
    /// terminal), lines otherwise, or nothing.
    pub fn auto(quiet: bool) -> Self {
        Self::new(if quiet {
            Mode::Quiet
        } else if dmalab_core::progress::enabled() {
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
        if self.mode == Mode::Bar {
            let bar = Bar::steps("", total as u64);
            bar.set_position(done as u64);
            self.bar = Some(bar);
        }
    }

    /// The time left from the pace of this session's runs (the bar keeps
    /// its own, from its own pace).
    fn eta(&self) -> String {
        if self.session_done == 0 {
            return "ETA --".into();
        }
        let per = self.session_start.elapsed() / self.session_done as u32;
        let left = self.total.saturating_sub(self.done) as u32;
        let s = (per * left).as_secs();
        format!("ETA {}", humantime::format_duration(Duration::from_secs(s)))
    }

    /// A run begins: the bar names it.
    pub fn begin(&mut self, _index: usize, label: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(label);
        }
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
                if let Some(bar) = &self.bar {
                    if rec.status != RunStatus::Completed {
                        // Above the bar, kept on the terminal.
                        bar.println(&format!("[{}/{}] {label}: {what}", self.done, self.total));
                    }
                    bar.set_position(self.done as u64);
                }
            }
        }
    }

    /// The session ends: the bar is cleared.
    pub fn end(&mut self) {
        self.bar = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_never_draws_and_lines_do_not_make_a_bar() {
        // Tests run with bars off (and stderr not a terminal): auto picks
        // lines, or nothing under --quiet; neither holds a bar.
        let mut p = Progress::auto(false);
        assert_eq!(p.mode, Mode::Lines);
        p.start(3, 1);
        assert!(p.bar.is_none());
        assert_eq!(Progress::auto(true).mode, Mode::Quiet);
    }

    #[test]
    fn eta_from_the_pace_of_this_session() {
        let mut p = Progress::new(Mode::Quiet);
        p.start(4, 0);
        assert_eq!(p.eta(), "ETA --");
        p.session_done = 1;
        p.done = 1;
        p.session_start = Instant::now() - Duration::from_secs(10);
        // 10 s a run, 3 runs left.
        assert_eq!(p.eta(), "ETA 30s");
    }
}
