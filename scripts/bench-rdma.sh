#!/usr/bin/env bash
# RDMA engine benchmark, inside the QEMU test guest with soft-RoCE
# (scripts/nvme-vm/run.sh --with-rdma): dmalab load --engine rdma against a
# dmalab rdma serve, and perftest's ib_write_bw / ib_read_bw, same message
# size (64 KiB), one QP, 16 outstanding, runs interleaved (perftest also
# with --post_list 16, as dmalab posts its freed requests as one list;
# dmalab also with perftest's footprint, one 64 KiB buffer each side);
# bandwidth ratio, rxe's retransmissions and the guest's CPU per message for
# each tool, and the error of each tool's software rate limit in 1-second
# windows at 10/50/90% of its own maximum.
#
#   scripts/bench-rdma.sh [--runtime SECS] [--rate-runtime SECS] [--reps N] [--dmalab BIN] [--no-rate]
#   scripts/bench-rdma.sh --report-only [--reps N]   # the last run's results again, no boot
#
# rxe copies with the CPU and the guest runs under TCG: the figures compare
# the two tools on the same software stack, not a NIC's DMA.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=5 rate_runtime=10 reps=3 dmalab="" report_only=0 rate=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) runtime="$2"; shift 2 ;;
    --rate-runtime) rate_runtime="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --dmalab) dmalab="$2"; shift 2 ;;
    --report-only) report_only=1; shift ;;
    # Bandwidth only: no rate-limit runs (an experiment's shorter loop).
    --no-rate) rate=0; shift ;;
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
sed -e "s/@RUNTIME@/$runtime/" -e "s/@RATE_RUNTIME@/$rate_runtime/" -e "s/@REPS@/$reps/" -e "s/@RATE@/$rate/" scripts/nvme-vm/guest-bench-rdma.sh >"$out/job.sh"
# The paper's experiment file, checked where an RDMA device exists (its
# aggressors' own --dry-run opens the device).
{
  echo "cat >/tmp/rdma-interference.toml <<'TOML'"
  cat examples/rdma-interference.toml
  echo "TOML"
  echo "(cd /tmp && /usr/dmalab/bin/dmalab run /tmp/rdma-interference.toml --dry-run) >/results/example-dry-run.txt 2>&1"
  echo "echo \$? >/results/example-dry-run.rc"
} >>"$out/job.sh"
timeout_s=$(((reps * 8) * (runtime + 8) + rate * 6 * (rate_runtime + 8) + 300))
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
rate_runs = os.path.exists(os.path.join(d, "rates"))
sys.path.insert(0, sys.argv[3])
import benchstat as bs
MIB = 1 << 20
def dm(name):
    r = json.load(open(os.path.join(d, name + ".json")))["result"]
    cpu = r.get("cpu", {})
    return r["rates"]["data_bw_bytes"], cpu.get("cpu_ns_per_command")
def pt(name):
    for line in open(os.path.join(d, name + ".txt")):
        w = line.split()
        if len(w) >= 5 and w[0] == "65536":
            return float(w[3]) * MIB  # BW average, MiB/s
    raise ValueError(f"{name}.txt has no result line")
# rxe's counters and the guest's /proc/stat cpu line, written by the guest
# job's `snap` before and after each client run of either tool.
RETRY_KEYS = ("completer_retry_err", "duplicate_request", "rcvd_seq_err",
              "out_of_seq_request", "retry_exceeded_err")
USER_HZ = 100
def snap(path):
    c, cpu = {}, None
    for line in open(path):
        w = line.split()
        if w and w[0] == "cpu":
            cpu = [int(x) for x in w[1:9]]  # user nice system idle iowait irq softirq steal
        elif len(w) == 2:
            c[w[0]] = int(w[1])
    return c, cpu
def around(name):
    """rxe's counter deltas and the guest's busy CPU seconds (both vCPUs,
    all but idle and iowait) over one client run."""
    (a, ca), (b, cb) = (snap(os.path.join(d, f"{name}.{w}")) for w in ("before", "after"))
    delta = {k: b[k] - a[k] for k in a if k in b}
    dc = [y - x for x, y in zip(ca, cb)]
    return delta, (sum(dc) - dc[3] - dc[4]) / USER_HZ
def pt_header(name):
    keys = ("TX depth", "CQ Moderation", "Outstand reads")
    got = {}
    for line in open(os.path.join(d, name + ".txt")):
        k, _, v = line.partition(":")
        if k.strip() in keys:
            got[k.strip()] = v.strip()
    return ", ".join(f"{k} {got[k]}" for k in keys if k in got)
