# Sourced by scripts/bench-gpu.sh and scripts/bench-gpu-wait.sh: the start
# both GPU benchmarks share. Expects $dmalab (empty: build the release
# binary) and $gpu; `gpu_bench_start NAME` sets $dmalab, makes
# target/NAME and sets $out to it, always uses the real CUDA driver, and
# exits 77 (skipped), saying why, when dmalab finds no usable GPU $gpu.
gpu_bench_start() {
  local name=$1 msg
  if [ -z "$dmalab" ]; then
    cargo build --release -q -p dmalab
    dmalab=target/release/dmalab
  fi
  unset DMALAB_GPU_DRIVER # the real driver, never the mock
  out=target/$name
  mkdir -p "$out"
  # dmalab itself says whether a driver and the GPU are there.
  if ! msg=$("$dmalab" load --engine gpu --target "gpu:$gpu" --dry-run -q 2>&1 >/dev/null); then
    echo "$name.sh: skipped, no usable NVIDIA GPU $gpu here: $msg" >&2
    exit 77
  fi
}
