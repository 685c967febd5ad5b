#!/usr/bin/env bash
# Benchmarks for `dmalab probe` (issue 4). Prints its figures; nothing here
# is a test.
#
#  1. Bandwidth against peers on the same thread count and buffer size:
#     our R vs `sysbench memory --memory-oper=read`, our W6 (non-temporal
#     writes) vs `sysbench memory --memory-oper=write` (regular stores), and
#     our copy vs `mbw` (memcpy, single thread), as ratios ours/peer.
#  2. Clock-only mean vs per-access mean on the same chain, interleaved
#     (`--mode both --rounds 5`): median and range of per-access/clock.
#  3. Per-access timing overhead in cycles: our rdtscp+lfence bracket and
#     our whole timed loop (per access, minus the clock-mode mean) against a
#     bare back-to-back rdtscp pair.
#
# Environment: THREADS (default 1), SIZE_MIB (per thread and array, default
# 64), RUNTIME_S (per bandwidth run, default 5), CHAIN (latency buffer,
# default 256M), ROUNDS (default 5).
#
# `scripts/bench-probe.sh interference` instead runs `dmalab probe latency
# --interval 1s` on CPU 0 and, after IDLE_S idle seconds (default 10), an
# aggressor on CPU 1 for LOAD_S seconds (default 10): `dmalab load` storage
# reads (the device writes memory), `dmalab load` storage writes (the device
# reads memory), then `dmalab probe bandwidth` (W5). It prints the live
# interval lines with the moments the aggressor started and stopped, and the
# idle interval-to-interval spread next to the intervals under load. The load
# target is a 1 GiB scratch file in $TMPDIR (default /tmp), removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

THREADS=${THREADS:-1}
SIZE_MIB=${SIZE_MIB:-64}
RUNTIME_S=${RUNTIME_S:-5}
CHAIN=${CHAIN:-256M}
ROUNDS=${ROUNDS:-5}

for p in sysbench mbw python3; do
    command -v "$p" >/dev/null || { echo "bench-probe: $p is not installed (scripts/install-deps.sh)" >&2; exit 1; }
done

