#!/usr/bin/env python3
"""Hood IoU on real bonnets, and no hood where there is none (issue 35).

  tools/eval/hood.py [--model DIR] [--out DIR] [--fps 25] [--bonnets-only] [--cuts 0.5,0.75,1.0,1.25]

Runs `roadseg process --hood-out` (the daemon's hood: the model's ego
vehicle where the model has that class, joined by the motion estimate and
the persistent edge where the model agrees) on:
- the clips with a bonnet that never trained (tools/teacher/ego-outlines.json,
  "eval": the Udacity clip, DAD sequence 000478 as a 6 fps video), after
  the first second and after the whole clip, against the drawn outline:
  hood IoU;
- clips without one (solidWhiteRight.mp4 and the hood-less clips of
  ../shared/data/clips), over each clip's first 8 s: the hood's share of
  the frame at the end, which must stay under 1% (the daemon reports none
  below that), and frame by frame (`--stats-out`): how many frames drew a
  hood and the largest one. A hood that comes and goes mid-clip hides road
  in those frames though the last estimate is none (2026-12-01: the
  shipped model drew one of 1% or more on 115 of highway.mp4's 240
  frames, up to 2.5%, all of it ego read in the bottom corners; none
  since a learned hood must span the middle third; rainy.mp4 on 9, up to
  1.25%, the motion estimate's, none since it must see less road than
  over it).
Prints a table; writes OUT/hood.json.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "teacher"))
import ego  # noqa: E402

SHARED = os.environ.get("ROADSEG_SHARED", os.path.join(ROOT, "..", "shared"))
BIN = os.environ.get("ROADSEG_BIN", os.path.join(ROOT, "target", "release", "roadseg"))
# Checked by eye over each clip's mean frame (2026-11-27). Not here:
# tmo324's night.mp4, which SOURCES.tsv lists without a bonnet, but whose
# mean frame shows a thin dark bonnet edge along the bottom 3%.
NO_HOOD = [
    "data/dashcam/solidWhiteRight.mp4",
    "data/clips/tmo324__lane_detecting/videos/rainy.mp4",
    "data/clips/tmo324__lane_detecting/videos/seattlestreet1.mp4",
    "data/clips/akin-oladejo__hough-lane-detection/highway.mp4",
    "data/clips/muchlisin1412__AutonomousVehicle/driving.mp4",
    # Looked at frame by frame on 2026-12-02 (5%, 50%, 95%), every frame
    # processed whole: no hood drawn on any.
    "data/clips/tmo324__lane_detecting/videos/seattlestreet2.mp4",
    "data/clips/tmo324__lane_detecting/videos/countryroad.mp4",
    "data/clips/tmo324__lane_detecting/videos/desert.mp4",
    "data/clips/erinflee__Autonomous-Car-Project/road_video.mp4",
]


def as_video(spec: str, tmp: str, fps: int) -> str:
    """A clip as it is, or a sequence of stills as an H.264 video at `fps`."""
    path = os.path.join(SHARED, spec)
    if spec.endswith(".mp4"):
        return path
    files = sorted(glob.glob(path))
    lst = os.path.join(tmp, "list.txt")
    with open(lst, "w") as f:
        for p in files:
            f.write(f"file '{p}'\nduration {1 / fps}\n")
    out = os.path.join(tmp, "stills.mp4")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i", lst, "-vf", f"fps={fps}",
                    "-pix_fmt", "yuv420p", "-c:v", "libx264", out], check=True)
    return out


def trimmed(video: str, seconds: float, tmp: str) -> str:
    out = os.path.join(tmp, f"first-{seconds}s.mp4")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", video, "-t", str(seconds), "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", out], check=True)
    return out


def process_hood(video: str, model: str, tmp: str, extra: list[str], per_frame: list | None = None) -> np.ndarray:
    """The daemon's last hood estimate; with `per_frame`, each frame's hood share (0-1) is appended to it."""
    hood = os.path.join(tmp, "hood.png")
    stats = os.path.join(tmp, "stats.jsonl")
    for p in (hood, stats):
        if os.path.exists(p):
            os.remove(p)
    per_frame_args = [] if per_frame is None else ["--stats-out", stats]
    subprocess.run([BIN, "process", video, "-o", os.path.join(tmp, "out.mp4"), "--model", model, "--device", "cpu",
                    "--hood-out", hood] + per_frame_args + extra, check=True, capture_output=True)
    if per_frame is not None:
        with open(stats) as f:
            per_frame.extend(json.loads(line)["hood_pct"] / 100 for line in f if line.strip())
    return np.asarray(Image.open(hood)) > 127


def iou(a: np.ndarray, b: np.ndarray) -> float:
    u = (a | b).sum()
    return float((a & b).sum() / u) if u else 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "roadseg-camvid"))
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "hood-eval"))
    ap.add_argument("--fps", type=int, default=6, help="frame rate the DAD stills play at (every 5th frame of 30 fps)")
    ap.add_argument("--process-arg", action="append", default=[], help="passed to roadseg process")
    ap.add_argument("--bonnets-only", action="store_true", help="leave out the hood-less clips")
    ap.add_argument("--cuts", type=lambda v: [float(x) for x in v.split(",") if x], default=[],
                    help="also the hood IoU after each of these seconds (0.5,0.75,1.0,1.25), and the mean "
                         "of those, the 1 s figure and the whole clip's: one cut resolves a few pixels of edge "
                         "and the codec's noise on them (p48-plan.md)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = {"model": args.model, "bonnets": {}, "no_hood": {}, "no_hood_frames": {}}
    print(f"model {args.model}")
    for name, src in ego.outlines().items():
        if src["split"] != "eval":
            continue
        with tempfile.TemporaryDirectory() as tmp:
            video = as_video(src["frames"], tmp, args.fps)
            full = process_hood(video, args.model, tmp, args.process_arg)
            h, w = full.shape
            truth = ego.outline_mask(src, w, h) == ego.EGO
            first = process_hood(trimmed(video, 1.0, tmp), args.model, tmp, args.process_arg)
            r = {"iou_after_1s": iou(first, truth), "iou_whole_clip": iou(full, truth),
                 "hood_share": float(full.mean()), "truth_share": float(truth.mean())}
            if args.cuts:
                at = {1.0: r["iou_after_1s"]}
                for t in args.cuts:
                    if t not in at:
                        at[t] = iou(process_hood(trimmed(video, t, tmp), args.model, tmp, args.process_arg), truth)
                r["iou_at"] = {f"{t:g}": at[t] for t in sorted(at)}
                r["iou_cuts_mean"] = float(np.mean(list(at.values()) + [r["iou_whole_clip"]]))
            Image.fromarray((full * 255).astype(np.uint8)).save(os.path.join(args.out, f"{name}-hood.png"))
        results["bonnets"][name] = r
        print(f"{name:<16} hood IoU after 1 s {r['iou_after_1s']:.3f}, whole clip {r['iou_whole_clip']:.3f} "
              f"(hood {100 * r['hood_share']:.1f}% of the frame, drawn {100 * r['truth_share']:.1f}%)")
        if "iou_at" in r:
            cuts = " / ".join(f"{v:.3f}" for v in r["iou_at"].values())
            print(f"{'':<16} after {' / '.join(r['iou_at'])} s: {cuts}; mean with the whole clip {r['iou_cuts_mean']:.3f}")
    for spec in [] if args.bonnets_only else NO_HOOD:
        with tempfile.TemporaryDirectory() as tmp:
            # The first 8 s: a hood claimed on a clip without one shows within them.
            frames: list[float] = []
            full = process_hood(trimmed(os.path.join(SHARED, spec), 8.0, tmp), args.model, tmp, args.process_arg, frames)
        share = float(full.mean())
        drawn = sum(f >= 0.01 for f in frames)
        results["no_hood"][spec] = share
        results["no_hood_frames"][spec] = {"frames": len(frames), "frames_with_hood": drawn,
                                           "max_share": max(frames, default=0.0),
                                           "mean_share": float(np.mean(frames)) if frames else 0.0}
        print(f"{os.path.basename(spec):<22} hood {100 * share:.2f}% of the frame at the end "
              f"({'none' if share < 0.01 else 'CLAIMED'}); drawn on {drawn} of {len(frames)} frames, "
              f"largest {100 * max(frames, default=0.0):.1f}%")
    with open(os.path.join(args.out, "hood.json"), "w") as f:
        json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
