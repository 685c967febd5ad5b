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

/// Writes `contents` to `path` atomically (temp file, fsync, rename).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
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
    fn appends_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        append_json_line(&p, &serde_json::json!({"a": 1})).unwrap();
        append_json_line(&p, &serde_json::json!({"a": 2})).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":1}\n{\"a\":2}\n");
    }
}
