//! The text trace form: `GAP_NS OP ADDR LEN [DUR_NS] [@DEVICE]`, one record a line.

use crate::{Device, Kind, Record, RecordSource, Source, TraceError};
use std::io::{BufRead, Read, Write};
use std::path::Path;

fn op_name(r: &Record) -> &'static str {
    match (r.kind, r.source, r.write) {
        (Kind::Ref, Source::Cpu, false) => "cpu-r",
        (Kind::Ref, Source::Cpu, true) => "cpu-w",
        (Kind::Ref, Source::Dma, false) => "dma-r",
        (Kind::Ref, Source::Dma, true) => "dma-w",
        (Kind::Begin, _, false) => "begin-r",
        (Kind::Begin, _, true) => "begin-w",
        (Kind::End, _, false) => "end-r",
        (Kind::End, _, true) => "end-w",
        (Kind::Xfer, _, false) => "xfer-r",
        (Kind::Xfer, _, true) => "xfer-w",
    }
}

fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(&h.replace('_', ""), 16).ok()
    } else {
        s.replace('_', "").parse().ok()
    }
}

/// Parses one line; `Ok(None)` for blank lines and comments. The error is a
/// message without the location.
pub fn parse_text_line(line: &str) -> Result<Option<Record>, String> {
    let line = match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    };
    let mut it = line.split_whitespace();
    let Some(gap) = it.next() else {
        return Ok(None);
    };
    let gap_ns = parse_u64(gap).ok_or_else(|| format!("gap '{gap}' is not a number of ns"))?;
    let op = it
        .next()
        .ok_or("missing OP (cpu-r, cpu-w, dma-r, dma-w, begin-w, end-w, xfer-w, ...)")?;
    let (kind, source, write) = match op {
        "cpu-r" => (Kind::Ref, Source::Cpu, false),
        "cpu-w" => (Kind::Ref, Source::Cpu, true),
        "dma-r" => (Kind::Ref, Source::Dma, false),
        "dma-w" => (Kind::Ref, Source::Dma, true),
        "begin-r" => (Kind::Begin, Source::Dma, false),
        "begin-w" => (Kind::Begin, Source::Dma, true),
        "end-r" => (Kind::End, Source::Dma, false),
        "end-w" => (Kind::End, Source::Dma, true),
        "xfer-r" => (Kind::Xfer, Source::Dma, false),
        "xfer-w" => (Kind::Xfer, Source::Dma, true),
        o => {
            return Err(format!(
                "unknown OP '{o}'; use cpu-r, cpu-w, dma-r, dma-w, begin-r, begin-w, end-r, end-w, xfer-r or xfer-w"
            ))
        }
    };
    let a = it.next().ok_or("missing ADDR")?;
    let addr = parse_u64(a).ok_or_else(|| format!("address '{a}' is not a number"))?;
    let l = it.next().ok_or("missing LEN")?;
    let len = parse_u64(l)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| format!("length '{l}' is not a number below 2^32"))?;
    let mut dur_ns = 0;
    let mut device = Device::Untagged;
    let mut next = it.next();
    if let Some(d) = next.filter(|d| !d.starts_with('@')) {
        if kind != Kind::Xfer {
            return Err(format!("unexpected '{d}': only xfer records take DUR_NS"));
        }
        dur_ns = parse_u64(d).ok_or_else(|| format!("duration '{d}' is not a number of ns"))?;
        next = it.next();
    }
    if let Some(d) = next.and_then(|d| d.strip_prefix('@')) {
        if source != Source::Dma {
            return Err(format!(
                "unexpected '@{d}': only DMA records (dma-, begin-, end-, xfer-) name a device"
            ));
        }
        device = Device::from_name(d)
            .filter(|&d| d != Device::Untagged)
            .ok_or_else(|| format!("unknown device '@{d}'; use @nic, @disk or @other"))?;
        next = it.next();
    }
    if let Some(x) = next {
        return Err(format!("unexpected '{x}' after the record"));
    }
    Ok(Some(Record {
        gap_ns,
        kind,
        source,
        write,
        addr,
        len,
        dur_ns,
        device,
    }))
}

/// The longest line of a text trace, bytes: a record is under 100, and a
/// file with no newline must not be read whole into memory.
pub const MAX_LINE_BYTES: usize = 4096;

/// Reads the text form.
pub struct TextDecoder<R: BufRead> {
    inp: R,
    line: Vec<u8>,
    lineno: u64,
    /// Byte offset of the start of the current line.
    offset: u64,
    path: String,
}

impl<R: BufRead> TextDecoder<R> {
    /// Reads from `inp`; `path` names it in errors.
    pub fn new(inp: R, path: &Path) -> Self {
        TextDecoder {
            inp,
            line: Vec::new(),
            lineno: 0,
            offset: 0,
            path: path.display().to_string(),
        }
    }
}

