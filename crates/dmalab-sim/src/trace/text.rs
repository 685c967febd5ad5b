//! The text trace form: `GAP_NS OP ADDR LEN [DUR_NS]`, one record a line.

use super::{Kind, Record, RecordSource, Source, TraceError};
use std::io::{BufRead, Write};
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
    if let Some(d) = it.next() {
        if kind != Kind::Xfer {
            return Err(format!("unexpected '{d}': only xfer records take DUR_NS"));
        }
        dur_ns = parse_u64(d).ok_or_else(|| format!("duration '{d}' is not a number of ns"))?;
    }
    if let Some(x) = it.next() {
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
    }))
}

/// Reads the text form.
pub struct TextDecoder<R: BufRead> {
    inp: R,
    line: String,
    lineno: u64,
    path: String,
}

impl<R: BufRead> TextDecoder<R> {
    /// Reads from `inp`; `path` names it in errors.
    pub fn new(inp: R, path: &Path) -> Self {
        TextDecoder {
            inp,
            line: String::new(),
            lineno: 0,
            path: path.display().to_string(),
        }
    }
}

impl<R: BufRead> RecordSource for TextDecoder<R> {
    fn next_record(&mut self, rec: &mut Record) -> Result<bool, TraceError> {
        loop {
            self.line.clear();
            let n = self
                .inp
                .read_line(&mut self.line)
                .map_err(|e| TraceError::Io {
                    path: self.path.clone(),
                    source: e,
                })?;
            if n == 0 {
                return Ok(false);
            }
            self.lineno += 1;
            match parse_text_line(&self.line) {
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
        if r.kind == Kind::Xfer {
            writeln!(
                self.out,
                "{} {} {:#x} {} {}",
                r.gap_ns,
                op_name(r),
                r.addr,
                r.len,
                r.dur_ns
            )
        } else {
            writeln!(
                self.out,
                "{} {} {:#x} {}",
                r.gap_ns,
                op_name(r),
                r.addr,
                r.len
            )
        }
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