cargo build --release -q -p dmalab
DMALAB=target/release/dmalab
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ "${1:-}" = interference ]; then
    IDLE_S=${IDLE_S:-10}
    LOAD_S=${LOAD_S:-10}
    echo "== dmalab probe latency --interval 1s beside aggressors"
    echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, $(uname -r)$(grep -q hypervisor /proc/cpuinfo && echo ', virtualised')"
    echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min load average; the machine is shared)"
    echo "probe:   chase over $CHAIN on CPU 0, per-access, 1 s intervals; aggressor on CPU 1 from ~${IDLE_S}s for ${LOAD_S}s"
    head -c 1G /dev/zero >"$TMP/target"
    sync
    scenario() { # name, aggressor command...
        local name=$1
        shift
        local total=$((IDLE_S * 2 + LOAD_S))
        "$DMALAB" probe latency --size "$CHAIN" --cpus-allowed 0 --interval 1s \
            --runtime "${total}s" --output "$TMP/$name.json" >"$TMP/$name.out" 2>/dev/null &
        local probe=$!
        # Count idle intervals from the probe's own output.
        until [ "$(grep -cE '^ *[0-9]+ +[0-9]' "$TMP/$name.out" || true)" -ge "$IDLE_S" ]; do sleep 0.1; done
        local start_iv
        start_iv=$(grep -cE '^ *[0-9]+ +[0-9]' "$TMP/$name.out" || true)
        "$@" >/dev/null 2>&1
        local stop_iv
        stop_iv=$(grep -cE '^ *[0-9]+ +[0-9]' "$TMP/$name.out" || true)
        wait "$probe"
        echo
        echo "-- $name: aggressor started during interval $start_iv, stopped during interval $stop_iv"
        echo "   aggressor: $*" | sed "s|$TMP|\$TMP|g"
        awk -v a="$start_iv" -v b="$stop_iv" '
            /^ *intv/ {print "   " $0; next}
            /^ *[0-9]+ +[0-9]/ {m = ""; if ($1 == a) m = "  <- aggressor starts"; if ($1 == b) m = "  <- aggressor stops"; print "   " $0 m; next}' \
            "$TMP/$name.out" | sed -n '1,200p'
        python3 - "$TMP/$name.json" "$start_iv" "$stop_iv" <<'EOF2'
import json, sys
iv = json.load(open(sys.argv[1]))["result"]["intervals"]
a, b = int(sys.argv[2]), int(sys.argv[3])
idle = [i for i in iv if 0 < i["index"] < a or i["index"] > b + 1]
busy = [i for i in iv if a < i["index"] < b]
def rng(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return f"{min(v):8.1f} .. {max(v):8.1f}" if v else "-"
print(f"   {'ns':<8} {'idle intervals (min .. max)':>28} {'under load (min .. max)':>28}")
for key in ["mean_ns", "p50_ns", "p90_ns", "p99_ns", "p99_9_ns"]:
    print(f"   {key:<8} {rng(idle, key):>28} {rng(busy, key):>28}")
print(f"   ({len(idle)} idle intervals, first and the one after the stop left out; {len(busy)} intervals fully under load)")
EOF2
    }
    scenario storage-reads "$DMALAB" load --target "$TMP/target" --direction write \
        --pattern full --bs 128K --max-blocks 1 --iodepth 16 --cpus-allowed 1 --runtime "${LOAD_S}s"
    scenario storage-writes "$DMALAB" load --target "$TMP/target" --allow-destroy="$TMP/target" \
        --direction read --pattern full --bs 128K --max-blocks 1 --iodepth 16 --cpus-allowed 1 --runtime "${LOAD_S}s"
    scenario bandwidth-W5 "$DMALAB" probe bandwidth --traffic W5 --size 256M --cpus-allowed 1 \
        --runtime "${LOAD_S}s"
    exit 0
fi

echo "== dmalab probe benchmark"
echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, $(uname -r)$(grep -q hypervisor /proc/cpuinfo && echo ', virtualised')"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min load average; anything near the CPU count means noisy figures)"
echo "config:  threads=$THREADS size=${SIZE_MIB}MiB per thread and array, ${RUNTIME_S}s per bandwidth run, chain $CHAIN, $ROUNDS rounds"
echo

gbs() { python3 -c "import sys; print(f'{float(sys.argv[1])/1e9:.2f}')" "$1"; }

ours_bw() { # traffic -> bytes/s (read+written) and read bytes/s
    "$DMALAB" probe bandwidth --traffic "$1" --threads "$THREADS" --size "${SIZE_MIB}M" \
        --runtime "${RUNTIME_S}s" --output "$TMP/bw.json" >/dev/null 2>&1
    python3 - "$TMP/bw.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
s = r["elapsed_ns"] / 1e9
print(r["bw_bytes"], r["read_bytes"] / s, r["write_bytes"] / s)
EOF
}

sysbench_bw() { # read|write -> bytes/s
    sysbench memory --threads="$THREADS" --memory-block-size="${SIZE_MIB}M" \
        --memory-total-size=100T --memory-oper="$1" --memory-access-mode=seq \
        --time="$RUNTIME_S" run 2>/dev/null |
        python3 -c "import re,sys; m=re.search(r'\(([0-9.]+) MiB/sec\)', sys.stdin.read()); print(float(m.group(1))*1048576)"
}

mbw_bw() { # bytes copied/s, memcpy method
    mbw -q -n 10 -t0 "$SIZE_MIB" 2>/dev/null |
        python3 -c "import re,sys; m=re.search(r'AVG.*Copy: ([0-9.]+) MiB/s', sys.stdin.read()); print(float(m.group(1))*1048576)"
}

echo "-- 1. bandwidth vs peers (GB/s = 1e9 bytes/s)"
read -r r_total _ _ < <(ours_bw R)
sb_read=$(sysbench_bw read)
read -r _ _ w6_write < <(ours_bw W6)
sb_write=$(sysbench_bw write)
# mbw is single-threaded and counts bytes copied once; compare our copy's
# read rate with one thread.
read -r _ copy_read _ < <(THREADS=1 ours_bw copy)
mbw_copy=$(mbw_bw)
python3 - "$r_total" "$sb_read" "$w6_write" "$sb_write" "$copy_read" "$mbw_copy" "$THREADS" <<'EOF'
import sys
r, sbr, w6, sbw, cp, mbw, t = map(float, sys.argv[1:])
rows = [
    (f"read, {int(t)} thread(s)", "dmalab R", r, "sysbench memory read", sbr),
    (f"write, {int(t)} thread(s)", "dmalab W6 (NT stores)", w6, "sysbench memory write", sbw),
    ("copy, 1 thread", "dmalab copy (bytes copied)", cp, "mbw memcpy", mbw),
]
print(f"{'what':<22} {'ours':<28} {'GB/s':>7}   {'peer':<22} {'GB/s':>7}  {'ours/peer':>9}")
for what, on, o, pn, p in rows:
    print(f"{what:<22} {on:<28} {o/1e9:>7.2f}   {pn:<22} {p/1e9:>7.2f}  {o/p:>9.2f}")
EOF
echo

echo "-- 2. clock-only mean vs per-access mean, same chain, interleaved $ROUNDS times"
"$DMALAB" probe latency --size "$CHAIN" --mode both --rounds "$ROUNDS" \
    --runtime "$((ROUNDS * 2))s" --output "$TMP/lat.json" >/dev/null 2>&1
python3 - "$TMP/lat.json" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))["result"]
rounds = d["threads"][0]["rounds"]
print(f"{'round':>5} {'clock_ns':>9} {'per_access_ns':>14} {'ratio':>7} {'timed_loop_ns':>14}")
for i, r in enumerate(rounds):
    print(f"{i:>5} {r['clock_mean_ns']:>9.1f} {r['per_access_mean_ns']:>14.1f} {r['ratio']:>7.3f} {r['per_access_loop_ns']:>14.1f}")
