#!/usr/bin/env bash
# bench-load.sh: `dmalab load --engine io_uring` against fio (io_uring,
# fixedbufs=1, registerfiles=1) on the same target, block size, queue depth,
# CPU list, access order, buffer footprint and duration, per shape:
#
#   4 KiB random read and write at iodepth 1 and 32, 128 KiB and 1 MiB
#   sequential reads (iodepth SEQ_IODEPTH)
#
# Each shape runs in interleaved pairs, A B B A (fio, dmalab, dmalab, fio;
# the next pair B A A B), and each pair gives one ratio dmalab/fio of
#   * IOPS (4 KiB shapes) or bandwidth (sequential shapes), each tool's
#     figure the mean of its two runs in the pair;
#   * CPU seconds per GiB moved: the CPU time of the whole command (every
#     thread of the process, io_uring's kernel threads it starts included:
#     SQPOLL's poller, io-wq workers, threads of the process since Linux
#     5.12), less the same tool's start-up and exit (a one-command run of
#     the same shape in the same pair), over its bytes. The CPU time is
#     `perf stat -e task-clock` where perf works, else the kernel's rusage
#     of the child (wait4, `benchstat.py rusage`); CPU_TIME=perf|rusage
#     picks one, and the header says which was used. With rusage a
#     third line per shape splits it into user and system time (the
#     tool's own code, and the kernel's work on its behalf).
# Printed: the median and range of the pairs' ratios (scripts/benchstat.py).
#
#   scripts/bench-load.sh                     # build, then run
#   SECONDS_PER_RUN=5 PAIRS=3 CPUS=1 SEQ_IODEPTH=16 scripts/bench-load.sh
#   SHAPES="rr4k-qd1 sr128k" scripts/bench-load.sh   # some shapes only
#   TARGET=file scripts/bench-load.sh # a file on the disk under DIR instead
#                                     # of the default TARGET=ram: a loop
#                                     # device over tmpfs (root), or where no
#                                     # loop device can be made, the tmpfs
#                                     # file itself (the header says so)
#   DMALAB=path/to/dmalab ...         # measure that build, build nothing
#                                     # (no cargo needed; DMALAB_BIN too)
#   FIO="/x/ld-linux-x86-64.so.2 --library-path /x/lib /x/fio" ...
#                                     # the fio command (split at spaces)
#   DMALAB_EXTRA="--sqpoll-cpu 0" ... # extra dmalab load flags on every run
#   RATE_PAIRS=9 ...                  # also each tool's rate error (below)
#
# Buffers: fio reads into iodepth x bs bytes of io_u buffers, so dmalab gets
# --buffer of the same size (the same memory footprint for the device's DMA).
# Storage writes go to the scratch file or loop device this script made.
#
# With RATE_PAIRS > 0, the rate error of each tool at 10%, 50% and 90% of its
# own maximum IOPS on the 4 KiB iodepth-32 random-read shape: the worst
# whole 1-second window's |rate - target| / target, from per-command
# completion times (dmalab's rate checker; fio's latency log), windows
# ending at least 100 ms before the stop.
set -euo pipefail

SECS=${SECONDS_PER_RUN:-5}
PAIRS=${PAIRS:-3}
RATE_PAIRS=${RATE_PAIRS:-0}
CPUS=${CPUS:-0}
SEQ_IODEPTH=${SEQ_IODEPTH:-16}
TARGET=${TARGET:-ram}
DIR=${DIR:-/var/tmp}
SIZE=${SIZE:-1G}
ALL_SHAPES="rr4k-qd1 rw4k-qd1 rr4k-qd32 rw4k-qd32 sr128k sr1m"
SHAPES=${SHAPES:-$ALL_SHAPES}
DMALAB_EXTRA=${DMALAB_EXTRA:-}
cd "$(dirname "$0")/.."
BENCHSTAT=(python3 "$PWD/scripts/benchstat.py")
(( SECS >= 2 )) || { echo "bench-load: SECONDS_PER_RUN must be at least 2 (the rate error needs a whole 1-s window)" >&2; exit 1; }

