//! Flag groups every measuring command shares: `--output`, `--output-format`.

use dmalab_core::output::{write_result, Accept, OutputFormat, OutputGuard};
use serde::Serialize;
use std::path::PathBuf;

/// `--output FILE --output-format json|text`.
#[derive(clap::Args, Debug, Clone)]
pub struct OutputArgs {
    /// Write the result to FILE (written whole or not at all).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Format of --output.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    pub output_format: OutputFormat,
}

impl OutputArgs {
    /// Checks `--output` with the command's guard (before any measuring).
    pub fn check(&self, guard: &mut OutputGuard) -> Result<(), dmalab_core::UsageError> {
        match &self.output {
            Some(p) => guard.check("--output", p, Accept::FileOrStream),
            None => Ok(()),
        }
    }

    /// Writes `doc` (or `text`) to `--output` if one was given.
    pub fn write<T: Serialize>(&self, doc: &T, text: &str) -> anyhow::Result<()> {
        if let Some(path) = &self.output {
            write_result(path, self.output_format, doc, text)
                .map_err(|e| anyhow::anyhow!("--output: cannot write {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// Puts `--buffer-file` under the command's guard, before its outputs: a
/// file (or a new path) is checked like every file dmalab writes, and no
/// output may name it; a DAX device is protected from the outputs (what
/// may be mapped is the placement's own check).
pub fn guard_buffer_file(
    guard: &mut OutputGuard,
    path: Option<&std::path::Path>,
) -> Result<(), dmalab_core::UsageError> {
    use std::os::unix::fs::FileTypeExt;
    let Some(p) = path else {
        return Ok(());
    };
    if std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device()) {
        guard.protect("--buffer-file", p);
        return Ok(());
    }
    guard.check("--buffer-file", p, Accept::RegularFile)
}
