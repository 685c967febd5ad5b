# The NVMe benchmark's guest job (scripts/bench-nvme.sh substitutes
# @RUNTIME@ and @REPS@): dmalab's nvme engine (io_uring passthrough and ioctl
# paths) against fio's io_uring_cmd engine on the same namespace
# (/dev/ng0n2, 4 KiB blocks) and settings, interleaved.
. /usr/dmalab/lib.sh
RT=@RUNTIME@
REPS=@REPS@
dev=/dev/ng0n2
uname -a >/results/uname
i=1
while [ $i -le $REPS ]; do
  # A: 4 KiB reads (one block per command), queue depth 16.
  /usr/dmalab/bin/dmalab load --engine nvme --target $dev --direction write --pattern single --bs 4K \
    --device-offsets sequential --iodepth 16 --buffer 16M --runtime ${RT}s -q \
    --output /results/A_uring_$i.json >/dev/null 2>>/results/errors
  DMALAB_NVME_PATH=ioctl /usr/dmalab/bin/dmalab load --engine nvme --target $dev --direction write --pattern single \
    --bs 4K --device-offsets sequential --iodepth 16 --buffer 16M --runtime ${RT}s -q \
    --output /results/A_ioctl_$i.json >/dev/null 2>>/results/errors
  /usr/dmalab/bin/fio --name=A --filename=$dev --ioengine=io_uring_cmd --cmd_type=nvme --rw=read --bs=4k \
    --iodepth=16 --fixedbufs=1 --registerfiles=1 --runtime=$RT --time_based \
    --output-format=json --output=/results/A_fio_$i.json >/dev/null 2>>/results/errors
  # B: 128 KiB reads (32 blocks of 4 KiB per command), queue depth 16.
  /usr/dmalab/bin/dmalab load --engine nvme --target $dev --direction write --pattern full --max-blocks 32 --bs 4K \
    --device-offsets sequential --iodepth 16 --buffer 16M --runtime ${RT}s -q \
    --output /results/B_uring_$i.json >/dev/null 2>>/results/errors
  DMALAB_NVME_PATH=ioctl /usr/dmalab/bin/dmalab load --engine nvme --target $dev --direction write --pattern full \
    --max-blocks 32 --bs 4K --device-offsets sequential --iodepth 16 --buffer 16M --runtime ${RT}s -q \
    --output /results/B_ioctl_$i.json >/dev/null 2>>/results/errors
  /usr/dmalab/bin/fio --name=B --filename=$dev --ioengine=io_uring_cmd --cmd_type=nvme --rw=read --bs=128k \
    --iodepth=16 --fixedbufs=1 --registerfiles=1 --runtime=$RT --time_based \
    --output-format=json --output=/results/B_fio_$i.json >/dev/null 2>>/results/errors
  i=$((i + 1))
done