# The fio command: a path, or a loader line such as "LD --library-path
# LIB FIO" (split at spaces; no word may itself hold a space).
read -r -a FIO_CMD <<<"${FIO:-fio}"
(( ${#FIO_CMD[@]} > 0 )) || { echo "bench-load: FIO is empty" >&2; exit 1; }
FIO_VERSION=$("${FIO_CMD[@]}" --version 2>/dev/null) ||
  { echo "bench-load: fio does not run as '${FIO_CMD[*]}' (install fio, or set FIO=/path/to/fio)" >&2; exit 1; }
DMALAB=${DMALAB:-${DMALAB_BIN:-}}
if [[ -n $DMALAB ]]; then
  DMALAB=$(realpath "$DMALAB")   # measure a build made elsewhere
  [[ -x $DMALAB ]] || { echo "bench-load: DMALAB=$DMALAB is not an executable" >&2; exit 1; }
else
  command -v cargo >/dev/null ||
    { echo "bench-load: cargo is not installed: set DMALAB=/path/to/dmalab (a release build)" >&2; exit 1; }
  cargo build --release -q -p dmalab
  DMALAB=$PWD/target/release/dmalab
fi
# CPU time of each run: perf's task-clock where perf works, else rusage.
CPU_TIME=${CPU_TIME:-}
if [[ -z $CPU_TIME ]]; then
  if command -v perf >/dev/null && perf stat -x, -e task-clock -o /dev/null -- true 2>/dev/null; then
    CPU_TIME=perf
  else
    CPU_TIME=rusage
  fi
fi
case $CPU_TIME in
  perf) CPU_SOURCE="perf stat -x, -e task-clock (every thread of the process)" ;;
  rusage) CPU_SOURCE="the kernel's rusage of the child, user + system (wait4: every thread of the process)" ;;
  *) echo "bench-load: CPU_TIME must be perf or rusage, not $CPU_TIME" >&2; exit 1 ;;
esac

WORK=$(mktemp -d "$DIR/bench-load.XXXXXX")
LOOP=
SHM=
cleanup() {
  if [[ -n $LOOP ]]; then losetup -d "$LOOP"; fi
  rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
NOTE=
case $TARGET in
  ram)
    # A loop device over a file in memory (tmpfs): no disk in the path, so
    # the tools' own costs decide IOPS and the pacing, not a virtio disk's
    # stalls.
    SHM=$(mktemp -d /dev/shm/bench-load.XXXXXX)
    if (( EUID == 0 )) && command -v losetup >/dev/null; then
      head -c "$SIZE" /dev/urandom >"$SHM/target.dat"
      LOOP=$(losetup --find --show "$SHM/target.dat" 2>"$WORK/losetup.err") || LOOP=
    fi
    if [[ -n $LOOP ]]; then
      FILE=$LOOP
    else
      why=$( (( EUID == 0 )) || echo "not root"; command -v losetup >/dev/null || echo "no losetup"; cat "$WORK/losetup.err" 2>/dev/null)
      NOTE="no loop device could be made ($(echo $why)): the target is the tmpfs file itself, so the path has no block layer (O_DIRECT on tmpfs needs Linux >= 6.6)"
      rm -f "$SHM/target.dat"
      FILE=$SHM/target.dat
      # One file with written data for both tools.
      "$DMALAB" load --target "$FILE" --size "$SIZE" --keep --engine io_uring --commands 1 -q >/dev/null 2>"$WORK/fill.err" ||
        { cat "$WORK/fill.err" >&2; exit 1; }
    fi
    ;;
  file)
    FILE=$WORK/target.dat
    # One file with written data for both tools.
    "$DMALAB" load --target "$FILE" --size "$SIZE" --keep --engine io_uring --commands 1 -q >/dev/null 2>&1
    ;;
  *) echo "bench-load: TARGET must be ram or file, not $TARGET" >&2; exit 1 ;;
