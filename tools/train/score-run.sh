#!/usr/bin/env bash
# Scores a finished distill.py run by the adoption rule its plan states
# (tools/train/logs/p8-plan.md onwards; issue 35), the same way every time:
#   tools/train/score-run.sh RUN_DIR [STEP_DIR]
# 1. The candidates: the last export (or STEP_DIR), its EMA when there is
#    one, and the half-and-half WiSE of each with the shipped model
#    (tools/train/wise.py --alpha 0.5).
# 2. Rule 1: `roadseg eval` CamVid val road IoU above the shipped model's
#    (CAMVID_MIN, default 0.9525: the shipped model scored as painted, at the
#    0.4 confidence threshold, since 2026-12-02). A candidate that fails it is not scored
#    further.
# 3. Those that pass: tools/eval/adoption-check.sh (every figure the rule
#    names) and tools/eval/hood.py; the thresholds to beat are the shipped
#    model's (the plan's) and are compared by a person reading RUN_DIR/score.log,
#    not here: a plan may name more than one figure per set.
# 4. Diagnostics, never selection: where CamVid val's road goes (pavement
#    painted road) and the dusk drive's fit (tools/eval/camvid-drives.py).
# Writes RUN_DIR/score.log (and each candidate's reports beside it).
# Needs target/release/roadseg, ../shared, torch and transformers.
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: tools/train/score-run.sh RUN_DIR [STEP_DIR]}
base=${BASE:-models/roadseg-camvid}
camvid_min=${CAMVID_MIN:-0.9525}
shared=${ROADSEG_SHARED:-../shared}
bin=${ROADSEG_BIN:-target/release/roadseg}
log=$run/score.log
say() { echo "$(date -u +%T) $*" | tee -a "$log"; }
last=${2:-$(ls -d "$run"/step-?????? 2>/dev/null | sort | tail -n 1)}
[ -n "$last" ] && [ -d "$last" ] || { echo "no export in $run" >&2; exit 2; }
[ -x "$bin" ] || { echo "build first: cargo build --release --locked" >&2; exit 2; }
say "scoring $last (base $base, CamVid val to beat $camvid_min)"

candidates=("$last")
[ -d "$last-ema" ] && candidates+=("$last-ema")
for c in "${candidates[@]}"; do
  python3 tools/train/wise.py --fine "$c" --base "$base" --alpha 0.5 --out "$c-wise50" >/dev/null 2>&1 \
    && candidates+=("$c-wise50") || say "wise.py failed for $c"
done

pass=()
for c in "${candidates[@]}"; do
  r=$("$bin" eval --model "$c" --images "$shared/data/camvid/val" --labels "$shared/data/camvid/valannot" \
      --road-labels 3 --ignore-index 11 --device cpu 2>/dev/null | grep '^road, pooled' | tr -s ' ' | cut -d' ' -f3)
  say "$c camvid-val ${r:-failed}"
  if [ -n "$r" ] && awk -v r="$r" -v m="$camvid_min" 'BEGIN { exit !(r > m) }'; then pass+=("$c"); fi
done
say "rule 1 (CamVid val > $camvid_min): ${pass[*]:-none}"

for c in "${pass[@]}"; do
  name=$(basename "$c")
  tools/eval/adoption-check.sh "$c" >"$run/$name-adoption.txt" 2>&1
  cat "target/adoption/$name/summary.txt" >>"$log"
  python3 tools/eval/hood.py --model "$c" >"$run/$name-hood.txt" 2>&1
  tail -n 15 "$run/$name-hood.txt" >>"$log"
done

# Diagnostics of the best-kept candidate (the EMA's WiSE when there is one).
diag=${candidates[-1]}
say "diagnostics of $diag (not selection)"
python3 tools/eval/camvid-drives.py "$diag" --split train --every 2 --only 0001TP 2>/dev/null | tee -a "$log"
for m in "$base" "$diag"; do
  say "CamVid val, $m:"
  python3 tools/eval/camvid-drives.py "$m" --split val 2>/dev/null | tee -a "$log"
done
say "finished"
