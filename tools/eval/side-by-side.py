#!/usr/bin/env python3
"""Our model and Intel's road-segmentation-adas-0001, side by side, on the same pixels.

  tools/eval/side-by-side.py [SET ...] [--model DIR] [--out DIR] [--markdown FILE]

SET is a name or a spec (default: camvid-val idd-holdout unseen):
  camvid-val      ../shared CamVid val, road = label 3, 11 = not scored
  idd-holdout     IDD Lite drives held out from training (tools/train/splits.py),
                  road = label 0 (drivable), 255 = not scored
  unseen          the frames of tools/eval/unseen-road.json, drawn polygons
  images=DIR,labels=DIR,road=V[,ignore=V]   any labelled folder
  images=DIR,polygons=FILE                  any polygon file

Both models are scored by the same code: `roadseg eval` runs ours as the
daemon runs a still (1024 wide, grounded road), and scores Intel's masks
(`--masks`: the peer's argmax is road or lane mark, at its own 896x512
input, resized back with nearest neighbour, as a user of that model gets
it). Per set it prints both pooled road IoUs, ours minus Intel's and a
paired bootstrap over frames (the frames drawn with replacement, both
models scored on the same draw): the 95% interval of the difference and the
share of draws in which ours is ahead. For polygon sets, the same again with
the drawn hood left out ("hood out", as the daemon shows video).

Needs target/release/roadseg, ../shared (or $ROADSEG_SHARED), numpy, PIL and
either openvino or torch (tools/teacher/omz.py, the same network in torch).
Intel's masks are cached under OUT/peer (delete to remake).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np
from PIL import Image

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
sys.path.insert(0, os.path.join(ROOT, "tools", "teacher"))
import splits  # noqa: E402

SHARED = os.environ.get("ROADSEG_SHARED", os.path.join(ROOT, "..", "shared"))
BIN = os.environ.get("ROADSEG_BIN", os.path.join(ROOT, "target", "release", "roadseg"))


class Peer:
    """Intel's model: OpenVINO (f32 asked for) where installed, else the torch port."""

    def __init__(self):
        import omz
        self.omz = omz
        try:
            import openvino as ov
            core = ov.Core()
            xml = os.path.join(omz.default_dir(), omz.XML_NAME)
            self.compiled = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            self.torch_model = None
            self.kind = "openvino"
        except ImportError:
            self.compiled = None
            self.torch_model = omz.OmzRoadSeg()
            self.kind = "torch"

    def road_mask(self, path: str) -> np.ndarray:
        img = Image.open(path).convert("RGB")
        small = img.resize((self.omz.INPUT_W, self.omz.INPUT_H), Image.BILINEAR)
        bgr = np.asarray(small, dtype=np.float32)[:, :, ::-1].transpose(2, 0, 1)[None].copy()
        if self.compiled is not None:
            probs = self.compiled([bgr])[0]
        else:
            import torch
            probs = self.torch_model(torch.from_numpy(bgr)).numpy()
        top = probs[0].argmax(0)
        road = ((top == 1) | (top == 3)).astype(np.uint8) * 255
        return np.asarray(Image.fromarray(road).resize(img.size, Image.NEAREST))


def stage_idd_holdout(out: str) -> tuple[str, str]:
    """Symlinks to the held-out IDD drives' frames and labels."""
    src = os.path.join(SHARED, "data", "idd-lite", "train")
    img_dir, lab_dir = os.path.join(out, "img"), os.path.join(out, "lab")
    os.makedirs(img_dir, exist_ok=True)
    os.makedirs(lab_dir, exist_ok=True)
    for name in sorted(os.listdir(os.path.join(src, "images"))):
        if not splits.idd_held_out(name):
            continue
        stem = os.path.splitext(name)[0]
        for s, d in ((os.path.join(src, "images", name), os.path.join(img_dir, name)),
                     (os.path.join(src, "labels", stem + ".png"), os.path.join(lab_dir, stem + ".png"))):
            if not os.path.lexists(d):
                os.symlink(os.path.realpath(s), d)
    return img_dir, lab_dir


def resolve(spec: str, out: str) -> dict:
    if spec == "camvid-val":
        c = os.path.join(SHARED, "data", "camvid")
        return dict(name=spec, images=os.path.join(c, "val"), labels=os.path.join(c, "valannot"), road="3", ignore="11")
    if spec == "idd-holdout":
        img, lab = stage_idd_holdout(os.path.join(out, "idd-holdout"))
        return dict(name=spec, images=img, labels=lab, road="0", ignore="255")
    if spec == "unseen":
        frames = os.path.join(out, "unseen-frames")
        subprocess.run([os.path.join(ROOT, "tools", "eval", "stage-unseen-road.sh"), frames], check=True,
                       stdout=subprocess.DEVNULL)
        return dict(name=spec, images=frames, polygons=os.path.join(ROOT, "tools", "eval", "unseen-road.json"))
    fields = dict(kv.split("=", 1) for kv in spec.split(","))
    fields.setdefault("name", os.path.basename(os.path.normpath(fields["images"])))
    fields.setdefault("ignore", "255")
    if "labels" not in fields and "polygons" not in fields:
        sys.exit(f"set {spec}: give labels=DIR,road=V or polygons=FILE")
    return fields