esac

# shape -> "fio_rw bs iodepth dmalab_direction dmalab_offsets measure"
shape() {
  case $1 in
    rr4k-qd1)  echo "randread 4K 1 write random iops" ;;
    rw4k-qd1)  echo "randwrite 4K 1 read random iops" ;;
    rr4k-qd32) echo "randread 4K 32 write random iops" ;;
    rw4k-qd32) echo "randwrite 4K 32 read random iops" ;;
    sr128k)    echo "read 128K $SEQ_IODEPTH write sequential bw" ;;
    sr1m)      echo "read 1M $SEQ_IODEPTH write sequential bw" ;;
    *) echo "bench-load: unknown shape $1 (known: $ALL_SHAPES)" >&2; exit 1 ;;
  esac
}
for s in $SHAPES; do shape "$s" >/dev/null; done

# fio_cmd and dmalab_cmd set CMD to the tool's command for a shape.
fio_cmd() { # shape extra...
  local rw bs qd; read -r rw bs qd _ < <(shape "$1"); shift
  CMD=("${FIO_CMD[@]}" --name=bench --filename="$FILE" --ioengine=io_uring --fixedbufs=1 --registerfiles=1 \
    --direct=1 --thread=1 --rw="$rw" --bs="${bs,,}" --iodepth="$qd" --iodepth_batch_complete_min=1 \
    --cpus_allowed="$CPUS" --size="$SIZE" --time_based=1 --runtime="$SECS" --norandommap=1 \
    --randrepeat=0 --output-format=json "$@")
}
dmalab_cmd() { # shape extra...
  local bs qd dir offs; read -r _ bs qd dir offs _ < <(shape "$1"); shift
  local destroy=()
  [[ $dir == read ]] && destroy=(--allow-destroy "$FILE")
  local extra; read -r -a extra <<<"$DMALAB_EXTRA"
  CMD=("$DMALAB" load --target "$FILE" --engine io_uring --bs "$bs" --max-blocks 1 --pattern single \
    --direction "$dir" --device-offsets "$offs" --iodepth "$qd" --buffer "$(( ${bs%[KM]} * qd ))${bs: -1}" \
    --cpus-allowed "$CPUS" --runtime "$SECS" "${destroy[@]}" -q "${extra[@]}" "$@")
}
# The command line, quoted so that it can be pasted.
quoted() { printf '%q ' "${CMD[@]}" | sed 's/ $//'; }

echo "# dmalab load vs fio: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), kernel $(uname -r), $FIO_VERSION, $("$DMALAB" --version)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (on a shared machine the figures are noisy)"
if [[ -n $LOOP ]]; then
  echo "# target $LOOP: loop device over $SHM/target.dat ($SIZE of random data in tmpfs), cpus $CPUS, ${SECS}s per run, $PAIRS interleaved pairs (ABBA/BAAB)"
elif [[ $TARGET == ram ]]; then
  echo "# target $FILE: a file in tmpfs ($SIZE), cpus $CPUS, ${SECS}s per run, $PAIRS interleaved pairs (ABBA/BAAB)"
  echo "# note: $NOTE"
else
  echo "# file $FILE ($SIZE on $(df --output=source "$DIR" | tail -1)), cpus $CPUS, ${SECS}s per run, $PAIRS interleaved pairs (ABBA/BAAB)"
fi
echo "# CPU time of each run: $CPU_SOURCE; command lines per shape:"
for s in $SHAPES; do
  fio_cmd "$s"; echo "#   $s: $(quoted)"
  dmalab_cmd "$s" --output R.json; echo "#   $s: $(quoted)"
done

