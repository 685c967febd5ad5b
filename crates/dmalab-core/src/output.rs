//! Writing results: `--output FILE` with `--output-format json|text`.
//!
//! Files are written whole or not at all: into a temporary file beside the
//! destination, fsynced, then renamed over it, so an interrupted or failed
//! write never leaves half a result behind. An existing character device or
//! FIFO is written in place and never renamed over or removed.
//!
//! Before a command measures or renders anything, an [`OutputGuard`] checks
//! every path it will write: no output may be the command's target, one of
//! its input files or the backing file of a loop device (compared by device
//! and inode, so links and other spellings are caught), nor a block device
//! or a directory.

use serde::Serialize;
use std::fs;
use std::io::Write;
use std::path::Path;

use crate::UsageError;

/// Output format of a result file (`--output-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// The result document, JSON (the common schema).
    #[default]
    Json,
    /// The text summary.
    Text,
    /// Terse CSV: a header and one row of the result's scalar figures
    /// (JSON pointer names under `/result`, raw bytes and nanoseconds).
    Csv,
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
/// target. A symlink at `path` is followed only where
/// [`crate::safefile::symlink_trusted`] allows it; one another user planted
/// in a directory anyone can write is replaced by the new file instead.
pub fn output_target(path: &Path) -> std::io::Result<OutputTarget> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = fs::symlink_metadata(path) {
        if m.file_type().is_symlink() && !crate::safefile::symlink_trusted(path, &m) {
            return Ok(OutputTarget::Atomic(path.to_path_buf()));
        }
    }
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

/// Opens an existing character device or FIFO for writing in place.
///
/// A FIFO nobody reads yet would block `open` for ever (and no signal
/// handler could end it), so it is opened non-blocking: while the kernel
/// answers ENXIO (no reader) this says once on stderr what it waits for and
/// retries every 50 ms until a reader appears or SIGINT/SIGTERM arrive
/// ([`crate::signal`]), which end the wait with `Interrupted`.
pub fn open_in_place(path: &Path) -> std::io::Result<fs::File> {
    open_in_place_until(path, &crate::signal::stop_requested)
}

fn open_in_place_until(path: &Path, stop: &dyn Fn() -> bool) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let mut said = false;
    loop {
        match fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => {
                // Writes block again, as a shell redirection's would.
                // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
                unsafe {
                    let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
                    if fl >= 0 {
                        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
                    }
                }
                return Ok(f);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if stop() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::Interrupted,
                        format!(
                            "stopped by a signal while waiting for a reader of the FIFO {}",
                            path.display()
                        ),
                    ));
                }
                if !said {
                    eprintln!(
                        "dmalab: waiting for a process to read the FIFO {} (nobody has it open for reading yet; Ctrl-C gives up)",
                        path.display()
                    );
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes `contents` to `path` atomically (a new file beside it, fsynced,
/// renamed over it: [`crate::safefile`]); an existing character device or
/// FIFO is written in place instead ([`output_target`], [`open_in_place`]).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    match output_target(path)? {
        OutputTarget::Direct => open_in_place(path)?.write_all(contents),
        OutputTarget::Atomic(p) => crate::safefile::replace(&p, contents, 0o666),
    }
}

/// What an output may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accept {
    /// A regular file or a new path (written whole through a temporary
    /// file), or an existing character device or FIFO (written in place).
    FileOrStream,
    /// Only a regular file or a new path (`--live-stats`, which is mapped
    /// and sized, or a results file that is appended to and locked).
    RegularFile,
}

/// How a path is told apart from others: by device and inode when it
/// exists, else by its directory (symlinks resolved) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Key {
    Id(crate::safety::FileId),
    New(std::path::PathBuf),
}

