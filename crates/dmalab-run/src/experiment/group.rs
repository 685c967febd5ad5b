//! Aggressor groups: an `[[aggressor]]` table with `members = ["rdma",
//! "ssd"]` runs those other aggressors of the file together in one cycle
//! (several DMA sources at once: two HCAs, a NIC beside an SSD).
//!
//! Each member is started as it would be alone (its own flags, its own
//! `cpus_allowed` and rate), all of them before the warm-up, and stopped
//! together after the victim; each one's counted work is read between the
//! victim's start and end (see `runner::evidence`). The members still run
//! alone as well, so a report has each source alone and all together.
//!
//! A group's control cycle (`control = "auto"`) is its members' controls
//! started the same way, each paced at the command rate its member reached
//! in the group's run ([`member_controls`] says what stands in for each).
//!
//! What is checked here, before anything runs: every member names another
//! aggressor, none is listed twice, none is itself a group; no member runs
//! on a CPU of another member or of a victim; and no aggressor's SQPOLL
//! poller (`sqpoll_cpu`) sits on a victim's CPU or another member's.
//! An aggressor another names as its control (`control = "NAME"`) runs
//! on no victim's CPU that the aggressor it stands in for leaves alone.

use super::{
    Aggressor, AggressorKind, Configuration, Control, Ctx, Experiment, Flag, RawValue, VictimKind,
};
use crate::error::ExpError;
use std::collections::BTreeMap;

/// Why a group takes no named control: its control is its members'.
pub const NAMED_CONTROL: &str = "a group's control cycle is its members' controls started together, each paced at the rate its member reached in the group's run; set control = \"auto\" on the group (and control = \"NAME\" on a member to choose that member's control)";

/// A group's control (`control = "auto"`): per member, in the group's
/// order, what stands in for it. A member that names its control
/// (`control = "NAME"`) is stood in for by that aggressor; a load by its
/// engine's twin (`control_flags`); a CPU bandwidth antagonist by itself,
/// as written (it moves no device data, so the group's control keeps its
/// CPU and memory traffic). Otherwise: why the member has none, naming it.
pub(super) fn member_controls(
    aggs: &[Aggressor],
    members: &[usize],
) -> Result<Vec<Control>, String> {
    members
        .iter()
        .map(|&m| {
            let a = &aggs[m];
            if let Some(Control::Aggressor(j)) = a.control {
                return Ok(Control::Aggressor(j));
            }
            let hint = format!("; give member '{}' control = \"NAME\" (another aggressor that stands in for it), or set control = \"none\" on the group", a.name);
            match &a.kind {
                AggressorKind::Load => super::control_flags(&a.flags, None)
                    .map(|_| Control::Twin)
                    .map_err(|why| {
                        // The engine's reason, with the group's way out.
                        let why = why.split("; name another aggressor").next().unwrap_or(&why).to_string();
                        format!("member '{}': {why}{hint}", a.name)
                    }),
                AggressorKind::ProbeBandwidth => Ok(Control::Aggressor(m)),
                AggressorKind::Exec { .. } => Err(format!(
                    "member '{}': an exec command has no automatic control{hint}",
                    a.name
                )),
                AggressorKind::Group { .. } => Err(format!("member '{}' is a group", a.name)),
            }
        })
        .collect()
}

/// A group's `members` key as written: the names and the key's offset.
#[derive(Clone, Debug)]
pub struct RawMembers {
    names: Vec<String>,
    at: usize,
}

