#!/usr/bin/env bash
# Builds the NVMe test guest's initramfs: the Debian initrd (kernel modules,
# busybox) with a cpio appended that holds dmalab, nvme-cli, mke2fs, sfdisk,
# wipefs, setpriv (and fio with --with-fio), their shared libraries (from ldd), the
# guest init and the job script to run. With --with-rdma also soft-RoCE: the
# Debian kernel's rdma_rxe.ko (its initrd carries ib_core, ib_uverbs and the
# UDP tunnels, not rxe), libibverbs with the rxe provider and its driver file,
# iproute2's rdma, ibv_devinfo and perftest's ib_write_bw/ib_read_bw.
#
#   mkinitrd.sh OUT.img DMALAB_BIN JOB_SCRIPT [--with-fio] [--with-rdma]
#
# The Debian initrd has a merged /usr (bin, lib, lib64 are links into usr/),
# so everything goes under usr/: a real bin/ or lib/ in our cpio would hide it.
# Our programs and libraries live in usr/dmalab/{bin,lib}: a file extracted
# over an existing path is written in place, and the initrd's busybox applets
# (mke2fs among them) are 256 hard links to one inode, so a same-named file
# would overwrite busybox itself.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; dmalab="$2"; job="$3"; shift 3
with_fio=0 with_rdma=0
for a in "$@"; do
  case "$a" in
    --with-fio) with_fio=1 ;;
    --with-rdma) with_rdma=1 ;;
    *) echo "mkinitrd.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
kver="${DMALAB_VM_KVER:-6.1.0-56-amd64}"
base="${DMALAB_VM_BASE_INITRD:-/boot/initrd.img-$kver}"
[ -r "$base" ] || { echo "mkinitrd.sh: $base missing (apt-get install linux-image-amd64)" >&2; exit 1; }

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/dmalab/bin" "$root/usr/dmalab/lib"

# Copies a library (resolving links) to the same place under usr/.
copy_lib() {
  local lib="$1" dest
  case "$lib" in
    */ld-linux*) return 0 ;; # the initrd's loader (same Debian release)
  esac
  dest="$root/usr/dmalab/lib/$(basename "$lib")"
  [ -e "$dest" ] && return 0
  mkdir -p "$(dirname "$dest")"
  cp -L "$lib" "$dest"
}

add_bin() {
  local src="$1" dest="$root/usr/dmalab/bin/$2"
  cp -L "$src" "$dest"
  chmod 755 "$dest"
  ldd "$src" | awk '/=>/ {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
    [ -n "$lib" ] && copy_lib "$lib"
  done
}

add_bin "$dmalab" dmalab
# The guest scripts need a shell toolbox (grep, tar, base64, dd, sha256sum...).
# The Debian initrd carries busybox only when the busybox package was
# installed when it was generated: without it, only klibc's few tools are
# there, and klibc's dd read nothing from the NVMe block device. So we ship
# the host's busybox with its applets linked into usr/dmalab/applets, which
# comes before the initrd's own tools in the guest's PATH: the guest gets the
# same tools either way. Module tools stay the initrd's (kmod).
bb="$(command -v busybox || true)"
[ -n "$bb" ] || { echo "mkinitrd.sh: busybox missing (apt-get install busybox)" >&2; exit 1; }
mkdir -p "$root/usr/dmalab/applets"
add_bin "$bb" busybox
for applet in $("$bb" --list); do
  case "$applet" in
    modprobe | insmod | rmmod | lsmod | depmod | modinfo) continue ;;
  esac
  ln -s ../bin/busybox "$root/usr/dmalab/applets/$applet"
done
# Debug builds carry hundreds of MiB of debug info: not needed in the guest.
strip --strip-debug "$root/usr/dmalab/bin/dmalab" 2>/dev/null || true
add_bin /usr/sbin/nvme nvme
add_bin /usr/sbin/mke2fs mke2fs
add_bin /usr/sbin/sfdisk sfdisk
add_bin /usr/sbin/wipefs wipefs
add_bin /usr/sbin/blkid blkid
# `dmalab info` as an unprivileged user (util-linux setpriv).
add_bin /usr/bin/setpriv setpriv
if [ "$with_fio" = 1 ]; then
  add_bin /usr/bin/fio fio
fi
if [ "$with_rdma" = 1 ]; then
  rxe="/lib/modules/$kver/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko"
  provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
  for f in "$rxe" "$provider" /etc/libibverbs.d/rxe.driver /usr/bin/ib_write_bw /usr/bin/ibv_devinfo /usr/bin/rdma; do
    [ -r "$f" ] || { echo "mkinitrd.sh: $f missing (apt-get install linux-image-amd64 rdma-core ibverbs-providers ibverbs-utils perftest iproute2)" >&2; exit 1; }
  done
  mkdir -p "$root/usr/dmalab/modules" "$root/usr/lib/x86_64-linux-gnu/libibverbs" "$root/etc/libibverbs.d"
  cp "$rxe" "$root/usr/dmalab/modules/"
  # libibverbs looks for providers in its built-in directory and for their
  # driver files in /etc/libibverbs.d: both at their Debian paths.
  cp -L "$provider" "$root/usr/lib/x86_64-linux-gnu/libibverbs/"
  cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
  ldd "$provider" | awk '/=>/ {print $3}' | while read -r lib; do [ -n "$lib" ] && copy_lib "$lib"; done
  # dmalab dlopens libibverbs.so.1 (found through LD_LIBRARY_PATH).
  copy_lib /usr/lib/x86_64-linux-gnu/libibverbs.so.1
  add_bin /usr/bin/rdma rdma
  add_bin /usr/bin/ibv_devinfo ibv_devinfo
  add_bin /usr/bin/ib_write_bw ib_write_bw
  add_bin /usr/bin/ib_read_bw ib_read_bw
fi
# The NVDIMM's drivers (run.sh gives the guest one), in load order; the
# Debian initrd does not carry them.
mkdir -p "$root/usr/dmalab/modules/nvdimm"
for m in nvdimm/libnvdimm acpi/nfit/nfit nvdimm/nd_btt nvdimm/nd_pmem dax/device_dax dax/dax_pmem; do
  ko="/lib/modules/$kver/kernel/drivers/$m.ko"
  [ -r "$ko" ] || { echo "mkinitrd.sh: $ko missing (apt-get install linux-image-amd64)" >&2; exit 1; }
  cp "$ko" "$root/usr/dmalab/modules/nvdimm/"
done
printf '%s\n' libnvdimm nfit nd_btt nd_pmem device_dax dax_pmem >"$root/usr/dmalab/modules/nvdimm/order"
cp "$here/guest-init.sh" "$root/usr/dmalab/init"
cp "$here/guest-lib.sh" "$root/usr/dmalab/lib.sh"
cp "$job" "$root/usr/dmalab/job.sh"
chmod 755 "$root/usr/dmalab/init" "$root/usr/dmalab/job.sh"

tmp="$out.tmp.$$"
cp "$base" "$tmp"
# The kernel unpacks concatenated archives in order; ours comes last.
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >>"$tmp"
mv "$tmp" "$out"
