//! CPU lists (`0-3,6`) as fio's `cpus_allowed` takes them, checked against the
//! CPUs this process may run on, and thread pinning.

use crate::error::UsageError;

/// Parses a CPU list such as `0`, `0-3`, `0,2,4-5`. The result is sorted and
/// free of duplicates. Every CPU must be in [`allowed_cpus`].
pub fn parse_cpu_list(option: &str, text: &str) -> Result<Vec<usize>, UsageError> {
    let mut cpus = Vec::new();
    let bad = |what: &str| {
        UsageError::new(
            option,
            format!("'{text}' is not a CPU list ({what}); use e.g. 0, 0-3 or 0,2,4-5"),
        )
    };
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad("empty item"));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: usize = lo.parse().map_err(|_| bad("not a number"))?;
        let hi: usize = hi.parse().map_err(|_| bad("not a number"))?;
        if hi < lo {
            return Err(bad("range runs backwards"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    let allowed = allowed_cpus();
    if let Some(missing) = cpus.iter().find(|c| !allowed.contains(c)) {
        return Err(UsageError::new(
            option,
            format!(
                "CPU {missing} does not exist or is not available to this process (available: {}); choose from those",
                format_cpu_list(&allowed)
            ),
        ));
    }
    Ok(cpus)
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
