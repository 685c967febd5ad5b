//! Progress bars for the steps that take longer than a moment (filling a
//! file, a session of runs), drawn with `indicatif` on stderr.
//!
//! Bars are off until the binary turns them on ([`enable`]), once, after it
//! has read its flags: never under `--quiet`, never when stdout carries the
//! result document (`--output -`), and, whatever was enabled, only while
//! stderr is a terminal, so pipes, logs and tests never see an escape code.
//! Libraries make a [`Bar`] wherever a step may be long; a bar that is not
//! drawn costs nothing.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns bars on (or off) for the rest of the process. The binary's choice,
/// from its flags; libraries only ask [`enabled`].
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// True when a bar would be drawn now: enabled, and stderr is a terminal.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// One progress bar; hidden when bars are off. Cleared from the terminal
/// when dropped, so an error message that follows starts on a clean line.
pub struct Bar(indicatif::ProgressBar);

impl Bar {
    fn with(total: u64, template: &str, what: &str) -> Self {
        if !enabled() {
            return Self(indicatif::ProgressBar::hidden());
        }
        let style = indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("#>-");
        let b = indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::stderr(),
        )
        .with_style(style)
        // What it is about may come from an input file: no raw escapes.
        .with_message(crate::text::shown(what));
        // A first frame at once: a step that starts slowly is not silent.
        b.tick();
        Self(b)
    }

    /// Bytes written of `total`, with the rate and the time left, binary
    /// units as everywhere in dmalab (`12.50 MiB/128.00 MiB, 1.20 GiB/s`).
    pub fn bytes(what: &str, total: u64) -> Self {
        Self::with(
            total,
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes}, {binary_bytes_per_sec}, ETA {eta}",
            what,
        )
    }

    /// Steps done of `total` (`3/12`), with the time left.
    pub fn steps(what: &str, total: u64) -> Self {
        Self::with(total, "[{bar:30}] {pos}/{len} ETA {eta}  {msg}", what)
    }

    /// True when this bar is drawn.
    pub fn is_drawn(&self) -> bool {
        !self.0.is_hidden()
    }

    /// `n` more bytes or steps done.
    pub fn inc(&self, n: u64) {
        self.0.inc(n);
    }

    /// Sets how many are done.
    pub fn set_position(&self, n: u64) {
        self.0.set_position(n);
    }

    /// Replaces the text beside the bar.
    pub fn set_message(&self, what: &str) {
        if self.is_drawn() {
            self.0.set_message(crate::text::shown(what));
        }
    }

    /// Prints `line` above the bar (or plainly on stderr when it is not
    /// drawn), so a line never lands in the middle of a frame.
    pub fn println(&self, line: &str) {
        if self.is_drawn() {
            self.0.println(line);
        } else {
            eprintln!("{line}");
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_is_hidden_until_enabled_and_counts_all_the_same() {
        // Tests never run with bars enabled: nothing is drawn.
        let b = Bar::bytes("filling", 100);
        assert!(!b.is_drawn());
        b.inc(40);
        b.set_position(60);
        assert_eq!(b.0.position(), 60);
    }
}