# Runs CMD, its stdout to $1; its CPU seconds to $2.cpu.
timed() { # stdout out
  if [[ $CPU_TIME == perf ]]; then
    perf stat -x, -e task-clock -o "$2.perf" -- "${CMD[@]}" >"$1"
    "${BENCHSTAT[@]}" task-clock-s "$2.perf" >"$2.cpu"
  else
    "${BENCHSTAT[@]}" rusage "$2.rusage" -- "${CMD[@]}" >"$1"
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cpu_s"])' "$2.rusage" >"$2.cpu"
  fi
}

run_one() { # tool shape out [startup]
  local tool=$1 s=$2 out=$3 one=()
  if [[ $tool == A ]]; then
    [[ -n ${4:-} ]] && one=(--time_based=0 --number_ios=1)
    fio_cmd "$s" "${one[@]}"
    timed "$out.json" "$out"
  else
    [[ -n ${4:-} ]] && one=(--commands 1)
    dmalab_cmd "$s" "${one[@]}" --output "$out.json"
    timed /dev/null "$out"
  fi
}

for i in $(seq 0 $((PAIRS - 1))); do
  for s in $SHAPES; do
    # Each tool's start-up and exit with a single command: subtracted from
    # its runs' CPU time, so CPU per GiB is the steady state's (fio spends
    # about 130 ms of CPU starting, dmalab about 4 ms).
    for t in $("${BENCHSTAT[@]}" order "$i" | cut -d' ' -f1-2); do
      run_one "$t" "$s" "$WORK/$s-$t-$i-start" startup
    done
    declare -A nth=([A]=0 [B]=0)
    for t in $("${BENCHSTAT[@]}" order "$i"); do
      # The first run of each tool in the pair is -0, the second -1.
      run_one "$t" "$s" "$WORK/$s-$t-$i-${nth[$t]}"
      nth[$t]=$((nth[$t] + 1))
    done
  done
done

python3 - "$WORK" "$PAIRS" "$PWD/scripts" $SHAPES <<'EOF'
import json, sys
work, pairs, scripts, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
sys.path.insert(0, scripts)
import benchstat as bs

def rusage(p):
    try:
        return json.load(open(p + ".rusage"))
    except FileNotFoundError:
        return None

def run(s, t, i, n):
    p = f"{work}/{s}-{t}-{i}-{n}"
    start = f"{work}/{s}-{t}-{i}-start"
    start_s = float(open(start + ".cpu").read())
    cpu_s = float(open(p + ".cpu").read()) - start_s
    ru, ru0 = rusage(p), rusage(start)
    d = json.load(open(p + ".json"))
    if t == "A":  # fio
        j = d["jobs"][0]
        iops = j["read"]["iops"] + j["write"]["iops"]
        bw = j["read"]["bw_bytes"] + j["write"]["bw_bytes"]
        moved = j["read"]["io_bytes"] + j["write"]["io_bytes"]
    else:
        r = d["result"]
        iops, bw, moved = r["rates"]["iops"], r["rates"]["data_bw_bytes"], r["totals"]["data_bytes"]
    split = None
    if ru and ru0:  # rusage: the user-space and the kernel's share apart
        split = tuple(bs.cpu_per_gib(ru[k] - ru0[k], moved) for k in ("user_s", "sys_s"))
    return iops, bw, bs.cpu_per_gib(cpu_s, moved), split

print(f"{'shape':<10} {'measure':<9} {'dmalab':>12} {'fio':>12}  ratio median [range]    "
      f"{'CPU s/GiB dmalab':>16} {'fio':>8}  ratio median [range]")
