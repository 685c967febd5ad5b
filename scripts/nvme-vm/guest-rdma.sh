# The soft-RoCE guest's job (run.sh --with-rdma) for `cargo test -p dmalab
# --test rdma`: rxe0 over lo (guest-init.sh), dmalab's RDMA engine and
# `dmalab rdma serve` checked against rxe's own hw_counters, with perftest
# as a sanity check of the stack. Results in /results, judged by
# crates/dmalab/tests/rdma.rs.
. /usr/dmalab/lib.sh
D=/usr/dmalab/bin/dmalab
HW=/sys/class/infiniband/rxe0/ports/1/hw_counters

# Counters of rxe0 as name=value lines.
counters() {
  for f in "$HW"/*; do echo "$(basename "$f")=$(cat "$f")"; done
}

# Starts `dmalab rdma serve` in the background on PORT with the given extra
# flags, and waits until it listens (its first line on stderr).
serve_start() {
  name="$1"; port="$2"; shift 2
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
  kill -TERM "$SERVE_PID"
  wait "$SERVE_PID"
  echo "$?" >"/results/$1/serve.rc"
}

/usr/dmalab/bin/ibv_devinfo -v >/results/ibv_devinfo.txt 2>&1
/usr/dmalab/bin/rdma link show >/results/rdma_link.txt 2>&1
cat /sys/class/infiniband/rxe0/ports/1/gids/1 >/results/gid1.txt 2>&1
ls /sys/class/infiniband/rxe0/ports/1/ >/results/port_dir.txt 2>&1

# --- perftest on the same stack (sanity; the benchmark compares properly) --
/usr/dmalab/bin/ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 >/results/perftest_server.txt 2>&1 &
PT=$!
sleep 1
/usr/dmalab/bin/ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 127.0.0.1 >/results/perftest_client.txt 2>&1
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
