# The soft-RoCE guest's job (run.sh --with-rdma) for `cargo test -p dmalab
# --test rdma`: rxe0 over lo (guest-init.sh), dmalab's RDMA engine and
# `dmalab rdma serve` checked against rxe's own hw_counters, with perftest
# as a sanity check of the stack. Results in /results, judged by
# crates/dmalab/tests/rdma.rs.
. /usr/dmalab/lib.sh
D=/usr/dmalab/bin/dmalab
# No case may hang the boot: each gets at most a minute (SIGINT: dmalab
# writes what it has and exits 130).
T="/usr/dmalab/applets/timeout -s INT 60"
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters

# Counters of rxe0 as name=value lines.
counters() {
  for f in "$HW"/*; do echo "$(basename "$f")=$(cat "$f")"; done
}

# Starts `dmalab rdma serve` in the background on PORT with the given extra
# flags, and waits until it listens (its first line on stderr).
serve_start() {
  name="$1"; port="$2"; shift 2
  echo "rdma guest: serve $name at $(cut -d' ' -f1 /proc/uptime)" >/dev/console
  mkdir -p "/results/$name"
  $D rdma serve --listen "127.0.0.1:$port" --output "/results/$name/serve.json" "$@" \
    >"/results/$name/serve.stdout" 2>"/results/$name/serve.stderr" &
  SERVE_PID=$!
  i=0
  while ! grep -q serving "/results/$name/serve.stderr" 2>/dev/null && [ $i -lt 300 ]; do
    sleep 0.1; i=$((i + 1))
  done
}

serve_stop() {
  echo "rdma guest: serve $1 stops at $(cut -d' ' -f1 /proc/uptime)" >/dev/console
  kill -TERM "$SERVE_PID"
  wait "$SERVE_PID"
  echo "$?" >"/results/$1/serve.rc"
}

/usr/dmalab/bin/ibv_devinfo -v >/results/ibv_devinfo.txt 2>&1
/usr/dmalab/bin/rdma link show >/results/rdma_link.txt 2>&1
cat /sys/class/infiniband/rxe0/ports/1/gids/1 >/results/gid1.txt 2>&1
ls /sys/class/infiniband/rxe0/ports/1/ >/results/port_dir.txt 2>&1

# --- perftest on the same stack (sanity; the benchmark compares properly) --
# Both ends under the case timeout: a client that starts before the server
# listens (a busy host) exits at once, and the server would wait for it
# forever, holding up the whole boot.
$T /usr/dmalab/bin/ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 >/results/perftest_server.txt 2>&1 &
PT=$!
sleep 1
$T /usr/dmalab/bin/ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 127.0.0.1 >/results/perftest_client.txt 2>&1
echo "$?" >/results/perftest_client.rc
wait "$PT"

# --- serve: bad input ------------------------------------------------------
case_run serve_no_device $D rdma serve --device nosuch0
case_run serve_bad_gid $D rdma serve --gid-index 77
case_run serve_bad_listen $D rdma serve --listen nowhere

# --- serve: up and down with nobody served ---------------------------------
serve_start serve_idle 18600 --buffer 1M
counters >/results/serve_idle/counters.before
serve_stop serve_idle

# Runs a case with rxe0's counters saved before and after it.
counted() {
  name="$1"; shift
  echo "rdma guest: $name at $(cut -d' ' -f1 /proc/uptime)" >/dev/console
  mkdir -p "/results/$name"
  counters >"/results/$name/counters.before"
  case_run "$name" "$@"
  counters >"/results/$name/counters.after"
}

# --- load --engine rdma, loopback: every --rdma-op and offset mode ----------
L="$T $D load --engine rdma -q --pattern single --bs 64K"
counted lb_write $L --target loopback --rdma-op write --buffer 1M --rdma-remote-buffer 1M \
  --device-offsets sequential --fill random:7 --commands 32 --iodepth 4 --qps 2 --buffer-checksum \
  --output /results/lb_write.json
# Inline writes (128 B: the CPU copies them into the work request), a whole
# 8 KiB buffer once; selective signalling; a path MTU below the port's.
counted lb_inline $T $D load --engine rdma -q --pattern single --bs 128 --target loopback \
  --rdma-op write --rdma-inline --buffer 8K --rdma-remote-buffer 8K --device-offsets sequential \
  --fill random:11 --commands 64 --iodepth 4 --buffer-checksum --output /results/lb_inline.json
counted lb_signal $L --target loopback --rdma-op write --buffer 1M --rdma-remote-buffer 1M \
  --device-offsets sequential --commands 41 --iodepth 16 --qps 2 --signal-every 4 \
  --output /results/lb_signal.json
counted lb_mtu $L --target loopback --rdma-op write --buffer 1M --rdma-remote-buffer 1M \
  --mtu 1024 --commands 8 --iodepth 4 --output /results/lb_mtu.json
counted lb_read $L --target loopback --rdma-op read --buffer 1M --rdma-remote-buffer 1M \
  --device-offsets sequential --fill random:3 --commands 16 --iodepth 4 --buffer-checksum \
  --output /results/lb_read.json
counted lb_mixed $L --target loopback --rdma-op mixed:50 --buffer 1M --rdma-remote-buffer 2M \
  --device-offsets random --commands 40 --iodepth 6 --qps 3 --output /results/lb_mixed.json
counted lb_same $L --target loopback --rdma-op write --buffer 1M --rdma-remote-buffer 1M \
  --device-offsets same --commands 16 --iodepth 2 --output /results/lb_same.json
dd if=/dev/zero bs=1M count=1 2>/dev/null | sha256sum | cut -d' ' -f1 >/results/zero1m.sha256

# --- a served peer: data moved both ways, equal SHA-256 on both sides -------
serve_start srv 18601 --buffer 1M --fill 90
counted srv_read $L --target 127.0.0.1:18601 --rdma-op read --buffer 1M --rdma-remote-buffer 1M \
  --device-offsets sequential --fill zero --commands 16 --iodepth 4 --buffer-checksum \
  --output /results/srv_read.json
counted srv_write $L --target 127.0.0.1:18601 --rdma-op write --buffer 1M --rdma-remote-buffer 1M \
  --device-offsets sequential --fill random:11 --commands 16 --iodepth 4 --qps 2 --buffer-checksum \
  --output /results/srv_write.json
serve_stop srv
# READs outstanding per QP come from the devices (ibv_query_device on both
# sides): --iodepth 200 is lowered to rxe's READ depth (the test compares
# it with ibv_devinfo -v), and every READ still completes.
serve_start srv_deep 18609 --buffer 1M
case_run srv_deep_read $L --target 127.0.0.1:18609 --rdma-op read --buffer 1M \
  --rdma-remote-buffer 1M --device-offsets sequential --commands 300 --iodepth 200 \
  --output /results/srv_deep_read.json
serve_stop srv_deep
# 1 MiB of byte 90 ('Z'), what the served buffer held before the writes.
dd if=/dev/zero bs=1M count=1 2>/dev/null | tr '\000' 'Z' | sha256sum | cut -d' ' -f1 >/results/z1m.sha256

# --- serve with two clients at once ------------------------------------------
serve_start two 18602 --buffer 4M
counters >/results/two/counters.before
$L --target 127.0.0.1:18602 --rdma-op write --buffer 1M --rdma-remote-buffer 4M --device-offsets random \
  --commands 40 --iodepth 4 --qps 2 --output /results/two/a.json >/results/two/a.out 2>&1 &
A=$!
$L --target 127.0.0.1:18602 --rdma-op mixed:30 --buffer 1M --rdma-remote-buffer 4M --device-offsets random \
  --commands 40 --iodepth 4 --qps 2 --output /results/two/b.json >/results/two/b.out 2>&1 &
B=$!
wait $A; echo "$?" >/results/two/a.rc
wait $B; echo "$?" >/results/two/b.rc
serve_stop two
counters >/results/two/counters.after

# --- the peer dies mid-run: the client stops and reports what it did --------
serve_start gone 18603 --buffer 1M
$L --target 127.0.0.1:18603 --rdma-op write --buffer 1M --rdma-remote-buffer 1M --runtime 30s \
  --iodepth 4 --output /results/gone/client.json >/results/gone/client.out 2>/results/gone/client.err &
C=$!
sleep 4
kill -KILL "$SERVE_PID"
wait $C; echo "$?" >/results/gone/client.rc

# --- bad input ---------------------------------------------------------------
case_run bad_device $L --target loopback --rdma-device nosuch0 --commands 1
case_run bad_gid $L --target loopback --gid-index 9 --commands 1
case_run bad_op $L --target loopback --rdma-op sideways --commands 1
case_run bad_target $L --target /dev/nvme0n1 --commands 1
case_run no_server $L --target 127.0.0.1:18699 --commands 1
case_run no_lib env DMALAB_IBVERBS_LIB=libnothere.so.1 $L --target loopback --commands 1
serve_start small 18605 --buffer 4K
case_run small_remote $L --target 127.0.0.1:18605 --rdma-remote-buffer 4K --commands 1
case_run small_region $L --target 127.0.0.1:18605 --commands 1
serve_stop small
# A peer of another protocol version: the magic, then version 3.
(printf 'DMALABRD\000\003\002'; head -c 53 /dev/zero) | /usr/dmalab/applets/nc -l -p 18604 >/dev/null &
NC=$!
sleep 0.5
case_run bad_version $L --target 127.0.0.1:18604 --commands 1
kill "$NC" 2>/dev/null

# --- dmalab run: examples/rdma-interference.toml, small enough for TCG ------
# The example's aggressor (64 KiB messages at random offsets on both sides,
# loopback) swept over the number of QPs, in two of its configurations
# (write, read), with its sequential R victim; buffers, runtimes and
# repetitions cut down. Then its report, with each figure as an SVG file.
# Strings in single quotes (TOML literal strings), so no line of the file
# reads as a call of a shipped program.
mkdir -p /results/interference
cat >/tmp/rdma-interference.toml <<'TOML'
[experiment]
name = 'rdma-interference'
repetitions = 2
warmup = '300ms'
cooldown = '0s'
timeout = '60s'

[cpus]
aggressor = 'last'
victims = 'rest'

[[configuration]]
name = 'write'
rdma_op = 'write'

[[configuration]]
name = 'read'
rdma_op = 'read'

[[aggressor]]
name = 'rdma'
command = 'load'
engine = 'rdma'
target = 'loopback'
pattern = 'random'
bs = '64K'
max_blocks = 1
buffer = '1M'
rdma_remote_buffer = '1M'
device_offsets = 'random'
iodepth = 4

[sweep]
aggressor = 'rdma'
flag = 'qps'
values = [1, 2, 4]
include_plain = true

[[victim]]
name = 'seq R'
command = 'probe bandwidth'
traffic = 'R'
size = '4M'
runtime = '300ms'
TOML
echo "rdma guest: interference run at $(cut -d' ' -f1 /proc/uptime)" >/dev/console
case_run interference_run /usr/dmalab/applets/timeout -s INT 400 $D run -q \
  -o /results/interference/results.jsonl /tmp/rdma-interference.toml
case_run interference_report $D report /results/interference/results.jsonl \
  -o /results/interference/report.html --figures /results/interference/figures
echo "rdma guest: interference done at $(cut -d' ' -f1 /proc/uptime)" >/dev/console
