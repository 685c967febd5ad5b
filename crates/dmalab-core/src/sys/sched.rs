//! What the scheduler and the interrupt counters say about a process and a
//! set of CPUs, from files every Linux host has (no PMU): a task's run time,
//! run-queue wait and time slices (`/proc/PID/schedstat`), its CPU
//! migrations (`/proc/PID/sched`, kernels with `CONFIG_SCHED_DEBUG`), its
//! user and system time (`/proc/PID/stat`), interrupts and softirqs per CPU
//! (`/proc/interrupts`, `/proc/softirqs`), steal time per CPU
//! (`/proc/stat`), and the runnable tasks on a set of CPUs
//! (`/proc/PID/task/TID/stat`).
//!
//! Parsers take text, so the tests feed them fixtures; the readers beside
//! them read the live files.

use std::collections::BTreeMap;

/// `/proc/PID/schedstat`: the task's time on a CPU, its time waiting on a
/// run queue, and the number of time slices it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time on a CPU, nanoseconds.
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU, nanoseconds.
    pub wait_ns: u64,
    /// Time slices run.
    pub timeslices: u64,
}

/// Parses `/proc/PID/schedstat` text (`run_ns wait_ns timeslices`).
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut it = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some(SchedStat {
        run_ns: it.next()??,
        wait_ns: it.next()??,
        timeslices: it.next()??,
    })
}

/// Reads a task's `/proc/PID/schedstat` (None when it is gone or the
/// kernel lacks `CONFIG_SCHEDSTATS`).
pub fn schedstat(pid: i32) -> Option<SchedStat> {
    parse_schedstat(&std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?)
}

/// `se.nr_migrations` of `/proc/PID/sched` text.
pub fn parse_migrations(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.trim_start().starts_with("se.nr_migrations"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// A task's CPU migrations (None without `CONFIG_SCHED_DEBUG`).
pub fn migrations(pid: i32) -> Option<u64> {
    parse_migrations(&std::fs::read_to_string(format!("/proc/{pid}/sched")).ok()?)
}

/// Nanoseconds per clock tick (`USER_HZ`), the unit of `/proc/stat` and
/// `/proc/PID/stat` times.
pub fn ns_per_tick() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }
}

/// The fields of `/proc/PID/stat` text after the command name (which may
/// hold spaces and parentheses): field 3 (the state) is element 0.
fn stat_fields(text: &str) -> Option<Vec<&str>> {
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// User plus system time of `/proc/PID/stat` text, clock ticks (a process's
/// file counts all its threads).
pub fn parse_stat_cpu_ticks(text: &str) -> Option<u64> {
    let f = stat_fields(text)?;
    // utime and stime are fields 14 and 15: elements 11 and 12.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// A process's user plus system time, nanoseconds (resolution one tick).
pub fn cpu_time_ns(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat_cpu_ticks(&text)? * ns_per_tick())
}

/// State and last CPU of `/proc/PID/task/TID/stat` text: (`R`, 1).
pub fn parse_stat_state_cpu(text: &str) -> Option<(char, usize)> {
    let f = stat_fields(text)?;
    // The state is field 3 (element 0), the last CPU field 39 (element 36).
    Some((f.first()?.chars().next()?, f.get(36)?.parse().ok()?))
}

/// Tasks (threads) that are runnable or running on one of `cpus` now,
/// leaving out the thread group `skip` (the caller). A task's CPU is the
/// one it last ran on.
pub fn runnable_on(cpus: &[usize], skip: i32) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == skip {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            if let Some(('R', cpu)) = parse_stat_state_cpu(&text) {
                if cpus.contains(&cpu) {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Column index of each `CPUn` in the header line of `/proc/interrupts` or
/// `/proc/softirqs`.
fn cpu_columns(header: &str) -> Vec<Option<usize>> {
    header
        .split_whitespace()
        .map(|c| c.strip_prefix("CPU").and_then(|n| n.parse().ok()))
        .collect()
}

/// Per-row sums over `cpus` of `/proc/interrupts` or `/proc/softirqs` text:
/// row name (`TIMER`, `NET_RX`, `24`, `LOC`) -> count. Rows with fewer
/// columns than CPUs (`ERR`, `MIS`) are left out.
pub fn parse_per_cpu_table(text: &str, cpus: &[usize]) -> BTreeMap<String, u64> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return BTreeMap::new();
    };
    let cols = cpu_columns(header);
    let mut out = BTreeMap::new();
    for l in lines {
        let Some((name, rest)) = l.split_once(':') else {
            continue;
        };
        let vals: Vec<&str> = rest.split_whitespace().take(cols.len()).collect();
        if vals.len() < cols.len() {
            continue;
        }
        let mut sum = 0u64;
        let mut ok = true;
        for (v, c) in vals.iter().zip(&cols) {
            match (v.parse::<u64>(), c) {
                (Ok(x), Some(c)) if cpus.contains(c) => sum += x,
                (Ok(_), _) => {}
                (Err(_), _) => ok = false,
            }
        }
        if ok {
            out.insert(name.trim().to_string(), sum);
        }
    }
    out
}

/// Interrupts per source on `cpus` so far (`/proc/interrupts`).
pub fn interrupts_on(cpus: &[usize]) -> Option<BTreeMap<String, u64>> {
    Some(parse_per_cpu_table(
        &std::fs::read_to_string("/proc/interrupts").ok()?,
        cpus,
    ))
}

/// Softirqs per kind on `cpus` so far (`/proc/softirqs`).
pub fn softirqs_on(cpus: &[usize]) -> Option<BTreeMap<String, u64>> {
    Some(parse_per_cpu_table(
        &std::fs::read_to_string("/proc/softirqs").ok()?,
        cpus,
    ))
}

/// Steal ticks summed over `cpus`, from `/proc/stat` text (`cpuN` lines,
/// the eighth value).
pub fn parse_steal_ticks_on(stat: &str, cpus: &[usize]) -> u64 {
    stat.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let cpu: usize = it.next()?.strip_prefix("cpu")?.parse().ok()?;
            if !cpus.contains(&cpu) {
                return None;
            }
            it.nth(7)?.parse::<u64>().ok()
        })
        .sum()
}

