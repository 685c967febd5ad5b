#!/usr/bin/env bash
# How the gpu engine's workers wait for copies (--gpu-wait spin|sleep|block):
# bandwidth and CPU of each mode, beside the plain cuMemcpyAsync loop
# (scripts/gpu-memcpy-loop.c) waiting in cuEventSynchronize on plain events
# (spinning) and on CU_EVENT_BLOCKING_SYNC events (sleeping), for 64 MiB
# copies 1 and 4 in flight, 2 MiB copies 4 in flight and 4 KiB copies 16 in
# flight, each direction.
#
# CPU is sampled from /proc/PID/stat (user + system time of every thread of
# the process, the driver's included) over a window in the middle of each
# run, as percent of one CPU; dmalab's line adds its workers' own figure
# from the result (getrusage per worker thread, over the whole run).
#
#   scripts/bench-gpu-wait.sh [--gpu N] [--runtime SECS] [--dmalab BIN]
#
# Exits 77 (skipped), saying why, on a host without an NVIDIA GPU and
# driver. Paste what it prints, with the date and device, under docs/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=0 runtime=5 dmalab=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu="$2"; shift 2 ;;
    --runtime) runtime="$2"; shift 2 ;;
    --dmalab) dmalab="$2"; shift 2 ;;
    *) echo "bench-gpu-wait.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
. scripts/gpu-bench-common.sh
gpu_bench_start bench-gpu-wait
cc -O2 -o "$out/memcpy-loop" scripts/gpu-memcpy-loop.c -ldl

echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, $(uname -r)"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader -i "$gpu" 2>/dev/null | sed 's/^/gpu: /' || true
echo "settings: GPU $gpu, ${runtime}s per run, single pattern (one slot per copy in flight), CPU over the middle of each run"

python3 - "$dmalab" "$out" "$gpu" "$runtime" <<'PY'
import json, os, subprocess, sys, time
dmalab, out, gpu, runtime = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
tck = os.sysconf("SC_CLK_TCK")

def cpu_s(pid):
    # Fields after the command name: state is field 3, utime 14, stime 15.
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tck

def run(cmd):
    """Runs cmd; its stdout and the process's CPU use (% of one CPU) over
    the middle of the run (after set-up, before the end)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    warm = min(2.0, runtime / 2)
    time.sleep(warm)
    try:
        a, ta = cpu_s(p.pid), time.monotonic()
        time.sleep(max(runtime - warm - 0.5, 0.5))
        b, tb = cpu_s(p.pid), time.monotonic()
        pct = 100 * (b - a) / (tb - ta)
    except OSError:
        pct = float("nan")
    o, e = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {e.strip()}")
    return o, pct

units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
size = lambda s: int(s[:-1]) * units[s[-1]]
cases = [("64M", 1, "1G"), ("64M", 4, "1G"), ("2M", 4, "256M"), ("4K", 16, "64M")]
for direction, peer in [("write", "dtoh"), ("read", "htod")]:
    for bs, depth, buf in cases:
        print(f"direction {direction} ({peer}), bs {bs}, {depth} in flight:")
        loops = {}
        for wait in ["spin", "block"]:
            o, pct = run([f"{out}/memcpy-loop", gpu, peer, str(size(bs)), str(size(buf)),
                          str(depth), str(runtime), wait])
            loops[wait] = float(o)
            print(f"  loop   {wait:<5} {loops[wait] / 1e9:7.2f} GB/s  process {pct:5.1f}% CPU")
        for mode in ["spin", "sleep", "block"]:
            j = f"{out}/{direction}-{bs}-{depth}-{mode}.json"
            _, pct = run([dmalab, "load", "--engine", "gpu", "--target", f"gpu:{gpu}", "--gpu-wait", mode,
                 "--direction", direction, "--pattern", "single", "--bs", bs, "--max-blocks", "1",
                 "--buffer", buf, "--size", str(size(bs) * depth), "--iodepth", str(depth),
                 "--runtime", f"{runtime}s", "-q", "--output", j])
            r = json.load(open(j))["result"]
            bw = r["rates"]["data_bw_bytes"]
            print(f"  dmalab {mode:<5} {bw / 1e9:7.2f} GB/s  process {pct:5.1f}% CPU  worker {r['cpu']['cpu_pct']:5.1f}%"
                  f"  lat mean {r['lat_ns']['mean_ns'] / 1e3:.1f} us"
                  f"  vs loop spin {bw / loops['spin']:.3f}, block {bw / loops['block']:.3f}")
PY