/// Takes `members` out of an `[[aggressor]]` table: None when the table is
/// not a group. A group runs its members' commands, so it has no
/// `command` of its own.
pub(super) fn take_members(
    ctx: &Ctx,
    owner: &str,
    map: &mut BTreeMap<String, RawValue>,
) -> Result<Option<RawMembers>, ExpError> {
    let Some(v) = map.remove("members") else {
        return Ok(None);
    };
    let at = v.span().start;
    let names = match v.get_ref() {
        toml::Value::Array(items) => items
            .iter()
            .map(|i| match i {
                toml::Value::String(s) => Some(s.clone()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>(),
        _ => None,
    }
    .ok_or_else(|| {
        ctx.err(
            at,
            format!("{owner}: members must be a list of aggressor names, e.g. members = [\"rdma\", \"ssd\"]"),
        )
    })?;
    if let Some(c) = map.get("command") {
        return Err(ctx.err(
            c.span().start,
            format!(
                "{owner}: a group (members = [...]) runs its members' commands; remove command"
            ),
        ));
    }
    Ok(Some(RawMembers { names, at }))
}

/// Resolves every group's member names to aggressor indices: at least two,
/// each naming another aggressor of the file, none twice, none a group.
pub(super) fn resolve_members(
    ctx: &Ctx,
    aggs: &mut [Aggressor],
    raw: Vec<Option<RawMembers>>,
) -> Result<(), ExpError> {
    let names: Vec<String> = aggs.iter().map(|a| a.name.clone()).collect();
    let is_group: Vec<bool> = raw.iter().map(Option::is_some).collect();
    for (i, m) in raw.into_iter().enumerate() {
        let Some(m) = m else { continue };
        let owner = format!("aggressor '{}'", names[i]);
        let plain: Vec<&str> = names
            .iter()
            .zip(&is_group)
            .filter(|(_, g)| !**g)
            .map(|(n, _)| n.as_str())
            .collect();
        if m.names.len() < 2 {
            return Err(ctx.err(
                m.at,
                format!(
                    "{owner}: a group needs at least two members; list two or more of: {}",
                    plain.join(", ")
                ),
            ));
        }
        let mut members = Vec::with_capacity(m.names.len());
        for (k, name) in m.names.iter().enumerate() {
            if m.names[..k].contains(name) {
                return Err(ctx.err(
                    m.at,
                    format!("{owner}: member '{name}' is listed twice; list each aggressor once"),
                ));
            }
            let j = names.iter().position(|n| n == name).ok_or_else(|| {
                ctx.err(
                    m.at,
                    format!("{owner}: member '{name}': no aggressor has that name; members name other [[aggressor]] tables: {}", plain.join(", ")),
                )
            })?;
            if is_group[j] {
                let what = if j == i {
                    "is the group itself".to_string()
                } else {
                    "is itself a group".to_string()
                };
                return Err(ctx.err(
                    m.at,
                    format!("{owner}: member '{name}' {what}; a group lists plain aggressors only (list that group's members here instead)"),
                ));
            }
            members.push(j);
        }
        aggs[i].kind = AggressorKind::Group { members };
    }
    Ok(())
}

/// A named control (`control = "NAME"`) between `a` and `target`: a group
/// has no control but its members', and a group cannot stand as another
/// aggressor's control.
pub(super) fn check_named_control(
    ctx: &Ctx,
    owner: &str,
    at: usize,
    a: &Aggressor,
    target: &Aggressor,
) -> Result<(), ExpError> {
    if matches!(a.kind, AggressorKind::Group { .. }) {
        return Err(ctx.err(
            at,
            format!("{owner}: control = \"{}\": {NAMED_CONTROL}", target.name),
        ));
    }
    if matches!(target.kind, AggressorKind::Group { .. }) {
        return Err(ctx.err(
            at,
            format!("{owner}: control = \"{}\" is a group; a control is one aggressor; name another aggressor, \"auto\" or \"none\"", target.name),
        ));
    }
    Ok(())
}

/// The value of `key` among `flags` (keys compared with `-` as `_`).
fn flag<'f>(flags: &'f [Flag], key: &str) -> Option<&'f Flag> {
    flags.iter().find(|f| f.key.replace('-', "_") == key)
}

/// The CPUs an aggressor runs on with `flags`: its `cpus_allowed`, else
/// the experiment's aggressor CPUs (what `dmalab run` gives it), with the
/// line that says so (None: `[cpus]` or the default).
fn cpus_with_line(
    exp: &Experiment,
    a: &Aggressor,
    flags: &[Flag],
) -> Result<(Vec<usize>, Option<usize>), ExpError> {
    let takes = a
        .kind
        .child()
        .is_some_and(|c| c.takes(&exp.children, "cpus_allowed"));
    match flag(flags, "cpus_allowed").filter(|_| takes) {
        Some(f) => dmalab_core::cpus::parse_cpu_list("cpus_allowed", &f.values.join(","))
            .map(|c| (c, Some(f.line)))
            .map_err(|e| {
                ExpError::new(
                    &exp.path,
                    Some(f.line),
                    format!("aggressor '{}': {e}", a.name),
                )
            }),
        None => Ok((exp.placement.aggressor.clone(), None)),
    }
}

/// An aggressor's `sqpoll_cpu` with `flags`, and its line.
fn sqpoll_cpu(
    exp: &Experiment,
    a: &Aggressor,
    flags: &[Flag],
) -> Result<Option<(usize, usize)>, ExpError> {
    let Some(f) = flag(flags, "sqpoll_cpu") else {
        return Ok(None);
    };
    let text = f.values.join(",");
    text.trim().parse::<usize>().map(|c| Some((c, f.line))).map_err(|_| {
        ExpError::new(
            &exp.path,
            Some(f.line),
            format!("aggressor '{}': sqpoll_cpu: '{}' is not a CPU number; give one CPU, e.g. sqpoll_cpu = 3", a.name, dmalab_core::text::shown(&text)),
        )
    })
}

/// The victims that run on CPUs, with their CPUs. An idle victim runs
/// nothing, so nothing of the aggressors' can land on it.
fn victim_cpus(exp: &Experiment) -> Vec<(&str, Vec<usize>)> {
    exp.victims
        .iter()
        .filter(|v| !matches!(v.kind, VictimKind::Idle { .. }))
        .map(|v| {
            (
                v.name.as_str(),
                v.cpus
                    .clone()
                    .unwrap_or_else(|| exp.placement.victims.clone()),
            )
        })
        .collect()
}

/// The first CPU of `a` that is in `b`.
fn shared(a: &[usize], b: &[usize]) -> Option<usize> {
    a.iter().copied().find(|c| b.contains(c))
}

/// The flags each run gives an aggressor: per configuration, and at each
/// sweep value when it is the swept one.
fn each_flags<'e>(
    exp: &'e Experiment,
    a: &'e Aggressor,
) -> impl Iterator<Item = (&'e Configuration, Vec<Flag>)> + 'e {
    let values: Vec<Option<String>> = match &exp.sweep {
        Some(s) if s.aggressor == a.name => s.values.iter().cloned().map(Some).collect(),
        _ => vec![None],
    };
    exp.configurations.iter().flat_map(move |c| {
        values
            .clone()
            .into_iter()
            .map(move |v| (c, exp.aggressor_flags(a, c, v.as_deref())))
    })
}

/// A member already placed: its name, CPUs and poller (CPU, line).
struct Placed<'e> {
    name: &'e str,
    cpus: Vec<usize>,
    poll: Option<(usize, usize)>,
}