for s in shapes:
    measure = "iops" if s.endswith(("qd1", "qd32")) else "bw"
    fig = {"A": [], "B": []}; cpu = {"A": [], "B": []}; split = {"A": [], "B": []}
    for i in range(pairs):
        for t in "AB":
            a, b = run(s, t, i, 0), run(s, t, i, 1)
            k = 0 if measure == "iops" else 1
            fig[t].append(bs.pair_mean(a[k], b[k]))
            cpu[t].append(bs.pair_mean(a[2], b[2]))
            if a[3] and b[3]:
                split[t].append(tuple(bs.pair_mean(x, y) for x, y in zip(a[3], b[3])))
    unit = (lambda v: f"{v:.0f}/s") if measure == "iops" else (lambda v: f"{v / 2**20:.1f} MiB/s")
    print(f"{s:<10} {measure:<9} {unit(bs.median(fig['B'])):>12} {unit(bs.median(fig['A'])):>12}  "
          f"{bs.fmt_ratio(bs.ratios(fig['B'], fig['A'])):<22} "
          f"{bs.median(cpu['B']):>16.3f} {bs.median(cpu['A']):>8.3f}  {bs.fmt_ratio(bs.ratios(cpu['B'], cpu['A']))}")
    print(f"{'':<10} pairs {measure}: " + " ".join(f"{x:.3f}" for x in bs.ratios(fig['B'], fig['A']))
          + "   CPU/GiB: " + " ".join(f"{x:.3f}" for x in bs.ratios(cpu['B'], cpu['A'])))
    if split["A"] and split["B"]:
        # Where the CPU goes: a tool's own code (user) and the kernel's
        # work on its behalf (system: submission, block layer, sleeping
        # and waking), medians of the pairs, s/GiB.
        med = lambda t, k: bs.median([x[k] for x in split[t]])
        print(f"{'':<10} CPU s/GiB user: dmalab {med('B', 0):.3f} fio {med('A', 0):.3f}"
              f"   system: dmalab {med('B', 1):.3f} fio {med('A', 1):.3f}")
EOF

if (( RATE_PAIRS > 0 )); then
  RS=rr4k-qd32
  max_of() { # tool -> median IOPS of its RS runs
    local f=() x
    for x in "$WORK/$RS-$1"-*.json; do
      if [[ $1 == A ]]; then f+=("$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['jobs'][0]['read']['iops'])" "$x")")
      else f+=("$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['result']['rates']['iops'])" "$x")"); fi
    done
    "${BENCHSTAT[@]}" median "${f[*]}"
  }
  DM_MAX=$(max_of B); FIO_MAX=$(max_of A)
  echo
  echo "# rate error on $RS: worst 1-s window, percent off the target, $RATE_PAIRS interleaved pairs"
  for pct in 10 50 90; do
    DM_T=$(python3 -c "print(int($DM_MAX*$pct/100))"); FIO_T=$(python3 -c "print(int($FIO_MAX*$pct/100))")
    dms=(); fios=()
    for i in $(seq 0 $((RATE_PAIRS - 1))); do
      for t in $("${BENCHSTAT[@]}" order "$i" | cut -d' ' -f1-2); do
        if [[ $t == A ]]; then
          rm -f "$WORK"/lat*.log
          fio_cmd "$RS" --rate_iops="$FIO_T" --write_lat_log="$WORK/lat" --log_avg_msec=0
          "${CMD[@]}" >/dev/null
          fios+=("$("${BENCHSTAT[@]}" window-error "$(ls "$WORK"/lat_clat*.log | head -1)" "$FIO_T" "$SECS")")
        else
          dmalab_cmd "$RS" --rate-iops "$DM_T" --output "$WORK/rate.json"
          "${CMD[@]}" >/dev/null
          dms+=("$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['result']['rate_check']['window_max_error_pct'])" "$WORK/rate.json")")
        fi
      done
    done
    echo "rate ${pct}% of max: dmalab ${DM_T}/s worst window median $("${BENCHSTAT[@]}" median "${dms[*]}")%  fio ${FIO_T}/s median $("${BENCHSTAT[@]}" median "${fios[*]}")%  ratio $("${BENCHSTAT[@]}" ratio "${dms[*]}" "${fios[*]}")"
  done
fi
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