fn key_of(path: &Path) -> Option<Key> {
    if let Some(id) = crate::safety::FileId::of_path(path) {
        return Some(Key::Id(id));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(Key::New(
        fs::canonicalize(dir).ok()?.join(path.file_name()?),
    ))
}

/// Checks every path a command writes before anything is measured or
/// rendered: each output's kind and directory, and that it is none of the
/// command's inputs, its target, a loop device's backing file or another
/// output. Paths are compared by device and inode, not by spelling.
#[derive(Debug, Default)]
pub struct OutputGuard {
    /// (what it is, as said in messages; its key)
    protected: Vec<(String, Key)>,
    outputs: Vec<(String, Key)>,
}

impl OutputGuard {
    /// An empty guard.
    pub fn new() -> Self {
        Self::default()
    }

    /// Names a path the command reads or writes in place (`--target`, an
    /// input file). `what` is the option or argument that names it. A loop
    /// block device protects its backing file too.
    pub fn protect(&mut self, what: &str, path: &Path) -> &mut Self {
        if let Some(k) = key_of(path) {
            self.protected
                .push((format!("{what} ({})", path.display()), k));
        }
        if let Some(id) = crate::safety::loop_backing_id(path) {
            self.protected.push((
                format!("the backing file of {what} ({})", path.display()),
                Key::Id(id),
            ));
        }
        self
    }

    /// Checks the output `path` given with `option`; on success it is
    /// remembered, so a later output may not name it again.
    pub fn check(&mut self, option: &str, path: &Path, accept: Accept) -> Result<(), UsageError> {
        use std::os::unix::fs::FileTypeExt;
        let bad = |m: String| UsageError::new(option, m);
        let shown = path.display();
        match fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                if !dir.is_dir() {
                    return Err(bad(format!(
                        "the directory of {shown} does not exist; create it or name another file"
                    )));
                }
            }
            Err(e) => return Err(bad(format!("cannot use {shown}: {e}"))),
            Ok(m) => {
                let t = m.file_type();
                let stream = t.is_char_device() || t.is_fifo();
                if !(t.is_file() || stream) || (stream && accept == Accept::RegularFile) {
                    let what = if t.is_block_device() {
                        "a block device"
                    } else if t.is_dir() {
                        "a directory"
                    } else if t.is_char_device() {
                        "a character device"
                    } else if t.is_fifo() {
                        "a FIFO"
                    } else {
                        "not a regular file"
                    };
                    let want = match accept {
                        Accept::RegularFile => "a regular file or a path that does not exist yet",
                        Accept::FileOrStream => {
                            "a file (or a character device or FIFO to stream to)"
                        }
                    };
                    return Err(bad(format!("{shown} is {what}; name {want}")));
                }
                if t.is_file() {
                    if let Some(u) = crate::safety::kernel_users_of_file(&m) {
                        return Err(bad(format!(
                            "{shown} must not be overwritten: {}",
                            u.detail
                        )));
                    }
                }
            }
        }
        let Some(k) = key_of(path) else {
            return Ok(());
        };
        if let Some((what, _)) = self.protected.iter().find(|(_, p)| *p == k) {
            return Err(bad(format!(
                "{shown} is {what}, which this command reads or uses; writing the output there would destroy it: name another file"
            )));
        }
        if let Some((other, _)) = self.outputs.iter().find(|(_, p)| *p == k) {
            return Err(bad(format!(
                "{shown} is also the file of {other}; give each output its own file"
            )));
        }
        self.outputs.push((option.to_string(), k));
        Ok(())
    }
}

/// Serialises a result document as pretty JSON with a trailing newline.
pub fn to_json<T: Serialize>(doc: &T) -> String {
    // Our result types hold only strings, numbers, maps with string keys and
    // vectors, which always serialise.
    let mut s = serde_json::to_string_pretty(doc).expect("result types always serialise");
    s.push('\n');
    s
}

/// A result document as terse CSV: `command,status` and every scalar
/// under `/result` (arrays and histogram buckets left out), named by its
/// JSON pointer below `/result`, one header line and one row.
pub fn to_csv<T: Serialize>(doc: &T) -> String {
    fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        use serde_json::Value;
        match v {
            Value::Object(m) => {
                // A histogram is no figure: its buckets and its encoding stay
                // in the JSON document.
                for (k, x) in m
                    .iter()
                    .filter(|(k, _)| *k != "buckets" && *k != "hdr_v2_base64")
                {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}/{k}")
                    };
                    flatten(&name, x, out);
                }
            }
            Value::Array(_) => {}
            Value::Null => out.push((prefix.to_string(), String::new())),
            Value::String(t) => out.push((prefix.to_string(), t.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    fn field(s: &str) -> String {
        if s.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s.to_string()
        }
    }
    let v = serde_json::to_value(doc).unwrap_or_default();
    let mut cols = vec![
        (
            "command".to_string(),
            v["command"].as_str().unwrap_or("").to_string(),
        ),
        (
            "status".to_string(),
            v["status"].as_str().unwrap_or("").to_string(),
        ),
    ];
    flatten("", &v["result"], &mut cols);
    let head: Vec<String> = cols.iter().map(|c| field(&c.0)).collect();
    let row: Vec<String> = cols.iter().map(|c| field(&c.1)).collect();
    format!("{}\n{}\n", head.join(","), row.join(","))
}

