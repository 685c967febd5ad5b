//! The DRAM check streams (`scripts/compare-dram.sh`): writes one as text
//! for the reference drivers, or replays one through dmalab's DRAM model.
//!
//! dram_stream gen KIND N SEED FILE
//! dram_stream run KIND N SEED GAP_CLOCKS SLOTS [KEY=VALUE ...]
//!
//! KEY=VALUE as `dmalab sim --set` (names under `dram.`), applied to the
//! `modern` parameter set (DDR4-3200).

use dmalab_sim::dramcheck::{replay, stream, stream_text, StreamKind};
use dmalab_sim::SimConfig;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dram_stream: {e}");
            ExitCode::from(2)
        }
    }
}

fn num(a: Option<&String>, what: &str) -> Result<u64, String> {
    a.ok_or(format!("missing {what}"))?
        .parse()
        .map_err(|_| format!("{what} must be a number"))
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args
        .get(1)
        .and_then(|k| StreamKind::parse(k))
        .ok_or("KIND must be seq, rand, mix or rows")?;
    let n = num(args.get(2), "N")? as usize;
    let seed = num(args.get(3), "SEED")?;
    let reqs = stream(kind, n, seed);
    match args.first().map(String::as_str) {
        Some("gen") => {
            let file = args.get(4).ok_or("missing FILE")?;
            std::fs::write(file, stream_text(&reqs)).map_err(|e| format!("{file}: {e}"))
        }
        Some("run") => {
            let gap = num(args.get(4), "GAP_CLOCKS")?;
            let slots = num(args.get(5), "SLOTS")? as usize;
            let mut cfg = SimConfig::modern();
            let sets = args[6..]
                .iter()
                .map(|s| s.split_once('=').ok_or(format!("'{s}' is not KEY=VALUE")))
                .collect::<Result<Vec<_>, _>>()?;
            cfg.set_all(sets).map_err(|e| e.to_string())?;
            let f = replay(&cfg.dram, &reqs, gap, slots)?;
            println!("{}", serde_json::to_string(&f).map_err(|e| e.to_string())?);
            Ok(())
        }
        _ => Err("use gen or run".into()),
    }
}
