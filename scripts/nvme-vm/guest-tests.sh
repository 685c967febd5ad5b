# The NVMe test guest's job for `cargo test -p dmalab --test nvme`: every
# check runs in one boot (a boot costs ~10 s of TCG), results go to /results
# and the host-side tests judge them, with QEMU's trace as the oracle.
. /usr/dmalab/lib.sh

# --- Identify: dmalab against nvme-cli on the same controller -------------
for n in 1 2; do
  case_run "info$n" dmalab info nvme "/dev/ng0n$n" --output "/results/info$n.json"
  nvme id-ns "/dev/ng0n$n" -o json >"/results/id-ns$n.json" 2>&1
done
nvme id-ctrl /dev/ng0n1 -o json >/results/id-ctrl.json 2>&1
case_run info_missing dmalab info nvme /dev/ng9n9
