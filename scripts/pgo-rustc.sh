#!/usr/bin/env bash
# rustc wrapper for scripts/build-pgo.sh: adds -Cprofile-use=$DMALAB_PGO_PROFILE
# when compiling the `dmalab_sim` or `dmalab` crate, and nothing otherwise.
#
# -profile-summary-cutoff-hot=999000: code that accounts for 99.9% of the
# counted executions is hot (LLVM's default is 99%). With the default, whether
# the replay's DMA-reference paths count as hot depends on small changes in
# the training runs, and with it the build's speed (measured: 3% or 15% faster
# than a plain build from the same code); with 99.9% the training that had
# given 3% gave 14% (docs/sim.md, "Fourth round").
set -euo pipefail
rustc=$1
shift
name=
prev=
for a in "$@"; do
    [[ $prev == --crate-name ]] && name=$a
    prev=$a
done
if [[ -n ${DMALAB_PGO_PROFILE:-} && ($name == dmalab_sim || $name == dmalab) ]]; then
    exec "$rustc" "$@" "-Cprofile-use=$DMALAB_PGO_PROFILE" \
        -Cllvm-args=-profile-summary-cutoff-hot=999000
fi
exec "$rustc" "$@"