/// A control named by a plain aggressor (`control = "NAME"`) runs its
/// CPU-side work where that aggressor does, or at least not on a victim's
/// CPU that the aggressor leaves alone: there it would slow the victim by
/// sharing its CPU, the control cycle would show more slowdown than the
/// aggressor's own CPU work causes, and the DMA's share (aggressor minus
/// control) would come out too small. (A group's stand-ins are held to the
/// members' rules in [`check_cpus`].)
fn check_named_controls(exp: &Experiment) -> Result<(), ExpError> {
    let victims = victim_cpus(exp);
    let fmt = dmalab_core::cpus::format_cpu_list;
    for a in &exp.aggressors {
        let Some(Control::Aggressor(j)) = &a.control else {
            continue;
        };
        let ctl = &exp.aggressors[*j];
        for c in &exp.configurations {
            let ours = exp.aggressor_cpus(a, c, None);
            let theirs = exp.aggressor_cpus(ctl, c, None);
            let (_, line) = cpus_with_line(exp, ctl, &exp.aggressor_flags(ctl, c, None))?;
            for (v, vc) in &victims {
                let Some(cpu) = theirs
                    .iter()
                    .copied()
                    .find(|x| vc.contains(x) && !ours.contains(x))
                else {
                    continue;
                };
                return Err(ExpError::new(
                    &exp.path,
                    Some(line.unwrap_or(ctl.line)),
                    format!("aggressor '{}' in configuration '{}': its control '{}' runs on CPU {cpu}, a CPU of victim '{v}' ({}), where '{}' does not run ({}): the control would also slow the victim by sharing its CPU, and the DMA's share of the slowdown would come out too small; give '{}' the CPUs of '{}' (cpus_allowed)", a.name, c.name, ctl.name, fmt(vc), a.name, fmt(&ours), ctl.name, a.name),
                ));
            }
        }
    }
    Ok(())
}