impl<R: BufRead> RecordSource for TextDecoder<R> {
    fn next_record(&mut self, rec: &mut Record) -> Result<bool, TraceError> {
        loop {
            self.line.clear();
            let n = (&mut self.inp)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.line)
                .map_err(|e| TraceError::Io {
                    path: self.path.clone(),
                    cause: e,
                })?;
            if n == 0 {
                return Ok(false);
            }
            self.lineno += 1;
            let start = self.offset;
            self.offset += n as u64;
            let at = |message: String| TraceError::Format {
                path: format!("{}:{}", self.path, self.lineno),
                message,
            };
            if n > MAX_LINE_BYTES {
                return Err(at(format!(
                    "line starting at byte offset {start} is longer than {MAX_LINE_BYTES} bytes; is this a trace?"
                )));
            }
            let line = std::str::from_utf8(&self.line).map_err(|e| {
                at(format!(
                    "byte offset {} is not valid UTF-8; a text trace is ASCII (a binary trace starts with DMALTRC)",
                    start + e.valid_up_to() as u64
                ))
            })?;
            match parse_text_line(line) {
                Ok(Some(r)) => {
                    *rec = r;
                    return Ok(true);
                }
                Ok(None) => continue,
                Err(m) => {
                    return Err(TraceError::Format {
                        path: format!("{}:{}", self.path, self.lineno),
                        message: m,
                    })
                }
            }
        }
    }
}

/// Writes the text form.
pub struct TextEncoder<W: Write> {
    out: W,
}

impl<W: Write> TextEncoder<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        TextEncoder { out }
    }

    /// Writes one record as a line.
    pub fn write(&mut self, r: &Record) -> std::io::Result<()> {
        write!(
            self.out,
            "{} {} {:#x} {}",
            r.gap_ns,
            op_name(r),
            r.addr,
            r.len
        )?;
        if r.kind == Kind::Xfer {
            write!(self.out, " {}", r.dur_ns)?;
        }
        if r.source == Source::Dma && r.device != Device::Untagged {
            write!(self.out, " @{}", r.device.name())?;
        }
        writeln!(self.out)
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }

    /// The underlying writer, borrowed.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Result<u64, TraceError> {
        let mut d = TextDecoder::new(bytes, Path::new("t.txt"));
        let mut r = Record::default();
        let mut n = 0;
        while d.next_record(&mut r)? {
            n += 1;
        }
        Ok(n)
    }

    /// Issue 14: a non-UTF-8 text trace said "stream did not contain valid
    /// UTF-8" with no line or offset.
    #[test]
    fn non_utf8_text_trace_names_line_and_byte_offset() {
        let e = decode(b"0 cpu-r 0 64\n0 cpu-r \xff 64\n").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("t.txt:2") && s.contains("byte offset 21"), "{s}");
        let long = vec![b'1'; MAX_LINE_BYTES * 4];
        let s = decode(&long).unwrap_err().to_string();
        assert!(s.contains("longer than"), "{s}");
        assert_eq!(decode(b"0 cpu-r 0 64\n# x\n0 dma-w 0x40 64").unwrap(), 2);
    }

    #[test]
    fn parses_and_rejects() {
        let r = parse_text_line("  5 dma-w 0x1_000 64 # DMA")
            .unwrap()
            .unwrap();
        assert_eq!(r, Record::dma(5, true, 0x1000, 64));
        assert_eq!(parse_text_line("# only a comment").unwrap(), None);
        assert!(parse_text_line("0 cpu-x 0 64")
            .unwrap_err()
            .contains("unknown OP"));
        assert!(parse_text_line("0 cpu-r 0 64 9")
            .unwrap_err()
            .contains("only xfer"));
        assert!(parse_text_line("0 cpu-r zz 64")
            .unwrap_err()
            .contains("address"));
    }

    /// A DMA record names its device after `@`, after DUR_NS on a transfer;
    /// a CPU record or an unknown name is refused.
    #[test]
    fn parses_a_device_tag() {
        let r = parse_text_line("0 dma-w 0x40 64 @nic").unwrap().unwrap();
        assert_eq!(r, Record::dma(0, true, 0x40, 64).from_device(Device::Nic));
        let r = parse_text_line("0 xfer-w 0x1000 4096 900 @disk")
            .unwrap()
            .unwrap();
        assert_eq!((r.dur_ns, r.device), (900, Device::Disk));
        let r = parse_text_line("0 xfer-r 0x1000 4096 @other")
            .unwrap()
            .unwrap();
        assert_eq!((r.dur_ns, r.device), (0, Device::Other));
        assert!(parse_text_line("0 cpu-r 0 64 @nic")
            .unwrap_err()
            .contains("only DMA"));
        assert!(parse_text_line("0 dma-w 0 64 @gpu")
            .unwrap_err()
            .contains("unknown device"));
        assert!(parse_text_line("0 dma-w 0 64 @untagged")
            .unwrap_err()
            .contains("unknown device"));
        assert!(parse_text_line("0 dma-w 0 64 @nic 5")
            .unwrap_err()
            .contains("after the record"));
    }
}
