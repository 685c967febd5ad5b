#!/usr/bin/env bash
# bench-load.sh: `dmalab load` against fio (io_uring, fixedbufs=1,
# registerfiles=1) on the same file, block size, queue depth, CPU list,
# access order and duration; five interleaved pairs; median and range of
# each ratio dmalab/fio (nine pairs for the rate errors, the noisiest).
#
#   scripts/bench-load.sh            # build, then run (about 110 x SECONDS s)
#   SECONDS_PER_RUN=10 PAIRS=5 RATE_PAIRS=9 CPUS=0 IODEPTH=16 DIR=/var/tmp scripts/bench-load.sh
#   TARGET=ram scripts/bench-load.sh  # root: a loop device over tmpfs instead
#                                     # of a file on the disk (no disk noise)
#   DMALAB_BIN=path/to/dmalab ...     # measure that build, build nothing
#
# Metrics: bandwidth of random 128 KiB reads, IOPS of sequential 4 KiB
# reads (dmalab's single pattern), CPU time per command in both, and the
# rate error of each tool at 10%, 50% and 90% of its own maximum IOPS: the
# worst whole 1-second window's |rate - target| / target, computed the same
# way for both (windows ending at least 100 ms before the stop) from
# per-command completion times (dmalab's rate checker; fio's per-I/O
# latency log, whose times are completion times in ms). For dmalab it also
# gives the worst window error beyond the share of the window in which due
# commands waited for a free slot (all iodepth busy: the device, not the
# pacer, was behind): the issue's "when the device can deliver the rate".
#
# Buffers: fio reads into iodepth x bs bytes of io_u buffers (64 KiB for
# 16 x 4 KiB), so dmalab gets --buffer of the same size (the same memory
# footprint for the device's DMA); its default 64 MiB buffer is measured as
# well (one more 4 KiB run per pair) and printed on its own line.
# The bandwidth and 4 KiB IOPS pairs run A B B A (fio, dmalab, dmalab, fio;
# the next pair the other way round) and compare each tool's mean of two
# runs: the disk's rate drifts by tens of percent within minutes, and this
# cancels a steady drift within a pair.
# Device requests per command (from /sys/class/block/DEV/stat around each
# 4 KiB run) show whether the block layer merged commands.
set -euo pipefail

SECS=${SECONDS_PER_RUN:-5}
PAIRS=${PAIRS:-5}
# The rate errors swing most from run to run (host pauses: see the steal
# lines), so they get more pairs than the ratios.
RATE_PAIRS=${RATE_PAIRS:-9}
CPUS=${CPUS:-0}
IODEPTH=${IODEPTH:-16}
DIR=${DIR:-/var/tmp}
SIZE=${SIZE:-1G}
cd "$(dirname "$0")/.."
(( SECS >= 2 )) || { echo "bench-load: SECONDS_PER_RUN must be at least 2 (the rate error needs a whole 1-s window)" >&2; exit 1; }

command -v fio >/dev/null || { echo "bench-load: fio is not installed (apt-get install fio)" >&2; exit 1; }
if [[ -n ${DMALAB_BIN:-} ]]; then
  DMALAB=$(realpath "$DMALAB_BIN")   # measure a build made elsewhere
else
  cargo build --release -q -p dmalab
  DMALAB=$PWD/target/release/dmalab
fi

WORK=$(mktemp -d "$DIR/bench-load.XXXXXX")
LOOP=
cleanup() {
  [[ -n $LOOP ]] && losetup -d "$LOOP"
  rm -rf "$WORK" "${SHM:-}"
}
trap cleanup EXIT
if [[ ${TARGET:-file} == ram ]]; then
  # A loop device over a file in memory (tmpfs): no disk in the path, so the
  # tools' own costs decide IOPS and the pacing, not a virtio disk's stalls.
  (( EUID == 0 )) || { echo "bench-load: TARGET=ram needs root (losetup)" >&2; exit 1; }
  SHM=$(mktemp /dev/shm/bench-load.XXXXXX)
  head -c "$SIZE" /dev/urandom >"$SHM"
  LOOP=$(losetup --find --show "$SHM")
  FILE=$LOOP
  DEV_OF_FILE=$(basename "$LOOP")
