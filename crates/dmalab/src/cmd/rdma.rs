//! `dmalab rdma serve`: the peer of `dmalab load --engine rdma --target
//! HOST:PORT`. The server itself lives in `dmalab_rdma::serve`.

use super::common::OutputArgs;
use dmalab_core::host::HostInfo;
use dmalab_core::output::OutputGuard;
use dmalab_core::placement::PlacementSpec;
use dmalab_core::schema::ResultDoc;
use dmalab_core::UsageError;
use dmalab_rdma::access::{AllowNet, Secret};
use dmalab_rdma::serve::{self, ServeConfig};
use dmalab_rdma::verbs::DeviceConfig;
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

/// RDMA peers for `dmalab load --engine rdma`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Register a buffer on this host and serve RDMA clients (`dmalab load
    /// --engine rdma --target HOST:PORT`), any number at once, until
    /// SIGINT/SIGTERM; then print what was served.
    Serve(ServeArgs),
}

/// `dmalab rdma serve`.
#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address and TCP port of the handshake (use 0.0.0.0:PORT to serve
    /// other hosts).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:18515")]
    listen: String,
    /// RDMA device (see /sys/class/infiniband; default: the first).
    #[arg(long, value_name = "NAME")]
    device: Option<String>,
    /// Port of the device.
    #[arg(long = "rdma-port", value_name = "N", default_value_t = 1)]
    rdma_port: u8,
    /// GID index (default: 0 on InfiniBand, the first IPv4-mapped GID on RoCE).
    #[arg(long, value_name = "N")]
    gid_index: Option<u8>,
    /// Size of the served buffer (the clients' remote buffer).
    #[arg(long, value_name = "SIZE", default_value = "64M")]
    buffer: String,
    /// Byte the buffer holds before serving (0-255).
    #[arg(long, value_name = "BYTE", default_value_t = 0)]
    fill: u8,
    /// Connections served at once (each costs a thread and a QP); one more
    /// is closed with a reason. Default 64.
    #[arg(long, value_name = "N")]
    max_clients: Option<String>,
    /// Longest a client may take to complete its handshake (a slower one
    /// is dropped).
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    handshake_timeout: String,
    /// A file holding a shared secret (yours, mode 0600, 16+ bytes): only
    /// clients that prove they know it (`load --rdma-secret-file`) connect.
    /// Never on the command line, where `ps` shows it.
    #[arg(long, value_name = "PATH")]
    secret_file: Option<PathBuf>,
    /// Only peers in ADDR[/PREFIX] may connect (repeatable; default: any
    /// that reach the port).
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    allow: Vec<String>,
    /// Bind the served buffer to this NUMA node (mbind MPOL_BIND before
    /// its pages are touched; every page is checked afterwards with
    /// move_pages, and serving refused if one landed elsewhere).
    #[arg(long, visible_alias = "numa-node", value_name = "NODE")]
    membind: Option<usize>,
    /// Back the served buffer with this file or DAX device (/dev/daxX.Y),
    /// mapped shared. A path that does not exist is created and removed
    /// afterwards; an existing one must be at least --buffer long and named
    /// with --allow-destroy; it is never truncated.
    #[arg(long, value_name = "PATH")]
    buffer_file: Option<PathBuf>,
    /// Allow the existing --buffer-file to be overwritten (the --fill byte
    /// and the clients' writes land in it).
    #[arg(long, value_name = "PATH")]
    allow_destroy: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

/// The resolved configuration, as the result records it.
#[derive(Serialize)]
struct ServeConfigDoc {
    /// The handshake's address.
    listen: String,
    /// Device asked for (None: the first).
    device: Option<String>,
    /// Port of the device.
    rdma_port: u8,
    /// GID index asked for (None: chosen).
    gid_index: Option<u8>,
    /// Bytes of the served buffer.
    buffer_bytes: u64,
    /// Fill byte.
    fill: u8,
    /// Connections served at once.
    max_clients: usize,
    /// Longest a handshake may take, seconds.
    handshake_timeout_s: u64,
    /// The secret's file, when clients must prove they know it.
    secret_file: Option<PathBuf>,
    /// Networks that may connect (empty: any).
    allow: Vec<String>,
    /// Where the served buffer lives.
    placement: PlacementSpec,
}

