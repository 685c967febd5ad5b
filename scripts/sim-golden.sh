#!/usr/bin/env bash
# Results a simulator speed change must leave byte-identical:
#
#   scripts/sim-golden.sh BIN DRAM_STREAM OUTDIR
#
# BIN is a dmalab binary, DRAM_STREAM the dram_stream example of the same
# build (cargo build --release -p dmalab-sim --example dram_stream). Writes
# into OUTDIR the JSON of `dmalab sim compare` on four synthetic traces
# (file copy, web, receive ring, TPC-H) under several parameter sets, less
# its timing fields and the trace path, the exact figures of the DRAM check
# streams (crates/dmalab-sim/tests/dram_refs.rs) under three schedulers, and
# SUMS (their SHA-256). Two builds give the same results when their SUMS
# are equal: `diff A/SUMS B/SUMS`.
set -euo pipefail
BIN=$1; DS=$2; OUT=$3
mkdir -p "$OUT"; T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$BIN" sim synth file-copy --size 16M --output "$T/fc.trace" >/dev/null
"$BIN" sim synth web --requests 2000 --ring 64 --output "$T/web.trace" >/dev/null
"$BIN" sim synth rx --packets 20000 --ring 256 --inflight 255 --output "$T/rx.trace" >/dev/null
"$BIN" sim synth tpch --output "$T/tpch.trace" >/dev/null
strip() { python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["result"]
for k in ("wall_ns", "refs_per_sec", "cpu_ns", "refs_per_cpu_sec"):
    r.pop(k, None)
c = d.get("config") or {}
c.pop("trace", None)
json.dump({"config": c, "result": r}, open(sys.argv[2], "w"), indent=1, sort_keys=True)
PY
}
run() { # NAME TRACE ARGS...
    local n=$1 t=$2; shift 2
    "$BIN" sim compare "$t" "$@" --output "$T/$n.json" >"$OUT/$n.txt"
    strip "$T/$n.json" "$OUT/$n.json"
}
for p in paper modern; do
    run fc-$p "$T/fc.trace" --params $p
    run web-$p "$T/web.trace" --params $p
    run rx-$p "$T/rx.trace" --params $p
    run tpch-$p "$T/tpch.trace" --params $p
done
run fc-ddr4 "$T/fc.trace" --set dram.preset=ddr4-3200
run fc-ddr4-wt "$T/fc.trace" --set dram.preset=ddr4-3200 --schemes dma-cache-64K-wt,dma-cache-256K-pf
run web-modern-fcfs "$T/web.trace" --params modern --set dram.scheduler=fcfs --set dram.page_policy=closed
run fc-modern-cap "$T/fc.trace" --params modern --set dram.row_hit_cap=4 --set dram.write_policy=drain
run tpch-modern-ram "$T/tpch.trace" --params modern --set dram.write_policy=ramulator
# The DRAM check streams (crates/dmalab-sim/tests/dram_refs.rs), exact figures.
: >"$OUT/dram.txt"
for s in seq rand mix rows; do
    for g in 64 16 8 4 2 0; do
        echo "$s $g $("$DS" run $s 20000 1 $g 64)" >>"$OUT/dram.txt"
        echo "$s $g fcfs $("$DS" run $s 20000 1 $g 64 dram.scheduler=fcfs dram.row_hit_cap=0)" >>"$OUT/dram.txt"
        echo "$s $g cap4-drain $("$DS" run $s 20000 1 $g 8 dram.row_hit_cap=4 dram.write_policy=drain)" >>"$OUT/dram.txt"
    done
done
(cd "$OUT" && sha256sum *.json dram.txt > SUMS)