else
  FILE=$WORK/target.dat
  # One file with written data for both tools.
  "$DMALAB" load --target "$FILE" --size "$SIZE" --keep --engine io_uring --commands 1 -q >/dev/null 2>&1
fi

fio_cmd() { # bs rw extra...
  local bs=$1 rw=$2; shift 2
  echo fio --name=bench --filename="$FILE" --ioengine=io_uring --fixedbufs=1 --registerfiles=1 \
    --direct=1 --thread=1 --rw="$rw" --bs="$bs" --iodepth="$IODEPTH" --iodepth_batch_complete_min=1 \
    --cpus_allowed="$CPUS" --size="$SIZE" --time_based=1 --runtime="$SECS" --norandommap=1 \
    --randrepeat=0 --output-format=json "$@"
}
dmalab_cmd() { # bs pattern offsets extra...
  local bs=$1 pattern=$2 offsets=$3; shift 3
  echo "$DMALAB" load --target "$FILE" --engine io_uring --bs "$bs" --max-blocks 1 --pattern "$pattern" \
    --device-offsets "$offsets" --iodepth "$IODEPTH" --cpus-allowed "$CPUS" --runtime "$SECS" -q "$@"
}
kib() { echo "$(( ${1%K} * IODEPTH ))K"; } # fio's buffer for bs=NK: iodepth x bs
DEV=${DEV_OF_FILE:-$(basename "$(df --output=source "$DIR" | tail -1)")}
STAT=/sys/class/block/$DEV/stat
[[ -r $STAT ]] || STAT=
devstat() { # -> "reads merged" of the file's block device (empty when unknown)
  [[ -n $STAT ]] && awk '{print $1, $2}' "$STAT" || echo "0 0"
}

echo "# dmalab load vs fio: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: figures are noisy)"
if [[ -n $LOOP ]]; then
  echo "# target $LOOP: loop device over $SHM ($SIZE of random data in tmpfs), cpus $CPUS, iodepth $IODEPTH, ${SECS}s per run, $PAIRS interleaved pairs ($RATE_PAIRS for the rates)"
else
  echo "# file $FILE ($SIZE on $(df --output=source "$DIR" | tail -1)), cpus $CPUS, iodepth $IODEPTH, ${SECS}s per run, $PAIRS interleaved pairs ($RATE_PAIRS for the rates)"
fi
echo "# fio command lines (exact, plus --rate_iops=N --write_lat_log=... --log_avg_msec=0 for the rate runs):"
echo "#   $(fio_cmd 128k randread)"
echo "#   $(fio_cmd 4k read)"
echo "# dmalab command lines:"
echo "#   $(dmalab_cmd 128K random random --buffer "$(kib 128K)") --output R.json"
echo "#   $(dmalab_cmd 4K single sequential --buffer "$(kib 4K)") --output R.json"
echo "#   (and the 4 KiB line once more without --buffer: dmalab's default 64 MiB buffer)"

run_fio() { # out bs rw extra...
  local out=$1; shift
  local s0; s0=$(devstat)
  $(fio_cmd "$@") >"$out"
  echo "$s0 $(devstat)" >"$out.dev"
}
run_dmalab() { # out bs pattern offsets extra... (--buffer as fio's unless extra has one)
  local out=$1 bs=$2; shift
  local buf=(--buffer "$(kib "$bs")")
  [[ " $* " == *" --buffer "* ]] && buf=()
  local s0; s0=$(devstat)
  $(dmalab_cmd "$@" "${buf[@]}") --output "$out" >/dev/null
  echo "$s0 $(devstat)" >"$out.dev"
}

