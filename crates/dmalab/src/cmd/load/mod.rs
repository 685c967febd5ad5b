//! `dmalab load`: flags into a target request and a plan (`flags.rs`), the
//! plan's rules, the engine's lifecycle, the run, its output. Everything
//! an engine knows lives behind its driver in `dmalab_load::engine`; this
//! file names no engine.

mod flags;

use anyhow::Context;
use dmalab_core::host::HostInfo;
use dmalab_core::output::{Accept, OutputGuard};
use dmalab_core::schema::{ResultDoc, RunStatus};
use dmalab_load::engine::{self, Driver};
pub use flags::Args;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

/// What `load` has checked before it changes anything.
struct Checked {
    /// The engine's driver, its target inspected.
    driver: Box<dyn Driver>,
    /// What the inspection found.
    target: dmalab_load::engine::TargetInfo,
    /// The plan, its rules checked.
    plan: dmalab_load::plan::Plan,
    /// The counters asked for.
    counters: Option<dmalab_counters::session::Request>,
}

/// What `load` checks before it changes anything: the target inspected,
/// the plan's rules, the counters asked for, the engine's preflight. It
/// creates nothing (see [`Driver`]).
fn checked(a: &flags::LoadArgs) -> anyhow::Result<Checked> {
    let mut driver = engine::driver(a.engine, &super::seams::engines());
    let target = driver.inspect(&a.target_request()?)?;
    let plan = a.plan(&target, driver.as_mut())?;
    plan.validate()?;
    let counters = super::counters::with_mode(
        super::counters::request("--counters", a.counters.as_deref())?,
        a.counters_mode.as_deref(),
        a.counters_run,
    )?;
    driver.preflight(&plan)?;
    Ok(Checked {
        driver,
        target,
        plan,
        counters,
    })
}

/// Checks the flags of a `dmalab load` that another command will start as
/// its child (`throttle`'s aggressor), with load's own definition and rules,
/// so bad flags are refused before that command measures anything. A bad
/// flag is a usage error of `option` that names the load flag at fault.
pub fn check_flags(option: &str, argv: &[String]) -> anyhow::Result<()> {
    use clap::Parser;
    #[derive(clap::Parser)]
    #[command(name = "dmalab load")]
    struct Load {
        #[command(flatten)]
        args: Args,
    }
    let parsed =
        Load::try_parse_from(std::iter::once("load").chain(argv.iter().map(String::as_str)))
            .map_err(|e| {
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or_default();
                dmalab_core::UsageError::new(option, first.strip_prefix("error: ").unwrap_or(first))
            })?;
    match checked(&parsed.args.inner) {
        Ok(_) => Ok(()),
        Err(e) => match e
            .chain()
            .find_map(|c| c.downcast_ref::<dmalab_core::UsageError>())
        {
            Some(u) => Err(dmalab_core::UsageError::new(option, u.to_string()).into()),
            None => Err(e.context(format!("{option}: dmalab load {}", argv.join(" ")))),
        },
    }
}

/// Runs `dmalab load`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let a = *args.inner;
    let started = SystemTime::now();
    let Checked {
        mut driver,
        target,
        mut plan,
        counters,
    } = checked(&a)?;
    // Every output before anything runs: none may be the target (or its
    // loop backing file), and --live-stats is a regular file or new.
    let mut guard = OutputGuard::new();
    if let Some(t) = &target.path {
        guard.protect("--target", t);
    }
    super::common::guard_buffer_file(&mut guard, plan.placement.buffer_file.as_deref())?;
    a.output.check(&mut guard)?;
    if let Some(o) = &a.trace {
        guard.check("--trace", o, Accept::FileOrStream)?;
    }
    if let Some(o) = &a.live_stats {
        guard.check("--live-stats", o, Accept::RegularFile)?;
    }
    if a.dry_run {
        outln!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(ExitCode::SUCCESS);
    }

    // Pools and files a killed run left (its ledger) go first.
    dmalab_core::ledger::cleanup_at_start();
    // Ready the target (this may create and fill a file, or format).
    driver.prepare(&mut plan)?;
    let driver: Arc<dyn Driver> = Arc::from(driver);
    let mut host = HostInfo::collect();
    host.target = driver.device(&plan);
    let quiet = a.output.quiet;
    let moves_data = driver.kind().moves_data();
    let mut on_sample = |s: &dmalab_load::result::Sample| {
        if !quiet {
            eprintln!("{}", s.line(moves_data));
        }
    };
    // Only a live-stats file this run creates may be removed on failure.
    let live_stats_new = plan
        .live_stats
        .as_deref()
        .is_some_and(|p| std::fs::symlink_metadata(p).is_err());
    let mut counting = super::counters::LoadCounting::new(counters, &mut on_sample);
    let stop = dmalab_core::signal::stop_flag();
    let result = dmalab_load::run::run_observed(&plan, driver.clone(), stop, &mut counting);
    if let (Some(ls), true) = (&plan.live_stats, live_stats_new) {
        let ours = std::fs::symlink_metadata(ls).is_ok_and(|m| m.file_type().is_file());
        if result.is_err() && ours {
            let _ = std::fs::remove_file(ls);
        }
    }
    let result = result.context("dmalab load")?;
    let mut text = driver.header();
    text.push_str(&result.text(plan.stream.bs_bytes));
    let counters = counting.finish(super::counters::load_accounting(&plan, &result));
    if let Some(c) = &counters {
        text.push_str(&c.text());
    }
    let failed = result.first_error.is_some();
    let interrupted = result.interrupted;
    let result = super::counters::WithCounters { result, counters };
    let mut doc = ResultDoc::new("load", host, plan, result, started);
    doc.status = if failed {
        RunStatus::Failed
    } else if interrupted {
        RunStatus::Interrupted
    } else {
        RunStatus::Completed
    };
    out!("{text}");
    a.output.write(&doc, &text)?;
    // What the driver created (a scratch file) goes now.
    drop(driver);
    if failed {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
