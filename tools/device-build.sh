#!/usr/bin/env bash
# Builds what a GPU machine without Rust or GStreamer can run, into
# target/device/: the engine-only roadseg binary (infer/eval/bench, CUDA
# included) and the CUDA test executables. Carry `target/device` there and run
#   ROADSEG_REPO=$PWD target/device/test-cuda --nocapture
#   target/device/roadseg bench --device cuda ...
# (ROADSEG_SHARED points the tests at the fixtures when ../shared is elsewhere.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/device
rm -rf "$out"
mkdir -p "$out"
features=(--release --no-default-features --features cuda)
cargo build "${features[@]}"
cp target/release/roadseg "$out/roadseg"
for t in cuda cuda_kernels parity; do
  exe=$(cargo test "${features[@]}" --test "$t" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$t")
  cp "$exe" "$out/test-$t"
done
# Debug info would put the folder over the 64 MiB a device run can carry.
strip --strip-debug "$out"/*
ls -la "$out"
du -sh "$out"