/// Runs `dmalab rdma`.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    match a.action {
        Action::Serve(s) => run_serve(s),
    }
}

fn run_serve(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let listen: SocketAddr = a.listen.parse().map_err(|_| {
        UsageError::new(
            "--listen",
            format!("{:?} is not ADDR:PORT (e.g. 0.0.0.0:18515)", a.listen),
        )
    })?;
    let buffer_bytes = dmalab_core::units::parse_size("--buffer", &a.buffer)?;
    if buffer_bytes == 0 {
        return Err(UsageError::new("--buffer", "must be at least 1 byte").into());
    }
    let max_clients = match &a.max_clients {
        None => serve::DEFAULT_MAX_CLIENTS,
        Some(t) => usize::try_from(dmalab_core::units::parse_count("--max-clients", t)?)
            .unwrap_or(usize::MAX),
    };
    let handshake_timeout =
        dmalab_core::units::parse_duration("--handshake-timeout", &a.handshake_timeout)?;
    let cfg = ServeConfig {
        listen,
        device: DeviceConfig {
            device: a.device.clone(),
            port: a.rdma_port,
            gid_index: a.gid_index,
            device_flag: "--device",
        },
        buffer_bytes,
        fill: a.fill,
        sysfs_root: PathBuf::from("/sys/class/infiniband"),
        max_clients,
        handshake_timeout,
        secret: a
            .secret_file
            .as_deref()
            .map(|p| Secret::read(p, "--secret-file"))
            .transpose()?,
        allow: a
            .allow
            .iter()
            .map(|t| t.parse::<AllowNet>())
            .collect::<Result<_, _>>()?,
        placement: PlacementSpec {
            membind: a.membind,
            buffer_file: a.buffer_file.clone(),
            buffer_file_allowed: match (&a.buffer_file, &a.allow_destroy) {
                (Some(b), Some(d)) => dmalab_core::safety::same_path(b, d),
                _ => false,
            },
        },
    };
    if let (Some(d), false) = (&a.allow_destroy, cfg.placement.buffer_file_allowed) {
        return Err(UsageError::new(
            "--allow-destroy",
            format!(
                "{} is not the --buffer-file; rdma serve writes no other existing file",
                d.display()
            ),
        )
        .into());
    }
    cfg.validate()?;
    let mut guard = OutputGuard::new();
    super::common::guard_buffer_file(&mut guard, cfg.placement.buffer_file.as_deref())?;
    a.output.check(&mut guard)?;
    let started = SystemTime::now();
    let stop = dmalab_core::signal::stop_flag();
    let report = serve::serve(&cfg, &stop, &|line: &str| {
        eprintln!("dmalab rdma serve: {}", dmalab_core::text::escaped(line));
    })?;
    let text = report.summary();
    out!("{text}");
    // Serving ends on SIGINT/SIGTERM by design: that is its stop condition,
    // so the document says completed.
    let doc = ResultDoc::new(
        "rdma serve",
        HostInfo::collect(),
        ServeConfigDoc {
            listen: a.listen,
            device: a.device,
            rdma_port: a.rdma_port,
            gid_index: a.gid_index,
            buffer_bytes,
            fill: a.fill,
            max_clients,
            handshake_timeout_s: handshake_timeout.as_secs(),
            secret_file: a.secret_file,
            allow: a.allow,
            placement: cfg.placement.clone(),
        },
        report,
        started,
    );
    a.output.write(&doc, &text)?;
    Ok(ExitCode::SUCCESS)
}
