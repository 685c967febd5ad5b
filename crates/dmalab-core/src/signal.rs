//! One process-wide stop flag raised by SIGINT and SIGTERM.
//!
//! Long loops poll [`stop_requested`]; nothing is done inside the signal
//! handler beyond setting the flag, so every command can finish its current
//! step, reap what is in flight, undo its host changes and write its results.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs the SIGINT/SIGTERM handlers (idempotent).
pub fn install() -> std::io::Result<()> {
    let f = flag().clone();
    signal_hook::flag::register(signal_hook::consts::SIGINT, f.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, f)?;
    Ok(())
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
