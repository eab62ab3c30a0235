#!/usr/bin/env bash
# Adoption rule 1 (tools/train/logs/pNN-plan.md): CamVid val road IoU of each
# candidate of run RUN, by roadseg on the CPU with its defaults, appended with
# the time to target/runs/RUN/rule1.txt:
#   tools/eval/camvid-val.sh RUN CANDIDATE [CANDIDATE ...]   # e.g. p22 step-000380-ema-wise50 step-000380
# Needs target/release/roadseg and ../shared (or $ROADSEG_SHARED).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: tools/eval/camvid-val.sh RUN CANDIDATE [CANDIDATE ...]}
shift
shared=${ROADSEG_SHARED:-../shared}
for m in "$@"; do
  r=$(target/release/roadseg eval --model "target/runs/$run/$m" --images "$shared/data/camvid/val" \
    --labels "$shared/data/camvid/valannot" --road-labels 3 --ignore-index 11 --device cpu 2>/dev/null |
    grep '^road, pooled' | tr -s ' ')
  echo "$(date -u +%H:%M:%S) $m camvid-val $r" | tee -a "target/runs/$run/rule1.txt"
done
