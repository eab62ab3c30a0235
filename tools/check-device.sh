#!/usr/bin/env bash
# Everything the device calls of docs/gpu-check.md need, checked without a
# GPU (CI runs it on every change, so the first lent GPU gives numbers, not
# a build error):
#   1. tools/device-build.sh: the engine-only binary and the test executable
#      the GPU machine runs (--no-default-features --features cuda), and that
#      the test executable holds the GPU test modules;
#   2. tools/device-bundle.sh: the portable pipeline bundle;
#   3. each call's carry (working tree + what it carries) under 60 MiB;
#   4. bench/gpu-check.sh --dry-run: every call's plan under its time limit
#      and every step's files, binaries, flags and test filters, on the CPU;
#   5. bench/pipeline-gpu.sh --plan and its CPU dry run over the bundle;
#   6. bench/scale-gpu.sh --plan and its CPU dry run (two steps, small).
# Failing commands print their own output; nothing is hidden.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-target/check-device}
rm -rf "$out"
mkdir -p "$out"

echo "== device build"
./tools/device-build.sh
listed=$(target/device/test-it --list)
for m in cuda cuda_attention cuda_kernels frame_path overlay parity; do
  n=$(grep -c "^$m::.*: test$" <<<"$listed" || true)
  echo "target/device/test-it: $n tests in $m::"
  [ "$n" -gt 0 ] || { echo "check-device: target/device/test-it has no $m:: tests" >&2; exit 1; }
done

echo "== pipeline bundle"
./tools/device-bundle.sh

echo "== what each call carries"
tools/carry-size.sh --check target/device
tools/carry-size.sh --check target/device-bundle

echo "== bench/gpu-check.sh --dry-run"
OUT=$out/gpu-check bench/gpu-check.sh --dry-run

echo "== bench/pipeline-gpu.sh --plan, then its CPU dry run"
bench/pipeline-gpu.sh --plan
BUNDLE=target/device-bundle OUT=$out/pipeline DEVICE=cpu FRAMES=30 STREAMS=2 SECONDS=10 WORKERS=auto PORT=${PORT:-19474} bench/pipeline-gpu.sh
echo "== bench/scale-gpu.sh --plan, then its CPU dry run"
bench/scale-gpu.sh --plan
BUNDLE=target/device-bundle OUT=$out/scale DEVICE=cpu RES=320x240 FPS=5 STEPS="1 2" STEP_S=5 SIZE=256x192 BATCH=2 \
  RECORD=source PORT=${SCALE_PORT:-19494} bench/scale-gpu.sh
echo "check-device: ok"
