#!/usr/bin/env bash
# One device call that does the two things a lent GPU is most wanted for
# when it is lent for 15 minutes: the CUDA tests (docs/gpu-check.md call 1)
# and then, in the time the call has left, the bundled model's GPU
# fine-tuning (call 7, tools/train/README.md). The two never overlap: the
# memory test asserts device-wide free memory, and a trainer beside it
# would move that.
#
#   device run, carry ["target/device", "target/train-data"], timeout 600:
#   bash tools/train/gpu-tests-then-train.sh
#   TESTS=0 bash tools/train/gpu-tests-then-train.sh   # call 7 alone: carry ["target/train-data"]
#
# This is the one place the GPU training line lives (tools/train/README.md
# and docs/gpu-check.md point here).
#
# Returns at most 8 files (the device tool's limit): tests/summary.md,
# tests/gpu-check.log, tests/results.tar.gz, train.log, train.out,
# model.tar (config.json + model.safetensors, the best CamVid-val epoch),
# snaps-a.tar and snaps-b.tar (the last four validated epochs, two per tar
# to stay under 16 MiB a file) for a weight average here (tools/train/soup.py).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:?set OUT}
CALL_S=${CALL_S:-575} # when everything must be in $OUT (the call's limit is 600)
TRAIN_MIN_S=${TRAIN_MIN_S:-90}
# a dry run here: TRAIN_DEVICE=cpu TRAIN_WORKERS=2 TRAIN_EXTRA="--limit-train 8 --limit-val 2"
START=$SECONDS

if [ "${TESTS:-1}" = 1 ]; then
  OUT=$OUT/tests bench/gpu-check.sh tests >/dev/null 2>&1
  echo "tests: rc $? after $((SECONDS - START)) s"
  sed -n '/^| step/,/^$/p' "$OUT/tests/summary.md" 2>/dev/null
fi

# python start + the tarring after it: 25 s; train.py's budget covers its own
# start, the last validation and the export.
budget_s=$((CALL_S - (SECONDS - START) - 25))
if [ "$budget_s" -lt "$TRAIN_MIN_S" ]; then
  echo "train: skipped, only ${budget_s} s left"
  exit 0
fi
budget_min=$(awk -v s="$budget_s" 'BEGIN { printf "%.2f", s / 60 }')
echo "train: budget ${budget_min} min"
PYTHONUNBUFFERED=1 timeout -k 5 $((budget_s + 15)) python3 tools/train/train.py \
  --data target/train-data/camvid --synth target/train-data/synth --synth-per-batch 2 \
  --arch b0-d128 --init-from models/roadseg-camvid --device "${TRAIN_DEVICE:-cuda}" --workers "${TRAIN_WORKERS:-12}" ${TRAIN_EXTRA:-} \
  --batch-size 16 --crop-w 512 --crop-h 384 --scale-min 0.5 --scale-max 2.0 \
  --lr ${LR:-4e-4} --warmup-iters 50 --class-weights none --road-augment 0.5 \
  --road-augment-skip near_car,overpass,reflection --epochs 1000 \
  --time-budget-min "$budget_min" --val-every 4 --select road \
  --out /tmp/gpu-model --snapshots /tmp/gpu-snap --log "$OUT/train.log" >"$OUT/train.out" 2>&1
echo "train: rc $? after $((SECONDS - START)) s"
tail -n 5 "$OUT/train.log" 2>/dev/null
[ -f /tmp/gpu-model/model.safetensors ] && tar cf "$OUT/model.tar" -C /tmp gpu-model
mapfile -t snaps < <(ls -d /tmp/gpu-snap/epoch-* 2>/dev/null | sort | tail -n 4)
[ "${#snaps[@]}" -ge 1 ] && tar cf "$OUT/snaps-a.tar" -C /tmp/gpu-snap $(basename -a "${snaps[@]:0:2}")
[ "${#snaps[@]}" -ge 3 ] && tar cf "$OUT/snaps-b.tar" -C /tmp/gpu-snap $(basename -a "${snaps[@]:2:2}")
ls -laR "$OUT"
exit 0
