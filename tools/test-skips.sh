#!/usr/bin/env bash
# The tests that skipped, counted, with their reasons (cargo counts a skip as
# a pass). Tests record each skip with roadseg::test_skip::skip, one line
# `test: reason` in $ROADSEG_SKIP_LOG (default target/release/test-skips.log).
#   tools/test-skips.sh                 prints the summary of the log as it is
#   tools/test-skips.sh CMD [ARGS...]   empties the log, runs CMD (e.g. cargo
#                                       test --release), prints the summary, and
#                                       exits with CMD's status
# With CMD, the NVRTC that tools/install-test-deps.sh installed is put on
# LD_LIBRARY_PATH, so that the kernel compilation test runs instead of skipping.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export ROADSEG_SKIP_LOG="${ROADSEG_SKIP_LOG:-${CARGO_TARGET_DIR:-$root/target}/release/test-skips.log}"

summary() {
  if [ ! -s "$ROADSEG_SKIP_LOG" ]; then
    echo "no tests skipped"
    return
  fi
  # One test may record several reasons (one per missing fixture): count tests.
  local n
  n=$(sed "s/: .*//" "$ROADSEG_SKIP_LOG" | sort -u | wc -l)
  if [ "$n" = 1 ]; then echo "1 test skipped:"; else echo "$n tests skipped:"; fi
  # Grouped by reason (13 CUDA tests share one), each with its tests.
  sort -u "$ROADSEG_SKIP_LOG" | awk '
    { i = index($0, ": "); name = substr($0, 1, i - 1); why = substr($0, i + 2)
      if (!(why in count)) order[++k] = why
      count[why]++; names[why] = names[why] (count[why] > 1 ? ", " : "") name }
    END { for (j = 1; j <= k; j++) { w = order[j]
            printf "  %s: %d test%s: %s\n", w, count[w], (count[w] > 1 ? "s" : ""), names[w] } }'
}

if [ "$#" = 0 ]; then
  summary
  exit 0
fi
mkdir -p "$(dirname "$ROADSEG_SKIP_LOG")"
: >"$ROADSEG_SKIP_LOG"
nvrtc=$(ls -d "${NVRTC_VENV:-$HOME/.cache/roadseg/nvrtc-venv}"/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib 2>/dev/null | sed -n 1p)
if [ -n "$nvrtc" ]; then export LD_LIBRARY_PATH="$nvrtc:${LD_LIBRARY_PATH:-}"; fi
"$@"
status=$?
echo
summary
exit "$status"
