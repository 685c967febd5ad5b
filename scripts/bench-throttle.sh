#!/usr/bin/env bash
# Benchmark for `dmalab throttle` (issue 20). Prints its figures; nothing
# here is a test.
#
# On this machine: `dmalab probe latency` on CPU 0 is the victim, storage
# reads (the device writes memory) by `dmalab load` from a scratch file on
# CPU 1 the aggressor. One session measures the baseline (aggressor idle),
# runs the closed loop for each of two SLOs, then the open-loop frontier
# (victim slowdown at SWEEP_POINTS fixed rates, SWEEP_REPEAT passes). For
# each SLO it prints:
#   * the controller's settled delivered rate as a share of the best fixed
#     rate that met the same SLO in the sweep (goal: at least 0.9),
#   * its violation share after settling (goal: at most 5% of intervals),
#   * its settling time.
#
# Environment: SLO1, SLO2 (default 'mean <= 1.5 x baseline', 'mean <= 1.3 x
# baseline'), CONTROLLER (model; pi and aimd for comparison), INTERVALS
# (per loop, 40), MAX_RATE (1200M),
# SWEEP_POINTS (7), SWEEP_REPEAT (2), DMALAB (a built binary; default: a
# release build), VICTIM ('probe latency --size 64M --cpus-allowed 0'),
# AGGRESSOR (the load's flags; default: random 4 KiB-block storage reads
# from a scratch file into a 4000K buffer, 2 workers on CPU 1). The scratch
# file lives in $TMPDIR (default /var/tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

SLO1=${SLO1:-"mean <= 1.5 x baseline"}
SLO2=${SLO2:-"mean <= 1.3 x baseline"}
CONTROLLER=${CONTROLLER:-model}
INTERVALS=${INTERVALS:-40}
MAX_RATE=${MAX_RATE:-1200M}
SWEEP_POINTS=${SWEEP_POINTS:-7}
SWEEP_REPEAT=${SWEEP_REPEAT:-2}
VICTIM=${VICTIM:-"probe latency --size 64M --cpus-allowed 0"}
AGGRESSOR=${AGGRESSOR:-"--pattern random --direction write --size 64M --buffer 4000K --workers 2 --cpus-allowed 1"}
command -v python3 >/dev/null || { echo "bench-throttle: python3 is not installed" >&2; exit 1; }
if [ -z "${DMALAB:-}" ]; then
    cargo build --release -q -p dmalab
    DMALAB=target/release/dmalab
fi
DMALAB=$(realpath "$DMALAB")
TMP=$(mktemp -d "${TMPDIR:-/var/tmp}/bench-throttle.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

echo "== dmalab throttle: closed loop against the open-loop frontier"
echo "date:       $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "host:       $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "binary:     $DMALAB ($("$DMALAB" --version))"
echo "controller: $CONTROLLER, $INTERVALS intervals of 1 s per SLO; sweep $SWEEP_POINTS rates x $SWEEP_REPEAT passes"
echo "victim:     $VICTIM"
echo "aggressor:  dmalab load $AGGRESSOR"
echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
echo
(cd "$TMP" && "$DMALAB" throttle \
    --victim "$VICTIM" \
    --aggressor "$AGGRESSOR" \
    --slo "$SLO1" --slo "$SLO2" --controller "$CONTROLLER" \
    --intervals "$INTERVALS" --min-rate 20M --max-rate "$MAX_RATE" \
    --sweep --sweep-points "$SWEEP_POINTS" --sweep-repeat "$SWEEP_REPEAT" --sweep-intervals 3 \
    --output "$TMP/throttle.json")
echo
python3 - "$TMP/throttle.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["result"]
mib = lambda v: "-" if v is None else f"{v / 2**20:.0f} MiB/s"
print("frontier (mean over passes; per SLO, intervals past its bound of all passes' intervals):")
rates = sorted({round(p["rate_target_bytes_per_s"]) for p in d["sweep"]})
for r in rates:
    pts = [p for p in d["sweep"] if round(p["rate_target_bytes_per_s"]) == r]
    figs = {k: sum(p["victim"][k] for p in pts) / len(pts) for k in pts[0]["victim"]}
    dl = [p["delivered_bytes_per_s"] for p in pts if p["delivered_bytes_per_s"]]
    unit = d["victim_unit"]
    judged = [next((q for q in v.get("points", []) if round(q["rate_target_bytes_per_s"]) == r), None)
              for v in d["frontier"]]
    print(f"  {mib(r):>12}  delivered {mib(sum(dl) / len(dl) if dl else None):>12}  "
          + "  ".join(f"{k} {v:.4g} {unit} (x{v / d['baseline'][k]:.3f})" for k, v in figs.items())
          + "".join(f"  {q['violations']}/{q['intervals']}{'' if q['meets'] else ' fails'}" for q in judged if q))
print()
print(f"{'SLO':<26} {'best fixed':>12} {'closed loop':>12} {'share':>6} {'goal':>5}  {'viol. after settle':>18} {'goal':>5}  settle time")
for l, v in zip(d["loops"], d["frontier"]):
    share = v["closed_loop_share_of_best"]
    va = l["violation_share_after_settle"]
    # The session judges both with one rule (at most 5%, none in fewer
    # than 20 intervals); older results lack the field.
    met = l.get("within_violation_budget", va is not None and va <= 0.05)
    print(f"{l['slo']['text']:<26} {mib(v['best_fixed_delivered_bytes_per_s']):>12} "
          f"{mib(l['settled_delivered_bytes_per_s']):>12} "
          f"{'-' if share is None else f'{share:.3f}':>6} {'ok' if share is not None and share >= 0.9 else 'MISS':>5}  "
          f"{'-' if va is None else f'{100 * va:.1f}%':>18} {'ok' if met else 'MISS':>5}  "
          f"{'never' if l['settle_time_s'] is None else str(round(l['settle_time_s'])) + ' s'}"
          f"  (all intervals: {l['violations']}/{len(l['series'])} past the bound)"
          f"  outcome: {l.get('outcome', {}).get('kind', '-')}")
PY