def dm_rdma(name):
    doc = json.load(open(os.path.join(d, name + ".json")))
    f, cfg = doc["result"]["rdma"], doc.get("config", {})
    # result.rdma has them since the engine recorded its facts; a binary
    # before that left them out: the configuration still has what was asked.
    depth = f.get("iodepth", cfg.get("iodepth"))
    signal = f.get("signal_every", (cfg.get("rdma") or {}).get("signal_every"))
    reads = f.get("max_rd_atomic")
    text = lambda v: "not recorded" if v is None else v
    return (f"--iodepth {text(depth)}, --signal-every {text(signal)}, "
            f"READs outstanding per QP {text(reads)}")
for op, tool in (("W", "ib_write_bw"), ("R", "ib_read_bw")):
    dmbw, ptbw, dmb, ptb, dmc = [], [], [], [], []
    # Per tool: rxe's counters summed over the repetitions, and the guest's
    # busy CPU per message of each run.
    nic = {"dmalab": {}, tool: {}}
    cpu = {"dmalab": [], tool: []}
    for i in range(1, reps + 1):
        try:
            a, ac = dm(f"{op}_dm_{i}")
            b = pt(f"{op}_pt_{i}")
        except Exception as e:
            print(f"  rep {i} missing: {e}")
            continue
        dmbw.append(a); ptbw.append(b); dmb.append(a / MIB); ptb.append(b / MIB)
        if ac: dmc.append(ac / 1000)
        for who, name in (("dmalab", f"{op}_dm_{i}"), (tool, f"{op}_pt_{i}")):
            try:
                delta, busy_s = around(name)
            except (OSError, ValueError, TypeError):
                continue
            for k, v in delta.items():
                nic[who][k] = nic[who].get(k, 0) + v
            # Messages from the same counter for both tools: perftest
            # prints only the iterations of its sampled middle.
            msgs = delta.get("sent_pkts", 0) / 17
            if msgs > 0:
                cpu[who].append(busy_s * 1e6 / msgs)
    print(f"\n{'RDMA WRITE' if op == 'W' else 'RDMA READ'}: dmalab vs {tool}")
    try:
        print(f"  settings: dmalab {dm_rdma(f'{op}_dm_1')}; {tool} {pt_header(f'{op}_pt_1')}")
    except Exception as e:
        print(f"  settings unreadable: {e}")
    print(f"  per repetition, MiB/s (dmalab/{tool}): " + "  ".join(
        f"{a:.1f}/{b:.1f}" for a, b in zip(dmb, ptb)))
    if dmbw:
        print(f"  bandwidth dmalab {bs.median(dmb):.1f} MiB/s, {tool} {bs.median(ptb):.1f} MiB/s, ratio {bs.fmt_ratio(bs.ratios(dmbw, ptbw))}")
    # dmalab with perftest's footprint: one 64 KiB buffer on each side.
    fpb, fpt = [], []
    for i in range(1, reps + 1):
        try:
            a, _ = dm(f"{op}_fp_{i}")
            b = pt(f"{op}_pt_{i}")
        except Exception:
            continue
        fpb.append(a); fpt.append(b)
    if fpb:
        print(f"  dmalab with perftest's footprint (--buffer 64K --rdma-remote-buffer 64K, one message-sized buffer each side):")
        print(f"    per repetition, MiB/s (dmalab 64K/{tool}): " + "  ".join(
            f"{a / MIB:.1f}/{b / MIB:.1f}" for a, b in zip(fpb, fpt)))
        print(f"    bandwidth dmalab 64K {bs.median([a / MIB for a in fpb]):.1f} MiB/s, ratio {bs.fmt_ratio(bs.ratios(fpb, fpt))}")
    # dmalab posts what its queue frees as one list (mean length below);
    # the same tool with --post_list 16, run in each repetition beside it.
    dml, pll = [], []
    for i in range(1, reps + 1):
        try:
            b = pt(f"{op}_pl_{i}")
            a, _ = dm(f"{op}_dm_{i}")
            f = json.load(open(os.path.join(d, f"{op}_dm_{i}.json")))["result"]["rdma"]
        except Exception:
            continue
        dml.append((a, f["moved"]["writes"] + f["moved"]["reads"], f.get("post_send_calls")))
        pll.append(b)
    if dml and all(c for _, _, c in dml):
        lists = sum(n for _, n, _ in dml) / sum(c for _, _, c in dml)
        print(f"  with {tool} -l 16 ({pt_header(f'{op}_pl_1')}; dmalab's lists held {lists:.1f} requests on average):")
        print(f"    per repetition, MiB/s (dmalab/{tool} -l 16): " + "  ".join(
            f"{a / MIB:.1f}/{b / MIB:.1f}" for (a, _, _), b in zip(dml, pll)))
        print(f"    bandwidth {tool} -l 16 {bs.median([b / MIB for b in pll]):.1f} MiB/s, ratio "
              f"{bs.fmt_ratio(bs.ratios([a for a, _, _ in dml], pll))}")
    for who in ("dmalab", tool):
        c = nic[who]
        if c:
            print(f"  rxe counters over {who}'s runs (summed): sent_pkts {c.get('sent_pkts', 0)}, "
                  + ", ".join(f"{k} {c.get(k, 0)}" for k in RETRY_KEYS))
    if cpu["dmalab"] and cpu[tool]:
        # Like for like: what the guest's two vCPUs spent (user, system,
        # softirq: rxe's copies and checksums run in the kernel) per
        # message, both tools counted the same way. perftest's --cpu_util
        # is not this: it is user time over user + idle of /proc/stat,
        # without the kernel time rxe spends.
        print(f"  guest CPU per message (busy time of both vCPUs / (sent_pkts / 17)): dmalab "
              f"{bs.median(cpu['dmalab']):.1f} us, {tool} {bs.median(cpu[tool]):.1f} us"
              + (f"; dmalab's own process {bs.median(dmc):.1f} us" if dmc else ""))
