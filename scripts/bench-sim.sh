#!/usr/bin/env bash
# Simulator speed: line references per second on one core, file-copy
# workload, every scheme, DDR4-3200 timing, binary trace decoding included.
#
#   scripts/bench-sim.sh [SIZE]        (default 64M copied: 6.3 M records)
#
# Measures two builds of the same code: a plain `cargo build --release`
# ("plain") and the profile-guided one from scripts/build-pgo.sh ("pgo").
# For each it prints refs/s per scheme (each scheme a separate `dmalab sim
# compare` run, pinned to one CPU) and for all seven together (one run that
# decodes the trace once and replays it through every scheme), then runs the
# all-seven case three more times alternating the builds, and prints the
# ratio. DMALAB_BIN=PATH measures that one build only, without building.
# DMALAB_BIN=NEW DMALAB_BASE=OLD measures two builds side by side, without
# building: each scheme run alternately with OLD and NEW, three times, and
# the ratio of their refs per CPU second printed (on a busy host the ratio
# of runs taken moments apart says more than either figure).
# No peer simulator (Dinero IV, Ramulator 2, DRAMsim3) is packaged for this
# machine, so no peer ratio is printed; the issue quotes 2.7-3.9 M refs/s for
# Dinero IV and 0.1-0.2 M requests/s for Ramulator 2 / DRAMsim3 on this kind
# of machine.
set -euo pipefail
SIZE=${1:-64M}
cd "$(dirname "$0")/.."
BUILDS=()
if [[ -n ${DMALAB_BIN:-} && -n ${DMALAB_BASE:-} ]]; then
    BUILDS=("base=$DMALAB_BASE" "new=$DMALAB_BIN")
elif [[ -n ${DMALAB_BIN:-} ]]; then
    BUILDS=("given=$DMALAB_BIN")
else
    cargo build --release -q -p dmalab
    BUILDS=("plain=target/release/dmalab" "pgo=$(scripts/build-pgo.sh)")
fi
BIN=${BUILDS[0]#*=}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CPU=$(( $(nproc) - 1 ))
PIN=()
command -v taskset >/dev/null && PIN=(taskset -c "$CPU")

"$BIN" sim synth file-copy --size "$SIZE" --output "$TMP/fc.trace" >/dev/null
# Warm the page cache so the first scheme does not pay for disk reads.
cat "$TMP/fc.trace" >/dev/null

all7() { # BIN -> seconds of wall time for all seven schemes in one run; the document stays in $TMP/all.json
    "${PIN[@]}" "$1" sim compare "$TMP/fc.trace" --set dram.preset=ddr4-3200 --output "$TMP/all.json" >/dev/null
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["result"]["wall_ns"]/1e9)' "$TMP/all.json"
}

for b in "${BUILDS[@]}"; do
    BIN=${b#*=}
    echo "== ${b%%=*} build ($BIN)"
    echo "dmalab sim speed, $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "file-copy $SIZE, params paper with dram.preset=ddr4-3200, one CPU (${PIN[*]:-unpinned})"
    printf '%-20s %12s %10s %12s %10s %16s\n' scheme line_refs wall_s refs_per_s cpu_s refs_per_cpu_s
    for s in snoop shared dma-cache-32K dma-cache-64K dma-cache-128K dma-cache-256K dma-cache-256K-pf; do
        "${PIN[@]}" "$BIN" sim compare "$TMP/fc.trace" --set dram.preset=ddr4-3200 \
            --schemes "$s" --output "$TMP/$s.json" >/dev/null
        python3 - "$TMP/$s.json" "$s" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["result"]
print(f"{sys.argv[2]:<20} {d['refs_simulated']:>12} {d['wall_ns']/1e9:>10.3f} {d['refs_per_sec']/1e6:>10.1f} M {d['cpu_ns']/1e9:>10.3f} {d['refs_per_cpu_sec']/1e6:>14.1f} M")
PY
    done
    all7 "$BIN" >/dev/null
    python3 - "$TMP/all.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["result"]
print(f"{'all seven, one run':<20} {d['refs_simulated']:>12} {d['wall_ns']/1e9:>10.3f} {d['refs_per_sec']/1e6:>10.1f} M {d['cpu_ns']/1e9:>10.3f} {d['refs_per_cpu_sec']/1e6:>14.1f} M")
PY
done

if [[ -n ${DMALAB_BASE:-} ]]; then
    echo "== each scheme, base and new alternating, 3 rounds (M refs per CPU second)"
    printf '%-20s %8s %8s %8s\n' scheme base new new/base
    cpurate() { # BIN SCHEME -> M refs per CPU second
        "${PIN[@]}" "$1" sim compare "$TMP/fc.trace" --set dram.preset=ddr4-3200 \
            --schemes "$2" --output "$TMP/r.json" >/dev/null
        python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["result"]["refs_per_cpu_sec"]/1e6)' "$TMP/r.json"
    }
    for s in snoop shared dma-cache-32K dma-cache-64K dma-cache-128K dma-cache-256K dma-cache-256K-pf; do
        for i in 1 2 3; do
            b=$(cpurate "$DMALAB_BASE" "$s")
            n=$(cpurate "$DMALAB_BIN" "$s")
            python3 -c 'import sys; s,b,n=sys.argv[1],float(sys.argv[2]),float(sys.argv[3]); print(f"{s:<20} {b:>8.1f} {n:>8.1f} {n/b:>8.3f}")' "$s" "$b" "$n"
        done
    done
elif (( ${#BUILDS[@]} == 2 )); then
    echo "== all seven, builds alternating (wall s)"
    P=${BUILDS[0]#*=}
    G=${BUILDS[1]#*=}
    refs=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["result"]["refs_simulated"])' "$TMP/all.json")
    for i in 1 2 3; do
        p=$(all7 "$P")
        g=$(all7 "$G")
        python3 -c 'import sys; r,p,g=int(sys.argv[1]),float(sys.argv[2]),float(sys.argv[3]); print(f"plain {p:.3f} s {r/p/1e6:.1f} M   pgo {g:.3f} s {r/g/1e6:.1f} M   pgo/plain speed {p/g:.3f}")' "$refs" "$p" "$g"
    done
fi
