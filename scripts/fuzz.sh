#!/usr/bin/env bash
# Longer runs of dmalab's own fuzz harness (crates/dmalab/tests/fuzz.rs):
#   scripts/fuzz.sh ITER [SEED]
# runs ITER mutated cases per input family, in-process and through the
# binary, and ITER connections of mutated handshakes against `dmalab rdma
# serve` on the fake verbs library (CI runs a fixed, smaller count). Failing inputs land in
# target/tmp/fuzz-failures/ with a .why file naming the command and the failure;
# commit each under tests/fuzz/regressions/ with a name after the bug.
set -euo pipefail
cd "$(dirname "$0")/.."
iter="${1:?usage: scripts/fuzz.sh ITER [SEED]}"
export DMALAB_FUZZ_ITER="$iter"
if [ -n "${2:-}" ]; then
    export DMALAB_FUZZ_SEED="$2"
fi
exec cargo test -p dmalab --test fuzz -- --nocapture
