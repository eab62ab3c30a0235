#!/usr/bin/env bash
# One device call that trains the product model on a lent GPU (issue 35;
# docs/gpu-check.md call 7): Intel's teacher labels the unlabelled frames
# first (the torch port of its IR, on the GPU), then tools/train/distill.py
# trains from the bundled model for the rest of the call, and the last two
# validated exports come back, each with its running average of the weights
# (--ema, the candidate that lost least CamVid in the CPU runs p8-p10).
#
# RECIPE (default p21): what distill.py trains. p21 is the recipe of the CPU
# runs p15-p25 that kept CamVid's road border (tools/train/logs/p21-plan.md:
# IDD's drivable on its own output channel and kept off the shared rows, the
# teacher's road on its own channel, the teacher's rain and night frames on
# the product's road, IDD's drivable unscored where the teacher says P(road)
# < 0.2), at twice p21's batch (20) for the GPU's thousands of steps; the
# IDD frames' teacher labels it needs are made here first, on the GPU, like
# the clips'. RECIPE=p2 is the recipe every GPU call ran before 2026-11-30
# (p2's: every source on the product's rows, the scene augmentations, LR
# 4e-4). MIX, LR, STEPS and EMA override either; TRAIN_EXTRA is appended last
# (argparse: a later flag wins). The run is judged by tools/train/logs/gpu3-plan.md.
# With TESTS=1 (and target/device carried too,
# which then does not fit beside target/gpu-train: use it only with a
# smaller stage) the CUDA tests run first (docs/gpu-check.md call 1).
#
#   here:  tools/train/stage-data.sh && tools/train/stage-gpu.sh    # target/gpu-train, 48 MiB (59 of the 60 MiB stage-gpu.sh allows with the tree)
#   device run, carry ["target/gpu-train"], timeout 600:
#     OUT=$OUT bash tools/train/gpu-tests-then-train.sh
#   a dry run here (CPU, a few steps; relabelling alone takes ~265 s on 2 AVX2 cores, so give
#   it 600; the IDD frames' labels take longer still, so copy them in first:
#   cp -r target/train-data/idd-teacher target/gpu-train/): OUT=/tmp/o TRAIN_DEVICE=cpu TRAIN_WORKERS=0 \
#   TRAIN_EXTRA="--steps 4 --val-every 2 --limit-val 2" CALL_S=900 bash tools/train/gpu-tests-then-train.sh
#   then run stage-gpu.sh again before a call: the labels a dry run leaves in the stage
#   (teacher/road, 24 MB; idd-teacher, 57 MB) would take the carry over its 64 MiB.
#
# This is the one place the GPU training line lives (tools/train/README.md
# and docs/gpu-check.md point here).
#
# Returns at most 8 files (the device tool's limit): train.log, train.out,
# label.out, last.tar (the last validated export, step-NNNNNN/ and
# step-NNNNNN-ema/: config.json, model.safetensors, training.json each),
# prev.tar (the pair before), and with
# TESTS=1 tests/summary.md, tests/gpu-check.log.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:?set OUT}
CALL_S=${CALL_S:-575} # when everything must be in $OUT (the call's limit is 600)
TRAIN_MIN_S=${TRAIN_MIN_S:-90}
DATA=${DATA:-target/gpu-train}
START=$SECONDS
mkdir -p "$OUT"

if [ "${TESTS:-0}" = 1 ]; then
  OUT=$OUT/tests bench/gpu-check.sh tests >/dev/null 2>&1
  echo "tests: rc $? after $((SECONDS - START)) s"
  sed -n '/^| step/,/^$/p' "$OUT/tests/summary.md" 2>/dev/null
fi

[ -f "$DATA/teacher/index.tsv" ] || { echo "no $DATA: run tools/train/stage-data.sh and tools/train/stage-gpu.sh here and carry it"; exit 2; }
ROADSEG_TEACHER_DIR=$DATA/teacher-ir python3 tools/teacher/label.py --relabel "$DATA/teacher" \
  --device "${TRAIN_DEVICE:-cuda}" >"$OUT/label.out" 2>&1
