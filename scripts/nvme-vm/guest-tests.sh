# The NVMe test guest's job for `cargo test -p dmalab --test nvme`: every
# check runs in one boot (a boot costs ~10 s of TCG), results go to /results
# and the host-side tests judge them, with QEMU's trace as the oracle.
. /usr/dmalab/lib.sh

# --- Identify: dmalab against nvme-cli on the same controller -------------
for n in 1 2; do
  case_run "info$n" /usr/dmalab/bin/dmalab info nvme "/dev/ng0n$n" --output "/results/info$n.json"
  /usr/dmalab/bin/nvme id-ns "/dev/ng0n$n" -o json >"/results/id-ns$n.json" 2>&1
done
/usr/dmalab/bin/nvme id-ctrl /dev/ng0n1 -o json >/results/id-ctrl.json 2>&1
case_run info_missing /usr/dmalab/bin/dmalab info nvme /dev/ng9n9

# --- dmalab info: the host report against nvme list on the same controller --
case_run host_info /usr/dmalab/bin/dmalab info --output /results/host_info.json
case_run host_info_nobody /usr/dmalab/bin/setpriv --reuid=65534 --regid=65534 --clear-groups \
  /usr/dmalab/bin/dmalab info
/usr/dmalab/bin/nvme list -o json >/results/nvme-list.json 2>&1

# --- Patterns: every command checked against QEMU's trace -----------------
# Storage reads (--direction write), device offsets sequential from 0 so the
# traced LBAs must tile [0, blocks) exactly; a few workers and depths.
L="/usr/dmalab/bin/dmalab load --engine nvme -q"
case_run single_512 $L --target /dev/ng0n1 --pattern single --bs 512 --buffer 64K \
  --direction write --device-offsets sequential --commands 300 --iodepth 8 --output /results/single_512.json
case_run single_4k_on_512 $L --target /dev/ng0n1 --pattern single --bs 4K --buffer 256K \
  --direction write --device-offsets sequential --commands 200 --iodepth 4 --workers 2 --output /results/single_4k_on_512.json
case_run single_4k $L --target /dev/ng0n2 --pattern single --bs 4K --buffer 256K \
  --direction write --device-offsets sequential --commands 200 --iodepth 16 --output /results/single_4k.json
case_run random_4k $L --target /dev/ng0n2 --pattern random --bs 4K --max-blocks 8 --buffer 1M \
  --direction write --device-offsets sequential --commands 100 --iodepth 8 --output /results/random_4k.json
case_run full_512 $L --target /dev/ng0n1 --pattern full --bs 512 --max-blocks 16 --buffer 1M \
  --direction write --device-offsets sequential --commands 100 --iodepth 8 --output /results/full_512.json
case_run same_512 $L --target /dev/ng0n1 --pattern single --bs 512 --buffer 64K \
  --direction write --device-offsets same --commands 50 --iodepth 4 --output /results/same_512.json
case_run flush_1 $L --target /dev/ng0n1 --pattern flush --commands 60 --iodepth 4 --output /results/flush_1.json
case_run noop_1 $L --target /dev/ng0n1 --pattern noop --commands 60 --iodepth 4 --output /results/noop_1.json
case_run single_512_ioctl env DMALAB_NVME_PATH=ioctl $L --target /dev/ng0n1 --pattern single --bs 512 \
  --buffer 64K --direction write --device-offsets sequential --commands 100 --iodepth 8 \
  --output /results/single_512_ioctl.json
# --- probe latency on QEMU's default CPU model, which has no rdtscp: the
# fenced reads fall back to lfence+rdtsc+lfence (this died of SIGILL before).
case_run probe_no_rdtscp /usr/dmalab/bin/dmalab probe latency --size 1M --runtime 300ms \
  --output /results/probe_no_rdtscp.json

# --- dmalab run: an NVMe aggressor and its control cycle ------------------
# control = 'auto' twins the aggressor with --pattern flush (the same
# passthrough path, no data blocks), paced at the rate the aggressor reached;
# two repetitions, so the control runs once after its load and once before.
# Strings in single quotes (TOML literal strings), so no line of the file
# reads as a call of a shipped program.
cat >/tmp/nvme-run.toml <<'EOF'
[experiment]
repetitions = 2
warmup = '300ms'
cooldown = '0s'
timeout = '60s'
control = 'auto'

[[aggressor]]
name = 'nvread'
command = 'load'
engine = 'nvme'
target = '/dev/ng0n1'
pattern = 'random'
direction = 'write'
bs = '512'
buffer = '64K'
iodepth = 4

