//! Flag groups every measuring command shares: `--output`, `--output-format`,
//! `--quiet`.

use dmalab_core::output::{render, write_result, Accept, OutputFormat, OutputGuard};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `--output FILE --output-format json|text|csv --quiet`, as fio and perf
/// read them: `-` is stdout, a format without a file applies to stdout.
#[derive(clap::Args, Debug, Clone)]
pub struct OutputArgs {
    /// Write the result to FILE (written whole or not at all); `-` is
    /// stdout, and then the text summary goes to stderr.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Format of the result: of --output [default json], or of stdout
    /// without --output [default text]. json or csv on stdout moves the text
    /// summary to stderr.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub output_format: Option<OutputFormat>,
    /// Print nothing but the result: no per-second lines, no summary beside
    /// a result file, no warnings (they are in the result document).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Where the result goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sink {
    /// The text summary on stdout, as it is printed (no document).
    Text,
    /// The document, in this format, on stdout.
    Stdout(OutputFormat),
    /// A file.
    File(OutputFormat),
}

/// Whether `path` is this process's stdout (`/dev/stdout`, `/proc/self/fd/1`,
/// or the file or pipe stdout is): writing a second copy there would mix
/// text and the document.
fn is_stdout(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if path == Path::new("-") {
        return true;
    }
    match (
        std::fs::metadata(path),
        std::fs::metadata("/proc/self/fd/1"),
    ) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl OutputArgs {
    fn sink(&self) -> Sink {
        match (&self.output, self.output_format) {
            (None, None | Some(OutputFormat::Text)) => Sink::Text,
            (None, Some(f)) => Sink::Stdout(f),
            (Some(p), f) if is_stdout(p) => match f.unwrap_or(OutputFormat::Json) {
                OutputFormat::Text => Sink::Text,
                f => Sink::Stdout(f),
            },
            (Some(_), f) => Sink::File(f.unwrap_or(OutputFormat::Json)),
        }
    }

    /// Checks `--output` with the command's guard (before any measuring),
    /// and routes the text the command prints: to stderr when stdout
    /// carries the document, nowhere under `--quiet` unless it is the result.
    pub fn check(&self, guard: &mut OutputGuard) -> Result<(), dmalab_core::UsageError> {
        let sink = self.sink();
        if let (Some(p), Sink::File(_)) = (&self.output, sink) {
            guard.check("--output", p, Accept::FileOrStream)?;
        }
        crate::route_text(match (sink, self.quiet) {
            (Sink::Text, _) => crate::TextRoute::Stdout,
            (_, true) => crate::TextRoute::Nowhere,
            (Sink::Stdout(_), false) => crate::TextRoute::Stderr,
            (Sink::File(_), false) => crate::TextRoute::Stdout,
        });
        // Progress bars (drawn only on a terminal's stderr) never under
        // --quiet, nor beside a document on stdout.
        dmalab_core::progress::enable(!self.quiet && !matches!(sink, Sink::Stdout(_)));
        Ok(())
    }

    /// Writes `doc` (or `text`) where the result goes: the file, or stdout
    /// (the text summary was printed already).
    pub fn write<T: Serialize>(&self, doc: &T, text: &str) -> anyhow::Result<()> {
        match self.sink() {
            Sink::Text => {}
            Sink::Stdout(f) => crate::write_result_stdout(&render(f, doc, text)),
            Sink::File(f) => {
                if let Some(path) = &self.output {
                    write_result(path, f, doc, text).map_err(|e| {
                        anyhow::anyhow!("--output: cannot write {}: {e}", path.display())
                    })?;
                }
            }
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
