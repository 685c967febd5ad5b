#!/usr/bin/env bash
# GPU copy-engine benchmark (issue 21): dmalab load --engine gpu against a
# peer on the same GPU, buffer size and copies in flight:
#   * nvbandwidth's host_to_device_memcpy_ce / device_to_host_memcpy_ce when
#     `nvbandwidth` is on PATH, and always
#   * a plain cuMemcpyAsync loop (scripts/gpu-memcpy-loop.c, built here with
#     cc against the driver alone: no CUDA toolkit needed), registered
#     memory, N streams;
# both directions at once against two such loops side by side; then the
# rate error in 1-second windows at 10/50/90% of dmalab's maximum, and
# `dmalab probe latency --mode both` on the host alone and beside a
# full-speed load in each direction (probe and load pinned to different
# CPUs, so the load's polling worker does not share the probe's CPU).
#
#   scripts/bench-gpu.sh [--gpu N] [--bs SIZE] [--buffer SIZE] [--iodepth N]
#                        [--runtime SECS] [--probe-cpu N] [--load-cpu N]
#                        [--dmalab BIN]
#
# Exits 77 (skipped), saying why, on a host without an NVIDIA GPU and
# driver. Paste what it prints, with the date and device, under docs/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
gpu=0 bs=64M buffer=1G iodepth=4 runtime=10 dmalab="" probe_cpu=0 load_cpu=$(($(nproc) - 1))
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu="$2"; shift 2 ;;
    --bs) bs="$2"; shift 2 ;;
    --buffer) buffer="$2"; shift 2 ;;
    --iodepth) iodepth="$2"; shift 2 ;;
    --runtime) runtime="$2"; shift 2 ;;
    --dmalab) dmalab="$2"; shift 2 ;;
    --probe-cpu) probe_cpu="$2"; shift 2 ;;
    --load-cpu) load_cpu="$2"; shift 2 ;;
    *) echo "bench-gpu.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
. scripts/gpu-bench-common.sh
gpu_bench_start bench-gpu
bytes() { python3 -c 'import sys; u={"K":1<<10,"M":1<<20,"G":1<<30}; s=sys.argv[1]; print(int(s[:-1])*u[s[-1]] if s[-1] in u else int(s))' "$1"; }
bs_b=$(bytes "$bs") buf_b=$(bytes "$buffer")

# The peer loop: the same copies dmalab issues, with nothing around them.
have_loop=1
cc -O2 -o "$out/memcpy-loop" scripts/gpu-memcpy-loop.c -ldl 2>"$out/cc.err" || { have_loop=0; echo "no C compiler for the cuMemcpyAsync loop: $(head -1 "$out/cc.err")" >&2; }

load() { # DIRECTION JSON [extra flags...]; $lrt: seconds, default --runtime
  local dir=$1 json=$2; shift 2
  "$dmalab" load --engine gpu --target "gpu:$gpu" --direction "$dir" --pattern single \
    --bs "$bs" --max-blocks 1 --buffer "$buffer" --size "$(( bs_b * iodepth ))" \
    --iodepth "$iodepth" --runtime "${lrt:-$runtime}s" -q --output "$json" "$@" >/dev/null
}
rate_line() { # PCT JSON
  python3 - "$@" <<'PY'
import json, sys
pct, path = sys.argv[1], sys.argv[2]
bs = int(sys.argv[3])
c = json.load(open(path))["result"]["rate_check"]
# A window holds whole copies: at N.x copies/s a window of N+1 is off by
# up to 1/N whatever the pacing does.
print(f"  {pct}% ({c['target_per_s'] / 1e9:.2f} GB/s = {c['target_per_s'] / bs:.2f} copies/s): "
      f"max window error {c['window_max_error_pct']:.3f}% over {len(c['windows_per_s'])} windows")
PY
}
field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["result"]; print(eval(sys.argv[2], {}, {"r": r}))' "$@"; }

echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, $(uname -r)"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader -i "$gpu" 2>/dev/null | sed 's/^/gpu: /' || true
echo "settings: GPU $gpu, bs $bs, buffer $buffer, $iodepth copies in flight, ${runtime}s per run; probe on CPU $probe_cpu, load beside it on CPU $load_cpu"

declare -A peak
for dir in write read; do
  [ "$dir" = write ] && peer=dtoh nvb=device_to_host_memcpy_ce || peer=htod nvb=host_to_device_memcpy_ce
  load "$dir" "$out/max-$dir.json"
  bw=$(field "$out/max-$dir.json" 'r["rates"]["data_bw_bytes"]')
  peak[$dir]=$bw
  line="direction $dir ($peer): dmalab $(python3 -c "print(f'{$bw/1e9:.2f}')") GB/s"
  if [ $have_loop = 1 ]; then
    p=$("$out/memcpy-loop" "$gpu" "$peer" "$bs_b" "$buf_b" "$iodepth" "$runtime")
    line+=", cuMemcpyAsync loop $(python3 -c "print(f'{$p/1e9:.2f}')") GB/s, ratio $(python3 -c "print(f'{$bw/$p:.3f}')")"
  fi
  if command -v nvbandwidth >/dev/null; then
    n=$(nvbandwidth -t "$nvb" -b "$(( bs_b >> 20 ))" 2>&1 | awk '/SUM/ {print $NF}' | tail -1)
    [ -n "$n" ] && line+=", nvbandwidth $nvb $n GB/s, ratio $(python3 -c "print(f'{$bw/($n*1e9):.3f}')")"
  fi
  echo "$line"
done

load both "$out/max-both.json"
bw=$(field "$out/max-both.json" 'r["rates"]["data_bw_bytes"]')
line="direction both (dtoh+htod): dmalab $(python3 -c "print(f'{$bw/1e9:.2f}')") GB/s"
if [ $have_loop = 1 ]; then
  # Two loops side by side, one per direction, each with the copies in flight.
  "$out/memcpy-loop" "$gpu" dtoh "$bs_b" "$buf_b" "$iodepth" "$runtime" >"$out/both-dtoh" &
  lp=$!
  p2=$("$out/memcpy-loop" "$gpu" htod "$bs_b" "$buf_b" "$iodepth" "$runtime")
  wait "$lp"
  p=$(python3 -c "print($(cat "$out/both-dtoh") + $p2)")
  line+=", two cuMemcpyAsync loops $(python3 -c "print(f'{$p/1e9:.2f}')") GB/s, ratio $(python3 -c "print(f'{$bw/$p:.3f}')")"
fi
echo "$line"

echo "rate error in 1 s windows (direction write), goal <= 1%:"
for pct in 10 50 90; do
  rate=$(python3 -c "print(int(${peak[write]} * $pct / 100))")
  load write "$out/rate-$pct.json" --rate "$rate"
  rate_line "$pct" "$out/rate-$pct.json" "$bs_b"
done

probe() { # what `probe latency` says about the mean, without its histogram
  "$dmalab" probe latency --mode both --cpus-allowed "$probe_cpu" --runtime "${runtime}s" 2>&1 |
    grep -E '^(timer|clock mode|per-access):' | sed 's/^/    /'
}
echo "host latency (probe on CPU $probe_cpu, 256 MiB chase), alone and beside a full-speed load on CPU $load_cpu:"
echo "  alone:"
probe
for dir in write read; do
  lrt=$((runtime + 4)) load "$dir" "$out/beside-$dir.json" --cpus-allowed "$load_cpu" &
  lp=$!
  sleep 2
  echo "  beside --direction $dir:"
  probe
  wait "$lp"
  echo "    (load beside it: $(field "$out/beside-$dir.json" 'round(r["rates"]["data_bw_bytes"] / 1e9, 2)') GB/s)"
done
