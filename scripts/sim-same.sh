#!/usr/bin/env bash
# Checks that two builds of the simulator print the same results: every
# figure of `dmalab sim compare` (wall-clock fields left out) on synthetic
# traces of every workload under a matrix of parameter sets, DRAM presets
# and controller settings, and the DRAM check streams of
# crates/dmalab-sim/src/dramcheck.rs replayed by the `dram_stream` example.
# For a change meant to make the simulator faster without changing what it
# models.
#
#   scripts/sim-same.sh OLD_DIR NEW_DIR
#
# Each DIR holds a `dmalab` binary and a `dram_stream` binary, copied from
# target/release after `cargo build --release -p dmalab` and `cargo build
# --release -p dmalab-sim --examples` (copy the old build's before
# changing the code). Prints one line per case and exits 1 on the first
# difference, showing it.
# SIZE=4M (default) sets the trace size of file-copy and tpch.
set -euo pipefail
old=${1:?usage: scripts/sim-same.sh OLD_DIR NEW_DIR}
new=${2:?usage: scripts/sim-same.sh OLD_DIR NEW_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${SIZE:-4M}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$new/dmalab" sim synth file-copy --size "$SIZE" --output "$tmp/fc.trace" >/dev/null
"$new/dmalab" sim synth tpch --size "$SIZE" --output "$tmp/tpch.trace" >/dev/null
"$new/dmalab" sim synth web --requests 1500 --output "$tmp/web.trace" >/dev/null
"$new/dmalab" sim synth web --requests 1500 --ring 16 --seed 3 --output "$tmp/web16.trace" >/dev/null
"$new/dmalab" sim synth msr --input "$root/tests/fixtures/sim/msr_small.csv" --output "$tmp/msr.trace" >/dev/null

# The result document without what depends on the machine or the clock.
strip() {
    python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def drop(x):
    if isinstance(x, dict):
        return {k: drop(v) for k, v in x.items()
                if k not in ("wall_ns", "cpu_ns", "refs_per_sec", "refs_per_cpu_sec",
                             "host", "started", "finished", "tool_version", "time", "timestamp")}
    if isinstance(x, list):
        return [drop(v) for v in x]
    return x
print(json.dumps(drop(d["result"]), indent=1, sort_keys=True))
PY
}

n=0
same() { # NAME: compares $tmp/old.out and $tmp/new.out
    n=$((n + 1))
    if ! cmp -s "$tmp/old.out" "$tmp/new.out"; then
        echo "DIFFERENT: $1"
        diff "$tmp/old.out" "$tmp/new.out" | head -40
        exit 1
    fi
    echo "same: $1"
}

compare() { # TRACE ARGS...
    local trace=$1; shift
    for b in old new; do
        local dir=${!b}
        "$dir/dmalab" sim compare "$tmp/$trace.trace" "$@" --output "$tmp/$b.json" >/dev/null
        strip "$tmp/$b.json" >"$tmp/$b.out"
    done
    same "compare $trace $*"
}

for t in fc tpch web web16 msr; do
    compare "$t"
    compare "$t" --params modern
done
for preset in ddr4-3200 ddr5-4800; do
    compare fc --set "dram.preset=$preset"
    compare web --params modern --set "dram.preset=$preset"
done
for p in paper modern; do
    compare fc --params $p --set dram.write_policy=ramulator
    compare fc --params $p --set dram.write_policy=drain
    compare tpch --params $p --set dram.write_policy=drain --set cpu.outstanding_misses=8 --set dma.outstanding_reads=16
    compare fc --params $p --set dram.scheduler=fcfs
    compare web --params $p --set dram.scheduler=fcfs --set dram.write_policy=drain
    compare fc --params $p --set dram.timing.trefi=0
    compare fc --params $p --set dram.row_hit_cap=4 --set cpu.outstanding_misses=8 --set dma.outstanding_reads=8
    compare tpch --params $p --set dram.row_hit_cap=2 --set dram.write_policy=drain --set dma.outstanding_reads=16
    compare fc --params $p --set dram.page_policy=closed
    compare fc --params $p --set dram.mapping=ro-co-ba-bg --set dram.bank_xor=true
    compare web16 --params $p --set dram.command_bus_limit=false --set cpu.outstanding_misses=4
    compare fc --params $p --set dram.read_queue=4 --set dram.write_queue=6 --set dram.write_high_watermark=5 --set dram.write_low_watermark=2 --set dma.outstanding_reads=8
    compare msr --params $p --set dram.write_policy=ramulator --set dma.outstanding_reads=32
done

# The DRAM check streams: every kind, light load to saturation, and some
# controller settings.
stream() { # KIND GAP SLOTS KEY=VALUE...
    for b in old new; do
        local dir=${!b}
        "$dir/dram_stream" run "$1" 3000 1 "$2" "$3" "${@:4}" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))' >"$tmp/$b.out"
    done
    same "stream $*"
}
for k in seq rand mix rows; do
    for g in 64 16 4 0; do
        stream $k $g 64
    done
    stream $k 0 64 dram.row_hit_cap=4
    stream $k 0 64 dram.scheduler=fcfs
    stream $k 2 64 dram.write_policy=drain
    stream $k 0 64 dram.write_policy=ramulator dram.timing.trefi=0
    stream $k 0 16 dram.preset=ddr5-4800
    stream $k 1 64 dram.command_bus_limit=false dram.row_hit_cap=1
    stream $k 0 8 dram.page_policy=closed
done
echo "all $n cases the same"