/// The CPU rules of groups, named controls and SQPOLL pollers (see the
/// module's head).
pub(super) fn check_cpus(exp: &Experiment) -> Result<(), ExpError> {
    check_named_controls(exp)?;
    let err = |line: usize, msg: String| ExpError::new(&exp.path, Some(line), msg);
    let victims = victim_cpus(exp);
    let fmt = dmalab_core::cpus::format_cpu_list;
    // Every aggressor's poller away from the victims.
    for a in &exp.aggressors {
        for (c, flags) in each_flags(exp, a) {
            let Some((cpu, line)) = sqpoll_cpu(exp, a, &flags)? else {
                continue;
            };
            if let Some((v, vc)) = victims.iter().find(|(_, vc)| vc.contains(&cpu)) {
                return Err(err(
                    line,
                    format!("aggressor '{}' in configuration '{}': sqpoll_cpu = {cpu} is a CPU of victim '{v}' ({}): the SQPOLL kernel thread would spin beside the victim; choose a CPU outside the victims' CPUs", a.name, c.name, fmt(vc)),
                ));
            }
        }
    }
    for g in &exp.aggressors {
        let AggressorKind::Group { members } = &g.kind else {
            continue;
        };
        // The members, and the loads its control cycle starts in their
        // places (an aggressor a member names as its control runs where
        // that aggressor's CPUs are, and is held to the same rules).
        let mut sets = vec![(format!("aggressor '{}'", g.name), members.clone())];
        if let Some(Control::Group(cs)) = &g.control {
            let stand_ins = members
                .iter()
                .zip(cs)
                .map(|(&m, c)| match c {
                    Control::Aggressor(j) => *j,
                    _ => m,
                })
                .collect::<Vec<_>>();
            if stand_ins != *members {
                sets.push((
                    format!("aggressor '{}' (its control cycle)", g.name),
                    stand_ins,
                ));
            }
        }
        for (owner, members) in &sets {
            for c in &exp.configurations {
                let mut placed: Vec<Placed> = Vec::new();
                for &m in members {
                    let a = &exp.aggressors[m];
                    let flags = exp.aggressor_flags(a, c, None);
                    let (cpus, cl) = cpus_with_line(exp, a, &flags)?;
                    let line = cl.unwrap_or(g.line);
                    let whence = if cl.is_some() {
                        "its cpus_allowed"
                    } else {
                        "cpus.aggressor, as it sets no cpus_allowed"
                    };
                    if let Some((v, vc)) =
                        victims.iter().find(|(_, vc)| shared(&cpus, vc).is_some())
                    {
                        return Err(err(
                        line,
                        format!("{owner} in configuration '{}': member '{}' runs on CPU {} ({whence}), a CPU of victim '{v}' ({}); give each member cpus_allowed outside the victims' CPUs", c.name, a.name, fmt(&cpus), fmt(vc)),
                    ));
                    }
                    let poll = sqpoll_cpu(exp, a, &flags)?;
                    for Placed {
                        name: other,
                        cpus: ocpus,
                        poll: opoll,
                    } in &placed
                    {
                        if let Some(cpu) = shared(&cpus, ocpus) {
                            return Err(err(
                            line,
                            format!("{owner} in configuration '{}': members '{other}' and '{}' both run on CPU {cpu} ({whence}); give each member its own cpus_allowed", c.name, a.name),
                        ));
                        }
                        let clash = |p: Option<(usize, usize)>,
                                     cpus: &[usize],
                                     poll_of: &str,
                                     on: &str| {
                            p.filter(|(pc, _)| cpus.contains(pc)).map(|(pc, pl)| {
                            err(pl, format!("{owner} in configuration '{}': member '{poll_of}': sqpoll_cpu = {pc} is a CPU of member '{on}'; give each member's poller a CPU of its own", c.name))
                        })
                        };
                        let mut ocpus_all = ocpus.clone();
                        ocpus_all.extend(opoll.map(|p| p.0));
                        if let Some(e) = clash(poll, &ocpus_all, &a.name, other) {
                            return Err(e);
                        }
                        if let Some(e) = clash(*opoll, &cpus, other, &a.name) {
                            return Err(e);
                        }
                    }
                    placed.push(Placed {
                        name: &a.name,
                        cpus,
                        poll,
                    });
                }
            }
        }
    }
    Ok(())
}