python_summary() {
python3 - "$WORK" "$PAIRS" "$SECS" <<'EOF'
import json, sys, glob, os, statistics as st
work, pairs, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def fio_job(p):
    return json.load(open(p))["jobs"][0]

def fio_cpu_per_cmd(j):
    r = j["read"]
    cpu_s = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * (j["job_runtime"] / 1000.0)
    return 1e9 * cpu_s / max(r["total_ios"], 1)

def dm(p):
    return json.load(open(p))["result"]

def ratio_line(name, pairs_vals, unit_fmt):
    rs = [d / f for d, f in pairs_vals if f > 0]
    dms = [d for d, _ in pairs_vals]; fis = [f for _, f in pairs_vals]
    print(f"{name:<34} dmalab {unit_fmt(st.median(dms)):>14}  fio {unit_fmt(st.median(fis)):>14}  "
          f"ratio median {st.median(rs):.3f}  range [{min(rs):.3f}, {max(rs):.3f}]  pairs " + " ".join(f"{r:.2f}" for r in rs))

# Both measures run as A B B A (fio dmalab dmalab fio, then the other way
# round), and each tool's figure is the mean of its two runs, which cancels
# a disk whose rate drifts steadily within the pair.
def dm_bw(i): return (dm(f"{work}/dm-rand-{i}.json")["rates"]["data_bw_bytes"] + dm(f"{work}/dm-rand-{i}-b.json")["rates"]["data_bw_bytes"]) / 2
def fio_bw(i): return (fio_job(f"{work}/fio-rand-{i}.json")["read"]["bw_bytes"] + fio_job(f"{work}/fio-rand-{i}-b.json")["read"]["bw_bytes"]) / 2
bw = [(dm_bw(i), fio_bw(i)) for i in range(pairs)]
def dm_iops(i): return (dm(f"{work}/dm-single-{i}.json")["rates"]["iops"] + dm(f"{work}/dm-single-{i}-b.json")["rates"]["iops"]) / 2
def fio_iops(i): return (fio_job(f"{work}/fio-single-{i}.json")["read"]["iops"] + fio_job(f"{work}/fio-single-{i}-b.json")["read"]["iops"]) / 2
iops = [(dm_iops(i), fio_iops(i)) for i in range(pairs)]
iops64 = [(dm(f"{work}/dm-single64m-{i}.json")["rates"]["iops"], fio_iops(i)) for i in range(pairs)]
def reqs(p, cmds):  # device requests per command and merged share, from the .dev file
    r0, m0, r1, m1 = map(int, open(p + ".dev").read().split())
    return (r1 - r0) / max(cmds, 1), (m1 - m0) / max(cmds, 1)
rq = [(reqs(f"{work}/dm-single-{i}.json", dm(f"{work}/dm-single-{i}.json")["totals"]["commands"])[0],
       reqs(f"{work}/fio-single-{i}.json", fio_job(f"{work}/fio-single-{i}.json")["read"]["total_ios"])[0]) for i in range(pairs)]
mg = [(reqs(f"{work}/dm-single-{i}.json", dm(f"{work}/dm-single-{i}.json")["totals"]["commands"])[1],
       reqs(f"{work}/fio-single-{i}.json", fio_job(f"{work}/fio-single-{i}.json")["read"]["total_ios"])[1]) for i in range(pairs)]
cpu4 = [(dm(f"{work}/dm-single-{i}.json")["cpu"]["cpu_ns_per_command"], fio_cpu_per_cmd(fio_job(f"{work}/fio-single-{i}.json"))) for i in range(pairs)]
cpu128 = [(dm(f"{work}/dm-rand-{i}.json")["cpu"]["cpu_ns_per_command"], fio_cpu_per_cmd(fio_job(f"{work}/fio-rand-{i}.json"))) for i in range(pairs)]
mib = lambda v: f"{v/2**20:.1f} MiB/s"
ratio_line("random 128 KiB bandwidth", bw, mib)
ratio_line("single 4 KiB IOPS (ABBA)", iops, lambda v: f"{v:.0f}/s")
ratio_line("single 4 KiB IOPS, dm 64 MiB buffer", iops64, lambda v: f"{v:.0f}/s")
ratio_line("CPU per command, single 4 KiB", cpu4, lambda v: f"{v/1000:.2f} us")
ratio_line("CPU per command, random 128 KiB", cpu128, lambda v: f"{v/1000:.2f} us")
dmm = st.median([d for d, _ in rq]); fim = st.median([f for _, f in rq])
print(f"{'device requests per 4 KiB command':<34} dmalab {dmm:>14.3f}  fio {fim:>14.3f}  "
      f"(merged: dmalab {st.median([d for d, _ in mg]):.3f}, fio {st.median([f for _, f in mg]):.3f} per command;"
      f" other I/O on the disk counts too)")
json.dump({"dm_max_iops": st.median([d for d, _ in iops]), "fio_max_iops": st.median([f for _, f in iops])},
          open(f"{work}/max.json", "w"))
EOF
}

