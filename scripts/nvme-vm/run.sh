#!/usr/bin/env bash
# Boots the NVMe test guest: QEMU (TCG, never KVM) with an emulated NVMe
# controller holding three namespaces, the Debian kernel, and an initramfs
# with dmalab in it; QEMU traces every NVMe Read, Write and Flush (the
# oracle the tests judge dmalab by).
#
#   run.sh --out DIR --job SCRIPT [--dmalab BIN] [--with-fio] [--with-rdma] [--timeout SECS]
#   run.sh --shell [--dmalab BIN] [--with-fio] [--with-rdma]  # by hand: a shell on the console
#
# --with-rdma: soft-RoCE in the guest (see mkinitrd.sh); its init brings up
# rxe0 over lo (`rdma link add rxe0 type rxe netdev lo`, GID index 1 is
# ::ffff:127.0.0.1).
#
# Namespaces: 1 = 64 MiB with 512 B blocks, 2 = 64 MiB with 4 KiB blocks,
# 3 = 1 MiB marker namespace (see guest-lib.sh). Inside the guest they are
# /dev/ng0n1../dev/ng0n3 (generic) and /dev/nvme0n1.. (block).
#
# NUMA: two nodes of 512 MiB, CPU 0 on node 0 and CPU 1 on node 1 (buffer
# placement is checked on node 1 against the guest kernel's numa_maps).
# NVDIMM: 64 MiB of emulated persistent memory on node 1 (DIR/nvdimm.img,
# no labels: the guest sees one raw namespace, /dev/pmem0, which a job may
# turn into a device-DAX device).
#
# Leaves in DIR: console.log, trace.log (QEMU trace events), results/ (what
# the job wrote to /results), ns1.img ns2.img.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="" job="" dmalab="" fio_flag="" rdma_flag="" timeout=600 shell=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --job) job="$2"; shift 2 ;;
    --dmalab) dmalab="$2"; shift 2 ;;
    --with-fio) fio_flag="--with-fio"; shift ;;
    --with-rdma) rdma_flag="--with-rdma"; shift ;;
    --timeout) timeout="$2"; shift 2 ;;
    --shell) shell=1; shift ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
kver="${DMALAB_VM_KVER:-6.1.0-56-amd64}"
kernel="/boot/vmlinuz-$kver"
command -v qemu-system-x86_64 >/dev/null || { echo "run.sh: qemu-system-x86_64 missing (apt-get install qemu-system-x86)" >&2; exit 1; }
[ -r "$kernel" ] || { echo "run.sh: $kernel missing (apt-get install linux-image-amd64)" >&2; exit 1; }
if [ -z "$dmalab" ]; then
  dmalab="$repo/target/release/dmalab"
  [ -x "$dmalab" ] || dmalab="$repo/target/debug/dmalab"
fi
[ -x "$dmalab" ] || { echo "run.sh: no dmalab binary at $dmalab (cargo build --release, or --dmalab BIN)" >&2; exit 1; }
if [ "$shell" = 1 ]; then
  [ -n "$out" ] || out="$(mktemp -d)"
  [ -n "$job" ] || job="$here/guest-lib.sh"
else
  [ -n "$out" ] && [ -n "$job" ] || { echo "run.sh: --out DIR and --job SCRIPT are required (or --shell)" >&2; exit 2; }
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -rf "$out/results" "$out/trace.log" "$out/console.log"
"$here/mkinitrd.sh" "$out/initrd.img" "$dmalab" "$job" $fio_flag $rdma_flag
for n in 1 2; do rm -f "$out/ns$n.img"; truncate -s 64M "$out/ns$n.img"; done
rm -f "$out/ns3.img"; truncate -s 1M "$out/ns3.img"
rm -f "$out/nvdimm.img"; truncate -s 64M "$out/nvdimm.img"

append="console=ttyS0 rdinit=/usr/dmalab/init loglevel=1 panic=-1"
args=(
  -accel tcg -machine pc,nvdimm=on -m 1G,slots=2,maxmem=2G -smp 2 -nodefaults -no-reboot
  -object memory-backend-ram,id=mem0,size=512M -numa node,nodeid=0,cpus=0,memdev=mem0
  -object memory-backend-ram,id=mem1,size=512M -numa node,nodeid=1,cpus=1,memdev=mem1
  -object "memory-backend-file,id=pmem0,share=on,mem-path=$out/nvdimm.img,size=64M,align=2M"
  -device nvdimm,id=nvdimm0,memdev=pmem0,node=1
  -kernel "$kernel" -initrd "$out/initrd.img"
  -device nvme,serial=dmalab-vm-0001,id=nvme0
  -drive "file=$out/ns1.img,if=none,id=nvm1,format=raw"
  -device nvme-ns,drive=nvm1,bus=nvme0,nsid=1,logical_block_size=512,physical_block_size=512
  -drive "file=$out/ns2.img,if=none,id=nvm2,format=raw"
  -device nvme-ns,drive=nvm2,bus=nvme0,nsid=2,logical_block_size=4096,physical_block_size=4096
  -drive "file=$out/ns3.img,if=none,id=nvm3,format=raw"
  -device nvme-ns,drive=nvm3,bus=nvme0,nsid=3,logical_block_size=512,physical_block_size=512
  -trace enable=pci_nvme_read -trace enable=pci_nvme_write -trace enable=pci_nvme_flush_ns
  -D "$out/trace.log"
)
if [ "$shell" = 1 ]; then
  exec qemu-system-x86_64 "${args[@]}" -nographic -serial mon:stdio -append "$append dmalab.shell"
fi
rc=0
timeout "$timeout" qemu-system-x86_64 "${args[@]}" -display none -serial "file:$out/console.log" \
  -append "$append" </dev/null || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "run.sh: qemu exited with $rc (124: timed out after ${timeout}s); console in $out/console.log" >&2
fi
mkdir -p "$out/results"
tr -d '\r' <"$out/console.log" | sed -n '/^===DMALAB-RESULTS-BEGIN===$/,/^===DMALAB-RESULTS-END===$/p' \
  | grep -v '^===DMALAB' | base64 -d -i 2>/dev/null | tar -C "$out/results" -xzf - 2>/dev/null || {
  echo "run.sh: no results on the console; see $out/console.log" >&2
  exit 1
}
exit "$rc"