def frame_names(s: dict) -> list[str]:
    if "polygons" in s:
        with open(s["polygons"]) as f:
            return [fr["name"] for fr in json.load(f)["frames"]]
    return sorted(n for n in os.listdir(s["images"]) if n.lower().endswith((".jpg", ".jpeg", ".png")))


def roadseg_eval(s: dict, extra: list[str]) -> dict:
    cmd = [BIN, "eval", "--images", s["images"], "--json", "--device", "cpu"]
    if "polygons" in s:
        cmd += ["--road-polygons", s["polygons"]]
    else:
        cmd += ["--labels", s["labels"], "--road-labels", s["road"], "--ignore-index", s["ignore"]]
    res = subprocess.run(cmd + extra, check=True, capture_output=True, text=True)
    lines = [l for l in res.stdout.splitlines() if l.startswith("{")]
    return json.loads(lines[-1])


def counts(result: dict, hood_out: bool) -> dict[str, tuple[int, int]]:
    out = {}
    for name, f in result["frames"].items():
        f = f["hood_out"] if hood_out else f
        out[name] = (f["intersection"], f["union"])
    return out


def pooled(c: dict, names) -> float:
    i = sum(c[n][0] for n in names)
    u = sum(c[n][1] for n in names)
    return i / u if u else 1.0


def bootstrap(ours: dict, peer: dict, resamples: int, seed: int) -> tuple[float, float, float]:
    names = sorted(ours)
    rng = random.Random(seed)
    diffs = []
    for _ in range(resamples):
        draw = [rng.choice(names) for _ in names]
        diffs.append(pooled(ours, draw) - pooled(peer, draw))
    diffs.sort()
    lo, hi = diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples) - 1]
    ahead = sum(d > 0 for d in diffs) / resamples
    return lo, hi, ahead


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets", nargs="*", default=["camvid-val", "idd-holdout", "unseen"])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "roadseg-camvid"))
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "side-by-side"))
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--eval-arg", action="append", default=[],
                    help="passed to `roadseg eval` for our model (e.g. --eval-arg=--preset --eval-arg=accurate)")
    args = ap.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN}: build first (cargo build --release --locked) or set ROADSEG_BIN")
    if not os.path.isdir(os.path.join(SHARED, "data")):
        sys.exit(f"{SHARED}: no ../shared data; set ROADSEG_SHARED")
    peer = None
    rows = []
    header = (f"| set | frames | Intel's model | ours | ours - Intel | 95% interval | ours ahead |\n"
              f"|---|---:|---:|---:|---:|---|---:|")
    print(f"ours: {args.model}")
    for spec in args.sets:
        s = resolve(spec, args.out)
        names = frame_names(s)
        mask_dir = os.path.join(args.out, "peer", s["name"])
        os.makedirs(mask_dir, exist_ok=True)
        for n in names:
            dst = os.path.join(mask_dir, os.path.splitext(n)[0] + ".png")
            if not os.path.exists(dst):
                if peer is None:
                    peer = Peer()
                    print(f"Intel's model through {peer.kind}")
                Image.fromarray(peer.road_mask(os.path.join(s["images"], n))).save(dst)
        theirs = roadseg_eval(s, ["--masks", mask_dir])
        ours = roadseg_eval(s, ["--model", args.model] + args.eval_arg)
        variants = [("", False)] + ([(" (hood out)", True)] if "polygons" in s else [])
        for suffix, hood_out in variants:
            o, p = counts(ours, hood_out), counts(theirs, hood_out)
            po, pp = pooled(o, o), pooled(p, p)
            lo, hi, ahead = bootstrap(o, p, args.resamples, args.seed)
            rows.append(f"| {s['name']}{suffix} | {len(o)} | {pp:.4f} | {po:.4f} | {po - pp:+.4f} | "
                        f"[{lo:+.4f}, {hi:+.4f}] | {100 * ahead:.1f}% |")
            print(f"{s['name'] + suffix:<22} frames {len(o):>4}  Intel {pp:.4f}  ours {po:.4f}  "
                  f"diff {po - pp:+.4f}  95% [{lo:+.4f}, {hi:+.4f}]  ours ahead in {100 * ahead:.1f}% of draws")
    table = header + "\n" + "\n".join(rows) + "\n"
    with open(os.path.join(args.out, "side-by-side.md"), "w") as f:
        f.write(f"ours: {args.model}\n\n{table}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    print(f"table: {os.path.join(args.out, 'side-by-side.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
