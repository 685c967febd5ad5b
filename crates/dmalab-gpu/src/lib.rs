//! GPU copy engines as a DMA source for dmalab.
//!
//! The CUDA driver API is loaded at run time from `libcuda.so.1`
//! ([`cuda`]): nothing of CUDA is needed to build, and a host without the
//! driver gets one clear error. The dozen driver calls dmalab makes form one
//! trait ([`api::Cuda`]), which a mock driver ([`mock`]) implements too, so
//! everything above the driver runs in CI. [`queue`] holds the run's side:
//! opened GPUs, the page-locked host buffer, one worker's copy queue.
//! [`facts`] describes a GPU (name, PCI address, link, NUMA node);
//! [`wait`] how a worker waits for its copies (`--gpu-wait`).

pub mod api;
pub mod cuda;
pub mod error;
pub mod facts;
pub mod mock;
pub mod queue;
pub mod wait;

pub use api::Cuda;
pub use error::GpuError;
pub use facts::GpuFacts;
pub use queue::GpuCopy;
pub use wait::GpuWait;

use dmalab_core::UsageError;
use std::path::PathBuf;
use std::sync::Arc;

/// The environment variable that picks the driver (a test hook): unset =
/// `libcuda.so.1`; `mock[:OPTIONS]` = the mock driver
/// ([`mock::MockConfig::parse`]); anything else = the path or name of the
/// driver library to open.
pub const DRIVER_ENV: &str = "DMALAB_GPU_DRIVER";

/// A driver, loaded, with the directory that stands for `/sys` for it.
#[derive(Clone)]
pub struct Loaded {
    /// The function table.
    pub cuda: Arc<dyn Cuda>,
    /// `/sys`, or the mock's fixture tree.
    pub sysfs: PathBuf,
}

/// Loads the driver `spec` names (see [`DRIVER_ENV`]; None: the real one).
pub fn load_driver(spec: Option<&str>) -> Result<Loaded, GpuError> {
    let sys = PathBuf::from("/sys");
    match spec {
        None | Some("") => Ok(Loaded {
            cuda: Arc::new(cuda::CudaDriver::load()?),
            sysfs: sys,
        }),
        Some(s) if s == "mock" || s.starts_with("mock:") => {
            let cfg = mock::MockConfig::parse(
                s.strip_prefix("mock")
                    .unwrap_or_default()
                    .trim_start_matches(':'),
            )
            .map_err(GpuError::Spec)?;
            let sysfs = cfg.sysfs.clone().unwrap_or(sys);
            Ok(Loaded {
                cuda: Arc::new(mock::MockDriver::new(cfg)),
                sysfs,
            })
        }
        Some(path) => Ok(Loaded {
            cuda: Arc::new(cuda::CudaDriver::load_from(path)?),
            sysfs: sys,
        }),
    }
}

/// Parses `--target gpu:N`.
pub fn parse_target(option: &str, text: &str) -> Result<u32, UsageError> {
    text.strip_prefix("gpu:")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            UsageError::new(
                option,
                format!("'{text}' is not a GPU; --engine gpu takes gpu:N (N counts from 0, as nvidia-smi numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID)"),
            )
        })
}

/// Parses `--gpus LIST` (`0`, `0,2`, `0-3`): GPU indices, ascending, each once.
pub fn parse_gpu_list(option: &str, text: &str) -> Result<Vec<u32>, UsageError> {
    let list = dmalab_core::cpus::parse_kernel_list(text)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            UsageError::new(
                option,
                format!("'{text}' is not a list of GPU indices; use e.g. 0, 0,1 or 0-3"),
            )
        })?;
    let mut v: Vec<u32> = list
        .into_iter()
        .filter_map(|i| u32::try_from(i).ok())
        .collect();
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_lists_parse() {
        assert_eq!(parse_target("--target", "gpu:3"), Ok(3));
        for bad in ["gpu:", "gpu:-1", "gpu3", "/dev/nvidia0", "gpu:x"] {
            let e = parse_target("--target", bad).unwrap_err();
            assert!(e.message.contains("gpu:N"), "{bad}: {e}");
        }
        assert_eq!(parse_gpu_list("--gpus", "2,0-1,1").unwrap(), [0, 1, 2]);
        assert!(parse_gpu_list("--gpus", "").is_err());
        assert!(parse_gpu_list("--gpus", "a").is_err());
    }

    #[test]
    fn the_driver_spec_picks_mock_path_or_libcuda() {
        let l = load_driver(Some("mock:3,sysfs=/tmp/x")).unwrap();
        assert_eq!(l.cuda.origin(), "mock");
        assert_eq!(l.sysfs, PathBuf::from("/tmp/x"));
        let e = load_driver(Some("mock:fast")).err().unwrap();
        assert!(
            e.to_string()
                .starts_with("DMALAB_GPU_DRIVER: mock option 'fast'"),
            "{e}"
        );
        let e = load_driver(Some("/nonexistent/libcuda.so.1"))
            .err()
            .unwrap();
        assert!(matches!(e, GpuError::NoDriver { .. }), "{e}");
        assert!(e.is_host_lacking());
    }
}
