#!/usr/bin/env bash
# GPU benchmark: HF SegFormer in PyTorch (eager, channels_last+SDPA,
# torch.compile max-autotune) against roadseg's CUDA backend, on the same
# random-weight B5 and B0 checkpoints (the GPU machine has no internet; speed
# depends on the layout, not on the weight values).
#
# Run from the repository root on the GPU machine, with a prebuilt roadseg:
#   ROADSEG_BIN=./target/release/roadseg bench/cuda.sh            # everything
#   bench/cuda.sh ckpt torch-b0 torch-b0-576                       # some steps
#   OUT=/some/dir bench/cuda.sh summary                            # table only (python3, no torch)
#
# Steps (default: all, in this order):
#   ckpt          random checkpoints b5 + b0 (19 labels, fp16) in $CKPT_DIR
#   torch-b5      bench/torch_segformer.py, B5 1024x1024
#   torch-b0      bench/torch_segformer.py, B0 1024x1024
#   torch-b0-576  bench/torch_segformer.py, B0 1024x576
#   roadseg       roadseg bench for the same three cases
#   roadseg-b5    roadseg bench for B5 1024x1024 alone (not in the default list)
#   summary       side-by-side table from the JSONs in $OUT
# The torch steps include a max-autotune compile (minutes each, B5 the
# longest); where one command may only run ~10 minutes, run the steps in
# separate calls. Every step creates the checkpoints it needs if missing.
#
# Results: $OUT (default bench/out) gets torch-<case>.json, roadseg-<case>.json,
# summary.txt and cuda-bench.log (everything printed, appended).
#
# Environment knobs: ROADSEG_BIN, OUT, CKPT_DIR, PYTHON, ITERS (200), WARMUP (30),
# FRAMES (500), TORCH_CONFIGS (comma list, default all three), COMPILE_MODE
# (max-autotune), ROADSEG_EXTRA (more roadseg bench flags), ROADSEG_FRAME
# (source frame WxH; default: the model input size, so resizing costs least
# and the numbers stay close to model-only).
set -uo pipefail # no -e: a failing step is logged and the others still run

cd "$(dirname "$0")/.."
ROADSEG_BIN=${ROADSEG_BIN:-./target/release/roadseg}
OUTDIR=${OUT:-bench/out}
CKPT_DIR=${CKPT_DIR:-${TMPDIR:-/tmp}/roadseg-bench-ckpt} # fixed, so split runs reuse it
PY=${PYTHON:-python3}
ITERS=${ITERS:-200}
WARMUP=${WARMUP:-30}
FRAMES=${FRAMES:-500}
COMPILE_MODE=${COMPILE_MODE:-max-autotune}
mkdir -p "$OUTDIR" "$CKPT_DIR"
LOG=$OUTDIR/cuda-bench.log
exec > >(tee -a "$LOG") 2>&1

# case name -> "arch WxH"
CASES=("b5-1024x1024 b5 1024x1024" "b0-1024x1024 b0 1024x1024" "b0-1024x576 b0 1024x576")
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(ckpt torch-b5 torch-b0 torch-b0-576 roadseg summary)
FAILED=()

header() {
  echo "# $(date -u +%FT%TZ) $(hostname) bench/cuda.sh ${STEPS[*]}"
  echo "# git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader
  $PY -c 'import torch, transformers; print("# torch", torch.__version__, "CUDA", torch.version.cuda, "transformers", transformers.__version__, "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' 2>/dev/null || true
}

ckpt() { # ckpt ARCH: make $CKPT_DIR/ARCH unless it is already complete
  local arch=$1 dir=$CKPT_DIR/$1
  if [ -f "$dir/config.json" ] && [ -f "$dir/model.safetensors" ]; then return 0; fi
  echo "== random checkpoint $arch -> $dir"
  $PY bench/make_random_checkpoint.py --arch "$arch" --labels 19 --dtype f16 --seed 0 --out "$dir"
}

torch_case() { # torch_case CASE ARCH WxH
  local name=$1 arch=$2 size=$3
  ckpt "$arch" || return 1
  echo "== PyTorch $name"
  local cfg=()
  [ -n "${TORCH_CONFIGS:-}" ] && cfg=(--configs "$TORCH_CONFIGS")
  $PY bench/torch_segformer.py --model "$CKPT_DIR/$arch" --size "$size" --iters "$ITERS" --warmup "$WARMUP" \
    --compile-mode "$COMPILE_MODE" "${cfg[@]}" --json-out "$OUTDIR/torch-$name.json"
}

# The roadseg command in one place: adjust here if the CLI's flags differ.
roadseg_cmd() { # roadseg_cmd MODEL_DIR WxH
  # shellcheck disable=SC2086 # ROADSEG_EXTRA is a flag list
  "$ROADSEG_BIN" bench --model "$1" --size "$2" --frame "${ROADSEG_FRAME:-$2}" --frames "$FRAMES" \
    --device cuda --precision fp16 --workers "${ROADSEG_WORKERS:-4}" ${ROADSEG_EXTRA:-}
}

