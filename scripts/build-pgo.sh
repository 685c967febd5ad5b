#!/usr/bin/env bash
# Builds dmalab with profile-guided optimisation of the simulator.
#
#   scripts/build-pgo.sh            -> target/pgo/release/dmalab
#
# 1. builds an instrumented binary (target/pgo-gen);
# 2. runs it on fixed-seed synthetic traces (file copy, TPC-H-like scan,
#    web server; every scheme, DDR4 timing) to count which branches and
#    calls the replay takes;
# 3. rebuilds with those counts applied to the `dmalab-sim` crate and the
#    `dmalab` binary crate only (scripts/pgo-rustc.sh), so the other crates
#    (load, probe, ...) are compiled exactly as in a plain release build and
#    are not treated as cold code.
#
# The simulated results are the same as a plain build's (the code is the
# same; only its layout and inlining change); docs/sim.md has the speed of
# both. Needs `llvm-profdata` of the compiler's own LLVM version: the
# `llvm-tools` rustup component, installed here if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HOST=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA="$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata"
if [[ ! -x "$PROFDATA" ]]; then
    rustup component add llvm-tools >&2 || {
        echo "build-pgo.sh: llvm-profdata for this rustc is missing and 'rustup component add llvm-tools' failed" >&2
        exit 1
    }
fi
GEN=$ROOT/target/pgo-gen
PROF=$ROOT/target/pgo-data
rm -rf "$PROF"
mkdir -p "$PROF/raw"

echo "build-pgo.sh: instrumented build" >&2
RUSTFLAGS="-Cprofile-generate=$PROF/raw" \
    cargo build --release -q -p dmalab --target-dir "$GEN"

echo "build-pgo.sh: training runs" >&2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$GEN/release/dmalab" sim synth file-copy --size 16M --output "$T/fc.trace" >/dev/null
"$GEN/release/dmalab" sim synth tpch --size 8M --output "$T/tp.trace" >/dev/null
"$GEN/release/dmalab" sim synth web --requests 2000 --output "$T/web.trace" >/dev/null
rm -f "$PROF"/raw/*.profraw # only the replays count
for t in fc tp web; do
    "$GEN/release/dmalab" sim compare "$T/$t.trace" --set dram.preset=ddr4-3200 \
        --output "$T/$t.json" >/dev/null
done
"$PROFDATA" merge -o "$PROF/sim.profdata" "$PROF"/raw/*.profraw

echo "build-pgo.sh: optimised build" >&2
# The wrapper is not part of the fingerprint: start these two crates afresh.
cargo clean -q -p dmalab -p dmalab-sim --release --target-dir "$ROOT/target/pgo"
DMALAB_PGO_PROFILE="$PROF/sim.profdata" RUSTC_WRAPPER="$ROOT/scripts/pgo-rustc.sh" \
    cargo build --release -q -p dmalab --target-dir "$ROOT/target/pgo"
echo "$ROOT/target/pgo/release/dmalab"
