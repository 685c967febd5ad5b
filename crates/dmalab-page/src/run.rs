//! The parent side of a run: check the host, clean up leftovers of killed
//! runs, set up (settings, swap, cgroup) through the ledger, start the worker
//! child inside the cgroup, wait for it (forwarding SIGINT/SIGTERM), undo
//! everything and build the result.

use crate::cgroup::{self, MemCgroup, Version};
use crate::config::{ClassifyMethod, PageConfig, SwapSpec};
use crate::report::{
    ClassHists, FaultAccounting, PageResult, SetupReport, SwapUse, Table2, ThreadSummary,
    VmstatReport,
};
use crate::state::{self, Ledger};
use crate::swap;
use crate::sysinfo::Vmstat;
use crate::worker::{WorkerOut, WorkerPlan};
use dmalab_core::hist::LatHist;
use dmalab_core::ledger::{DirRemoval, Ident, Step};
use dmalab_core::sys::swaps::read_swaps;
use dmalab_core::UsageError;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// Bad input (exit 2).
    #[error("{0}")]
    Usage(#[from] UsageError),
    /// Missing privilege.
    #[error("{0}")]
    NeedRoot(String),
    /// The host lacks something or refused a change.
    #[error("{0}")]
    Setup(String),
    /// The worker failed.
    #[error("{0}")]
    Worker(String),
}

/// How to start the worker (the binary re-executes itself).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Executable of the worker (normally the dmalab binary itself).
    pub worker_exe: PathBuf,
    /// Its arguments (the hidden worker subcommand).
    pub worker_args: Vec<String>,
    /// Where ledgers live (normally [`state::STATE_DIR`]).
    pub state_dir: PathBuf,
}

/// A finished (or interrupted) run.
#[derive(Debug)]
pub struct Outcome {
    /// The figures.
    pub result: PageResult,
    /// Stopped early by SIGINT/SIGTERM.
    pub interrupted: bool,
    /// Things the user should know.
    pub warnings: Vec<String>,
}

fn setup_err(what: &str) -> impl Fn(std::io::Error) -> PageError + '_ {
    move |e| PageError::Setup(format!("{what}: {e}"))
}

/// Checks what can be checked before anything on the host changes.
fn precheck(cfg: &PageConfig) -> Result<Option<cgroup::MemoryHierarchy>, PageError> {
    match &cfg.swap {
        SwapSpec::Existing => {}
        SwapSpec::Zram { .. } => {
            if !swap::zram_available() {
                return Err(PageError::Setup(
                    "--swap zram: this kernel has no /sys/class/zram-control; load the zram module (modprobe zram) or use --swap file:PATH:SIZE".into(),
                ));
            }
        }
        SwapSpec::File { path, size_bytes } => {
            if path.exists() {
                return Err(UsageError::new(
                    "--swap",
                    format!("{} already exists; dmalab creates the swap file itself and never overwrites a file: name a new path", path.display()),
                )
                .into());
            }
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            if !parent.is_dir() {
                return Err(UsageError::new(
                    "--swap",
                    format!("directory {} does not exist", parent.display()),
                )
                .into());
            }
            let fs = dmalab_core::host::filesystem_type(&parent).unwrap_or_default();
            if swap::NO_SWAPFILE_FS.contains(&fs.as_str()) {
                return Err(UsageError::new(
                    "--swap",
                    format!("{} is on {fs}, which cannot hold a swap file; put it on a disk filesystem such as ext4 or xfs, or use --swap zram", path.display()),
                )
                .into());
            }
            dmalab_core::sys::check_room(
                &parent,
                *size_bytes,
                "--swap",
                "choose a smaller SIZE in --swap file:PATH:SIZE, a PATH on a filesystem with room, or --swap zram",
            )?;
        }
        SwapSpec::Dev { .. } => {}
    }
    if cfg.changes_host() && !dmalab_core::sys::is_root() {
        return Err(PageError::NeedRoot(
            "--memory-limit, --swap (other than existing), --page-cluster and --swappiness change the host: \
             they need root (CAP_SYS_ADMIN for cgroups, swapon and sysctls); run dmalab as root, e.g. with sudo"
                .into(),
        ));
    }
    if let SwapSpec::Dev { path } = &cfg.swap {
        crate::devguard::check_swap_device(path, cfg.allow_destroy.as_deref())?;
    }
    if cfg.memory_limit_bytes.is_some() {
        let h = cgroup::detect()
            .ok_or_else(|| PageError::Setup(cgroup::CgroupError::NoController.to_string()))?;
        return Ok(Some(h));
    }
    Ok(None)
}