/// A result document rendered in `format` (`text` is the summary).
pub fn render<T: Serialize>(format: OutputFormat, doc: &T, text: &str) -> String {
    match format {
        OutputFormat::Json => to_json(doc),
        OutputFormat::Text => text.to_string(),
        OutputFormat::Csv => to_csv(doc),
    }
}

/// Writes a result document to `path` in `format`; `text` is the human
/// summary (what the command also prints on stdout).
pub fn write_result<T: Serialize>(
    path: &Path,
    format: OutputFormat,
    doc: &T,
    text: &str,
) -> std::io::Result<()> {
    write_atomic(path, render(format, doc, text).as_bytes())
}

/// Appends one JSON line to `path` and fsyncs it (experiment records).
pub fn append_json_line<T: Serialize>(path: &Path, record: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
    line.push('\n');
    let mut f = crate::safefile::open_append(path, 0o666)?;
    f.write_all(line.as_bytes())?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terse_csv_is_a_header_and_one_row_of_scalars() {
        let doc = serde_json::json!({"command": "load", "status": "completed",
            "config": {"bs_bytes": 4096},
            "result": {"bw_bytes": 1.5e9, "lat": {"mean_ns": 80, "buckets": [1, 2], "hdr_v2_base64": "x"},
                       "engine": "null, mock", "first_error": null}});
        assert_eq!(
            to_csv(&doc),
            "command,status,bw_bytes,engine,first_error,lat/mean_ns\nload,completed,1500000000.0,\"null, mock\",,80\n"
        );
    }

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
    fn a_fifo_without_reader_waits_until_stopped() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pipe");
        assert!(std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap()
            .success());
        let n = std::cell::Cell::new(0);
        let e = open_in_place_until(&p, &|| {
            n.set(n.get() + 1);
            n.get() > 2
        })
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted);
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
    }

    #[test]
    fn guard_compares_by_inode_not_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.jsonl");
        fs::write(&input, b"data").unwrap();
        let link = dir.path().join("hard");
        fs::hard_link(&input, &link).unwrap();
        let sym = dir.path().join("sym");
        std::os::unix::fs::symlink(&input, &sym).unwrap();
        let mut g = OutputGuard::new();
        g.protect("RESULTS", &input);
        for p in [&input, &link, &sym, &dir.path().join(".").join("in.jsonl")] {
            let e = g.check("-o", p, Accept::FileOrStream).unwrap_err();
            assert_eq!(e.option, "-o");
            assert!(e.message.contains("RESULTS"), "{e}");
        }
        // A new path is fine once, not twice.
        let out = dir.path().join("r.html");
        g.check("-o", &out, Accept::FileOrStream).unwrap();
        let e = g
            .check("--csv", &dir.path().join("./r.html"), Accept::FileOrStream)
            .unwrap_err();
        assert!(e.message.contains("-o"), "{e}");
        // Missing directory, directory, FIFO for a regular-file output.
        let e = g
            .check("--csv", &dir.path().join("no/x.csv"), Accept::FileOrStream)
            .unwrap_err();
        assert!(e.message.contains("does not exist"), "{e}");
        let e = g
            .check("--csv", dir.path(), Accept::FileOrStream)
            .unwrap_err();
        assert!(e.message.contains("a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = g
            .check("--live-stats", &fifo, Accept::RegularFile)
            .unwrap_err();
        assert!(e.message.contains("a FIFO"), "{e}");
        g.check("--output", &fifo, Accept::FileOrStream).unwrap();
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
