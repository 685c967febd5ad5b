#!/usr/bin/env bash
# bench-page.sh: what exact fault classification costs, and a paging run.
#
# 1. The classifier's effect on hit latency: the same in-memory run (warm,
#    no memory limit: every access is a hit) with --classify none and with
#    --classify rusage (getrusage(RUSAGE_THREAD) before and after every
#    access). Prints hit latency percentiles of both and their ratio.
# 2. (root only) the paper's set-up in small: a 1 GiB map under a 256 MiB
#    memory cgroup, swapping to a fresh zram device, page clustering off.
#
# pmbench itself is not packaged for Debian and cannot be fetched here, so
# there is no side-by-side run with it; `dmalab page import` reads its XML
# reports for comparison where it is installed.
#
# Usage: scripts/bench-page.sh [RUNTIME]   (default 5s per run)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=${1:-5s}
BIN=target/release/dmalab
[ -x "$BIN" ] || cargo build --release -p dmalab >&2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

echo "# $(date -u +%FT%TZ) $(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs"
for c in none rusage; do
  "$BIN" page --map 64M --runtime "$RUNTIME" --classify "$c" --output "$TMP/$c.json" >/dev/null
done
python3 - "$TMP" <<'PY'
import json, sys
d = {c: json.load(open(f"{sys.argv[1]}/{c}.json"))["result"] for c in ("none", "rusage")}
def lat(r, kind):
    # With --classify none every access is reported under "all"; in this
    # warm in-memory run they are all hits (checked below for rusage).
    s = r[kind]["hit"] if r[kind].get("hit") else r[kind]["all"]
    return s
r = d["rusage"]
print(f"classifier: {r['faults']['classifier_call_ns']:.0f} ns per getrusage call (2 per access); "
      f"faults inside accesses: {r['faults']['major_faults']} major, {r['faults']['minor_faults']} minor")
print(f"{'hit latency':<14}{'none':>10}{'rusage':>10}{'ratio':>8}")
for kind in ("read", "write"):
    for key, label in (("mean", "mean"), ("50.000000", "p50"), ("90.000000", "p90"), ("99.000000", "p99")):
        a = lat(d["none"], kind); b = lat(d["rusage"], kind)
        va = a["mean_ns"] if key == "mean" else a["lat"]["percentile_ns"][key]
        vb = b["mean_ns"] if key == "mean" else b["lat"]["percentile_ns"][key]
        print(f"{kind+' '+label:<14}{va:>8.0f}ns{vb:>8.0f}ns{vb/va:>8.2f}")
for c in ("none", "rusage"):
    n = d[c]["total"]["all"]["accesses"]; t = d[c]["runtime_ns"] / 1e9
    print(f"accesses/s with --classify {c}: {n/t:,.0f}")
PY

if [ "$(id -u)" = 0 ] && [ -e /sys/class/zram-control/hot_add ]; then
  echo
  echo "# dmalab page --map 1G --memory-limit 256M --swap zram --page-cluster 0 --runtime $RUNTIME --media-latency 1us"
  "$BIN" page --map 1G --memory-limit 256M --swap zram --page-cluster 0 --runtime "$RUNTIME" --media-latency 1us
fi
