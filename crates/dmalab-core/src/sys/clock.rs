//! The monotonic clock, read the same way everywhere (the live-stats page
//! stores its readings, so writer and reader must agree on the clock).

/// `CLOCK_MONOTONIC` now, nanoseconds (inlined: the load workers read
/// it twice per command).
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; with a valid
    // pointer and CLOCK_MONOTONIC it cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_does_not_go_back_and_moves() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(a > 0);
        // Only the direction and a lower bound: no wall-clock assertion.
        assert!(b >= a + 1_000_000, "{a} -> {b}");
    }
}
