//! The device libraries' test seams, read from the environment here and
//! nowhere else, and passed down as values (as `dmalab-host` takes a
//! `HostRoot`): which GPU driver, which NVMe passthrough path and which
//! verbs library a run uses. Tests set the variables to reach the mocks.

/// `DMALAB_GPU_DRIVER`, `DMALAB_NVME_PATH`: for the load engines.
pub fn engines() -> dmalab_load::engine::DeviceSeams {
    dmalab_load::engine::DeviceSeams {
        gpu_driver: std::env::var(dmalab_load::engine::gpu::DRIVER_ENV).ok(),
        nvme_path: std::env::var(dmalab_nvme::queue::PATH_ENV).ok(),
    }
}

/// `DMALAB_IBVERBS_LIB`: the verbs library for every command that loads
/// one (it is loaded once per process, so chosen once, at start-up).
pub fn install_verbs_library() {
    dmalab_rdma::sys::use_library(std::env::var(dmalab_rdma::sys::LIBRARY_ENV).ok());
}