roadseg_case() { # roadseg_case CASE ARCH WxH
  local name=$1 arch=$2 size=$3 out=$OUTDIR/roadseg-$1.json
  ckpt "$arch" || return 1
  echo "== roadseg $name: $ROADSEG_BIN bench --model $CKPT_DIR/$arch --size $size --frame ${ROADSEG_FRAME:-$size} --frames $FRAMES --device cuda --precision fp16 ${ROADSEG_EXTRA:-}"
  if [ ! -x "$ROADSEG_BIN" ]; then
    echo "roadseg binary $ROADSEG_BIN not found (set ROADSEG_BIN)"
    return 1
  fi
  # stdout is the one JSON line; progress and errors go to stderr (the log).
  local line
  if line=$(roadseg_cmd "$CKPT_DIR/$arch" "$size"); then
    echo "$line"
    echo "$line" | tail -n 1 >"$out"
  else
    local rc=$?
    echo "roadseg bench failed (exit $rc)"
    printf '{"error": "roadseg bench exited %s"}\n' "$rc" >"$out"
    return 1
  fi
}

summary() {
  # Plain python3 (no torch): can also run on the fetched JSONs elsewhere.
  python3 - "$OUTDIR" <<'EOF' | tee "$OUTDIR/summary.txt"
import json, os, sys
d = sys.argv[1]
cases = ["b5-1024x1024", "b0-1024x1024", "b0-1024x576"]
cols = ["eager_fp16", "channels_last_sdpa_fp16", "compile_max_autotune_fp16"]
short = {"eager_fp16": "torch eager", "channels_last_sdpa_fp16": "torch CL+sdpa", "compile_max_autotune_fp16": "torch compile"}
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def ms(v):
    return f"{v:.2f}" if isinstance(v, (int, float)) else "-"
print("# median ms per forward (batch 1, fp16); (Nx) = multiple of the compute floor = FLOPs / measured fp16 GEMM rate")
print(f"{'case':<14} {'GFLOP':>7} {'floor':>6} " + " ".join(f"{short[c]:>17}" for c in cols) + f" {'roadseg model':>16} {'roadseg frame':>14}")
meta_line = None
for case in cases:
    t = load(os.path.join(d, f"torch-{case}.json"))
    r = load(os.path.join(d, f"roadseg-{case}.json"))
    if t is None and r is None:
        continue
    meta = (t or {}).get("meta", {})
    if meta and meta_line is None:
        meta_line = (f"# {meta.get('gpu')}; torch {meta.get('torch')}, transformers {meta.get('transformers')}, "
                     f"CUDA {meta.get('cuda')}; fp16 GEMM {meta.get('gemm_tflops', 0):.0f} TFLOP/s at {meta.get('gemm_size')}")
    floor = meta.get("floor_ms")
    by = {x["config"]: x for x in (t or {}).get("results", [])}
    cells = []
    for c in cols:
        x = by.get(c)
        if x is None:
            cells.append("-")
        elif "error" in x:
            cells.append("FAILED")
        else:
            cells.append(f"{ms(x['median_ms'])} ({x['x_floor']:.1f}x)")
    if r is None:
        rm = rf = "-"
    elif "error" in r:
        rm, rf = "FAILED", ""
    else:
        m = r.get("model_median_ms")
        rm = f"{ms(m)} ({m / floor:.1f}x)" if isinstance(m, (int, float)) and floor else ms(m)
        rf = ms(r.get("median_ms"))
    gflop = f"{meta['flops'] / 1e9:.0f}" if meta.get("flops") else "-"
    print(f"{case:<14} {gflop:>7} {ms(floor):>6} " + " ".join(f"{c:>17}" for c in cells) + f" {rm:>16} {rf:>14}")
if meta_line:
    print(meta_line)
print("# roadseg frame = preprocess + model + postprocess of one frame; the PyTorch columns are the model alone.")
EOF
}

header
for step in "${STEPS[@]}"; do
  case $step in
    ckpt) ckpt b5 && ckpt b0 || FAILED+=("$step") ;;
    torch-b5) torch_case ${CASES[0]} || FAILED+=("$step") ;;
    torch-b0) torch_case ${CASES[1]} || FAILED+=("$step") ;;
    torch-b0-576) torch_case ${CASES[2]} || FAILED+=("$step") ;;
    roadseg)
      for c in "${CASES[@]}"; do
        # shellcheck disable=SC2086 # split "case arch size"
        roadseg_case $c || FAILED+=("roadseg ${c%% *}")
      done
      ;;
    roadseg-b5) roadseg_case ${CASES[0]} || FAILED+=("roadseg ${CASES[0]%% *}") ;;
    summary) summary || FAILED+=("$step") ;;
    *) echo "unknown step '$step' (ckpt torch-b5 torch-b0 torch-b0-576 roadseg roadseg-b5 summary)"; FAILED+=("$step") ;;
  esac
done
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "# failed: ${FAILED[*]} (see $LOG)"
  exit 1
fi
echo "# done: results in $OUTDIR"