fio_rate_error() { # lat-log target_iops
python3 - "$1" "$2" "$SECS" <<'EOF'
import sys
log, target, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
whole = int((secs - 0.1) // 1)       # windows ending >= 100 ms before the stop
w = [0] * whole
for line in open(log):
    t_ms = int(line.split(",")[0])    # completion time, ms since the job start
    k = t_ms // 1000
    if k < whole:
        w[k] += 1
print(max(abs(x - target) / target * 100 for x in w))
EOF
}

for i in $(seq 0 $((PAIRS - 1))); do
  if (( i % 2 == 0 )); then
    run_fio "$WORK/fio-rand-$i.json" 128k randread; run_dmalab "$WORK/dm-rand-$i.json" 128K random random
    run_dmalab "$WORK/dm-rand-$i-b.json" 128K random random; run_fio "$WORK/fio-rand-$i-b.json" 128k randread
    run_fio "$WORK/fio-single-$i.json" 4k read; run_dmalab "$WORK/dm-single-$i.json" 4K single sequential
    run_dmalab "$WORK/dm-single-$i-b.json" 4K single sequential; run_fio "$WORK/fio-single-$i-b.json" 4k read
    run_dmalab "$WORK/dm-single64m-$i.json" 4K single sequential --buffer 64M
  else
    run_dmalab "$WORK/dm-rand-$i.json" 128K random random; run_fio "$WORK/fio-rand-$i.json" 128k randread
    run_fio "$WORK/fio-rand-$i-b.json" 128k randread; run_dmalab "$WORK/dm-rand-$i-b.json" 128K random random
    run_dmalab "$WORK/dm-single64m-$i.json" 4K single sequential --buffer 64M
    run_dmalab "$WORK/dm-single-$i.json" 4K single sequential; run_fio "$WORK/fio-single-$i.json" 4k read
    run_fio "$WORK/fio-single-$i-b.json" 4k read; run_dmalab "$WORK/dm-single-$i-b.json" 4K single sequential
  fi
done
echo
python_summary
read -r DM_MAX FIO_MAX < <(python3 -c "import json;d=json.load(open('$WORK/max.json'));print(d['dm_max_iops'], d['fio_max_iops'])")

echo
echo "# rate error: worst 1-s window, percent off the target (single 4 KiB, --rate-iops / rate_iops)"
echo "# (dmalab also measures, per window, how long due commands waited because all iodepth slots were"
echo "#  busy, and gives the worst window error beyond that share; fio's latency log has completion times"
echo "#  in whole ms and no submission times, so its windows cannot be split the same way)"
dm_rate_fields() { # dmalab result file -> "worst window %, beyond the holds %, largest held %"
  python3 -c "import json,sys;c=json.load(open(sys.argv[1]))['result']['rate_check'];print(c['window_max_error_pct'], c['unexplained_max_error_pct'], c['held_max_pct'])" "$1"
}
# Steal time: what the hypervisor took from this VM's CPUs during a run (the
# most any CPU lost, ms per second of the run). On the development VM the
# host pauses the guest for 10-30 ms every 100 ms while the disk is busy,
# and whether a pause straddles a window boundary decides most of a disk
# run's window error, for both tools.
TICK_MS=$(( 1000 / $(getconf CLK_TCK) ))
steal_snap() { awk '/^cpu[0-9]/ {printf "%s ", $9}' /proc/stat; }
steal_per_s() { # snapshot-before -> ms stolen per second of the run (most any CPU lost)
  python3 - "$1" "$(steal_snap)" "$TICK_MS" "$SECS" <<'EOF'
import sys
a = [int(x) for x in sys.argv[1].split()]; b = [int(x) for x in sys.argv[2].split()]
print(max((y - x for x, y in zip(a, b)), default=0) * int(sys.argv[3]) / float(sys.argv[4]))
EOF
}
for pct in 10 50 90; do
  DM_T=$(python3 -c "print(int($DM_MAX*$pct/100))")
  FIO_T=$(python3 -c "print(int($FIO_MAX*$pct/100))")
  dms=(); beyond=(); helds=(); fios=(); dm_steal=(); fio_steal=()
  for i in $(seq 0 $((RATE_PAIRS - 1))); do
    one_dm() {
      local s0; s0=$(steal_snap)
      run_dmalab "$WORK/dm-rate.json" 4K single sequential --rate-iops "$DM_T"
      dm_steal+=("$(steal_per_s "$s0")")
      local a b h
      read -r a b h < <(dm_rate_fields "$WORK/dm-rate.json")
      dms+=("$a"); beyond+=("$b"); helds+=("$h")
    }
    one_fio() {
      rm -f "$WORK"/lat*.log
      local s0; s0=$(steal_snap)
      run_fio "$WORK/fio-rate.json" 4k read --rate_iops="$FIO_T" --write_lat_log="$WORK/lat" --log_avg_msec=0
      fio_steal+=("$(steal_per_s "$s0")")
      fios+=("$(fio_rate_error "$(ls "$WORK"/lat_clat*.log | head -1)" "$FIO_T")")
    }
    if (( i % 2 == 0 )); then one_fio; one_dm; else one_dm; one_fio; fi
  done
  python3 - "$pct" "$DM_T" "$FIO_T" "${dms[*]}" "${fios[*]}" "${beyond[*]}" "${helds[*]}" "${dm_steal[*]}" "${fio_steal[*]}" <<'EOF'
import sys, statistics as st
pct, dt, ft = sys.argv[1], sys.argv[2], sys.argv[3]
d = [float(x) for x in sys.argv[4].split()]; f = [float(x) for x in sys.argv[5].split()]
r = [a / b for a, b in zip(d, f) if b > 0]
rr = f"ratio median {st.median(r):.3f} range [{min(r):.3f}, {max(r):.3f}]" if r else "ratio n/a (fio error 0)"
print(f"rate {pct:>2}% of max: dmalab {dt}/s worst window median {st.median(d):.3f}% [{min(d):.3f}, {max(d):.3f}]  "
      f"fio {ft}/s median {st.median(f):.3f}% [{min(f):.3f}, {max(f):.3f}]  {rr}")
print(f"    runs with every window within 1%: dmalab {sum(x <= 1 for x in d)}/{len(d)}, fio {sum(x <= 1 for x in f)}/{len(f)}")
k = [float(x) for x in sys.argv[6].split()]; h = [float(x) for x in sys.argv[7].split()]
print(f"    dmalab, worst window error beyond the device's holds: median {st.median(k):.3f}% [{min(k):.3f}, {max(k):.3f}]; "
      f"largest share of a window with due commands waiting for a full queue, per run: " + " ".join(f"{x:.1f}%" for x in h))
ds = [float(x) for x in sys.argv[8].split()]; fs = [float(x) for x in sys.argv[9].split()]
print("    steal (ms per second, the CPU that lost most), per run: dmalab " + " ".join(f"{x:.0f}" for x in ds)
      + "  fio " + " ".join(f"{x:.0f}" for x in fs))
EOF
done
# The same absolute rate for both tools: dmalab at fio's 90% target, which
# is a lower share of dmalab's own maximum when dmalab is the faster tool.
# This compares the pacers alone, at equal load on the device.
FIO_T=$(python3 -c "print(int($FIO_MAX*90/100))")
sames=()
for i in $(seq 0 $((RATE_PAIRS - 1))); do
  run_dmalab "$WORK/dm-rate.json" 4K single sequential --rate-iops "$FIO_T"
  read -r a _ < <(dm_rate_fields "$WORK/dm-rate.json")
  sames+=("$a")
done
python3 - "$FIO_T" "${sames[*]}" <<'EOF'
import sys, statistics as st
d = [float(x) for x in sys.argv[2].split()]
print(f"rate at fio's 90% target for both: dmalab {sys.argv[1]}/s worst window median {st.median(d):.3f}% [{min(d):.3f}, {max(d):.3f}], "
      f"{sum(x <= 1 for x in d)}/{len(d)} runs within 1%")
EOF
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