/// Sets up the swap area of `cfg.swap`, recording each step in the ledger.
fn setup_swap(cfg: &PageConfig, ledger: &mut Ledger) -> Result<Option<PathBuf>, PageError> {
    let ledger_err = setup_err("cannot write the ledger under /run/dmalab");
    match &cfg.swap {
        SwapSpec::Existing => Ok(None),
        SwapSpec::Zram {
            size_bytes,
            algorithm,
        } => {
            let id = swap::zram_hot_add().map_err(setup_err("zram hot_add"))?;
            ledger
                .record(Step::ZramRemove { id })
                .map_err(&ledger_err)?;
            if let Some(a) = algorithm {
                let algs = swap::zram_algorithms(id);
                if !algs.iter().any(|x| x == a) {
                    return Err(UsageError::new(
                        "--swap",
                        format!(
                            "zram has no compression algorithm '{a}'; this kernel offers {}",
                            algs.join(", ")
                        ),
                    )
                    .into());
                }
            }
            // Twice the map: a page swapped back in keeps its swap slot while
            // it sits in the swap cache, so slots for the whole map plus the
            // resident part can be taken at once; a zram device sized to the
            // map alone fills up and the cgroup OOM-kills the worker.
            let size = size_bytes.unwrap_or((2 * cfg.map_bytes).max(64 << 20));
            swap::zram_configure(id, size, algorithm.as_deref())
                .map_err(setup_err("configure zram"))?;
            let dev = PathBuf::from(format!("/dev/zram{id}"));
            // udev may take a moment to create the node.
            let t0 = Instant::now();
            while !dev.exists() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&dev)
                .map_err(setup_err("open the new zram device"))?;
            swap::write_swap_header(&mut f, size).map_err(setup_err("write swap header"))?;
            drop(f);
            ledger
                .record(Step::Swapoff { path: dev.clone() })
                .map_err(&ledger_err)?;
            swap::swapon_highest(&dev).map_err(setup_err("swapon zram"))?;
            Ok(Some(dev))
        }
        SwapSpec::File { path, size_bytes } => {
            let file = ledger
                .record(Step::remove_file(path))
                .map_err(&ledger_err)?;
            swap::create_swap_file(path, *size_bytes).map_err(setup_err("create swap file"))?;
            ledger.created(file).map_err(&ledger_err)?;
            ledger
                .record(Step::Swapoff { path: path.clone() })
                .map_err(&ledger_err)?;
            swap::swapon_highest(path).map_err(|e| {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    PageError::Usage(UsageError::new(
                        "--swap",
                        format!("the filesystem holding {} cannot hold a swap file (swapon: {e}); use ext4 or xfs, or --swap zram", path.display()),
                    ))
                } else {
                    PageError::Setup(format!("swapon {}: {e}", path.display()))
                }
            })?;
            Ok(Some(path.clone()))
        }
        SwapSpec::Dev { path } => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_EXCL)
                .open(path)
                .map_err(setup_err("open swap device exclusively"))?;
            let size = dmalab_core::sys::blockdev::block_device_size(&f)
                .map_err(setup_err("size of swap device"))?;
            ledger
                .record(Step::WipeSwapHeader {
                    path: path.clone(),
                    ident: Some(Ident::of(path).map_err(setup_err("stat swap device"))?),
                })
                .map_err(&ledger_err)?;
            ledger
                .record(Step::Swapoff { path: path.clone() })
                .map_err(&ledger_err)?;
            swap::write_swap_header(&mut f, size).map_err(setup_err("write swap header"))?;
            drop(f);
            swap::swapon_highest(path).map_err(setup_err("swapon"))?;
            Ok(Some(path.clone()))
        }
    }
}

use std::os::unix::fs::OpenOptionsExt;

