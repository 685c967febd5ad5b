#!/usr/bin/env bash
# bench-page.sh: what exact fault classification costs, and a paging run.
#
# 1. The classifier's effect on hit latency: the same in-memory run (warm,
#    no memory limit: every access is a hit) with --classify none, perf
#    (perf software-event rings, no system call per access) and rusage
#    (getrusage(RUSAGE_THREAD) before and after every access).
# 2. (root only) its effect on major-fault latency: perf vs rusage on zram.
# 3. (root only) the paper's set-up in small: a 1 GiB map under a 256 MiB
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

echo "# $(date -u +%FT%TZ) $(uname -r) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
echo "# 1. hit latency of a warm in-memory 64 MiB map, by classifier"
for c in none perf rusage; do
  "$BIN" page --map 64M --runtime "$RUNTIME" --classify "$c" --output "$TMP/$c.json" >/dev/null
done
if [ "$(id -u)" = 0 ] && [ -e /sys/class/zram-control/hot_add ]; then
  echo "# 2. major-fault latency, 128 MiB map under a 32 MiB cgroup on zram, by classifier"
  for c in perf rusage; do
    "$BIN" page --map 128M --memory-limit 32M --swap zram --page-cluster 0 --runtime "$RUNTIME" \
      --classify "$c" --output "$TMP/z-$c.json" >/dev/null
  done
fi
python3 - "$TMP" <<'PY'
import json, os, sys
t = sys.argv[1]
d = {c: json.load(open(f"{t}/{c}.json"))["result"] for c in ("none", "perf", "rusage")}
def stats(r, kind, cls):
    s = r[kind].get(cls) or r[kind]["all"]
    p = s["lat"]["percentile_ns"]
    return [s["mean_ns"], p["50.000000"], p["90.000000"], p["99.000000"]]
print(f"classifier cost: rusage {d['rusage']['faults']['classifier_call_ns']:.0f} ns per getrusage call, 2 per access;"
      f" perf: two loads of the rings' data_head per access")
for c in ("perf", "rusage"):
    f = d[c]["faults"]
    print(f"  {c}: faults inside accesses {f['major_faults']} major / {f['minor_faults']} minor (all should be hits)")
print(f"{'hit latency':<14}{'none':>10}{'perf':>10}{'rusage':>10}{'perf/none':>11}{'rusage/none':>13}")
for kind in ("read", "write"):
    rows = {c: stats(d[c], kind, "hit") for c in d}
    for i, label in enumerate(("mean", "p50", "p90", "p99")):
        n, p, r = rows["none"][i], rows["perf"][i], rows["rusage"][i]
        print(f"{kind+' '+label:<14}{n:>8.0f}ns{p:>8.0f}ns{r:>8.0f}ns{p/n:>11.2f}{r/n:>13.2f}")
for c in d:
    n = d[c]["total"]["all"]["accesses"]; s = d[c]["runtime_ns"] / 1e9
    print(f"accesses/s with --classify {c}: {n/s:,.0f}")
if os.path.exists(f"{t}/z-perf.json"):
    z = {c: json.load(open(f"{t}/z-{c}.json"))["result"] for c in ("perf", "rusage")}
    print(f"{'major latency':<14}{'perf':>10}{'rusage':>10}{'perf/rusage':>13}")
    for i, label in enumerate(("mean", "p50", "p90", "p99")):
        p, r = stats(z["perf"], "total", "major")[i], stats(z["rusage"], "total", "major")[i]
        print(f"{'major '+label:<14}{p:>8.0f}ns{r:>8.0f}ns{p/r:>13.2f}")
    for c in z:
        f = z[c]["faults"]
        print(f"  {c}: classified {f['major_faults']} major vs cgroup {f['cgroup']['pgmajfault']} ({f['cgroup_major_diff_pct']:.2f}%)")
PY

if [ "$(id -u)" = 0 ] && [ -e /sys/class/zram-control/hot_add ]; then
  echo
  echo "# dmalab page --map 1G --memory-limit 256M --swap zram --page-cluster 0 --runtime $RUNTIME --media-latency 1us"
  "$BIN" page --map 1G --memory-limit 256M --swap zram --page-cluster 0 --runtime "$RUNTIME" --media-latency 1us
fi
