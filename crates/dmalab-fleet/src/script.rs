//! The sbatch script of one submission: a job array whose task I runs
//! unit I's `dmalab run` on its node, after checking that it is on that
//! node, that the results directory is the shared one (the marker) and
//! that the dmalab binary is there. Kept beside the results so a user can
//! read it and submit it again.

use crate::manifest::{EXPERIMENT, MARKER};
use crate::plan::Unit;
use std::fmt::Write;
use std::path::Path;

/// What a script is made of.
pub struct ScriptSpec<'a> {
    /// Experiment name (the job name is `dmalab-fleet-NAME`).
    pub experiment: &'a str,
    /// Its hash.
    pub experiment_hash: &'a str,
    /// Submission number.
    pub number: u32,
    /// When it is written, RFC 3339.
    pub written_at: &'a str,
    /// The results directory, absolute.
    pub results: &'a Path,
    /// The dmalab binary, absolute.
    pub dmalab: &'a Path,
    /// The marker token.
    pub marker_token: &'a str,
    /// `--partition`.
    pub partition: Option<&'a str>,
    /// Extra `#SBATCH` options.
    pub sbatch_args: &'a [String],
    /// `--array=...%K`.
    pub max_running: Option<u32>,
    /// `--exclusive`.
    pub exclusive: bool,
    /// The units, by array index.
    pub tasks: &'a [&'a Unit],
}