/// Runs `dmalab page` as configured.
pub fn run_page(cfg: &PageConfig, opts: &RunOptions) -> Result<Outcome, PageError> {
    cfg.validate()?;
    let hierarchy = precheck(cfg)?;
    // One host-changing run at a time: two would each restore what they
    // found (leaving the first run's settings for good) and move each
    // other's pages to their own swap.
    let _host_lock = if cfg.changes_host() {
        dmalab_core::lock::host_lock(&opts.state_dir, "page")?
    } else {
        None
    };
    let mut setup = SetupReport::default();
    let mut warnings = Vec::new();
    if dmalab_core::sys::is_root() {
        let r = state::cleanup_leftovers(&opts.state_dir);
        setup.leftovers_removed = r.done;
        for e in r.errors {
            warnings.push(format!("leftover cleanup: {e}"));
        }
    }
    let mut ledger = if cfg.changes_host() {
        Some(
            Ledger::create(&opts.state_dir)
                .map_err(setup_err("cannot create the ledger under /run/dmalab"))?,
        )
    } else {
        None
    };
    let r = run_with_ledger(
        cfg,
        opts,
        hierarchy,
        ledger.as_mut(),
        &mut setup,
        &mut warnings,
    );
    if let Some(l) = ledger.as_mut() {
        setup.settings = l.settings().to_vec();
        setup.cleanup_errors = l.undo();
    }
    let (mut result, interrupted) = r?;
    for e in &setup.cleanup_errors {
        warnings.push(format!("cleanup failed: {e}; run `dmalab cleanup`"));
    }
    result.setup = setup;
    Ok(Outcome {
        result,
        interrupted,
        warnings,
    })
}

fn run_with_ledger(
    cfg: &PageConfig,
    opts: &RunOptions,
    hierarchy: Option<cgroup::MemoryHierarchy>,
    ledger: Option<&mut Ledger>,
    setup: &mut SetupReport,
    warnings: &mut Vec<String>,
) -> Result<(PageResult, bool), PageError> {
    let ledger_err = setup_err("cannot write the ledger under /run/dmalab");
    let mut added_swap = None;
    let mut cg: Option<MemCgroup> = None;
    if let Some(l) = ledger {
        if let Some(pc) = cfg.page_cluster {
            state::change_setting(l, Path::new("/proc/sys/vm/page-cluster"), &pc.to_string())
                .map_err(setup_err("set /proc/sys/vm/page-cluster"))?;
        }
        let v1_limit = hierarchy.as_ref().is_some_and(|h| h.version == Version::V1);
        if let Some(s) = cfg.swappiness {
            if !v1_limit {
                // cgroup v2 (or no cgroup): only the global knob exists.
                state::change_setting(l, Path::new("/proc/sys/vm/swappiness"), &s.to_string())
                    .map_err(setup_err("set /proc/sys/vm/swappiness"))?;
            }
        }
        added_swap = setup_swap(cfg, l)?;
        if let (Some(h), Some(limit)) = (&hierarchy, cfg.memory_limit_bytes) {
            let path = MemCgroup::path_for(h, std::process::id());
            let made = l
                .record(Step::remove_dir(&path, DirRemoval::Cgroup))
                .map_err(&ledger_err)?;
            let c = MemCgroup::create(
                h,
                std::process::id(),
                limit,
                if v1_limit { cfg.swappiness } else { None },
            )
            .map_err(|e| PageError::Setup(e.to_string()))?;
            l.created(made).map_err(&ledger_err)?;
            if v1_limit {
                if let Some(s) = cfg.swappiness {
                    // Goes with the cgroup: reported, nothing to undo.
                    l.report_setting(state::SettingChange {
                        path: c.path.join("memory.swappiness"),
                        old: "(cgroup default)".into(),
                        new: s.to_string(),
                    });
                }
            }
            setup.cgroup = Some(c.path.clone());
            setup.cgroup_version = Some(match c.version {
                Version::V1 => "v1".into(),
                Version::V2 => "v2".into(),
            });
            setup.memory_limit_bytes = Some(limit);
            cg = Some(c);
        }
    }
    if cfg.memory_limit_bytes.is_some()
        && matches!(cfg.swap, SwapSpec::Existing)
        && read_swaps().is_empty()
    {
        warnings.push("--memory-limit without any swap: pages cannot be swapped out, and the worker will be OOM-killed if it needs more than the limit; add --swap zram".into());
    }
    let (out, interrupted) = spawn_worker(cfg, opts, cg.as_ref())?;
    let post_unmap = Vmstat::read();
    warnings.extend(out.warnings.iter().cloned());
    let result = build_result(cfg, &out, post_unmap, added_swap.as_deref())?;
    Ok((result, interrupted))
}

