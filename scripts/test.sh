#!/usr/bin/env bash
# The whole test suite: installs missing Debian packages (as root), checks
# formatting and lints, then runs every test. Under DMALAB_CI=1 a test that
# needs root, loop devices, zram or QEMU fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo test --workspace --no-fail-fast