echo "teacher labels: rc $? after $((SECONDS - START)) s: $(tail -n 1 "$OUT/label.out")"

RECIPE=${RECIPE:-p21}
case $RECIPE in
  p21)
    # The IDD frames' teacher labels are 57 MB: made here, not carried
    # (stage-gpu.sh never stages them; a dry run here may copy them in).
    if [ ! -d "$DATA/idd-teacher" ]; then
      ROADSEG_TEACHER_DIR=$DATA/teacher-ir python3 tools/teacher/label.py --idd "$DATA/idd-teacher" \
        --idd-images "$DATA/idd-lite/train/images" --device "${TRAIN_DEVICE:-cuda}" >>"$OUT/label.out" 2>&1
      echo "IDD teacher labels: rc $? after $((SECONDS - START)) s: $(tail -n 1 "$OUT/label.out")"
    fi
    mix_default=camvid:8,idd:4,teacher:4,teacher_product:2,synth:2 lr_default=1e-4 ema_default=0.998
    recipe=(--teacher-product-sources rainy.mp4,wenig_nacht --teacher-product-confident 0.9 --warmup 100
      --road-augment 0 --cutmix 0 --scale-min 0.9 --scale-max 1.2 --ego-paste 0.3 --ego-weight 1.5
      --plain camvid --idd-teacher-min 0.2 --idd-road-channel --teacher-road-channel
      --aux-detach --aux-detach-sources idd)
    ;;
  p2) mix_default=camvid:4,idd:4,teacher:6,synth:2 lr_default=4e-4 ema_default=0.999 recipe=() ;;
  *) echo "RECIPE=$RECIPE: use p21 or p2"; exit 2 ;;
esac

# python start, the last validation and the tarring after it: 40 s;
# distill.py's budget covers its own start, validations and exports.
budget_s=$((CALL_S - (SECONDS - START) - 40))
if [ "$budget_s" -lt "$TRAIN_MIN_S" ]; then
  echo "train: skipped, only ${budget_s} s left"
  exit 0
fi
budget_min=$(awk -v s="$budget_s" 'BEGIN { printf "%.2f", s / 60 }')
echo "train: recipe $RECIPE, budget ${budget_min} min"
rm -rf /tmp/gpu-run
PYTHONUNBUFFERED=1 timeout -k 5 $((budget_s + 30)) python3 tools/train/distill.py \
  --data "$DATA" --out /tmp/gpu-run --init-from "${INIT_FROM:-models/roadseg-camvid}" \
  --device "${TRAIN_DEVICE:-cuda}" --workers "${TRAIN_WORKERS:-12}" --threads 4 \
  --mix "${MIX:-$mix_default}" --lr "${LR:-$lr_default}" --steps "${STEPS:-20000}" \
  --val-every "${VAL_EVERY:-500}" --time-budget-min "$budget_min" --save-every-min 1000 \
  --ema "${EMA:-$ema_default}" "${recipe[@]}" ${TRAIN_EXTRA:-} >"$OUT/train.out" 2>&1
echo "train: rc $? after $((SECONDS - START)) s"
cp /tmp/gpu-run/train.log "$OUT/train.log" 2>/dev/null
grep -E 'step [0-9]+:' "$OUT/train.log" | tail -n 3
# The raw exports (step-NNNNNN), newest last; each goes with its -ema twin.
mapfile -t exports < <(ls -d /tmp/gpu-run/step-?????? 2>/dev/null | sort | tail -n 2)
pack() { # pack TAR EXPORT: the export and its EMA twin when there is one
  local names=("$(basename "$2")")
  [ -d "$2-ema" ] && names+=("$(basename "$2")-ema")
  tar cf "$1" -C /tmp/gpu-run "${names[@]}"
}
[ "${#exports[@]}" -ge 1 ] && pack "$OUT/last.tar" "${exports[-1]}"
[ "${#exports[@]}" -ge 2 ] && pack "$OUT/prev.tar" "${exports[0]}"
ls -laR "$OUT"
exit 0
