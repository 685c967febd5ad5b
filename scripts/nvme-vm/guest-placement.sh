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

# --- DAX: the NVDIMM's raw namespace made a device-DAX device ---------------
# What `ndctl create-namespace -f -e namespace0.0 -m devdax` does, by hand
# through sysfs: the region's DAX seed claims the namespace (its metadata,
# struct pages included, kept in the pmem), then dax_pmem binds it.
ls -l /sys/bus/nd/devices/ >/results/nd_devices 2>&1
R=/sys/bus/nd/devices/region0
seed=$(cat $R/dax_seed 2>/dev/null)
{
  echo "seed=$seed"
  echo namespace0.0 >/sys/bus/nd/drivers/nd_pmem/unbind
  cat /proc/sys/kernel/random/uuid >/sys/bus/nd/devices/$seed/uuid
  echo 2097152 >/sys/bus/nd/devices/$seed/align
  echo pmem >/sys/bus/nd/devices/$seed/mode
  echo namespace0.0 >/sys/bus/nd/devices/$seed/namespace
  echo $seed >/sys/bus/nd/drivers/dax_pmem/bind
  sleep 1
  ls -l /dev/dax* /sys/bus/dax/devices/
  cat /sys/bus/dax/devices/dax0.0/target_node /sys/bus/dax/devices/dax0.0/size /sys/bus/dax/devices/dax0.0/align
} >/results/devdax.log 2>&1

d=/results/load_dax; mkdir -p $d
$D load --engine nvme --target /dev/ng0n2 --pattern single --bs 4K --buffer 4M \
  --direction write --device-offsets sequential --runtime 6s \
  --buffer-file /dev/dax0.0 --allow-destroy /dev/dax0.0 --membind 1 \
  -q --output $d/load.json >$d/stdout 2>$d/stderr &
pid=$!
i=0
while ! grep -q "/dev/dax0.0" "/proc/$pid/numa_maps" 2>/dev/null && [ $i -lt 600 ]; do
  sleep 0.1; i=$((i + 1))
done
sleep 1
cat "/proc/$pid/numa_maps" >$d/numa_maps 2>&1
grep -A20 "dax0.0" "/proc/$pid/smaps" >$d/smaps 2>&1
wait $pid; echo "$?" >$d/rc

d=/results/serve_dax; mkdir -p $d
$D rdma serve --listen 127.0.0.1:18702 --buffer 4M --fill 7 \
  --buffer-file /dev/dax0.0 --allow-destroy /dev/dax0.0 \
  --output $d/serve.json >$d/stdout 2>$d/stderr &
pid=$!
i=0; while ! grep -q serving $d/stderr 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
cat "/proc/$pid/numa_maps" >$d/numa_maps 2>&1
kill -INT $pid; wait $pid; echo "$?" >$d/rc

# Refusals: not named with --allow-destroy; on the wrong node.
case_run dax_not_allowed $D load --engine nvme --target /dev/ng0n2 --buffer 2M --runtime 1s \
  --buffer-file /dev/dax0.0
case_run dax_wrong_node $D load --engine nvme --target /dev/ng0n2 --buffer 2M --runtime 1s \
  --buffer-file /dev/dax0.0 --allow-destroy /dev/dax0.0 --membind 0
