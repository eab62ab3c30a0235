#!/usr/bin/env python3
"""How sure is "candidate beats the shipped model" on the unseen frames?

  tools/eval/compare-unseen.py BASE.json CANDIDATE.json [--hood-out] [--resamples 20000] [--seed 1]

Each JSON is the last line of `roadseg eval --road-polygons
tools/eval/unseen-road.json --json` (tools/eval/adoption-check.sh keeps it as
OUT/unseen.json). Pooled road IoU is a ratio of sums over frames, so one
frame with a lot of road can decide it. A paired bootstrap over frames
(draw the frames with replacement, score both models on the same draw) says
how much of a difference the frame sample alone can make: the 95% interval
of CANDIDATE - BASE, and the share of draws in which the candidate is ahead.
An interval that straddles 0 means ten frames cannot tell the two apart.
--hood-out compares the figures with the drawn hood left out of the
prediction, as the daemon shows video (its hood estimate removes a static
bonnet or dashboard); a still has no hood estimate and is judged hood in.
Standard library only.
"""
import argparse
import json
import random
import sys


def frames_of(path, hood_out=False):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"{path}: no JSON line (run roadseg eval with --json)")
    frames = json.loads(lines[-1]).get("frames", {})
    counts = {}
    for name, s in frames.items():
        if hood_out:
            if "hood_out" not in s:
                sys.exit(f"{path}: frame {name} has no hood_out counts (a roadseg older than --hood-out)")
            s = s["hood_out"]
        if "intersection" not in s or "union" not in s:
            sys.exit(f"{path}: frame {name} has no intersection/union counts (a roadseg older than this tool)")
        counts[name] = (s["intersection"], s["union"])
    return counts


def pooled(counts, names):
    inter = sum(counts[n][0] for n in names)
    union = sum(counts[n][1] for n in names)
    return inter / union if union else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("candidate")
    ap.add_argument("--hood-out", action="store_true", help="score with the drawn hood left out, as on video")
    ap.add_argument("--resamples", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    base, cand = frames_of(args.base, args.hood_out), frames_of(args.candidate, args.hood_out)
    if set(base) != set(cand):
        sys.exit(f"the two runs scored different frames: {sorted(set(base) ^ set(cand))}")
    names = sorted(base)
    rng = random.Random(args.seed)
    diffs = []
    for _ in range(args.resamples):
        draw = [rng.choice(names) for _ in names]
        diffs.append(pooled(cand, draw) - pooled(base, draw))
    diffs.sort()
    lo, hi = diffs[int(0.025 * len(diffs))], diffs[int(0.975 * len(diffs)) - 1]
    ahead = sum(d > 0 for d in diffs) / len(diffs)
    b, c = pooled(base, names), pooled(cand, names)
    what = "hood out" if args.hood_out else "hood in"
    print(f"frames {len(names)}; pooled road IoU ({what}): base {b:.4f}, candidate {c:.4f}, difference {c - b:+.4f}")
    print(f"paired bootstrap over frames ({args.resamples} draws): 95% interval of the difference [{lo:+.4f}, {hi:+.4f}]; candidate ahead in {100 * ahead:.1f}% of draws")
    for n in names:
        bi, ci = base[n][0] / max(base[n][1], 1), cand[n][0] / max(cand[n][1], 1)
        print(f"  {n:<28} {bi:.4f} -> {ci:.4f} ({ci - bi:+.4f}), base's union {base[n][1]} px")


if __name__ == "__main__":
    main()
