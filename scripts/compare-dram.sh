#!/usr/bin/env bash
# Compares dmalab's DRAM model with DRAMsim3 and Ramulator 2 on the check
# streams of crates/dmalab-sim/src/dramcheck.rs (issue 16), given the two
# references already built from their public sources outside this
# repository:
#
#   DRAMSIM3_DIR=/path/to/DRAMsim3 RAMULATOR2_DIR=/path/to/ramulator2 \
#     scripts/compare-dram.sh [--fixture FILE] [--only dramsim3|ramulator2]
#
# DRAMsim3: built with cmake (libdramsim3.so in its top folder).
# Ramulator 2: built with cmake -DRAMULATOR_PYTHON_BINDINGS=OFF
# (libramulator.so in its top folder); its python/ folder exports the config.
# Prints a Markdown table (dmalab against the references' mean) and, with
# --fixture, writes the references' figures as JSON for the CI replay test
# (crates/dmalab-sim/tests/dram_refs.rs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fixture=""
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --fixture) fixture=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) echo "compare-dram.sh: unknown option '$1'; use --fixture FILE or --only dramsim3|ramulator2" >&2; exit 2 ;;
    esac
done
N=${N:-20000}
SEED=${SEED:-1}
SLOTS=64
GAPS=${GAPS:-"64 16 8 4 2 0"}
STREAMS=${STREAMS:-"seq rand mix rows"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

use() { [ -z "$only" ] || [ "$only" = "$1" ]; }
if use dramsim3; then
    : "${DRAMSIM3_DIR:?set DRAMSIM3_DIR to a built DRAMsim3 checkout}"
    g++ -O2 -std=c++17 -DFMT_HEADER_ONLY -I "$DRAMSIM3_DIR/src" -I "$DRAMSIM3_DIR/ext/headers" \
        -I "$DRAMSIM3_DIR/ext/fmt/include" "$here/dram-refs/dramsim3_driver.cc" \
        -o "$work/dramsim3_driver" -L "$DRAMSIM3_DIR" -ldramsim3 -Wl,-rpath,"$DRAMSIM3_DIR"
    # The reference's own DDR4-3200 x8 8 Gb config; tCK exactly 0.625 ns
    # (the file rounds it to 0.63) so clocks convert to ns as in dmalab; 8 GiB
    # a channel: one rank of eight 8 Gb chips (16 GiB would make bit 17 a
    # rank bit).
    sed -e "s/^tCK = .*/tCK = 0.625/" -e "s/^channel_size = .*/channel_size = 8192/" "$DRAMSIM3_DIR/configs/DDR4_8Gb_x8_3200.ini" >"$work/ddr4-own-queues.ini"
    # The comparison's 32-entry FR-FCFS window. DRAMsim3 schedules only among
    # its command queues (CommandQueue::GetFirstReadyInQueue); its 32-entry
    # transaction queue feeds them in arrival order, one a clock
    # (Controller::ScheduleTransaction). Its own PER_BANK queues of 8 make the
    # window 8 for requests to one bank and up to 16 x 8 across banks, served
    # round-robin by bank (CommandQueue::GetNextQueue), not oldest first. One
    # PER_RANK queue of 32 is one 32-entry window for the rank, scanned
    # oldest first: the spec. The own-queues config still runs, for the
    # second table.
    sed -e "s/^queue_structure = .*/queue_structure = PER_RANK/" -e "s/^cmd_queue_size = .*/cmd_queue_size = 32/" "$work/ddr4-own-queues.ini" >"$work/ddr4.ini"
    grep -q "^queue_structure = PER_RANK" "$work/ddr4.ini" && grep -q "^cmd_queue_size = 32" "$work/ddr4.ini" || {
        echo "compare-dram.sh: $DRAMSIM3_DIR/configs/DDR4_8Gb_x8_3200.ini has no queue_structure or cmd_queue_size line to set" >&2
        exit 1
    }
    ds3_commit=$(git -C "$DRAMSIM3_DIR" rev-parse HEAD 2>/dev/null || echo unknown)
fi
if use ramulator2; then
    : "${RAMULATOR2_DIR:?set RAMULATOR2_DIR to a built Ramulator 2 checkout}"
    g++ -O2 -std=c++20 -I "$RAMULATOR2_DIR/src" -I "$RAMULATOR2_DIR/ext/yaml-cpp/include" \
        -I "$RAMULATOR2_DIR/ext/fmt/include" -I "$RAMULATOR2_DIR/ext/argparse/include" \
        "$here/dram-refs/ramulator2_driver.cpp" -o "$work/ramulator2_driver" \
        -L "$RAMULATOR2_DIR" -lramulator -Wl,-rpath,"$RAMULATOR2_DIR"
    PYTHONPATH="$RAMULATOR2_DIR/python" python3 -m ramulator export \
        "$here/dram-refs/ramulator2_config.py" -o "$work/ddr4.yaml" >/dev/null
    ram_commit=$(git -C "$RAMULATOR2_DIR" rev-parse HEAD 2>/dev/null || echo unknown)
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
cargo build -q --release -p dmalab-sim --example dram_stream
ds="$CARGO_TARGET_DIR/release/examples/dram_stream"

timed() { # FILE CMD...: runs CMD, appends its JSON line with the run's seconds
    local out=$1; shift
    local t0 t1 line
    t0=$(date +%s.%N)
    line=$("$@")
    t1=$(date +%s.%N)
    echo "${line%\}},\"wall_s\":$(printf "%.3f" "$(echo "$t1 - $t0" | bc)")}" >>"$out"
}
: >"$work/rows.jsonl"
for s in $STREAMS; do
    "$ds" gen "$s" "$N" "$SEED" "$work/$s.txt"
    for g in $GAPS; do
        echo "{\"stream\":\"$s\",\"gap\":$g}" >>"$work/rows.jsonl"
        timed "$work/dmalab.jsonl" "$ds" run "$s" "$N" "$SEED" "$g" "$SLOTS"
        if use dramsim3; then
            mkdir -p "$work/ds3"
            timed "$work/dramsim3.jsonl" "$work/dramsim3_driver" "$work/ddr4.ini" "$work/ds3" "$work/$s.txt" "$g" "$SLOTS"
            timed "$work/dramsim3-own.jsonl" "$work/dramsim3_driver" "$work/ddr4-own-queues.ini" "$work/ds3" "$work/$s.txt" "$g" "$SLOTS"
        fi
        if use ramulator2; then
            timed "$work/ramulator2.jsonl" "$work/ramulator2_driver" "$work/ddr4.yaml" "$work/$s.txt" "$g" "$SLOTS"
        fi
    done
done
touch "$work/dramsim3.jsonl" "$work/dramsim3-own.jsonl" "$work/ramulator2.jsonl"
echo "# DRAM model against DRAMsim3 and Ramulator 2 ($(date -u +%Y-%m-%d), $(uname -m))"
echo
echo "dmalab $(git -C "$root" rev-parse --short HEAD); DRAMsim3 ${ds3_commit:-not run}; Ramulator 2 ${ram_commit:-not run}."
echo "Streams of $N requests (seed $SEED), $SLOTS read slots, DDR4-3200 (22-22-22), one channel and rank,"
echo "ro-ba-bg-co, open page, FR-FCFS, 32/32 queues, refresh on. gap: memory clocks from acceptance to the next request."
echo "DRAMsim3 with one 32-entry command queue for the rank (queue_structure = PER_RANK, cmd_queue_size = 32) behind"
echo "its 32/32 transaction queues; its own queues (PER_BANK, 8 a bank) in the second table."
echo
python3 - "$work" "$fixture" "$N" "$SEED" "$SLOTS" "${ds3_commit:-}" "${ram_commit:-}" <<'PY'
import json, sys
work, fixture, n, seed, slots, ds3c, ramc = sys.argv[1:8]
def load(name):
    try:
        return [json.loads(l) for l in open(f"{work}/{name}.jsonl") if l.strip()]
    except FileNotFoundError:
        return []
rows = load("rows"); dm = load("dmalab"); d3 = load("dramsim3"); r2 = load("ramulator2")
d3own = load("dramsim3-own")
print("| stream | gap | GB/s offered | dmalab GB/s | refs GB/s (DRAMsim3 / Ramulator 2) | time vs refs | dmalab lat ns | refs lat ns | lat vs refs | dmalab hits | refs hits | hits vs refs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
out = []
speed = {"dmalab": 0.0, "dramsim3": 0.0, "ramulator2": 0.0}
reqs = 0
by_stream = {}
for i, r in enumerate(rows):
    refs = [x[i] for x in (d3, r2) if len(x) > i]
    m = dm[i]
    def mean(k):
        return sum(x[k] for x in refs) / len(refs) if refs else float("nan")
    gbps = lambda f: (f["reads"] + f["writes"]) * 64 / f["total_ns"]
    offered = 64 / ((r["gap"] or 1) * 0.625) if r["gap"] else float("inf")
    lat_ref = mean("read_lat_mean_ns")
    hits_ref = mean("row_hits")
    print(f"| {r['stream']} | {r['gap']} | {offered:.1f} | {gbps(m):.2f} | "
          + " / ".join(f"{gbps(x):.2f}" for x in refs)
          + f" | {m['total_ns'] / mean('total_ns'):.3f} | {m['read_lat_mean_ns']:.1f} | "
          + " / ".join(f"{x['read_lat_mean_ns']:.1f}" for x in refs)
          + f" | {m['read_lat_mean_ns'] / lat_ref:.3f} | {m['row_hits']} | "
          + " / ".join(str(x['row_hits']) for x in refs)
          + f" | {(m['row_hits'] + 1) / (hits_ref + 1):.3f} |")
    reqs += m["reads"] + m["writes"]
    st = by_stream.setdefault(r["stream"], {"reqs": 0})
    st["reqs"] += m["reads"] + m["writes"]
    for k, xs in (("dmalab", dm), ("dramsim3", d3), ("ramulator2", r2)):
        if len(xs) > i:
            st[k] = st.get(k, 0.0) + xs[i]["wall_s"]
    speed["dmalab"] += m["wall_s"]
    if len(d3) > i: speed["dramsim3"] += d3[i]["wall_s"]
    if len(r2) > i: speed["ramulator2"] += r2[i]["wall_s"]
    strip = lambda f: {k: v for k, v in f.items() if k not in ("wall_s", "clocks")}
    rec = dict(r)
    if len(d3) > i: rec["dramsim3"] = strip(d3[i])
    if len(r2) > i: rec["ramulator2"] = strip(r2[i])
    if len(d3own) > i: rec["dramsim3_own_queues"] = strip(d3own[i])
    out.append(rec)
if d3own:
    print()
    print("DRAMsim3 with its own queues (PER_BANK, 8 a bank) beside the 32-entry window above; time vs refs:")
    print("dmalab against the mean of Ramulator 2 and DRAMsim3 with its own queues.")
    print()
    print("| stream | gap | DRAMsim3 GB/s (32 window / own) | lat ns (32 window / own) | ACTs (32 window / own) | Ramulator 2 ACTs | time vs refs (own) |")
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        if len(d3) <= i or len(d3own) <= i:
            continue
        a, b = d3[i], d3own[i]
        gb = lambda f: (f["reads"] + f["writes"]) * 64 / f["total_ns"]
        ref = [b] + ([r2[i]] if len(r2) > i else [])
        mt = sum(x["total_ns"] for x in ref) / len(ref)
        ra = str(r2[i]["acts"]) if len(r2) > i else "-"
        print(f"| {r['stream']} | {r['gap']} | {gb(a):.2f} / {gb(b):.2f} | {a['read_lat_mean_ns']:.1f} / "
              f"{b['read_lat_mean_ns']:.1f} | {a['acts']} / {b['acts']} | {ra} | {dm[i]['total_ns'] / mt:.3f} |")
print()
print("Requests per second over all runs (process start included): " + ", ".join(
    f"{k} {reqs / v / 1e6:.2f} M/s" for k, v in speed.items() if v > 0))
for name, st in by_stream.items():
    print(f"- {name}: " + ", ".join(
        f"{k} {st['reqs'] / st[k] / 1e6:.2f} M/s" for k in speed if st.get(k, 0) > 0))
if fixture:
    doc = {"n": int(n), "seed": int(seed), "slots": int(slots),
           "dramsim3_commit": ds3c, "ramulator2_commit": ramc,
           "dramsim3_queues": "queue_structure = PER_RANK, cmd_queue_size = 32, trans_queue_size = 32 "
                              "(dramsim3_own_queues: the config file's PER_BANK, 8)",
           "runs": out}
    with open(fixture, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
PY
