//! One queue of NVMe I/O commands on one namespace, over whichever
//! passthrough path this kernel offers: io_uring `IORING_OP_URING_CMD` on the
//! generic character device (asynchronous, many commands in flight), or the
//! synchronous `NVME_IOCTL_IO_CMD` (one command per system call, as
//! nvme-memload did) when io_uring passthrough is missing.
//!
//! Both report a command's outcome the same way: 0 for success, a positive
//! NVMe status, or a negative errno.

use crate::cmd::PassthruCmd;
use crate::dev::{namespace_names, NvmeDevice};
use crate::uring::{self, UringCompletion, UringQueue};
use crate::Error;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;

/// The environment variable that forces a path (`uring_cmd` or `ioctl`).
pub const PATH_ENV: &str = "DMALAB_NVME_PATH";

/// The passthrough path in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassthruPath {
    /// io_uring `IORING_OP_URING_CMD` on `/dev/ngXnY`.
    UringCmd,
    /// Synchronous `NVME_IOCTL_IO_CMD`.
    Ioctl,
}

impl PassthruPath {
    /// The engine name results carry.
    pub fn engine_name(self) -> &'static str {
        match self {
            PassthruPath::UringCmd => "nvme-uring-cmd",
            PassthruPath::Ioctl => "nvme-ioctl",
        }
    }
}

/// How to pick the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathChoice {
    /// io_uring when the kernel has it, else ioctl.
    Auto,
    /// io_uring or fail.
    UringCmd,
    /// ioctl.
    Ioctl,
}

impl PathChoice {
    /// Parses the value of [`PATH_ENV`] (the binary reads it): unset or
    /// empty is `Auto`.
    pub fn parse(text: Option<&str>) -> Result<Self, Error> {
        match text.unwrap_or_default() {
            "" | "auto" => Ok(PathChoice::Auto),
            "uring_cmd" => Ok(PathChoice::UringCmd),
            "ioctl" => Ok(PathChoice::Ioctl),
            other => Err(Error::BadCommand(format!(
                "{PATH_ENV}={other}: use uring_cmd, ioctl or auto"
            ))),
        }
    }
}

enum Inner {
    Uring(Box<UringQueue>),
    Ioctl {
        dev: NvmeDevice,
        pending: Vec<(PassthruCmd, u64)>,
    },
}

/// A queue of NVMe I/O commands on one namespace.
pub struct NvmeQueue {
    inner: Inner,
    nsid: u32,
    fallback_reason: Option<String>,
}