/// A word quoted for the shell (single quotes unless it is plainly safe):
/// the one quoting of every value the script embeds, in commands and in
/// `#SBATCH` lines alike (sbatch reads a directive's words with the same
/// single quotes and `\'` escapes, so nothing in them runs; one difference:
/// sbatch also takes a backslash inside quotes as an escape, where the
/// shell keeps it). A line break inside the quotes is
/// still a line break to a comment, so values that reach a comment or a
/// directive are refused with one first ([`crate::plan::one_line`]) and
/// comments show control characters escaped ([`comment`]).
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-=+:,@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Text for a `#` comment line: control characters (a line break would
/// end the comment and start a command) shown escaped.
pub fn comment(s: &str) -> String {
    dmalab_core::text::escaped(s)
}

/// The `dmalab run` arguments (after the binary) of one unit.
pub fn run_args(results: &Path, u: &Unit) -> Vec<String> {
    let mut a = vec![
        "run".to_string(),
        results.join(EXPERIMENT).display().to_string(),
        "--results".into(),
        results.join(u.results_file()).display().to_string(),
    ];
    if let Some(c) = &u.configuration {
        a.push("--configuration".into());
        a.push(c.clone());
    }
    a
}

/// The command line that runs one unit by hand, on its node.
pub fn command_line(dmalab: &Path, results: &Path, u: &Unit) -> String {
    std::iter::once(dmalab.display().to_string())
        .chain(run_args(results, u))
        .map(|w| sh_quote(&w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The array spec: `0-N[%K]`.
pub fn array_spec(n: usize, max_running: Option<u32>) -> String {
    let range = if n == 1 {
        "0".to_string()
    } else {
        format!("0-{}", n - 1)
    };
    match max_running {
        Some(k) => format!("{range}%{k}"),
        None => range,
    }
}

/// Renders the script.
pub fn render(s: &ScriptSpec) -> String {
    let results = s.results.display().to_string();
    let dmalab = s.dmalab.display().to_string();
    let n = s.tasks.len();
    let mut t = String::from("#!/bin/bash\n");
    let _ = writeln!(
        t,
        "# dmalab fleet: experiment '{}' (sha256 {}), submission {}, written {}.",
        comment(s.experiment),
        comment(s.experiment_hash),
        s.number,
        comment(s.written_at)
    );
    t.push_str(
        "# `dmalab fleet submit` submitted it held, pinned array task I to its node\n\
         # (scontrol update JobId=JOB_I ReqNodeList=NODE) and released it; running it\n\
         # again skips the nodes whose results are complete. One task by hand:\n\
         #   sbatch --array=I --nodelist=NODE THIS_FILE\n\
         # Tasks (array index, node, command line; without Slurm, run each line on\n\
         # its node, the results directory shared by all):\n",
    );
    for (i, u) in s.tasks.iter().enumerate() {
        let _ = writeln!(
            t,
            "#   {i}  {}  {}",
            comment(&u.node),
            comment(&command_line(s.dmalab, s.results, u))
        );
    }
    let _ = writeln!(
        t,
        "#SBATCH --job-name=dmalab-fleet-{}",
        job_name_part(s.experiment)
    );
    let _ = writeln!(t, "#SBATCH --array={}", array_spec(n, s.max_running));
    t.push_str("#SBATCH --nodes=1\n#SBATCH --ntasks=1\n");
    if s.exclusive {
        t.push_str("#SBATCH --exclusive\n");
    }
    let _ = writeln!(
        t,
        "#SBATCH {}",
        sh_quote(&format!("--output={results}/slurm-%A_%a.out"))
    );
    if let Some(p) = s.partition {
        let _ = writeln!(t, "#SBATCH {}", sh_quote(&format!("--partition={p}")));
    }
    for a in s.sbatch_args {
        let _ = writeln!(t, "#SBATCH {}", sh_quote(a));
    }
    let _ = write!(
        t,
        "set -u\nresults={}\ndmalab={}\ntask=\"${{SLURM_ARRAY_TASK_ID:-}}\"\ncase \"$task\" in\n",
        sh_quote(&results),
        sh_quote(&dmalab)
    );
    for (i, u) in s.tasks.iter().enumerate() {
        let extra = match &u.configuration {
            Some(c) => format!(" --configuration {}", sh_quote(c)),
            None => String::new(),
        };
        let _ = writeln!(
            t,
            "  {i}) node={}; file={}; set --{extra} ;;",
            sh_quote(&u.node),
            sh_quote(&u.results_file())
        );
    }
    let last = n.saturating_sub(1);
    let _ = writeln!(
        t,
        "  *) echo \"dmalab fleet: error: array task '$task' is not in this script's table (0-{last}); submit it with --array inside 0-{last}\" >&2; exit 2 ;;\nesac"
    );
    let _ = write!(
        t,
        r#"here="${{SLURMD_NODENAME:-$(hostname -s)}}"
if [ "$here" != "$node" ]; then
  echo "dmalab fleet: error: task $task writes the results of node $node but runs on $here; submit it with --nodelist=$node (dmalab fleet submit pins every task to its node)" >&2
  exit 2
fi
if [ "$(cat "$results/{MARKER}" 2>/dev/null)" != {token} ]; then
  echo "dmalab fleet: error: $results on node $here lacks the marker dmalab fleet submit wrote there ({MARKER}): the results directory is not shared between the submitting host and this node; submit again with --results on a file system every node mounts at the same path" >&2
  exit 2
fi
if [ ! -x "$dmalab" ]; then
  echo "dmalab fleet: error: $dmalab is not an executable file on node $here; install dmalab at that path on every node, or submit with --dmalab PATH" >&2
  exit 2
fi
echo "dmalab fleet: task $task on $here: $results/$file"
exec "$dmalab" run "$results/{EXPERIMENT}" --results "$results/$file" "$@"
"#,
        token = sh_quote(s.marker_token),
    );
    t
}

/// The experiment name as part of a job name (no spaces or odd bytes).
fn job_name_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_plain_words_and_quotes_the_rest() {
        assert_eq!(sh_quote("/a/b.jsonl"), "/a/b.jsonl");
        assert_eq!(sh_quote("big buf"), "'big buf'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }

    #[test]
    fn a_value_with_a_line_break_stays_inside_its_comment() {
        let u = [Unit {
            key: "n1".into(),
            node: "n1".into(),
            host: "n1".into(),
            replica: 1,
            configuration: None,
            planned_runs: 1,
        }];
        let tasks: Vec<&Unit> = u.iter().collect();
        let args = vec!["--comment=a b'c".to_string()];
        let s = render(&ScriptSpec {
            experiment: "x\ntouch /tmp/PWNED #",
            experiment_hash: "abc",
            number: 1,
            written_at: "t",
            results: Path::new("/shared/res"),
            dmalab: Path::new("/opt/d\nmalab"),
            marker_token: "tok",
            partition: Some("p q"),
            sbatch_args: &args,
            max_running: None,
            exclusive: false,
            tasks: &tasks,
        });
        assert!(!s.lines().any(|l| l.starts_with("touch")), "{s}");
        assert!(
            s.lines()
                .any(|l| l.starts_with("# dmalab fleet: experiment 'x\\ntouch /tmp/PWNED #'")),
            "{s}"
        );
        assert!(s.lines().any(|l| l == "#   0  n1  '/opt/d\\nmalab' run /shared/res/experiment.toml --results /shared/res/n1.jsonl"), "{s}");
        assert!(s.lines().any(|l| l == "#SBATCH '--partition=p q'"), "{s}");
        assert!(
            s.lines().any(|l| l == r"#SBATCH '--comment=a b'\''c'"),
            "{s}"
        );
    }

    #[test]
    fn array_spec_has_the_concurrency_limit() {
        assert_eq!(array_spec(1, None), "0");
        assert_eq!(array_spec(4, Some(1)), "0-3%1");
        assert_eq!(array_spec(3, None), "0-2");
    }

    #[test]
    fn the_script_pins_checks_and_runs_each_unit() {
        let u = [
            Unit {
                key: "n1".into(),
                node: "n1".into(),
                host: "n1".into(),
                replica: 1,
                configuration: None,
                planned_runs: 3,
            },
            Unit {
                key: "n2.big_buf".into(),
                node: "n2".into(),
                host: "n2".into(),
                replica: 1,
                configuration: Some("big buf".into()),
                planned_runs: 3,
            },
        ];
        let tasks: Vec<&Unit> = u.iter().collect();
        let args = vec!["--time=10:00".to_string()];
        let s = render(&ScriptSpec {
            experiment: "quick test",
            experiment_hash: "abc",
            number: 1,
            written_at: "2026-11-24T00:00:00Z",
            results: Path::new("/shared/res"),
            dmalab: Path::new("/opt/dmalab"),
            marker_token: "tok",
            partition: Some("debug"),
            sbatch_args: &args,
            max_running: Some(2),
            exclusive: true,
            tasks: &tasks,
        });
        for line in [
            "#SBATCH --job-name=dmalab-fleet-quick_test",
            "#SBATCH --array=0-1%2",
            "#SBATCH --exclusive",
            "#SBATCH --output=/shared/res/slurm-%A_%a.out",
            "#SBATCH --partition=debug",
            "#SBATCH --time=10:00",
            "  0) node=n1; file=n1.jsonl; set -- ;;",
            "  1) node=n2; file=n2.big_buf.jsonl; set -- --configuration 'big buf' ;;",
            "#   1  n2  /opt/dmalab run /shared/res/experiment.toml --results /shared/res/n2.big_buf.jsonl --configuration 'big buf'",
        ] {
            assert!(s.lines().any(|l| l == line), "no line {line:?} in\n{s}");
        }
        // Every #SBATCH line comes before the first command, or sbatch
        // ignores it.
        let first_cmd = s.lines().position(|l| l == "set -u").unwrap();
        assert!(s.lines().skip(first_cmd).all(|l| !l.starts_with("#SBATCH")));
    }
}
