#!/usr/bin/env bash
# Builds what a GPU machine without Rust or GStreamer can run, into
# target/device/: the engine-only roadseg binary (infer/eval/bench, CUDA
# included), the CUDA test executables, build-info.txt (the revision built),
# and shared-tools/: a copy of ../shared's fixture generator and its one input
# image (see below). Carry `target/device` there and run
#   OUT=$OUT bench/gpu-check.sh          # everything, < 9 minutes (docs/cuda.md)
# or single pieces:
#   ROADSEG_REPO=$PWD target/device/test-it --nocapture cuda::
#   target/device/roadseg bench --device cuda ...
# (ROADSEG_SHARED points the tests at the fixtures when ../shared is elsewhere.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/device
rm -rf "$out"
mkdir -p "$out"
features=(--release --no-default-features --features cuda)
# Its own target folder: an engine-only build in target/release would replace
# the full binary there (and the next full build would redo everything).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/device-cargo}
cargo build "${features[@]}"
cp "$CARGO_TARGET_DIR/release/roadseg" "$out/roadseg"
# One test binary (tests/it): its cuda::, cuda_attention::, cuda_kernels::,
# frame_path::, overlay:: and parity:: modules are what the GPU machine runs
# (the video modules are compiled out). Cargo's messages go to the terminal:
# a compile error must be seen, not swallowed by `set -e`.
for t in it; do
  json=$out/.cargo-test-$t.json
  cargo test "${features[@]}" --test "$t" --no-run --message-format=json-render-diagnostics >"$json"
  exe=$(python3 -c 'import sys, json
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[2]:
        print(m["executable"])' "$json" "$t")
  rm -f "$json"
  if [ -z "$exe" ] || [ ! -x "$exe" ]; then
    echo "device-build: cargo built no test executable for tests/$t (see the messages above)" >&2
    exit 1
  fi
  cp "$exe" "$out/test-$t"
done
# Debug info would put the folder over the 64 MiB a device run can carry.
strip --strip-debug "$out"/roadseg "$out"/test-*

{
  echo "rev $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
  echo "built $(date -u +%FT%TZ)"
  echo "features ${features[*]}"
} >"$out/build-info.txt"

# The GPU machine gets the checkout and the carried paths, not ../shared, so
# bench/gpu-check.sh regenerates the ../shared SegFormer fixtures there (91 MB,
# too big to carry) with ../shared's own generator. Copied into this ignored
# build folder, never into the project: the generator script and its one input
# image. The script reads IMGDIR/bdd.jpg; fixtures/segformer/b0-image-1024x576/
# input.png holds exactly the pixels that fixture was made from (PNG data under
# that name: PIL opens files by content), so the regenerated case sees the same
# image. About 0.7 MB.
shared=${ROADSEG_SHARED:-../shared}
gen=$shared/tools/make_segformer_goldens.py
img=$shared/fixtures/segformer/b0-image-1024x576/input.png
if [ -f "$gen" ] && [ -f "$img" ]; then
  mkdir -p "$out/shared-tools"
  cp "$gen" "$out/shared-tools/"
  cp "$img" "$out/shared-tools/bdd.jpg"
else
  echo "warning: $gen or $img not found: bench/gpu-check.sh will not be able to regenerate the fixtures" >&2
fi
ls -la "$out" "$out/shared-tools" 2>/dev/null
du -sh "$out"
