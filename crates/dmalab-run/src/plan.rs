//! The list of runs an experiment makes, in the order they are made.

use crate::experiment::{Experiment, Order, CONTROL_SUFFIX};
use crate::record::ControlOrder;

/// The load name of a run without an aggressor.
pub const PLAIN: &str = "plain";

/// One run to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRun {
    /// Position in the plan.
    pub index: usize,
    /// Index into `Experiment::configurations`.
    pub configuration: usize,
    /// Repetition, 1-based.
    pub repetition: u32,
    /// Index into `Experiment::victims`.
    pub victim: usize,
    /// Index into `Experiment::aggressors`, None for plain.
    pub aggressor: Option<usize>,
    /// Sweep value, in sweep mode.
    pub sweep_value: Option<String>,
    /// True for the control cycle of `aggressor` (its twin, or the
    /// aggressor it names as control, paced at its measured rate).
    pub control: bool,
}

/// The load name of an aggressor's control cycle: `random/control`.
pub fn control_load(aggressor: &str) -> String {
    format!("{aggressor}{CONTROL_SUFFIX}")
}

/// The aggressor a load name is the control of (`random/control` ->
/// `random`), or None for plain and the aggressors themselves.
pub fn controlled(load: &str) -> Option<&str> {
    load.strip_suffix(CONTROL_SUFFIX)
}

/// The load name a run is recorded under: `plain`, the aggressor, or its
/// control.
pub fn load_name(e: &Experiment, p: &PlannedRun) -> String {
    match p.aggressor {
        None => PLAIN.to_string(),
        Some(a) if p.control => control_load(&e.aggressors[a].name),
        Some(a) => e.aggressors[a].name.clone(),
    }
}

/// Where repetition `repetition`'s control cycles run against its loads.
///
/// Cycle order alternates by repetition, ABBA-style: the first repetition
/// (and every other one after it: 1, 3, 5...) runs its controls after the
/// loads, the others (2, 4...) before them, so a slow drift of the host
/// falls on loads and controls alike instead of always on the second. The
/// first must be after: a control is paced at the command rate its
/// aggressor reached, and before the first loaded run there is none.
/// Blocked order runs every repetition of a control after all of its load's.
pub fn control_order(e: &Experiment, repetition: u32) -> ControlOrder {
    match e.order {
        Order::Cycle if repetition.is_multiple_of(2) => ControlOrder::BeforeLoad,
        _ => ControlOrder::AfterLoad,
    }
}

/// Expands an experiment into its runs.
///
/// Cycle order (the default, as the thesis): for each configuration, for
/// each repetition, for each victim: plain, then every load. Blocked order
/// makes all repetitions of one load before the next. Control cycles come
/// after the loads in odd repetitions (plain, loads, controls) and before
/// them in even ones (plain, controls, loads; see [`control_order`]).
/// Sweep mode: for each configuration and repetition, each victim runs
/// plain (unless turned off) and then beside the swept aggressor at each
/// value.
pub fn expand(e: &Experiment) -> Vec<PlannedRun> {
    let mut runs = Vec::new();
    let mut push = |c, r, v, (a, control): (Option<usize>, bool), s: Option<String>| {
        runs.push(PlannedRun {
            index: 0,
            configuration: c,
            repetition: r,
            victim: v,
            aggressor: a,
            sweep_value: s,
            control,
        })
    };
    let aggressors: Vec<(Option<usize>, bool)> =
        (0..e.aggressors.len()).map(|a| (Some(a), false)).collect();
    let controls: Vec<(Option<usize>, bool)> = (0..e.aggressors.len())
        .filter(|&a| e.aggressors[a].control.is_some())
        .map(|a| (Some(a), true))
        .collect();
    let plain = [(None, false)];
    let loads = [&plain[..], &aggressors, &controls].concat();
    let controls_first = [&plain[..], &controls, &aggressors].concat();
    for c in 0..e.configurations.len() {
        if let Some(s) = &e.sweep {
            let a = e.aggressors.iter().position(|a| a.name == s.aggressor);
            for r in 1..=e.repetitions {
                for v in 0..e.victims.len() {
                    if s.include_plain {
                        push(c, r, v, (None, false), None);
                    }
                    for val in &s.values {
                        push(c, r, v, (a, false), Some(val.clone()));
                    }
                }
            }
            continue;
        }
        match e.order {
            Order::Cycle => {
                for r in 1..=e.repetitions {
                    let order = match control_order(e, r) {
                        ControlOrder::AfterLoad => &loads,
                        ControlOrder::BeforeLoad => &controls_first,
                    };
                    for v in 0..e.victims.len() {
                        for &a in order {
                            push(c, r, v, a, None);
                        }
                    }
                }
            }
            Order::Blocked => {
                for v in 0..e.victims.len() {
                    for &a in &loads {
                        for r in 1..=e.repetitions {
                            push(c, r, v, a, None);
                        }
                    }
                }
            }
        }
    }
    for (i, r) in runs.iter_mut().enumerate() {
        r.index = i;
    }
    runs
}