# The victim spins in the shell (its figure: wall seconds); `probe latency`
# needs rdtscp, which QEMU's default CPU model lacks.
[[victim]]
name = 'spin'
command = 'exec'
run = ['sh', '-c', 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done']
EOF
case_run nvme_run /usr/dmalab/bin/dmalab run -q -o /results/nvme_run/results.jsonl /tmp/nvme-run.toml

# Storage writes on a clean namespace, named with --allow-destroy.
case_run write_full_4k $L --target /dev/ng0n2 --pattern full --bs 4K --max-blocks 4 --buffer 256K \
  --direction read --device-offsets sequential --commands 64 --iodepth 8 --allow-destroy /dev/ng0n2 \
  --fill random:5 --output /results/write_full_4k.json
# A command larger than MDTS (512 KiB here) is refused, not split.
case_run mdts_too_big $L --target /dev/ng0n2 --pattern full --bs 4K --max-blocks 256 --buffer 4M \
  --direction write --commands 4
# --max-blocks mdts: as many blocks per command as the maximum transfer allows
# (the test checks them against nvme-cli's MDTS and the kernel's limit).
case_run mdts_blocks $L --target /dev/ng0n2 --pattern full --bs 4K --max-blocks mdts --buffer 4M \
  --direction write --device-offsets sequential --commands 4 --iodepth 1 --output /results/mdts_blocks.json
cat /sys/block/nvme0n2/queue/max_hw_sectors_kb >/results/max_hw_sectors_kb 2>&1

# --- The data really moved: write a random buffer, read it back ------------
# 256 single 4 KiB commands cover the 1 MiB buffer once, at LBAs 0..255 of
# namespace 2; the read run starts from a zeroed buffer.
case_run rt_write $L --target /dev/ng0n2 --direction read --pattern single --bs 4K --buffer 1M \
  --device-offsets sequential --fill random:1234 --commands 256 --iodepth 8 --allow-destroy /dev/ng0n2 \
  --buffer-checksum --output /results/rt_write.json
case_run rt_read $L --target /dev/ng0n2 --direction write --pattern single --bs 4K --buffer 1M \
  --device-offsets sequential --fill zero --commands 256 --iodepth 8 --workers 2 \
  --buffer-checksum --output /results/rt_read.json
echo 3 >/proc/sys/vm/drop_caches
dd if=/dev/nvme0n2 bs=1M count=1 2>/dev/null | sha256sum | cut -d' ' -f1 >/results/rt_device.sha256

# --- --format-before: Format NVM (no secure erase) before a write run -----
# Namespace 2 holds the round trip's 1 MiB; after a one-command write run
# with --format-before, blocks 1..255 must read back as zeros.
case_run fmt_refused $L --target /dev/ng0n2 --direction write --pattern single --commands 1 --format-before
case_run fmt_write $L --target /dev/ng0n2 --direction read --pattern single --bs 4K --buffer 64K \
  --device-offsets sequential --commands 1 --fill random:9 --allow-destroy /dev/ng0n2 --format-before
echo 3 >/proc/sys/vm/drop_caches
dd if=/dev/nvme0n2 bs=4096 skip=1 count=255 2>/dev/null | sha256sum | cut -d' ' -f1 >/results/fmt_rest.sha256
dd if=/dev/zero bs=4096 count=255 2>/dev/null | sha256sum | cut -d' ' -f1 >/results/zero255.sha256

# --- Safety guard: refusals leave every byte unchanged ----------------------
md5() { md5sum <"$1" | cut -d' ' -f1; }
W="/usr/dmalab/bin/dmalab load --engine nvme -q --direction read --pattern single --bs 4K --buffer 64K \
  --device-offsets sequential --commands 16"
# A partition table (and so a partition) on namespace 1.
echo ',' | /usr/dmalab/bin/sfdisk -q --label dos /dev/nvme0n1 >/results/sfdisk.log 2>&1
sleep 1
ls /dev/nvme0n1* >/results/ns1_parts
md5 /dev/nvme0n1 >/results/safety_parted.before
case_run safety_parted $W --target /dev/ng0n1 --allow-destroy /dev/ng0n1
md5 /dev/nvme0n1 >/results/safety_parted.after
# An (unmounted) ext4 filesystem on namespace 2.
/usr/dmalab/bin/mke2fs -q -F -t ext4 /dev/nvme0n2 >/results/mke2fs.log 2>&1
md5 /dev/nvme0n2 >/results/safety_fs.before
case_run safety_fs $W --target /dev/ng0n2 --allow-destroy /dev/ng0n2
md5 /dev/nvme0n2 >/results/safety_fs.after
# The same filesystem, mounted.
modprobe ext4
# Read-only, so nothing but dmalab could write to it during the case.
mount -t ext4 -o ro /dev/nvme0n2 /mnt >/results/mount.log 2>&1
grep nvme0n2 /proc/mounts >/results/mounted
case_run safety_mounted $W --target /dev/ng0n2 --allow-destroy /dev/ng0n2
umount /mnt
md5 /dev/nvme0n2 >/results/safety_mounted.after
