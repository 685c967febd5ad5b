#!/usr/bin/env bash
# RDMA engine benchmark, inside the QEMU test guest with soft-RoCE
# (scripts/nvme-vm/run.sh --with-rdma): dmalab load --engine rdma against a
# dmalab rdma serve, and perftest's ib_write_bw / ib_read_bw, same message
# size (64 KiB), one QP, 16 outstanding, runs interleaved; bandwidth ratio,
# CPU per operation, and the error of each tool's software rate limit in
# 1-second windows at 10/50/90% of its own maximum.
#
#   scripts/bench-rdma.sh [--runtime SECS] [--rate-runtime SECS] [--reps N] [--dmalab BIN]
#   scripts/bench-rdma.sh --report-only [--reps N]   # the last run's results again, no boot
#
# rxe copies with the CPU and the guest runs under TCG: the figures compare
# the two tools on the same software stack, not a NIC's DMA.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=5 rate_runtime=10 reps=3 dmalab="" report_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) runtime="$2"; shift 2 ;;
    --rate-runtime) rate_runtime="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --dmalab) dmalab="$2"; shift 2 ;;
    --report-only) report_only=1; shift ;;
    *) echo "bench-rdma.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out=target/bench-rdma
if [ "$report_only" = 1 ]; then
  [ -d "$out/results" ] || { echo "bench-rdma.sh: no results in $out to report" >&2; exit 2; }
  echo "re-reported from $out/results (guest run finished $(date -u -r "$out/results/job.rc" +%Y-%m-%dT%H:%M:%SZ))"
else
if [ -z "$dmalab" ]; then
  cargo build --release -q -p dmalab
  dmalab=target/release/dmalab
fi
mkdir -p "$out"
sed -e "s/@RUNTIME@/$runtime/" -e "s/@RATE_RUNTIME@/$rate_runtime/" -e "s/@REPS@/$reps/" scripts/nvme-vm/guest-bench-rdma.sh >"$out/job.sh"
# The paper's experiment file, checked where an RDMA device exists (its
# aggressors' own --dry-run opens the device).
{
  echo "cat >/tmp/rdma-interference.toml <<'TOML'"
  cat examples/rdma-interference.toml
  echo "TOML"
  echo "(cd /tmp && /usr/dmalab/bin/dmalab run /tmp/rdma-interference.toml --dry-run) >/results/example-dry-run.txt 2>&1"
  echo "echo \$? >/results/example-dry-run.rc"
} >>"$out/job.sh"
timeout_s=$(((reps * 4) * (runtime + 8) + 6 * (rate_runtime + 8) + 300))
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
scripts/nvme-vm/run.sh --out "$out" --job "$out/job.sh" --dmalab "$dmalab" --with-rdma --timeout "$timeout_s"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host load average (1/5/15 min) before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg); in the guest before each repetition: $(cut -d' ' -f1 "$out/results/loadavg" 2>/dev/null | tr '\n' ' ')"
fi
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, $(uname -r)"
echo "guest: $(cat "$out/results/uname" 2>/dev/null), QEMU TCG -smp 2, soft-RoCE rxe0 over lo"
echo "settings: 64 KiB messages, 1 QP, 16 outstanding, ${runtime}s per run (${rate_runtime}s under a rate limit), $reps interleaved repetitions"
if [ -s "$out/results/errors" ]; then
  echo "errors from the guest:"; cat "$out/results/errors"
fi
echo "examples/rdma-interference.toml --dry-run in the guest: exit $(cat "$out/results/example-dry-run.rc"), $(tail -1 "$out/results/example-dry-run.txt")"
# Medians and ratios: scripts/benchstat.py, shared by every bench-*.sh.
python3 - "$out/results" "$reps" "$PWD/scripts" <<'PY'
import json, sys, os
d, reps = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import benchstat as bs
MIB = 1 << 20
def dm(name):
    r = json.load(open(os.path.join(d, name + ".json")))["result"]
    cpu = r.get("cpu", {})
    return r["rates"]["data_bw_bytes"], cpu.get("cpu_ns_per_command")
def pt(name):
    text = open(os.path.join(d, name + ".txt")).read()
    bw = cpu = None
    for line in text.splitlines():
        w = line.split()
        if len(w) >= 5 and w[0] == "65536":
            bw = float(w[3]) * MIB  # BW average, MiB/s
            # --cpu_util adds CPU_Util[%]: percent of the machine's CPUs
            # over the run; per message, in ns of one CPU.
            if len(w) >= 6 and float(w[5]) > 0:
                cpu = float(w[5]) / 100 * os.cpu_count() * 1e9 / (bw / 65536)
    return bw, cpu
def pt_header(name):
    keys = ("TX depth", "CQ Moderation", "Outstand reads")
    got = {}
    for line in open(os.path.join(d, name + ".txt")):
        k, _, v = line.partition(":")
        if k.strip() in keys:
            got[k.strip()] = v.strip()
    return ", ".join(f"{k} {got[k]}" for k in keys if k in got)
