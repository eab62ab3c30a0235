"""Which frames train and which select: fixed before any candidate was scored.

IDD Lite names its frames `<drive>_<frame>.jpg`; frames of one drive are
near-duplicates, so a held-out split must hold out whole drives, or it
measures memory, not generalisation. Rule (2026-11-27, before the first
candidate trained on IDD): drives whose number is a multiple of 7 are held
out (50 of 309 drives, 229 of 1,403 labelled frames), and so are their
unlabelled frames (47 of 404), which the teacher would otherwise label for
training. Selection uses this split; the IDD split that ../shared holds back
is never looked for.

Frames that judge the model and so never train it, under any label source:
the seven BDD stills and solidWhiteRight.mp4 (tools/eval/unseen-road.json's
frames; the clip also measures flicker), and the Udacity bonnet clip
(bonnet-test-video.mp4: hood IoU), and the DAD sequence HOOD_EVAL_DAD (its
bonnet edge is drawn in tools/eval/hood-dad.json).
"""
from __future__ import annotations

import os

IDD_HOLDOUT_MODULUS = 7
HOOD_EVAL_DAD = "000478"


def idd_drive(name: str) -> int:
    return int(os.path.basename(name).split("_", 1)[0])


def idd_held_out(name: str) -> bool:
    """True for IDD frames (labelled or not) that never train: selection only."""
    return idd_drive(name) % IDD_HOLDOUT_MODULUS == 0


def never_trains(path: str) -> bool:
    """Frames of ../shared that judge the model (see the module's text)."""
    p = path.replace("\\", "/")
    if "/data/dashcam/bdd/" in p or p.endswith("solidWhiteRight.mp4"):
        return True
    if p.endswith("udacity/bonnet-test-video.mp4"):
        return True
    if f"/images/{HOOD_EVAL_DAD}/" in p:
        return True
    if "/idd-lite/" in p and idd_held_out(p):
        return True
    return False
