#!/usr/bin/env bash
# The cheap checks of a finished distill.py run, in the order the plans since
# p49 apply them (tools/train/logs/p49-plan.md onwards; issue 35):
#   tools/train/first-checks.sh RUN_DIR [STEP]      # STEP defaults to the last export
# Candidates: the raw export, WiSE(raw, shipped, 0.5), its EMA, and
# WiSE(EMA, shipped, 0.5) (the WiSEs made here when missing). For each: the
# unseen polygons (pooled and hood out, exactly rule 2's figures), the Udacity
# hood at the four cuts and the whole clip with DAD 000478 (rule 3's bonnet
# part), CamVid val over its 101 frames (rule 1).
# Prints the figures; the plan's bars are compared by whoever reads them.
# What is left of a rule (the hood-less clips, held-out IDD, flicker) is
# tools/eval/hood.py without --bonnets-only and tools/eval/adoption-check.sh.
# Writes RUN_DIR/first-checks.txt. About 1-3 minutes a candidate on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: tools/train/first-checks.sh RUN_DIR [STEP]}
[ -d "$run" ] || { echo "$run: no such run folder" >&2; exit 2; }
step=${2:-$(ls -d "$run"/step-?????? 2>/dev/null | sort | tail -n 1 | xargs -r basename || true)}
[ -n "$step" ] || { echo "$run has no step-NNNNNN export yet" >&2; exit 2; }
shared=${ROADSEG_SHARED:-../shared}
bin=${ROADSEG_BIN:-target/release/roadseg}
frames=${UNSEEN_FRAMES:-target/adoption/shipped-exposure/unseen-frames}
out=$run/first-checks.txt
# A run still exporting its EMA would be scored without it.
[ ! -f "$run/train.log" ] || grep -q 'done at step' "$run/train.log" ||
  { echo "$run is still training or exporting (no 'done at step' in train.log): wait for it" >&2; exit 2; }
[ -d "$frames" ] || { echo "$frames missing: run tools/eval/adoption-check.sh on the shipped model first" >&2; exit 2; }
raw=$run/$step
ema=$run/$step-ema
for fine in "$raw" "$ema"; do
  if [ -d "$fine" ] && [ ! -d "$fine-wise50" ] &&
    ! python3 tools/train/wise.py --fine "$fine" --base models/roadseg-camvid --alpha 0.5 --out "$fine-wise50" >/dev/null 2>&1; then
    echo "tools/train/wise.py failed on $fine: run it by hand to see why" >&2; exit 1
  fi
done
for m in "$raw" "$raw-wise50" "$ema" "$ema-wise50"; do
  [ -d "$m" ] || continue
  unseen=$("$bin" eval --model "$m" --images "$frames" --road-polygons tools/eval/unseen-road.json \
    --device cpu --json 2>/dev/null | tail -n 1 |
    python3 -c 'import json,sys; d=json.load(sys.stdin); f = {k[:8]: v["hood_out"]["road_iou"] for k, v in d["frames"].items()}
print("%.4f / %.4f (hood out: tunnel %.3f, night %.3f, overpass %.3f, leafy %.3f)" % (d["road_iou"], d["road_iou_hood_out"],
      f["cb5903ec"], f["caec69a1"], f["cc73b69d"], f["cbd64c44"]))')
  python3 tools/eval/hood.py --model "$m" --bonnets-only --cuts 0.5,0.75,1.0,1.25 --out "$m-hood" >/dev/null 2>&1
  hood=$(python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["bonnets"]; u=b["udacity-clip"]
five = list(u["iou_at"].values()) + [u["iou_whole_clip"]]
print("udacity %s, mean %.3f; DAD 000478 %.3f" % (" / ".join("%.3f" % v for v in five), u["iou_cuts_mean"], b["dad-000478"]["iou_after_1s"]))' "$m-hood/hood.json")
  camvid=$("$bin" eval --model "$m" --images "$shared/data/camvid/val" --labels "$shared/data/camvid/valannot" \
    --road-labels 3 --ignore-index 11 --device cpu 2>/dev/null | grep '^road, pooled' | tr -s ' ' | cut -d' ' -f3)
  echo "$(date -u +%H:%M) $(basename "$m"): unseen pooled / hood out $unseen; $hood; camvid val $camvid" | tee -a "$out"
done
