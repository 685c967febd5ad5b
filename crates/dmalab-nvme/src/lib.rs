//! NVMe protocol pieces for dmalab: submission-entry building (Read, Write,
//! Flush, Identify, Format NVM), Identify Controller/Namespace parsing, and
//! the passthrough paths (`NVME_IOCTL_*` and io_uring `IORING_OP_URING_CMD`).