ratios = [r["ratio"] for r in rounds]
print(f"per-access/clock ratio: median {statistics.median(ratios):.3f}, range {min(ratios):.3f} .. {max(ratios):.3f}")
p = d["per_access"]["percentile_ns"]
print(f"per-access p50 {p['50.000000']} ns, p99 {p['99.000000']} ns (the mean carries every preemption; p50 does not)")

print()
print("-- 3. timing overhead in cycles")
t, hz = d["timer"], d["tsc"]["tsc_hz"]
loop_cyc = [(r["per_access_loop_ns"] - r["clock_mean_ns"]) * hz / 1e9 for r in rounds]
print(f"bare rdtscp pair (back to back):            {t['bare_rdtscp_pair_median_cycles']:>6} cycles")
print(f"bare rdtsc pair (back to back):             {t['bare_rdtsc_pair_median_cycles']:>6} cycles")
print(f"our rdtscp+lfence bracket (median / min):   {t['fenced_pair_median_cycles']:>6} / {t['fenced_pair_min_cycles']} cycles  (ratio to bare rdtscp pair {t['fenced_pair_median_cycles']/max(1,t['bare_rdtscp_pair_median_cycles']):.2f})")
print(f"one rdtscp+lfence, repeated (its full cost): {t['fenced_read_cost_cycles']:>6.0f} cycles (only part of it falls between two counter samples)")
print(f"our whole timed loop minus clock mean:      {statistics.median(loop_cyc):>6.0f} cycles per access (median of rounds; bracket, recording, preemption share)")
print(f"TSC step (resolution of one sample):        {t['tsc_step_cycles']:>6} cycles = {t['tsc_step_cycles']*1e9/hz:.1f} ns")
EOF
