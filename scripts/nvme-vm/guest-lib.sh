# Helpers for guest job scripts (sourced: . /usr/dmalab/lib.sh).
#
# mark N: a one-block Read of LBA N on namespace 3, the marker namespace.
#   QEMU's trace shows it as `pci_nvme_read ... nsid 3 ... lba N`; the host
#   splits the trace at these reads, so the commands between mark N and
#   mark N+1 belong to case N.
# case NAME CMD...: marks, runs CMD with stdout/stderr/rc kept in
#   /results/NAME/, marks again.
CASE_NO=0

mark() {
  /usr/dmalab/bin/nvme read /dev/nvme0n3 --start-block="$1" --block-count=0 --data-size=512 \
    --data=/tmp/mark.bin >/dev/null 2>&1 || echo "mark $1 failed" >&2
}

case_run() {
  name="$1"; shift
  CASE_NO=$((CASE_NO + 1))
  d="/results/$name"
  mkdir -p "$d"
  echo "$CASE_NO" >"$d/mark"
  echo "$*" >"$d/cmd"
  mark "$CASE_NO"
  "$@" >"$d/stdout" 2>"$d/stderr"
  echo "$?" >"$d/rc"
  CASE_NO=$((CASE_NO + 1))
  mark "$CASE_NO"
}