/// The load names in plan order (`plain` first).
pub fn load_names(e: &Experiment) -> Vec<String> {
    let mut v = vec![PLAIN.to_string()];
    match &e.sweep {
        Some(s) => v.push(s.aggressor.clone()),
        None => {
            v.extend(e.aggressors.iter().map(|a| a.name.clone()));
            v.extend(
                e.aggressors
                    .iter()
                    .filter(|a| a.control.is_some())
                    .map(|a| control_load(&a.name)),
            );
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn cycle_order_is_plain_then_each_load_repeated() {
        let e = crate::experiment::parse(
            Path::new("t.toml"),
            "[experiment]\nrepetitions = 2\n[[aggressor]]\nname=\"random\"\n[[aggressor]]\nname=\"single\"\n[[victim]]\nname=\"v\"\ncommand=\"idle\"\nduration=\"1s\"\n",
            &crate::child::test_catalog(),
        )
        .unwrap();
        let runs = expand(&e);
        let seq: Vec<(u32, Option<usize>)> =
            runs.iter().map(|r| (r.repetition, r.aggressor)).collect();
        assert_eq!(
            seq,
            [
                (1, None),
                (1, Some(0)),
                (1, Some(1)),
                (2, None),
                (2, Some(0)),
                (2, Some(1))
            ]
        );
        assert_eq!(runs.last().unwrap().index, 5);
    }

    #[test]
    fn controls_alternate_after_and_before_the_loads_by_repetition() {
        let e = crate::experiment::parse(
            Path::new("t.toml"),
            "[experiment]\nrepetitions = 2\ncontrol = \"auto\"\n[[aggressor]]\nname=\"random\"\n[[aggressor]]\nname=\"single\"\ncontrol=\"none\"\n[[victim]]\nname=\"v\"\ncommand=\"idle\"\nduration=\"1s\"\n",
            &crate::child::test_catalog(),
        )
        .unwrap();
        let names: Vec<(u32, String)> = expand(&e)
            .iter()
            .map(|r| (r.repetition, load_name(&e, r)))
            .collect();
        let want = |r: u32, loads: [&str; 4]| loads.map(|l| (r, l.to_string())).to_vec();
        assert_eq!(
            names,
            [
                want(1, ["plain", "random", "single", "random/control"]),
                want(2, ["plain", "random/control", "random", "single"])
            ]
            .concat()
        );
        assert_eq!(control_order(&e, 1), ControlOrder::AfterLoad);
        assert_eq!(control_order(&e, 2), ControlOrder::BeforeLoad);
        assert_eq!(control_order(&e, 3), ControlOrder::AfterLoad);
        assert_eq!(
            load_names(&e),
            ["plain", "random", "single", "random/control"]
        );
        assert_eq!(controlled("random/control"), Some("random"));
        assert_eq!(controlled("random"), None);
    }

    #[test]
    fn sweep_plan() {
        let e = crate::experiment::parse(
            Path::new("t.toml"),
            "[experiment]\nrepetitions = 1\n[[aggressor]]\nname=\"r\"\n[sweep]\naggressor=\"r\"\nflag=\"workers\"\nvalues=[1,2,4]\n[[victim]]\nname=\"v\"\ncommand=\"idle\"\nduration=\"1s\"\n",
            &crate::child::test_catalog(),
        )
        .unwrap();
        let runs = expand(&e);
        let vals: Vec<Option<&str>> = runs.iter().map(|r| r.sweep_value.as_deref()).collect();
        assert_eq!(vals, [None, Some("1"), Some("2"), Some("4")]);
    }
}