/// Steal time on `cpus` so far, nanoseconds (resolution one tick).
pub fn steal_ns_on(cpus: &[usize]) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    Some(parse_steal_ticks_on(&stat, cpus) * ns_per_tick())
}

/// All ticks (busy, idle and stolen) on `cpus` so far, from `/proc/stat`
/// text: the denominator of a steal share.
pub fn parse_total_ticks_on(stat: &str, cpus: &[usize]) -> u64 {
    stat.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let cpu: usize = it.next()?.strip_prefix("cpu")?.parse().ok()?;
            if !cpus.contains(&cpu) {
                return None;
            }
            Some(
                it.take(8)
                    .filter_map(|x| x.parse::<u64>().ok())
                    .sum::<u64>(),
            )
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_and_migrations() {
        assert_eq!(
            parse_schedstat("61133090 98253817 172\n"),
            Some(SchedStat {
                run_ns: 61133090,
                wait_ns: 98253817,
                timeslices: 172
            })
        );
        assert_eq!(parse_schedstat("12 x\n"), None);
        let sched = "bash (15916, #threads: 1)\n---\nse.exec_start   :   612944.569894\nse.nr_migrations                             :                   13\nnr_switches : 172\n";
        assert_eq!(parse_migrations(sched), Some(13));
        assert_eq!(parse_migrations("nr_switches : 1\n"), None);
    }

    #[test]
    fn stat_fields_survive_a_command_name_with_spaces_and_parens() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
        // majflt cmajflt utime stime ... processor is field 39.
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[0] = "R".into();
        fields[11] = "150".into(); // utime
        fields[12] = "50".into(); // stime
        fields[36] = "1".into(); // processor
        let text = format!("42 (a (b) c) {}\n", fields.join(" "));
        assert_eq!(parse_stat_cpu_ticks(&text), Some(200));
        assert_eq!(parse_stat_state_cpu(&text), Some(('R', 1)));
    }

    #[test]
    fn per_cpu_tables_sum_the_chosen_cpus() {
        let softirqs = "                    CPU0       CPU1       \n          HI:          1          2\n       TIMER:      21833      18657\n";
        let t = parse_per_cpu_table(softirqs, &[1]);
        assert_eq!(t.get("TIMER"), Some(&18657));
        assert_eq!(t.get("HI"), Some(&2));
        let interrupts = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\nLOC:     100     200   Local timer interrupts\nERR:          0\n";
        let t = parse_per_cpu_table(interrupts, &[0, 1]);
        assert_eq!(t.get("24"), Some(&1));
        assert_eq!(t.get("LOC"), Some(&300));
        assert_eq!(t.get("ERR"), None, "a row without per-CPU columns");
    }

    #[test]
    fn steal_and_total_ticks_of_chosen_cpus() {
        let stat = "cpu  10 0 10 100 0 0 0 9 0 0\ncpu0 5 0 5 50 0 0 0 4 0 0\ncpu1 5 0 5 50 0 0 0 5 0 0\nintr 1\n";
        assert_eq!(parse_steal_ticks_on(stat, &[1]), 5);
        assert_eq!(parse_steal_ticks_on(stat, &[0, 1]), 9);
        assert_eq!(parse_total_ticks_on(stat, &[0]), 64);
    }

    #[test]
    fn live_files_of_this_process_read() {
        let me = std::process::id() as i32;
        assert!(cpu_time_ns(me).is_some());
        // A kernel without schedstats has no file; where it has one, it parses.
        if std::path::Path::new("/proc/self/schedstat").exists() {
            assert!(schedstat(me).is_some());
        }
    }
}