def dm_rdma(name):
    f = json.load(open(os.path.join(d, name + ".json")))["result"]["rdma"]
    return (f"--iodepth {f.get('iodepth')}, --signal-every {f.get('signal_every')}, "
            f"READs outstanding per QP {f.get('max_rd_atomic')}")
for op, tool in (("W", "ib_write_bw"), ("R", "ib_read_bw")):
    dmbw, ptbw, dmb, ptb, dmc, ptc = [], [], [], [], [], []
    for i in range(1, reps + 1):
        try:
            a, ac = dm(f"{op}_dm_{i}")
            b, bc = pt(f"{op}_pt_{i}")
        except Exception as e:
            print(f"  rep {i} missing: {e}")
            continue
        dmbw.append(a); ptbw.append(b); dmb.append(a / MIB); ptb.append(b / MIB)
        if ac: dmc.append(ac / 1000)
        if bc: ptc.append(bc / 1000)
    print(f"\n{'RDMA WRITE' if op == 'W' else 'RDMA READ'}: dmalab vs {tool}")
    try:
        print(f"  settings: dmalab {dm_rdma(f'{op}_dm_1')}; {tool} {pt_header(f'{op}_pt_1')}")
    except Exception as e:
        print(f"  settings unreadable: {e}")
    print(f"  per repetition, MiB/s (dmalab/{tool}): " + "  ".join(
        f"{a:.1f}/{b:.1f}" for a, b in zip(dmb, ptb)))
    if dmbw:
        print(f"  bandwidth dmalab {bs.median(dmb):.1f} MiB/s, {tool} {bs.median(ptb):.1f} MiB/s, ratio {bs.fmt_ratio(bs.ratios(dmbw, ptbw))}")
    if dmc:
        print(f"  CPU per operation: dmalab {bs.median(dmc):.1f} us" + (f", {tool} {bs.median(ptc):.1f} us (from --cpu_util)" if ptc else ""))
try:
    clock = open(os.path.join(d, "sampler_clock")).read().strip()
except OSError:
    clock = "s"
unit = 1e9 if clock == "ns" else 1.0
def windows(path, pkts_per_msg=17):
    rows = [(float(t) / unit, float(p)) for t, p in
            (l.split() for l in open(path) if len(l.split()) == 2)]
    out = []
    for (t0, p0), (t1, p1) in zip(rows, rows[1:]):
        if p1 > p0 and t1 > t0:
            out.append((p1 - p0) / pkts_per_msg * 65536 / (t1 - t0))
    # The first and last windows straddle the start and the end.
    return out[1:-1]
print(f"\nsoftware rate limit, 1-second windows of rxe's sent_pkts (17 packets per 64 KiB message; "
      f"clock {'/proc/timer_list, ns' if clock == 'ns' else '/proc/uptime, 10 ms'}):")
try:
    dm_max, pt_max = open(os.path.join(d, "max")).read().split()
    print(f"  maxima the rates are shares of (median writes): dmalab {float(dm_max) / MIB:.1f} MiB/s, "
          f"ib_write_bw {float(pt_max):.1f} MiB/s")
except (OSError, ValueError):
    pass
for line in open(os.path.join(d, "rates")):
    pct, dm_rate, pt_mib = line.split()
    for tool, path, target in (("dmalab", f"rate_dm_{pct}.samples", float(dm_rate)),
                               ("ib_write_bw", f"rate_pt_{pct}.samples", float(pt_mib) * MIB)):
        w = windows(os.path.join(d, path))
        if not w:
            print(f"  {pct}% {tool}: no full windows"); continue
        errs = [abs(x - target) / target * 100 for x in w]
        # A window holds whole messages: one more or less is this much of
        # it, an error no pacer can avoid at this rate.
        quantum = 65536 / target * 100
        print(f"  {pct:>2}% {tool:<12} target {target / MIB:8.1f} MiB/s, mean {sum(w) / len(w) / MIB:8.1f} MiB/s, "
              f"window error median {bs.median(errs):5.2f}% max {max(errs):5.2f}% ({len(w)} windows; "
              f"one message is {quantum:.2f}% of a window)")
    # dmalab's own check: whole 1-s windows of its completion timestamps.
    try:
        rc = json.load(open(os.path.join(d, f"rate_dm_{pct}.json")))["result"]["rate_check"]
        t = rc["target_per_s"]
        errs = " ".join(f"{(x - t) / t * 100:+.2f}" for x in rc["windows_per_s"])
        print(f"  {pct:>2}% dmalab's rate_check: {len(rc['windows_per_s'])} windows, max error "
              f"{rc['window_max_error_pct']:.2f}%, beyond device holds {rc.get('unexplained_max_error_pct', float('nan')):.2f}%; "
              f"per window, %: {errs}")
    except Exception as e:
        print(f"  {pct:>2}% dmalab's rate_check missing: {e}")
PY
