#!/usr/bin/env bash
# CPU benchmarks recorded in docs/benchmarks.md. Run from the repository root
# after `cargo build --release`, on an otherwise idle machine.
#   bench/cpu.sh [frames]
set -euo pipefail
BIN=./target/release/roadseg
FIX=../shared/fixtures/segformer
FRAMES=${1:-30}
echo "# $(date -u +%FT%TZ) $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for case in tiny-1024x576 b0-image-1024x576; do
  $BIN bench --model $FIX/$case --device cpu --size 1024x576 --frame 1280x720 --frames "$FRAMES" 2>/dev/null
done
[ -d models/roadseg-camvid ] && $BIN bench --model models/roadseg-camvid --device cpu --size 1024x576 --frame 1280x720 --frames "$FRAMES" 2>/dev/null
