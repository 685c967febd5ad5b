//! One process-wide stop flag raised by SIGINT and SIGTERM.
//!
//! Long loops poll [`stop_requested`]; nothing is done inside the signal
//! handler beyond setting the flag, so every command can finish its current
//! step, reap what is in flight, undo its host changes and write its results.
//!
//! The number of the signal that arrived is kept as well: every command
//! exits with [`exit_code`] (128 + the signal number: 130 after SIGINT, 143
//! after SIGTERM) once it has written what it measured, as shells and most
//! command-line tools do.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
static SIGNO: OnceLock<Arc<AtomicUsize>> = OnceLock::new();

fn signo() -> &'static Arc<AtomicUsize> {
    SIGNO.get_or_init(|| Arc::new(AtomicUsize::new(0)))
}

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs the SIGINT/SIGTERM handlers (idempotent).
pub fn install() -> std::io::Result<()> {
    let f = flag().clone();
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // The number first, so a reader that sees the flag sees its cause.
        signal_hook::flag::register_usize(sig, signo().clone(), sig as usize)?;
        signal_hook::flag::register(sig, f.clone())?;
    }
    Ok(())
}

/// The signal that raised the flag (SIGINT or SIGTERM; the later one if
/// both arrived), or None when no signal arrived.
pub fn received() -> Option<i32> {
    match signo().load(Ordering::Relaxed) {
        0 => None,
        n => i32::try_from(n).ok(),
    }
}

/// The exit status of a command that a signal stopped: 128 + the signal
/// number (130 after SIGINT, 143 after SIGTERM); None when no signal arrived.
pub fn exit_code() -> Option<u8> {
    received().and_then(|n| u8::try_from(128 + n).ok())
}

/// True once SIGINT or SIGTERM arrived (or [`request_stop`] was called).
pub fn stop_requested() -> bool {
    flag().load(Ordering::Relaxed)
}

/// Raises the stop flag from code (a test, or a fatal worker error).
pub fn request_stop() {
    flag().store(true, Ordering::Relaxed);
}

/// The shared flag itself, for threads that want to poll it cheaply.
pub fn stop_flag() -> Arc<AtomicBool> {
    flag().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_the_flag_and_the_exit_code() {
        install().unwrap();
        assert_eq!(exit_code(), None);
        // SAFETY: raise sends a signal to this process; the handler installed
        // above only stores into atomics.
        unsafe { libc::raise(libc::SIGTERM) };
        assert!(stop_requested());
        assert_eq!(received(), Some(libc::SIGTERM));
        assert_eq!(exit_code(), Some(143));
    }
}
