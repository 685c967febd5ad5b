# The buffer-placement job (run.sh --with-rdma) for `cargo test -p dmalab
# --test placement`: a `load` buffer and an `rdma serve` buffer bound to
# NUMA node 1 of the two-node guest, the kernel's own view of them taken
# from /proc/PID/numa_maps while they run, and the refusals (a node that
# does not exist). Results in /results, judged by
# crates/dmalab/tests/placement.rs.
. /usr/dmalab/lib.sh
D=/usr/dmalab/bin/dmalab
cat /sys/devices/system/node/online >/results/nodes_online
cat /sys/devices/system/node/has_memory >/results/nodes_with_memory

# --- load: a 1 MiB buffer on node 1, NVMe engine ---------------------------
d=/results/load_node1; mkdir -p $d
$D load --engine nvme --target /dev/ng0n2 --pattern single --bs 4K --buffer 1M \
  --direction write --device-offsets sequential --runtime 6s \
  --numa-node 1 -q --output $d/load.json >$d/stdout 2>$d/stderr &
pid=$!
# Copied once the bound mapping holds all its 256 pages (or after 60 s,
# for the test to show what it held).
i=0
while ! grep -q "bind:1 .*N1=256" "/proc/$pid/numa_maps" 2>/dev/null && [ $i -lt 600 ]; do
  sleep 0.1; i=$((i + 1))
done
cat "/proc/$pid/numa_maps" >$d/numa_maps 2>&1
wait $pid; echo "$?" >$d/rc

# --- rdma serve: a 1 MiB served buffer on node 1 ---------------------------
d=/results/serve_node1; mkdir -p $d
$D rdma serve --listen 127.0.0.1:18700 --buffer 1M --fill 7 --membind 1 \
  --output $d/serve.json >$d/stdout 2>$d/stderr &
pid=$!
i=0; while ! grep -q serving $d/stderr 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
cat "/proc/$pid/numa_maps" >$d/numa_maps 2>&1
kill -INT $pid; wait $pid; echo "$?" >$d/rc

# --- refusals: node 7 does not exist ---------------------------------------
case_run load_node7 $D load --engine nvme --target /dev/ng0n2 --buffer 1M --runtime 1s --numa-node 7
case_run serve_node7 $D rdma serve --listen 127.0.0.1:18701 --buffer 1M --numa-node 7