if not rate_runs:
    print("\nsoftware rate limit: not run (--no-rate)")
    sys.exit(0)
try:
    clock = open(os.path.join(d, "sampler_clock")).read().strip()
except OSError:
    clock = "s"
unit = 1e9 if clock == "ns" else 1.0
def samples(path):
    """The sampler's rows: (seconds, sent_pkts, duplicate_request or None)."""
    rows = []
    for l in open(path):
        w = l.split()
        if len(w) >= 2:
            rows.append((float(w[0]) / unit, float(w[1]), float(w[3]) if len(w) >= 5 else None))
    return rows
# Packets rxe sent twice, per window: each duplicate_request is a request
# packet the responder received again (a requester retransmission after a
# timeout), and rxe's responder answers every duplicate WRITE packet with
# an ACK of its own, so each one is two packets in sent_pkts beyond the
# message's 17. The run's totals check this estimate below.
RESENT_PER_DUP = 2
def windows(path, pkts_per_msg=17):
    """Per whole 1-s window: (bytes/s from sent_pkts, the same with the
    window's resent packets removed, or None without the counter)."""
    rows = samples(path)
    out = []
    for (t0, p0, d0), (t1, p1, d1) in zip(rows, rows[1:]):
        if p1 > p0 and t1 > t0:
            raw = (p1 - p0) / pkts_per_msg * 65536 / (t1 - t0)
            net = None
            if d0 is not None and d1 is not None:
                net = (p1 - p0 - RESENT_PER_DUP * (d1 - d0)) / pkts_per_msg * 65536 / (t1 - t0)
            out.append((raw, net))
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
        ws = windows(os.path.join(d, path))
        if not ws:
            print(f"  {pct}% {tool}: no full windows"); continue
        w = [raw for raw, _ in ws]
        errs = [abs(x - target) / target * 100 for x in w]
        # A window holds whole messages: one more or less is this much of
        # it, an error no pacer can avoid at this rate.
        quantum = 65536 / target * 100
        print(f"  {pct:>2}% {tool:<12} target {target / MIB:8.1f} MiB/s, mean {sum(w) / len(w) / MIB:8.1f} MiB/s, "
              f"window error median {bs.median(errs):5.2f}% max {max(errs):5.2f}% ({len(w)} windows; "
              f"one message is {quantum:.2f}% of a window)")
        if all(net is not None for _, net in ws):
            nerr = [abs(net - target) / target * 100 for _, net in ws]
            print(f"      without resent packets ({RESENT_PER_DUP} x duplicate_request per window): window error "
                  f"median {bs.median(nerr):5.2f}% max {max(nerr):5.2f}%; per window, raw/without, %: "
                  + " ".join(f"{(raw - target) / target * 100:+.2f}/{(net - target) / target * 100:+.2f}" for raw, net in ws))
        try:
            delta, _ = around(path.replace(".samples", ""))
            if tool == "dmalab":
                f = json.load(open(os.path.join(d, f"rate_dm_{pct}.json")))["result"]["rdma"]["moved"]
                msgs = f["writes"] + f["reads"]
                extra = f"sent_pkts beyond 17 per completed message {delta['sent_pkts'] - 17 * msgs}, "
            else:
                extra = ""
            print(f"      over the run: {extra}{RESENT_PER_DUP} x duplicate_request "
                  f"{RESENT_PER_DUP * delta.get('duplicate_request', 0)}, completer_retry_err {delta.get('completer_retry_err', 0)}")
        except (OSError, KeyError, ValueError, TypeError):
            pass
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
