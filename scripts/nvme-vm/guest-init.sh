#!/bin/sh
# Init of the NVMe test guest (rdinit=/usr/dmalab/init): mounts the basics,
# loads the NVMe driver, runs /usr/dmalab/job.sh with its results going to
# /results, prints them on the console as a base64 tarball between markers,
# and powers off. With dmalab.shell on the kernel command line it opens a
# shell instead of the job (running the guest by hand).
# Programs we ship are called by absolute path in the job scripts: a busybox
# built with a standalone shell runs its own applet (mke2fs, say) before PATH.
export PATH=/usr/dmalab/bin:/usr/dmalab/applets:/usr/bin:/usr/sbin
# Our programs' libraries (copied from the host, same Debian release).
export LD_LIBRARY_PATH=/usr/dmalab/lib
mkdir -p /proc /sys /dev /tmp /run /results /mnt
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
modprobe nvme
i=0
while [ ! -e /dev/ng0n3 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
# The NVDIMM (run.sh): libnvdimm, ACPI NFIT, pmem and device-DAX drivers.
if [ -e /usr/dmalab/modules/nvdimm/order ]; then
  while read -r m; do insmod "/usr/dmalab/modules/nvdimm/$m.ko"; done </usr/dmalab/modules/nvdimm/order
fi
# Soft-RoCE (mkinitrd.sh --with-rdma): rxe0 over the loopback interface.
if [ -e /usr/dmalab/modules/rdma_rxe.ko ]; then
  modprobe ib_uverbs
  modprobe udp_tunnel
  modprobe ip6_udp_tunnel
  insmod /usr/dmalab/modules/rdma_rxe.ko
  /usr/dmalab/applets/ip link set lo up
  /usr/dmalab/bin/rdma link add rxe0 type rxe netdev lo
fi
if grep -q dmalab.shell /proc/cmdline; then
  echo "dmalab NVMe guest: $(ls /dev/ng* /dev/nvme* | tr '\n' ' ')"
  echo "exit the shell to power off"
  setsid cttyhack sh
  poweroff -f
fi
echo "===DMALAB-JOB-START==="
sh /usr/dmalab/job.sh >/results/job.log 2>&1
echo "$?" >/results/job.rc
echo "===DMALAB-RESULTS-BEGIN==="
tar -C /results -czf - . | base64
echo "===DMALAB-RESULTS-END==="
sync
poweroff -f
