# The RDMA benchmark's guest job (scripts/bench-rdma.sh substitutes @RUNTIME@,
# @RATE_RUNTIME@ and @REPS@): dmalab's rdma engine against perftest's ib_write_bw and
# ib_read_bw on soft-RoCE (rxe0 over lo), same message size (64 KiB), one
# QP, 16 outstanding, interleaved; then each tool's software rate limit at
# 10/50/90% of its own maximum, judged in 1-second windows of rxe's
# sent_pkts (sampled beside the run, the same oracle for both tools).
. /usr/dmalab/lib.sh
RT=@RUNTIME@
# Rate runs are longer: the goal is judged over at least 5 whole 1-s
# windows, and the first and last sampler windows straddle start and end.
RRT=@RATE_RUNTIME@
REPS=@REPS@
# 0: bandwidth only (bench-rdma.sh --no-rate).
RATE=@RATE@
D=/usr/dmalab/bin/dmalab
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters
uname -a >/results/uname

# The sampler's clock: /proc/timer_list's "now at NS nsecs" (CLOCK_MONOTONIC
# in ns) where the kernel has it, else /proc/uptime (10 ms steps: up to 1%
# of a 1-s window at each end). Recorded beside the samples.
if { read -r _; read -r _; read -r w1 w2 t _; } </proc/timer_list 2>/dev/null && [ "$w1 $w2" = "now at" ]; then
  CLOCK=ns
else
  CLOCK=s
fi
echo "$CLOCK" >/results/sampler_clock

# Samples the clock, sent_pkts and the counters of packets sent twice
# about every second into FILE until killed, one line each: ns (or s)
# sent_pkts rcvd_pkts duplicate_request completer_retry_err. All are read
# by the shell itself, one right after the other: the old
# `$(cut ...) $(cat ...)` forked a process between the two readings, and
# under TCG on a busy host that gap alone was tens of ms, a few % of a
# window. sent_pkts is read right after the clock (the figure judged);
# the others after it.
sampler() {
  while :; do
    if [ $CLOCK = ns ]; then
      { read -r _; read -r _; read -r _ _ t _; } </proc/timer_list
    else
      read -r t _ </proc/uptime
    fi
    read -r p <$HW/sent_pkts
    read -r r <$HW/rcvd_pkts
    read -r d <$HW/duplicate_request
    read -r c <$HW/completer_retry_err
    echo "$t $p $r $d $c"
    sleep 1
  done >"$1"
}

# Writes rxe's counters (the hw_counters dmalab's result reads) and the
# guest's CPU time line of /proc/stat into FILE, read by the shell itself
# (no fork per file). Taken around each tool's client run, so both tools'
# retransmissions and CPU are counted the same way.
snap() {
  { for f in $HW/*; do read -r v <"$f"; echo "${f##*/} $v"; done
    read -r l </proc/stat; echo "$l"; } >"$1"
}

# dmalab's runs move a 16 MiB region on each side (DBUF= changes both):
# sequential 64 KiB messages through it, 256 distinct places. perftest's
# client at this size moves one message-sized buffer every time (its
# address advances only while a message fits twice in its cycle buffer, a
# page by default), so each repetition also runs dmalab with that
# footprint (DBUF=64K), reported on its own line.
dm_run() { # OP NAME [extra flags]: one dmalab run against a local serve
  op="$1"; name="$2"; shift 2
  $D rdma serve --listen 127.0.0.1:18700 --buffer 16M >/dev/null 2>/results/$name.serve.err &
  S=$!
  w=0; while ! grep -q serving /results/$name.serve.err && [ $w -lt 200 ]; do sleep 0.1; w=$((w + 1)); done
  snap /results/$name.before
  $D load --engine rdma --target 127.0.0.1:18700 --rdma-op "$op" --pattern single --bs 64K --buffer ${DBUF:-16M} \
    --rdma-remote-buffer ${DBUF:-16M} --device-offsets sequential --iodepth 16 --runtime ${DRT:-$RT}s -q "$@" \
    --output /results/$name.json >/dev/null 2>>/results/errors
  snap /results/$name.after
  kill -TERM $S; wait $S
}

pt_run() { # TOOL NAME [extra flags]: one perftest run, server and client
  tool="$1"; name="$2"; shift 2
  /usr/dmalab/bin/$tool -d rxe0 -x 1 -s 65536 -t 16 -q 1 -D ${DRT:-$RT} -F "$@" >/results/$name.server 2>&1 &
  S=$!
  sleep 1
  snap /results/$name.before
  /usr/dmalab/bin/$tool -d rxe0 -x 1 -s 65536 -t 16 -q 1 -D ${DRT:-$RT} -F "$@" 127.0.0.1 \
    >/results/$name.txt 2>&1
  snap /results/$name.after
  wait $S
}

# dmalab posts the requests its queue frees together as one list per QP
# (one ibv_post_send, one doorbell: on rxe one system call into the
# requester); in this guest all 16 complete together, so its lists hold 16
# (result.rdma.post_send_calls). perftest posts one request per call
# unless told --post_list (-l): each repetition runs it both ways.
# Signalling as perftest's own: run for a duration (-D), ib_write_bw and
# ib_read_bw ask for a completion on every request ("CQ Moderation : 1" in
# their header, which the bench prints), so dmalab's runs signal every
# request too (its default). The 2026-11-27 runs gave dmalab
# --signal-every 16 at depth 16: each worker then waited for all 16 before
# posting more, and for READs, whose completion waits for the data, the
# queue ran dry once per 16 messages. Rate runs use the same flags, so each
# tool's rate is a share of its maximum under the flags it is paced with.
i=1
while [ $i -le $REPS ]; do
  cat /proc/loadavg >>/results/loadavg
  dm_run write W_dm_$i
  pt_run ib_write_bw W_pt_$i
  DBUF=64K dm_run write W_fp_$i
  pt_run ib_write_bw W_pl_$i -l 16
  dm_run read R_dm_$i
  pt_run ib_read_bw R_pt_$i
  DBUF=64K dm_run read R_fp_$i
  pt_run ib_read_bw R_pl_$i -l 16
  i=$((i + 1))
done

# Rate limits: each tool at 10/50/90% of its own median maximum (writes).
[ "$RATE" = 1 ] || exit 0
dm_max=$(for f in /results/W_dm_*.json; do grep -o '"data_bw_bytes": [0-9.e+]*' "$f" | head -1 | cut -d' ' -f2; done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
pt_max=$(for f in /results/W_pt_*.txt; do awk '/^ 65536/ {print $4}' "$f"; done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "$dm_max $pt_max" >/results/max
for pct in 10 50 90; do
  rate=$(awk -v m="$dm_max" -v p=$pct 'BEGIN {printf "%d", m * p / 100}')
  sampler /results/rate_dm_$pct.samples &
  P=$!
  DRT=$RRT dm_run write rate_dm_$pct --rate "$rate"
  kill $P
  mib=$(awk -v m="$pt_max" -v p=$pct 'BEGIN {printf "%.2f", m * p / 100}')
  sampler /results/rate_pt_$pct.samples &
  P=$!
  DRT=$RRT pt_run ib_write_bw rate_pt_$pct --rate_limit="$mib" --rate_units=M --rate_limit_type=SW
  kill $P
  echo "$pct $rate $mib" >>/results/rates
done