fn spawn_worker(
    cfg: &PageConfig,
    opts: &RunOptions,
    cg: Option<&MemCgroup>,
) -> Result<(WorkerOut, bool), PageError> {
    let plan = WorkerPlan {
        config: cfg.clone(),
        cgroup: cg.map(|c| c.path.clone()),
    };
    let plan_json = serde_json::to_vec(&plan).map_err(|e| PageError::Worker(e.to_string()))?;
    let procs_fd = match cg {
        Some(c) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .open(c.procs_file())
                .map_err(setup_err("open cgroup.procs"))?,
        ),
        None => None,
    };
    let raw_fd = procs_fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    let mut cmd = Command::new(&opts.worker_exe);
    cmd.args(&opts.worker_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // Die with the parent, even on kill -9, so the cgroup empties.
    dmalab_core::process::prepare(
        &mut cmd,
        &dmalab_core::process::Setup {
            parent_death: Some(libc::SIGKILL),
            ..Default::default()
        },
    );
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe calls (getpid, write) on stack data.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = raw_fd {
                // Join the cgroup before exec maps anything: format our pid
                // without allocating.
                let mut buf = [0u8; 16];
                let mut n = libc::getpid() as u32;
                let mut i = buf.len();
                loop {
                    i -= 1;
                    buf[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                let len = buf.len() - i;
                if libc::write(fd, buf[i..].as_ptr().cast(), len) != len as isize {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        PageError::Worker(format!(
            "cannot start the worker {}: {e}",
            opts.worker_exe.display()
        ))
    })?;
    drop(procs_fd);
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(&plan_json)
            .map_err(|e| PageError::Worker(format!("cannot hand the plan to the worker: {e}")))?;
    }
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| PageError::Worker("worker has no stdout".into()))?;
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stdout.read_to_end(&mut s);
        s
    });
    let mut forwarded: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(PageError::Worker(format!("waiting for the worker: {e}"))),
        }
        if dmalab_core::signal::stop_requested() {
            match forwarded {
                None => {
                    // SAFETY: kill has no memory arguments; the pid is our
                    // own unreaped child.
                    unsafe {
                        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
                    }
                    forwarded = Some(Instant::now());
                }
                Some(t) if t.elapsed() > Duration::from_secs(15) => {
                    let _ = child.kill();
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let bytes = reader.join().unwrap_or_default();
    let interrupted = forwarded.is_some();
    if !status.success() {
        let oom = cg.map_or(0, MemCgroup::oom_kills);
        if oom > 0 {
            return Err(PageError::Worker(oom_message(&cfg.swap, oom)));
        }
        let how = match status.signal() {
            Some(s) => format!("killed by signal {s}"),
            None => format!("exit status {}", status.code().unwrap_or(-1)),
        };
        return Err(PageError::Worker(format!("the worker failed ({how})")));
    }
    let out: WorkerOut = serde_json::from_slice(&bytes)
        .map_err(|e| PageError::Worker(format!("unreadable worker output: {e}")))?;
    let interrupted = interrupted || out.interrupted;
    Ok((out, interrupted))
}

/// What to say when the worker was OOM-killed in its cgroup: the advice
/// depends on whether the run already added swap.
fn oom_message(swap: &SwapSpec, kills: u64) -> String {
    let head = format!("the worker was OOM-killed in its cgroup ({kills} kill(s))");
    match swap {
        SwapSpec::Existing => format!(
            "{head}: --memory-limit is too small for what it must keep resident and the host's swap could not take the rest; add --swap zram or raise the limit"
        ),
        _ => format!(
            "{head} although the run had its own swap (--swap): the swap area filled up or could not take pages out fast enough; give it more room (a larger --swap size, e.g. zram:2G), a smaller --set or --map, or raise --memory-limit"
        ),
    }
}

fn build_result(
    cfg: &PageConfig,
    out: &WorkerOut,
    post_unmap: Vmstat,
    added_swap: Option<&Path>,
) -> Result<PageResult, PageError> {
    let classified = cfg.classify != ClassifyMethod::None;
    let mut read = ClassHists::default();
    let mut write = ClassHists::default();
    let mut threads = Vec::new();
    let mut busy_ns = 0u64;
    let (mut maj, mut min, mut maj_out, mut min_out) = (0, 0, 0, 0);
    for t in &out.threads {
        let mut th = [ClassHists::default(), ClassHists::default()];
        for (rw, hs) in t.hists.iter().enumerate().take(2) {
            for (c, enc) in hs.iter().enumerate().take(3) {
                th[rw].class[c] = LatHist::decode(enc).ok_or_else(|| {
                    PageError::Worker("worker sent an undecodable histogram".into())
                })?;
            }
        }
        read.merge(&th[0]);
        write.merge(&th[1]);
        let mut all = th[0].all();
        all.merge(&th[1].all());
        threads.push(ThreadSummary {
            accesses: t.accesses,
            measured_ns: t.measured_ns,
            mean_ns: if all.is_empty() { 0.0 } else { all.mean() },
        });
        busy_ns += t.measured_ns;
        maj += t.majflt_in_access;
        min += t.minflt_in_access;
        maj_out += t.majflt_outside;
        min_out += t.minflt_outside;
    }
    let mut total = read.clone();
    total.merge(&write);
    let all = total.all();
    let table2 = Table2::compute(
        &all,
        classified.then_some(&total.class[2]),
        busy_ns,
        cfg.media_latency_ns,
    );
    let cgroup = match (out.cg_pre_run, out.cg_post_run) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    let diff = cgroup.filter(|_| classified).map(|c| {
        if c.pgmajfault == 0 {
            if maj == 0 {
                0.0
            } else {
                100.0
            }
        } else {
            (maj as f64 - c.pgmajfault as f64).abs() * 100.0 / c.pgmajfault as f64
        }
    });
    let faults = FaultAccounting {
        method: match cfg.classify {
            ClassifyMethod::Rusage => "rusage".into(),
            ClassifyMethod::Perf => "perf".into(),
            ClassifyMethod::None => "none".into(),
        },
        classifier_call_ns: if cfg.classify == ClassifyMethod::Rusage {
            out.classifier_call_ns
        } else {
            0.0
        },
        major_faults: maj,
        minor_faults: min,
        major_outside_access: maj_out,
        minor_outside_access: min_out,
        cgroup,
        cgroup_major_diff_pct: diff,
    };
    let vmstat = VmstatReport {
        pre_warmup: out.vm_pre_warmup,
        pre_run: out.vm_pre_run,
        post_run: out.vm_post_run,
        post_unmap,
        warmup_delta: out.vm_pre_run.since(&out.vm_pre_warmup),
        run_delta: out.vm_post_run.since(&out.vm_pre_run),
        after_delta: post_unmap.since(&out.vm_post_run),
    };
    let mut swap = Vec::new();
    for post in &out.swaps_post_run {
        let pre = out.swaps_pre_run.iter().find(|s| s.path == post.path);
        let pre_used = pre.map_or(0, |s| s.used_bytes);
        let added = added_swap.is_some_and(|a| a == post.path);
        swap.push(SwapUse {
            path: post.path.clone(),
            added_by_dmalab: added,
            priority: post.priority,
            size_bytes: post.size_bytes,
            used_pre_run_bytes: pre_used,
            used_post_run_bytes: post.used_bytes,
            received_pages: post.used_bytes > pre_used || (added && post.used_bytes > 0),
        });
    }
    Ok(PageResult {
        runtime_ns: out.run_ns,
        warmup_ns: out.warmup_ns,
        total: total.summarise(classified),
        read: read.summarise(classified),
        write: write.summarise(classified),
        table2,
        faults,
        vmstat,
        swap,
        setup: SetupReport::default(),
        threads,
        timer: out.timer.clone(),
        timer_hz: out.timer_hz,
        timer_overhead_ns: out.timer_overhead_ns,
    })
}

/// The worker's entry point: reads a [`WorkerPlan`] from stdin, measures,
/// writes a [`WorkerOut`] to stdout. Returns the process exit code.
pub fn worker_main() -> i32 {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("dmalab page worker: cannot read the plan: {e}");
        return 1;
    }
    let plan: WorkerPlan = match serde_json::from_slice(&input) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("dmalab page worker: bad plan: {e}");
            return 1;
        }
    };
    match crate::worker::run(&plan, dmalab_core::signal::stop_flag()) {
        Ok(out) => {
            let text = match serde_json::to_string(&out) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("dmalab page worker: {e}");
                    return 1;
                }
            };
            let mut so = std::io::stdout().lock();
            if so
                .write_all(text.as_bytes())
                .and_then(|_| so.flush())
                .is_err()
            {
                return 1;
            }
            0
        }
        Err(e) => {
            eprintln!("dmalab page worker: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_errors_print_each_cause_once() {
        let e = PageError::from(UsageError::new("--map", "bad"));
        let u = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<UsageError>());
        assert_eq!(u, Some(&UsageError::new("--map", "bad")));
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let e = crate::cgroup::CgroupError::Io {
            what: "create cgroup",
            path: "/sys/fs/cgroup/x".into(),
            cause: io,
        };
        assert_eq!(
            dmalab_core::error::chain_line(&e),
            "create cgroup /sys/fs/cgroup/x: denied"
        );
    }

    #[test]
    fn oom_message_does_not_advise_the_swap_already_given() {
        let zram = SwapSpec::Zram {
            size_bytes: None,
            algorithm: None,
        };
        assert!(!oom_message(&zram, 1).contains("add --swap zram"));
        assert!(oom_message(&zram, 1).contains("OOM-killed"));
        assert!(oom_message(&SwapSpec::Existing, 2).contains("add --swap zram"));
    }
}
