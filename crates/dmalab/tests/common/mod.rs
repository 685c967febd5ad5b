//! Helpers shared by the integration tests.
//!
//! Tests that need something this kind of machine may lack (root, loop
//! devices, zram, QEMU) call [`need`]: it skips with a message naming what
//! is missing, except under `DMALAB_CI=1`, where a missing prerequisite is a
//! failure, so CI can never pass by skipping.
#![allow(dead_code)]

use std::path::PathBuf;

/// True when the prerequisite is present. When it is not: under
/// `DMALAB_CI=1` panics, otherwise prints why the test is skipped and
/// returns false (the caller returns early).
pub fn need(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    if std::env::var("DMALAB_CI").is_ok_and(|v| v == "1") {
        panic!("DMALAB_CI=1 and this test needs {what}, which is missing");
    }
    eprintln!("SKIPPED: this test needs {what}");
    false
}

/// True when running as root.
pub fn is_root() -> bool {
    dmalab_core::sys::is_root()
}

/// Skips (or fails under CI) unless root.
pub fn need_root() -> bool {
    need("root", is_root())
}

/// Path of the built `dmalab` binary.
pub fn dmalab_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("dmalab")
}

/// A `Command` for the built binary.
pub fn dmalab() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("dmalab").expect("dmalab binary is built")
}

/// True when `prog` is on PATH.
pub fn have_program(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(prog).is_file()))
}