/// (major, minor) of the running kernel.
fn kernel_version() -> Option<(u32, u32)> {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = r.trim().split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

impl NvmeQueue {
    /// Opens a queue of `depth` slots on the namespace at `path`
    /// (`/dev/ngXnY` or `/dev/nvmeXnY`); `writable` when Write commands
    /// will be sent.
    pub fn open(
        path: &Path,
        writable: bool,
        depth: u32,
        choice: PathChoice,
    ) -> Result<Self, Error> {
        let uring_reason = if choice == PathChoice::Ioctl {
            Some(format!("{PATH_ENV}=ioctl"))
        } else {
            match uring::probe() {
                Err(e) => Some(e.to_string()),
                Ok(()) => None,
            }
        };
        let generic = if NvmeDevice::open(path, false)?.is_generic() {
            Some(path.to_path_buf())
        } else {
            namespace_names(path).and_then(|n| n.generic)
        };
        let reason = match (uring_reason, &generic) {
            (Some(r), _) => Some(r),
            (None, None) => Some(format!(
                "{} has no NVMe generic character device (/dev/ngXnY, Linux 5.13+)",
                path.display()
            )),
            (None, Some(_)) => None,
        };
        match (reason, generic) {
            (None, Some(g)) => {
                let dev = NvmeDevice::open(&g, writable)?;
                let nsid = dev.nsid();
                let file = dev.file().try_clone().map_err(|e| Error::io("dup", e))?;
                Ok(Self {
                    inner: Inner::Uring(Box::new(UringQueue::new(file, nsid, depth)?)),
                    nsid,
                    fallback_reason: None,
                })
            }
            (Some(r), _) if choice == PathChoice::UringCmd => Err(Error::Unsupported {
                what: "NVMe passthrough through io_uring".into(),
                detail: r,
            }),
            (reason, _) => {
                let dev = NvmeDevice::open(path, writable)?;
                Ok(Self {
                    nsid: dev.nsid(),
                    inner: Inner::Ioctl {
                        dev,
                        pending: Vec::with_capacity(depth as usize),
                    },
                    fallback_reason: reason,
                })
            }
        }
    }

    /// The path in use.
    pub fn path(&self) -> PassthruPath {
        match self.inner {
            Inner::Uring(_) => PassthruPath::UringCmd,
            Inner::Ioctl { .. } => PassthruPath::Ioctl,
        }
    }

    /// Why the ioctl path was taken, when it was.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The namespace id.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Registers the buffer regions as io_uring fixed buffers when the path
    /// is io_uring and the kernel's NVMe driver takes fixed buffers for
    /// passthrough (Linux 6.1+). Returns whether they are in use.
    ///
    /// # Safety
    /// The regions must stay allocated and unmoved while the queue exists.
    pub unsafe fn register_buffers(&mut self, regions: &[libc::iovec]) -> Result<bool, Error> {
        match &mut self.inner {
            Inner::Uring(q) if kernel_version().is_some_and(|v| v >= (6, 1)) => {
                // SAFETY: forwarded from the caller.
                unsafe { q.register_buffers(regions)? };
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// True when commands use io_uring fixed buffers.
    pub fn uses_fixed_buffers(&self) -> bool {
        matches!(&self.inner, Inner::Uring(q) if q.has_fixed_buffers())
    }

    /// Stops using fixed buffers for later commands. Linux 6.1's NVMe
    /// passthrough refuses (EINVAL) a fixed buffer whose pages io_uring
    /// coalesced into one large folio entry (a buffer in a transparent huge
    /// page) once a command spans more than one page; plain user addresses
    /// work there.
    pub fn stop_using_fixed_buffers(&mut self) {
        if let Inner::Uring(q) = &mut self.inner {
            q.stop_using_fixed_buffers();
        }
    }

    /// Queues a command; it is sent by the next [`Self::submit_and_reap`].
    ///
    /// # Safety
    /// `cmd.addr`/`cmd.data_len` must describe memory that stays valid until
    /// the command's completion has been returned; `buf_index` (when fixed
    /// buffers are registered) must name the region holding it.
    pub unsafe fn push(
        &mut self,
        cmd: PassthruCmd,
        user_data: u64,
        buf_index: Option<u16>,
    ) -> Result<(), Error> {
        match &mut self.inner {
            // SAFETY: forwarded from the caller.
            Inner::Uring(q) => unsafe { q.push(&cmd, user_data, buf_index) },
            Inner::Ioctl { pending, .. } => {
                pending.push((cmd, user_data));
                Ok(())
            }
        }
    }

    /// Sends what is queued and appends completions to `out`: io_uring waits
    /// for `want` of them or `timeout`; ioctl runs each queued command to
    /// completion in turn.
    pub fn submit_and_reap(
        &mut self,
        want: usize,
        timeout: Option<Duration>,
        out: &mut Vec<UringCompletion>,
    ) -> Result<(), Error> {
        match &mut self.inner {
            Inner::Uring(q) => {
                q.submit_and_wait(want, timeout)?;
                q.reap(out);
            }
            Inner::Ioctl { dev, pending } => {
                for (mut cmd, user_data) in pending.drain(..) {
                    // SAFETY: push's caller keeps the memory valid until the
                    // completion is returned, which is after this call.
                    let (res, result) = match unsafe { dev.io(&mut cmd) } {
                        Ok(dw0) => (0, u64::from(dw0)),
                        Err(Error::Nvme { status, .. }) => (status as i32, 0),
                        Err(Error::Io { cause, .. }) => {
                            (-cause.raw_os_error().unwrap_or(libc::EIO), 0)
                        }
                        Err(_) => (-libc::EIO, 0),
                    };
                    out.push(UringCompletion {
                        user_data,
                        res,
                        result,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_seam_parses_the_value_it_is_given() {
        assert_eq!(PathChoice::parse(None).unwrap(), PathChoice::Auto);
        assert_eq!(PathChoice::parse(Some("")).unwrap(), PathChoice::Auto);
        assert_eq!(PathChoice::parse(Some("ioctl")).unwrap(), PathChoice::Ioctl);
        assert_eq!(
            PathChoice::parse(Some("uring_cmd")).unwrap(),
            PathChoice::UringCmd
        );
        let e = PathChoice::parse(Some("spdk")).unwrap_err().to_string();
        assert!(e.contains("DMALAB_NVME_PATH=spdk"), "{e}");
    }

    #[test]
    fn engine_names() {
        assert_eq!(PassthruPath::UringCmd.engine_name(), "nvme-uring-cmd");
        assert_eq!(PassthruPath::Ioctl.engine_name(), "nvme-ioctl");
    }

    #[test]
    fn kernel_version_parses() {
        assert!(kernel_version().is_some_and(|(maj, _)| maj >= 3));
    }

    #[test]
    fn a_file_is_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(NvmeQueue::open(f.path(), false, 4, PathChoice::Auto).is_err());
    }
}
