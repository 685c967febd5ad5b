//! Writing results: `--output FILE` with `--output-format json|text`.
//!
//! Files are written whole or not at all: into a temporary file beside the
//! destination, fsynced, then renamed over it, so an interrupted or failed
//! write never leaves half a result behind.

use serde::Serialize;
use std::fs;
use std::io::Write;
use std::path::Path;

/// Output format of a result file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// The result document as pretty JSON.
    #[default]
    Json,
    /// The same text summary that goes to stdout.
    Text,
}

/// Where an output goes, decided before writing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputTarget {
    /// A regular file (or none yet) at this path, the symlinks on the way
    /// resolved: written whole or not at all, through a temporary file
    /// renamed over it.
    Atomic(std::path::PathBuf),
    /// An existing character device or FIFO (`/dev/null`, `/dev/stdout`, a
    /// pipe): written in place, as a shell redirection would. Renaming a
    /// file over it would replace the device node itself.
    Direct,
}

/// Decides how `path` is written; a block device, a directory or anything
/// else that is not a file, a character device or a FIFO is refused with
/// `InvalidInput`, so no result lands on a disk the user did not name as a
/// target.
pub fn output_target(path: &Path) -> std::io::Result<OutputTarget> {
    use std::os::unix::fs::FileTypeExt;
    match fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling symlink is replaced, as before; a plain path is new.
            Ok(OutputTarget::Atomic(path.to_path_buf()))
        }
        Err(e) => Err(e),
        Ok(m) => {
            let t = m.file_type();
            if t.is_file() {
                Ok(OutputTarget::Atomic(fs::canonicalize(path)?))
            } else if t.is_char_device() || t.is_fifo() {
                Ok(OutputTarget::Direct)
            } else {
                let what = if t.is_block_device() {
                    "a block device"
                } else if t.is_dir() {
                    "a directory"
                } else {
                    "not a regular file"
                };
                Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{} is {what}; name a file to write", path.display()),
                ))
            }
        }
    }
}

/// The temporary file an atomic write of `path` goes through before it is
/// renamed over `path`: hidden, beside it (so the rename stays on one file
/// system), named after this process.
pub fn tmp_beside(path: &Path) -> std::path::PathBuf {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    dir.join(format!(".{name}.tmp-{}", std::process::id()))
}

/// Writes `contents` to `path` atomically (temp file, fsync, rename); an
/// existing character device or FIFO is written in place instead
/// ([`output_target`]).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let path = match output_target(path)? {
        OutputTarget::Direct => {
            return fs::OpenOptions::new()
                .write(true)
                .open(path)?
                .write_all(contents)
        }
        OutputTarget::Atomic(p) => p,
    };
    let path = path.as_path();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tmp_beside(path);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serialises a result document as pretty JSON with a trailing newline.
pub fn to_json<T: Serialize>(doc: &T) -> String {
    // Our result types hold only strings, numbers, maps with string keys and
    // vectors, which always serialise.
    let mut s = serde_json::to_string_pretty(doc).expect("result types always serialise");
    s.push('\n');
    s
}

/// Writes a result document to `path` in `format`; `text` is the human
/// summary (what the command also prints on stdout).
pub fn write_result<T: Serialize>(
    path: &Path,
    format: OutputFormat,
    doc: &T,
    text: &str,
) -> std::io::Result<()> {
    match format {
        OutputFormat::Json => write_atomic(path, to_json(doc).as_bytes()),
        OutputFormat::Text => write_atomic(path, text.as_bytes()),
    }
}

/// Appends one JSON line to `path` and fsyncs it (experiment records).
pub fn append_json_line<T: Serialize>(path: &Path, record: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
    line.push('\n');
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(line.as_bytes())?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        write_atomic(&p, b"first").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        // No temporary files left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing-dir").join("r.json");
        assert!(write_atomic(&p, b"x").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_fifo_is_written_in_place_and_kept() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipe");
        let st = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap();
        assert!(st.success());
        let rp = p.clone();
        let reader = std::thread::spawn(move || fs::read(&rp).unwrap());
        write_atomic(&p, b"result").unwrap();
        // The node is still a FIFO (a rename would have replaced it with a
        // regular file, as it once replaced /dev/null; checked before
        // joining, as the reader would then wait for ever), and no
        // temporary file was left beside it.
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
        assert_eq!(reader.join().unwrap(), b"result");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(
            output_target(Path::new("/dev/null")).unwrap(),
            OutputTarget::Direct
        );
    }

    #[test]
    fn a_symlink_keeps_pointing_at_the_rewritten_file() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        let link = dir.path().join("link.json");
        fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"new");
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_atomic(dir.path(), b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a directory"), "{e}");
    }

    #[test]
    fn appends_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        append_json_line(&p, &serde_json::json!({"a": 1})).unwrap();
        append_json_line(&p, &serde_json::json!({"a": 2})).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
    }
}
