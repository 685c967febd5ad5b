//! A private single-node Slurm cluster for the fleet tests: munged on its
//! own socket with a key made here, slurmctld and slurmd on free loopback
//! ports, accounting off, every state, spool and log file and slurm.conf
//! in a temporary directory (point `SLURM_CONF` at [`Cluster::conf`]).
//! Nothing of the system's own Slurm or munge configuration is read or
//! written. Dropping the cluster cancels its jobs, stops the daemons and
//! removes the directory, also when a test fails.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the Debian packages put the daemons.
const SBIN: [&str; 2] = ["/usr/sbin", "/usr/bin"];

/// A program from PATH or the sbin directories.
pub fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SBIN.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The programs the cluster needs.
pub const PROGRAMS: [&str; 9] = [
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "sbatch",
    "scontrol",
    "squeue",
    "sinfo",
    "scancel",
];

/// A running single-node cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    daemons: Vec<(String, Child)>,
    /// The slurm.conf to point `SLURM_CONF` at.
    pub conf: PathBuf,
    /// The node's name.
    pub node: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < limit, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Cluster {
    /// Starts the cluster; None when the test is to be skipped (Slurm or
    /// root missing; under `DMALAB_CI=1` that fails instead).
    pub fn start() -> Option<Cluster> {
        let missing: Vec<&str> = PROGRAMS
            .iter()
            .copied()
            .filter(|p| program(p).is_none())
            .collect();
        if !crate::common::need(
            &format!(
                "Slurm and munge (Debian packages slurmctld slurmd slurm-client munge; missing: {})",
                missing.join(" ")
            ),
            missing.is_empty(),
        ) {
            return None;
        }
        if !crate::common::need_root() {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("dmalab-slurm-")
            .tempdir()
            .expect("temporary directory");
        let d = dir.path().to_path_buf();
        let mut c = Cluster {
            conf: d.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
            node: String::new(),
        };
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir(d.join(sub)).expect("cluster directory");
        }
        let key = d.join("munge.key");
        let st = Command::new(program("mungekey").unwrap())
            .arg("-c")
            .arg("-k")
            .arg(&key)
            .status()
            .expect("mungekey runs");
        assert!(st.success(), "mungekey -c failed");
        let sock = d.join("munge.sock");
        c.spawn(
            "munged",
            Command::new(program("munged").unwrap())
                .arg("-F")
                .arg(format!("--socket={}", sock.display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--log-file={}", d.join("log/munged.log").display()))
                .arg(format!("--pid-file={}", d.join("munged.pid").display()))
                .arg(format!("--seed-file={}", d.join("munged.seed").display())),
        );
        wait_for("munged's socket", Duration::from_secs(15), || sock.exists());

        // The node line as slurmd sees this machine, reached on loopback.
        let out = Command::new(program("slurmd").unwrap())
            .arg("-C")
            .env("SLURM_CONF", &c.conf)
            .output()
            .expect("slurmd -C runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with("NodeName="))
            .unwrap_or_else(|| panic!("slurmd -C printed no node line: {text}"))
            .to_string();
        c.node = line
            .split_whitespace()
            .next()
            .and_then(|w| w.strip_prefix("NodeName="))
            .unwrap_or_default()
            .to_string();
        let (ctld_port, d_port) = (free_port(), free_port());
        let conf = format!(
            "ClusterName=dmalabtest\n\
             SlurmctldHost=localhost(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={sock}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             MailProg=/bin/true\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             SchedulerType=sched/backfill\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             MpiDefault=none\n\
             SwitchType=switch/none\n\
             ReturnToService=2\n\
             {line} NodeAddr=127.0.0.1 State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            sock = sock.display(),
            d = d.display(),
        );
        std::fs::write(&c.conf, conf).expect("slurm.conf");
        let conf_path = c.conf.clone();
        c.spawn(
            "slurmctld",
            Command::new(program("slurmctld").unwrap())
                .arg("-D")
                .env("SLURM_CONF", &conf_path),
        );
        c.spawn(
            "slurmd",
            Command::new(program("slurmd").unwrap())
                .arg("-D")
                .env("SLURM_CONF", &conf_path),
        );
        let node = c.node.clone();
        wait_for("the node to be idle", Duration::from_secs(60), || {
            c.command("sinfo")
                .args(["-h", "-n", &node, "-o", "%T"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        Some(c)
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.path().join(format!("log/{name}.out")))
            .expect("log file");
        let err = log.try_clone().expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.daemons.push((name.to_string(), child));
    }

    /// A Slurm client command aimed at this cluster.
    pub fn command(&self, prog: &str) -> Command {
        let mut c = Command::new(program(prog).unwrap_or_else(|| PathBuf::from(prog)));
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// A `dmalab` command aimed at this cluster.
    pub fn dmalab(&self) -> assert_cmd::Command {
        let mut c = crate::common::dmalab();
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Waits until the job has left the queue.
    pub fn wait_job(&self, job: &str, limit: Duration) {
        wait_for(&format!("job {job} to finish"), limit, || {
            self.command("squeue")
                .args(["-h", "-j", job, "-o", "%i"])
                .output()
                .is_ok_and(|o| {
                    o.status.success() && o.stdout.iter().all(|b| b.is_ascii_whitespace())
                })
        });
    }

    /// The daemons' logs, for a failing assertion's message.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["slurmctld.log", "slurmd.log"] {
            let p = self.dir.path().join("log").join(f);
            let t = std::fs::read_to_string(&p).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(15).collect();
            s.push_str(&format!("--- {f}\n"));
            for l in tail.iter().rev() {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first, so no job step outlives its slurmd.
        let _ = self
            .command("scancel")
            .args(["-u", "root"])
            .stderr(Stdio::null())
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            let idle = match self.command("squeue").args(["-h", "-o", "%i"]).output() {
                Ok(o) => !o.status.success() || o.stdout.iter().all(|b| b.is_ascii_whitespace()),
                Err(_) => true,
            };
            if idle {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: kill only signals our own child, by its process id.
            unsafe { libc_kill(child.id() as i32, 15) };
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            let t0 = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if t0.elapsed() > Duration::from_secs(10) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