impl Experiment {
    /// The CPUs an aggressor runs on in configuration `c` (at sweep value
    /// `sv`): its `cpus_allowed`, else the experiment's aggressor CPUs
    /// (a group's: none of its own), and its SQPOLL poller's CPU. It is
    /// started pinned there: a load may place its workers and its poller
    /// only on CPUs it was started with.
    pub fn aggressor_cpus(&self, a: &Aggressor, c: &Configuration, sv: Option<&str>) -> Vec<usize> {
        let flags = self.aggressor_flags(a, c, sv);
        let mut cpus = cpus_with_line(self, a, &flags)
            .map(|(cpus, _)| cpus)
            .unwrap_or_else(|_| self.placement.aggressor.clone());
        if let Ok(Some((poller, _))) = sqpoll_cpu(self, a, &flags) {
            cpus.push(poller);
            cpus.sort_unstable();
            cpus.dedup();
        }
        cpus
    }
}

impl Experiment {
    /// Every CPU an aggressor of the file runs on, in any configuration
    /// and at any sweep value: `cpus.aggressor`, every `cpus_allowed` (a
    /// group's members are aggressors of the file too) and every
    /// `sqpoll_cpu`; sorted, each once. What `cpus.victims = "rest"`
    /// leaves out.
    pub fn all_aggressor_cpus(&self) -> Vec<usize> {
        let mut cpus = self.placement.aggressor.clone();
        for a in &self.aggressors {
            if !a.members().is_empty() {
                continue;
            }
            for (_, flags) in each_flags(self, a) {
                if let Ok((c, _)) = cpus_with_line(self, a, &flags) {
                    cpus.extend(c);
                }
                if let Ok(Some((poller, _))) = sqpoll_cpu(self, a, &flags) {
                    cpus.push(poller);
                }
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
}

impl Aggressor {
    /// A group's members (indices into the experiment's aggressors); empty
    /// for any other aggressor.
    pub fn members(&self) -> &[usize] {
        match &self.kind {
            AggressorKind::Group { members } => members,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;
    use std::path::Path;

    const IDLE: &str = "[[victim]]\nname = \"idle\"\ncommand = \"idle\"\nduration = \"1s\"\n";

    fn p(text: &str) -> Result<Experiment, ExpError> {
        parse(Path::new("t.toml"), text, &crate::child::test_catalog())
    }

    /// Two null loads on CPUs `a` and `b`, a group of them, and `extra`.
    fn two(a: &str, b: &str, group: &str, extra: &str) -> String {
        format!("[[aggressor]]\nname = \"a\"\nengine = \"null\"\ncpus_allowed = \"{a}\"\n\n[[aggressor]]\nname = \"b\"\nengine = \"null\"\ncpus_allowed = \"{b}\"\n\n[[aggressor]]\nname = \"a+b\"\n{group}\n{extra}")
    }

    #[test]
    fn a_group_names_its_members_and_runs_beside_them() {
        if dmalab_core::cpus::allowed_cpus().len() < 2 {
            eprintln!("skipped: needs two CPUs for two members");
            return;
        }
        let e = p(&two("0", "1", "members = [\"b\", \"a\"]", IDLE)).unwrap();
        assert_eq!(
            e.aggressors[2].kind,
            AggressorKind::Group {
                members: vec![1, 0]
            }
        );
        assert_eq!(e.aggressors[2].members(), [1, 0]);
        assert!(e.aggressors[2].flags.is_empty());
        assert_eq!(e.aggressors[0].members(), [] as [usize; 0]);
        let c = &e.configurations[0];
        assert_eq!(e.aggressor_cpus(&e.aggressors[0], c, None), [0]);
        assert_eq!(e.aggressor_cpus(&e.aggressors[1], c, None), [1]);
        let names: Vec<String> = crate::plan::expand(&e)
            .iter()
            .take(4)
            .map(|r| crate::plan::load_name(&e, r))
            .collect();
        assert_eq!(names, ["plain", "a", "b", "a+b"]);
    }

    #[test]
    fn bad_members_are_refused_with_the_line_of_members() {
        for (group, want) in [
            ("members = [\"a\", \"c\"]", "member 'c': no aggressor has that name; members name other [[aggressor]] tables: a, b"),
            ("members = [\"a\", \"a\"]", "member 'a' is listed twice"),
            ("members = [\"a\"]", "a group needs at least two members"),
            ("members = [\"a\", \"a+b\"]", "member 'a+b' is the group itself"),
            ("members = \"a\"", "members must be a list of aggressor names"),
            ("members = [\"a\", \"b\"]\ncommand = \"load\"", "a group (members = [...]) runs its members' commands; remove command"),
            ("members = [\"a\", \"b\"]\nworkers = 2", "unknown key 'workers'; allowed here: name, members, control"),
        ] {
            let e = p(&two("0", "0", group, IDLE)).unwrap_err();
            assert!(e.message.contains(want), "{group}: {e}");
            assert!(e.line.is_some_and(|l| l >= 12), "{group}: {e}");
        }
        let nested = format!(
            "{}\n[[aggressor]]\nname = \"outer\"\nmembers = [\"a\", \"a+b\"]\n",
            two("0", "0", "members = [\"a\", \"b\"]", IDLE)
        );
        let e = p(&nested).unwrap_err();
        assert!(
            e.message
                .contains("aggressor 'outer': member 'a+b' is itself a group"),
            "{e}"
        );
        assert_eq!(e.line, Some(21), "{e}");
    }

    #[test]
    fn members_may_not_share_a_cpu_with_each_other_or_a_victim() {
        let e = p(&two("0", "0", "members = [\"a\", \"b\"]", IDLE)).unwrap_err();
        assert!(
            e.message
                .contains("members 'a' and 'b' both run on CPU 0 (its cpus_allowed)"),
            "{e}"
        );
        assert_eq!(e.line, Some(9), "b's cpus_allowed: {e}");
        let lat = "[cpus]\nvictims = \"0\"\naggressor = \"0\"\n[[victim]]\nname = \"lat\"\ncommand = \"probe latency\"\n";
        let e = p(&two("0", "0", "members = [\"a\", \"b\"]", lat)).unwrap_err();
        assert!(
            e.message
                .contains("member 'a' runs on CPU 0 (its cpus_allowed), a CPU of victim 'lat' (0)"),
            "{e}"
        );
        assert_eq!(e.line, Some(4), "{e}");
    }

    #[test]
    fn a_poller_on_a_victims_cpu_or_another_members_is_refused_naming_the_key() {
        let lat =
            "[cpus]\nvictims = \"0\"\n[[victim]]\nname = \"lat\"\ncommand = \"probe latency\"\n";
        let e = p(&format!(
            "[[aggressor]]\nname = \"r\"\nsqpoll_cpu = 0\n{lat}"
        ))
        .unwrap_err();
        assert!(e.message.contains("aggressor 'r' in configuration 'default': sqpoll_cpu = 0 is a CPU of victim 'lat' (0)"), "{e}");
        assert_eq!(e.line, Some(3), "{e}");
        // An override in a configuration is checked as the run gives it.
        let e = p(&format!("[[aggressor]]\nname = \"r\"\n[[configuration]]\nname = \"poll\"\nsqpoll_cpu = 0\n{lat}")).unwrap_err();
        assert!(
            e.message
                .contains("in configuration 'poll': sqpoll_cpu = 0"),
            "{e}"
        );
        assert_eq!(e.line, Some(5), "{e}");
        // An idle victim runs nothing a poller could take CPU time from.
        p(&format!(
            "[[aggressor]]\nname = \"r\"\nsqpoll_cpu = 0\n[cpus]\nvictims = \"0\"\n{IDLE}"
        ))
        .unwrap();
        if dmalab_core::cpus::allowed_cpus().len() < 2 {
            eprintln!("skipped the members' part: needs two CPUs");
            return;
        }
        let text = two("0", "1", "members = [\"a\", \"b\"]", IDLE).replace(
            "cpus_allowed = \"1\"",
            "cpus_allowed = \"1\"\nsqpoll_cpu = 0",
        );
        let e = p(&text).unwrap_err();
        assert!(
            e.message
                .contains("member 'b': sqpoll_cpu = 0 is a CPU of member 'a'"),
            "{e}"
        );
        assert_eq!(e.line, Some(10), "{e}");
    }

    /// Issue 32: `cpus.victims = "rest"` left out `cpus.aggressor` only,
    /// so victims landed on the CPUs of aggressors that set `cpus_allowed`
    /// or `sqpoll_cpu` (and a file with a group was refused until
    /// `cpus.victims` was set).
    #[test]
    fn rest_leaves_out_every_aggressors_members_and_pollers_cpus() {
        let allowed = dmalab_core::cpus::allowed_cpus();
        if allowed.len() < 2 || allowed[..2] != [0, 1] {
            eprintln!("skipped: needs CPUs 0 and 1");
            return;
        }
        let rest: Vec<usize> = allowed.iter().copied().filter(|c| *c > 1).collect();
        // The victims get every other CPU, or share them with a warning
        // when none is left.
        let check = |e: &Experiment| {
            assert_eq!(e.all_aggressor_cpus(), [0, 1]);
            if rest.is_empty() {
                assert_eq!(e.placement.victims, allowed);
                assert!(
                    e.warnings.iter().any(|w| w.contains("victims share them")),
                    "{:?}",
                    e.warnings
                );
            } else {
                assert_eq!(e.placement.victims, rest, "{:?}", e.warnings);
            }
        };
        let lat = "[[victim]]\nname = \"lat\"\ncommand = \"probe latency\"\n";
        let one = |agg: &str, extra: &str| {
            format!("[cpus]\naggressor = \"{agg}\"\n[[aggressor]]\nname = \"a\"\nengine = \"null\"\n{extra}\n{lat}")
        };
        // An aggressor's own cpus_allowed beside cpus.aggressor.
        check(&p(&one("1", "cpus_allowed = \"0\"")).unwrap());
        // A file that puts a poller or a member beside a victim that runs
        // is refused, but only when no CPU is left for the victim.
        let check_or_refused = |text: &str, refusal: &str| match p(text) {
            Ok(e) => check(&e),
            Err(e) => {
                assert!(rest.is_empty(), "{e}");
                assert!(e.message.contains(refusal), "{e}");
            }
        };
        // Its SQPOLL poller.
        check_or_refused(
            &one("0", "cpus_allowed = \"0\"\nsqpoll_cpu = 1"),
            "sqpoll_cpu = 1 is a CPU of victim 'lat'",
        );
        // A configuration's cpus_allowed.
        check(
            &p(&format!(
                "{}[[configuration]]\nname = \"far\"\ncpus_allowed = \"1\"\n",
                one("0", "")
            ))
            .unwrap(),
        );
        // A group's members.
        let group = format!("[cpus]\naggressor = \"1\"\n{lat}");
        check_or_refused(
            &two("0", "1", "members = [\"a\", \"b\"]", &group),
            "member 'a' runs on CPU 0 (its cpus_allowed), a CPU of victim 'lat'",
        );
        // Beside an idle victim (it runs nothing) there is nothing to warn of.
        let e = p(&two(
            "0",
            "1",
            "members = [\"a\", \"b\"]",
            &format!("[cpus]\naggressor = \"1\"\n{IDLE}"),
        ))
        .unwrap();
        assert_eq!(e.all_aggressor_cpus(), [0, 1]);
        assert!(
            !e.warnings.iter().any(|w| w.contains("victims share")),
            "{:?}",
            e.warnings
        );
        // An explicit list is kept as written.
        let e = p(&one("1", "cpus_allowed = \"0\"")
            .replace("aggressor = \"1\"", "aggressor = \"1\"\nvictims = \"0\""))
        .unwrap();
        assert_eq!(e.placement.victims, [0]);
    }

    #[test]
    fn a_groups_control_is_its_members_controls_and_a_group_is_no_control() {
        if dmalab_core::cpus::allowed_cpus().len() < 2 {
            eprintln!("skipped: needs two CPUs for two members");
            return;
        }
        let auto = "members = [\"a\", \"b\"]\ncontrol = \"auto\"";
        let e = p(&two("0", "1", auto, IDLE)).unwrap();
        assert_eq!(
            e.aggressors[2].control,
            Some(Control::Group(vec![Control::Twin, Control::Twin]))
        );
        // Its control cycle is planned as a single aggressor's is.
        let names: Vec<String> = crate::plan::expand(&e)
            .iter()
            .take(5)
            .map(|r| crate::plan::load_name(&e, r))
            .collect();
        assert_eq!(names, ["plain", "a", "b", "a+b", "a+b/control"]);
        // A member that names its control is stood in for by it; a CPU
        // bandwidth antagonist by itself.
        let named = two("0", "1", auto, IDLE).replace(
            "cpus_allowed = \"1\"",
            "cpus_allowed = \"1\"\ncontrol = \"c\"\n\n[[aggressor]]\nname = \"c\"\ncommand = \"exec\"\nrun = [\"true\"]",
        );
        let e = p(&named).unwrap();
        assert_eq!(e.aggressors[3].name, "a+b");
        assert_eq!(
            e.aggressors[3].control,
            Some(Control::Group(vec![Control::Twin, Control::Aggressor(2)]))
        );
        let bw = two("0", "1", auto, IDLE).replace(
            "name = \"b\"\nengine = \"null\"",
            "name = \"b\"\ncommand = \"probe bandwidth\"",
        );
        let e = p(&bw).unwrap();
        assert_eq!(
            e.aggressors[2].control,
            Some(Control::Group(vec![Control::Twin, Control::Aggressor(1)]))
        );
        // A member without a control: refused when the group asks, skipped
        // with a warning when the experiment does.
        let rdma = |group: &str, extra: &str| {
            two("0", "1", group, extra).replace(
                "name = \"a\"\nengine = \"null\"",
                "name = \"a\"\nengine = \"rdma\"",
            )
        };
        let e = p(&rdma(auto, IDLE)).unwrap_err();
        assert!(e.message.contains("aggressor 'a+b': control = \"auto\": member 'a': the rdma engine has no faithful control"), "{e}");
        assert!(
            e.message.ends_with("give member 'a' control = \"NAME\" (another aggressor that stands in for it), or set control = \"none\" on the group"),
            "{e}"
        );
        assert_eq!(e.line, Some(14), "{e}");
        let e = p(&format!(
            "[experiment]\ncontrol = \"auto\"\n{}",
            rdma("members = [\"a\", \"b\"]", IDLE)
        ))
        .unwrap();
        assert_eq!(e.aggressors[2].control, None);
        assert_eq!(e.aggressors[1].control, Some(Control::Twin));
        assert!(
            e.warnings.iter().any(|w| w
                .starts_with("aggressor 'a+b' gets no control cycle: member 'a': the rdma engine")),
            "{:?}",
            e.warnings
        );
        let e = p(&two(
            "0",
            "1",
            "members = [\"a\", \"b\"]\ncontrol = \"a\"",
            IDLE,
        ))
        .unwrap_err();
        assert!(
            e.message
                .contains("control = \"a\": a group's control cycle is its members' controls"),
            "{e}"
        );
        let e = p(&two("0", "0", "members = [\"a\", \"b\"]", IDLE).replace(
            "cpus_allowed = \"0\"\n\n[[aggressor]]\nname = \"b\"",
            "cpus_allowed = \"0\"\ncontrol = \"a+b\"\n\n[[aggressor]]\nname = \"b\"",
        ))
        .unwrap_err();
        assert!(e.message.contains("control = \"a+b\" is a group"), "{e}");
        // A member's named control takes its place in the group's control
        // cycle, held to the members' CPU rules.
        let e = p(&named
            .replace(
                "command = \"exec\"",
                "engine = \"null\"\ncpus_allowed = \"0\"",
            )
            .replace("run = [\"true\"]", ""))
        .unwrap_err();
        assert!(
            e.message.contains("aggressor 'a+b' (its control cycle) in configuration 'default': members 'a' and 'c' both run on CPU 0"),
            "{e}"
        );
        let e = p(&two("0", "0", "members = [\"a\", \"b\"]", IDLE).replace("[[aggressor]]\nname = \"a+b\"", "[sweep]\naggressor = \"a+b\"\nflag = \"workers\"\nvalues = [1]\n[[aggressor]]\nname = \"a+b\"")).unwrap_err();
        assert!(
            e.message
                .contains("'a+b' is a group, which has no flags of its own"),
            "{e}"
        );
    }
}
