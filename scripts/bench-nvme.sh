#!/usr/bin/env bash
# NVMe engine benchmark, inside the QEMU test guest (scripts/nvme-vm/):
# dmalab load --engine nvme (io_uring passthrough, and the ioctl fallback)
# against fio's io_uring_cmd engine on the same namespace and settings,
# runs interleaved, median and range of each ratio printed.
#
#   scripts/bench-nvme.sh [--runtime SECS] [--reps N] [--dmalab BIN]
#
# Under TCG emulation both tools are bound by the emulator (every command
# costs QEMU far more than it costs either tool): the ratios say whether
# dmalab's engine keeps up with fio's on the same emulated device, not what
# either does on a real SSD.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=5 reps=3 dmalab=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) runtime="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --dmalab) dmalab="$2"; shift 2 ;;
    *) echo "bench-nvme.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$dmalab" ]; then
  cargo build --release -q -p dmalab
  dmalab=target/release/dmalab
fi
out=target/bench-nvme
mkdir -p "$out"
sed -e "s/@RUNTIME@/$runtime/" -e "s/@REPS@/$reps/" scripts/nvme-vm/guest-bench.sh >"$out/job.sh"
timeout_s=$((reps * runtime * 6 * 3 + 300))
scripts/nvme-vm/run.sh --out "$out" --job "$out/job.sh" --dmalab "$dmalab" --with-fio --timeout "$timeout_s"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, $(uname -r)"
echo "guest: $(cat "$out/results/uname" 2>/dev/null), QEMU TCG (emulated NVMe, -smp 2)"
echo "settings: /dev/ng0n2 (4 KiB LBAs), storage reads, iodepth 16, ${runtime}s per run, $reps interleaved repetitions"
if [ -s "$out/results/errors" ]; then
  echo "errors from the guest:"; cat "$out/results/errors"
fi
# Medians and ratios: scripts/benchstat.py, shared by every bench-*.sh.
python3 - "$out/results" "$reps" "$PWD/scripts" <<'PY'
import json, sys, os
d, reps = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import benchstat as bs
def dm(path):
    r = json.load(open(path))["result"]
    return r["rates"]["iops"], r["rates"]["data_bw_bytes"], r["engine"]
def fio(path):
    j = json.load(open(path))["jobs"][0]["read"]
    return j["iops"], j["bw_bytes"], "fio io_uring_cmd"
for case, what in (("A", "4 KiB reads (single)"), ("B", "128 KiB reads (full, 32 x 4 KiB)")):
    rows = {"uring": [], "ioctl": [], "fio": []}
    for i in range(1, reps + 1):
        for k, f in (("uring", dm), ("ioctl", dm), ("fio", fio)):
            p = os.path.join(d, f"{case}_{k}_{i}.json")
            try:
                rows[k].append(f(p))
            except Exception as e:
                print(f"  missing {p}: {e}")
    print(f"\n{case}: {what}")
    for k, v in rows.items():
        if v:
            print(f"  {v[0][2]:<18} IOPS median {bs.median([x[0] for x in v]):10.0f}   "
                  f"MiB/s median {bs.median([x[1] for x in v]) / 2**20:8.2f}")
    n = min(len(rows["uring"]), len(rows["fio"]), len(rows["ioctl"]))
    if n:
        iops = {k: [x[0] for x in v[:n]] for k, v in rows.items()}
        print("  ratio dmalab nvme-uring-cmd / fio io_uring_cmd (IOPS): " + bs.fmt_ratio(bs.ratios(iops["uring"], iops["fio"])))
        print("  ratio dmalab nvme-uring-cmd / dmalab nvme-ioctl (IOPS): " + bs.fmt_ratio(bs.ratios(iops["uring"], iops["ioctl"])))
PY
