# The NVMe test guest's job for `dmalab throttle` with a cgroup v2 io.max
# actuator (this host mounts cgroup v1; the guest's Debian kernel has cgroup
# v2 and blk-throttle). A `dmalab load` reading /dev/nvme0n1 runs inside the
# cgroup `aggr`; `dmalab throttle --io-max-cgroup` sweeps two fixed rbps
# limits on it and must restore io.max afterwards. Results in /results,
# judged by crates/dmalab/tests/throttle.rs.
#
# The guest's 6.1 blk-throttle lets a burst of several MB through when
# io.max is rewritten and then holds the cgroup until the limit has paid it
# back (seconds at a low limit): the limits are 1 and 8 MiB/s, so the
# payback is short, and each point discards 3 intervals before it measures
# 8, so the measured window lies mostly after the payback.
D=/usr/dmalab/bin/dmalab
mkdir -p /sys/fs/cgroup
mount -t cgroup2 none /sys/fs/cgroup 2>/results/mount.err
echo +io >/sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/aggr
cat /sys/block/nvme0n1/dev >/results/majmin
sh -c "echo \$\$ >/sys/fs/cgroup/aggr/cgroup.procs; exec $D load --engine io_uring --target /dev/nvme0n1 --direction write --pattern random --bs 4K --max-blocks 1 --iodepth 4 --runtime 120s" \
  >/results/aggr.out 2>&1 &
AGG=$!
sleep 2
(while :; do echo "$(cat /proc/uptime) max[$(cat /sys/fs/cgroup/aggr/io.max)] stat[$(cat /sys/fs/cgroup/aggr/io.stat)]"; sleep 0.3; done) >/results/io_trace 2>&1 &
MON=$!
$D throttle --victim-exec "sh -c 'while :; do echo v=100; sleep 1; done'" --victim-regex 'v=([0-9]+)' \
  --io-max-cgroup /sys/fs/cgroup/aggr --io-max-device "$(cat /results/majmin)" \
  --slo 'value <= 2 x baseline' --interval 1s --intervals 3 --baseline-intervals 1 --warmup-intervals 3 \
  --min-rate 1M --max-rate 8M --sweep --sweep-points 2 --sweep-repeat 1 --sweep-intervals 8 \
  --output /results/throttle_iomax.json >/results/throttle.out 2>/results/throttle.err
echo "$?" >/results/throttle.rc
cat /sys/fs/cgroup/aggr/io.max >/results/io_max_after
kill "$AGG" "$MON"
wait
