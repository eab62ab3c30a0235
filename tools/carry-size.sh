#!/usr/bin/env bash
# What a device call carries (docs/gpu-check.md): the working tree as the
# device tool copies it (tracked files and untracked ones git does not
# ignore) plus the ignored paths named to carry. Prints the bytes of each
# part and the total; with --check, fails when the total is over
# MAX_CARRY_BYTES (default 60 MiB: the tool's limit is 64 MiB, the rest is
# margin). --tree prints the tree's bytes alone.
#
#   tools/carry-size.sh [--check] [PATH...]      e.g. --check target/device
set -euo pipefail
cd "$(dirname "$0")/.."
max=${MAX_CARRY_BYTES:-$((60 * 1024 * 1024))}
check=0
case ${1:-} in
  --check) check=1; shift ;;
  --tree) # files deleted but still in the index are not carried
    git ls-files -z --cached --others --exclude-standard |
      python3 -c 'import os, sys; print(sum(os.lstat(f).st_size for f in sys.stdin.buffer.read().split(b"\0") if f and os.path.isfile(f)))'
    exit 0 ;;
esac
tree=$("$0" --tree)
total=$tree
printf '%-28s %12s\n' "working tree" "$tree"
for p in "$@"; do
  [ -e "$p" ] || { echo "carry-size: $p does not exist (build it first)" >&2; exit 1; }
  b=$(du -sb "$p" | cut -f1)
  printf '%-28s %12s\n' "$p" "$b"
  total=$((total + b))
done
printf '%-28s %12s (%s MiB; limit %s MiB)\n' "total" "$total" "$((total / 1048576))" "$((max / 1048576))"
if [ "$check" = 1 ] && [ "$total" -gt "$max" ]; then
  echo "carry-size: the call would carry $total bytes, over $max (MAX_CARRY_BYTES)" >&2
  exit 1
fi
