//! CPU lists (`0-3,6`) as fio's `cpus_allowed` takes them, checked against the
//! CPUs this process may run on, and thread pinning.

use crate::error::UsageError;

/// The kernel's largest CPU count (CONFIG_NR_CPUS is at most 8192): a CPU or
/// node number at or past it is not one the kernel wrote.
const MAX_KERNEL_ID: usize = 8192;

/// Parses a list the kernel wrote (`0-3,8` in `cpulist`, `online`, a PMU's
/// `cpumask`); empty text is an empty list. Unlike [`parse_cpu_list`] (user
/// input, checked against this process's affinity) it takes any CPU: the
/// host's facts and an uncore PMU's CPUs need not be ones this process may
/// run on. A number at or past [`MAX_KERNEL_ID`], a backwards range or more
/// than that many entries give None, before anything is expanded.
pub fn parse_kernel_list(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    let mut out = Vec::new();
    if text.is_empty() {
        return Some(out);
    }
    for part in text.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if a > b || b >= MAX_KERNEL_ID || out.len() + (b - a) >= MAX_KERNEL_ID {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// Parses a CPU list such as `0`, `0-3`, `0,2,4-5`. The result is sorted and
/// free of duplicates. Every CPU must be in [`allowed_cpus`].
///
/// Every number is checked against the allowed CPUs *before* a range is
/// expanded, and the list is gathered in a bitmap no larger than the
/// highest allowed CPU: `0-4294967295` or a million repeated ranges cost no
/// memory beyond that.
pub fn parse_cpu_list(option: &str, text: &str) -> Result<Vec<usize>, UsageError> {
    parse_cpu_list_within(option, text, &allowed_cpus())
}

/// [`parse_cpu_list`] against a given set of allowed CPUs (sorted).
pub fn parse_cpu_list_within(
    option: &str,
    text: &str,
    allowed: &[usize],
) -> Result<Vec<usize>, UsageError> {
    let bad = |what: &str| {
        UsageError::new(
            option,
            format!(
                "'{}' is not a CPU list ({what}); use e.g. 0, 0-3 or 0,2,4-5",
                crate::text::shown(text)
            ),
        )
    };
    let missing = |cpu: usize| {
        UsageError::new(
            option,
            format!(
                "CPU {cpu} does not exist or is not available to this process (available: {}); choose from those",
                format_cpu_list(allowed)
            ),
        )
    };
    let top = allowed.iter().copied().max().unwrap_or(0);
    let mut seen = vec![false; top + 1];
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad("empty item"));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let number = |t: &str| -> Result<usize, UsageError> {
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                // All digits: only overflow can fail, and such a CPU does
                // not exist.
                Ok(t.parse().unwrap_or(usize::MAX))
            } else {
                Err(bad("not a number"))
            }
        };
        let (lo, hi) = (number(lo)?, number(hi)?);
        if hi < lo {
            return Err(bad("range runs backwards"));
        }
        if lo > top {
            return Err(missing(lo));
        }
        if hi > top {
            // The first CPU of the range that is not allowed, found within
            // the bounded part 0..=top.
            let first = (lo..=top).find(|c| allowed.binary_search(c).is_err());
            return Err(missing(first.unwrap_or(top + 1)));
        }
        seen[lo..=hi].fill(true);
    }
    let cpus: Vec<usize> = (0..=top).filter(|&c| seen[c]).collect();
    if let Some(&m) = cpus.iter().find(|c| allowed.binary_search(c).is_err()) {
        return Err(missing(m));
    }
    Ok(cpus)
}

/// The most threads one option may ask for (`load --workers`, `probe
/// --threads`): the CPU affinity mask holds 1024 CPUs, and far more threads
/// than that fail in thread or ring creation half-way through a run.
pub const MAX_THREADS: usize = 1024;

/// Refuses 0 or more than [`MAX_THREADS`] threads for `option`.
pub fn check_threads(option: &str, n: usize) -> Result<usize, UsageError> {
    if n == 0 || n > MAX_THREADS {
        return Err(UsageError::new(
            option,
            format!("{n} is out of range; use 1 to {MAX_THREADS}"),
        ));
    }
    Ok(n)
}

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set, and
    // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            return (0..n).collect();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Formats a CPU list compactly: `[0,1,2,5]` -> `0-2,5`.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// Pins the calling thread to the given CPUs.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in allowed_cpus; CPU_SET only touches bits inside the set,
    // and every index is checked against CPU_SETSIZE first.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The CPU the calling thread runs on right now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no arguments and only returns a number.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists_parse() {
        use super::parse_kernel_list as parse;
        assert_eq!(parse("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse("0,20\n"), Some(vec![0, 20]));
        assert_eq!(parse(""), Some(vec![]));
        assert_eq!(parse("x"), None);
        // Found by tests/fuzz.rs: a huge range was expanded (and aborted).
        assert_eq!(parse("0-18446744073709551615"), None);
        assert_eq!(parse("3-1"), None);
        assert_eq!(parse("8192"), None);
    }

    #[test]
    fn parses_and_formats() {
        let first = allowed_cpus()[0];
        assert_eq!(
            parse_cpu_list("--cpus-allowed", &first.to_string()).unwrap(),
            vec![first]
        );
        assert_eq!(format_cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert!(parse_cpu_list("--cpus-allowed", "3-1").is_err());
        assert!(parse_cpu_list("--cpus-allowed", "a").is_err());
        let e = parse_cpu_list("--cpus-allowed", "100000").unwrap_err();
        assert!(e.message.contains("does not exist"), "{e}");
    }

    /// Issue 14 item 5: `0-4294967295` was expanded (32 GiB) before it was
    /// checked.
    #[test]
    fn huge_cpu_range_is_refused_before_expansion() {
        let allowed = [0, 1, 2, 3];
        for t in [
            "0-4294967295",
            "0-18446744073709551615",
            "0-99999999999999999999999",
            "4294967295",
        ] {
            let e = parse_cpu_list_within("--cpus-allowed", t, &allowed).unwrap_err();
            assert!(e.message.contains("does not exist"), "{t}: {e}");
            let first = if t == "4294967295" {
                "CPU 4294967295 "
            } else {
                "CPU 4 "
            };
            assert!(e.message.contains(first), "{t}: {e}");
        }
        // A long list of repeated ranges stays within the bitmap.
        let many = vec!["0-3"; 200_000].join(",");
        assert_eq!(
            parse_cpu_list_within("--cpus-allowed", &many, &allowed).unwrap(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            parse_cpu_list_within("--cpus-allowed", "3,1-2,1", &[0, 1, 2, 3]).unwrap(),
            vec![1, 2, 3]
        );
        let e = parse_cpu_list_within("--cpus-allowed", "0-3", &[0, 2, 3]).unwrap_err();
        assert!(e.message.contains("CPU 1 "), "{e}");
        assert!(parse_cpu_list_within("--cpus-allowed", "-1", &allowed).is_err());
        assert!(parse_cpu_list_within("--cpus-allowed", "+1", &allowed).is_err());
    }

    #[test]
    fn pins() {
        let first = allowed_cpus()[0];
        std::thread::spawn(move || {
            pin_current_thread(&[first]).unwrap();
            assert_eq!(current_cpu(), Some(first));
        })
        .join()
        .unwrap();
    }
}
